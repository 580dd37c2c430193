"""How well trained models fit their own adversarial training data:
`python -m tools.fit_check --study results/cifar10/robust_cnn`.

For each model of a study run, clean and PGD accuracy at 8/255 (PGD-10, steps of eps/4, one
random start: the validation attack of the training loop, `advjax_train.pgd_accuracy`) on
--n images drawn from the model's own training images and on --n validation images, both
without augmentation and in eval mode. Robust accuracy on the training images close to the
validation one means the model underfits the adversarial training objective; a large gap is
robust overfitting (Rice et al. 2020, "Overfitting in adversarially robust deep learning").
Writes <out>/fit_check.json (default <study>/fit_check/) and prints each model's line; one run
writes a folder at a time.
"""

import argparse
import json
import shlex
import sys
import types
from pathlib import Path

import jax

from advjax import backend
from advjax.data import load_cifar10, study_splits
from advjax.evaluation import parse_eps
from advjax.evaluation.stats import format_rate, rate
from advjax.io import environment, load_checkpoint
from advjax.records import atomic_write_json
from advjax_train import CompactCNN, pgd_accuracy, subset_indices
from experiments.cifar_robustness.study import model_train_indices
from experiments.cli import hold_output_folder, run_command

PROG = "tools.fit_check"
_TRAIN_STREAM, _VAL_STREAM, _ATTACK_STREAM = 0, 1, 2


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--study", default="results/cifar10/robust_cnn", help="a study run (results.json)"
    )
    p.add_argument("--models", nargs="+", default=None, help="default: every trained model")
    p.add_argument("--n", type=int, default=1000, help="images from each of the two sets")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--eps", type=parse_eps, default=8 / 255, help="L-inf budget, e.g. 8/255")
    p.add_argument("--seed", type=int, default=0, help="seed of the subsets and the starts")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None, help="output folder (default <study>/fit_check)")
    args = p.parse_args(argv)
    if args.n < 1 or args.steps < 1:
        p.error(f"--n {args.n} and --steps {args.steps} must be >= 1")
    if args.eps is not None and not args.eps <= 1:
        p.error(f"--eps {args.eps:g} must be in [0, 1], e.g. 8/255")
    return args


def fit_of(checkpoint: Path, sets: dict, *, eps: float, steps: int, key) -> dict:
    """Clean and PGD accuracy of one checkpoint on each named (images, labels) set."""
    model, variables = load_checkpoint(checkpoint, CompactCNN)
    state = types.SimpleNamespace(
        apply_fn=model.apply, params=variables["params"], batch_stats=variables["batch_stats"]
    )
    return {
        name: pgd_accuracy(state, images, labels, eps=eps, steps=steps, step_size=eps / 4, key=key)
        for name, (images, labels) in sets.items()
    }


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    args = parse_args(argv)
    out = Path(args.out) if args.out else Path(args.study) / "fit_check"
    return hold_output_folder(out, lambda: check(args, out, argv))


def check(args: argparse.Namespace, out: Path, argv) -> dict:
    """Every model's fit into `out` (the lock is held)."""
    study_dir = Path(args.study)
    study = json.loads((study_dir / "results.json").read_text())
    config = study["config"]
    data = load_cifar10(args.data_dir)
    splits = study_splits(
        data.train_labels, data.test_labels, train_size=config["train_size"],
        val_size=config["val_size"], eval_size=config["eval_size"], seed=config["seed"],
    )  # fmt: skip
    specs = {spec["name"]: spec for spec in config["models"]}
    names = args.models or [n for n in study["models"] if n in specs]
    key = jax.random.key(args.seed)
    val = splits.val[subset_indices(len(splits.val), args.n, jax.random.fold_in(key, _VAL_STREAM))]
    eps = args.eps
    rows = {}
    for name in names:
        spec = types.SimpleNamespace(**specs[name])
        own = model_train_indices(types.SimpleNamespace(seed=config["seed"]), spec, data, splits)
        train = own[subset_indices(len(own), args.n, jax.random.fold_in(key, _TRAIN_STREAM))]
        sets = {
            "training images": (data.train_images[train], data.train_labels[train]),
            "validation images": (data.train_images[val], data.train_labels[val]),
        }
        found = fit_of(
            study_dir / "checkpoints" / f"{name}.msgpack", sets, eps=eps, steps=args.steps,
            key=jax.random.fold_in(key, _ATTACK_STREAM),
        )  # fmt: skip
        rows[name] = {
            s: {k: v for k, v in r.items() if k != "fgsm_accuracy"} for s, r in found.items()
        }
        sizes = {s: len(labels) for s, (_, labels) in sets.items()}
        print(f"{name}: " + "; ".join(
            f"{s} clean {format_rate(rate(round(r['clean_accuracy'] * sizes[s]), sizes[s]))}, "
            f"PGD-{args.steps} {format_rate(rate(round(r['pgd_accuracy'] * sizes[s]), sizes[s]))}"
            for s, r in found.items()
        ), flush=True)  # fmt: skip
    result = {
        "command": f"python -m {PROG} " + shlex.join(sys.argv[1:] if argv is None else argv),
        "study": str(study_dir),
        "n": args.n,
        "eps": eps,
        "steps": args.steps,
        "seed": args.seed,
        "models": rows,
        "environment": environment(),
    }
    atomic_write_json(out / "fit_check.json", result)
    return result


if __name__ == "__main__":
    run_command(main, PROG)
