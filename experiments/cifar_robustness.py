"""The CIFAR-10 robustness study: `python -m experiments.cifar_robustness [--profile P]`.

Trains the standard and FGSM-adversarially-trained CompactCNNs on real CIFAR-10, attacks
them with FGSM and PGD on one fixed stratified test subset, and writes results.json,
tables and figures. Re-running resumes from the last finished phase; --force restarts.
"""

import argparse
import dataclasses
import shlex
import sys
import tempfile

from advjax.data import DATA_DIR_ENV
from experiments.dry_run import dry_run
from experiments.report import write_report
from experiments.study import run_study
from experiments.study_config import profile


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--profile", default="default", choices=["default", "reference", "quick"])
    p.add_argument(
        "--out", default=None, help="output folder (default results/, quick: a temp folder)"
    )
    p.add_argument(
        "--data-dir", default=None, help=f"CIFAR-10 binary folder (else ${DATA_DIR_ENV}, else tfds)"
    )
    p.add_argument("--force", action="store_true", help="discard finished phases and start over")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the threat model and the campaign's query count and wall-time estimate; "
        "attack nothing",
    )
    p.add_argument(
        "--policy",
        default=None,
        help="release policy JSON applied to the run (default experiments/release_policy.json)",
    )
    p.add_argument("--budget-steps", type=int, default=None, help="PGD steps of the budget curve")
    p.add_argument("--budget-restarts", type=int, default=None, help="restarts of the budget curve")
    p.add_argument(
        "--budget-eps", type=float, nargs="+", default=None, help="budget-curve eps in /255"
    )
    p.add_argument("--large-eps", type=float, default=None, help="large-eps probe in /255 (64)")
    for name, kind in (
        ("seed", int),
        ("train-size", int),
        ("val-size", int),
        ("eval-size", int),
        ("batch-size", int),
        ("pgd-steps", int),
        ("pgd-restarts", int),
        ("learning-rate", float),
        ("weight-decay", float),
        ("dropout-rate", float),
        ("pgd-step-fraction", float),
        ("attack-batch-size", int),
        ("saved-examples", int),
    ):
        p.add_argument(f"--{name}", type=kind, default=None)
    p.add_argument("--epochs", type=int, default=None, help="epochs for every model")
    p.add_argument(
        "--train-eps", type=float, default=None, help="FGSM training eps in /255 units (default 8)"
    )
    p.add_argument("--models", nargs="+", default=None, help="train and attack only these models")
    p.add_argument(
        "--reference-train-size",
        type=int,
        default=None,
        help="training images of the reference-budget FGSM model (default 8000)",
    )
    p.add_argument(
        "--reference-epochs",
        type=int,
        default=None,
        help="epochs of the reference-budget FGSM model (default 5)",
    )
    p.add_argument(
        "--eps", type=float, nargs="+", default=None, help="eps list in /255 units, e.g. 0 2 4 8"
    )
    return p.parse_args(argv)


def config_from_args(args: argparse.Namespace):
    config = profile(args.profile)
    names = (
        "seed",
        "train_size",
        "val_size",
        "eval_size",
        "batch_size",
        "pgd_steps",
        "pgd_restarts",
        "learning_rate",
        "weight_decay",
        "dropout_rate",
        "pgd_step_fraction",
        "attack_batch_size",
        "saved_examples",
    )
    overrides = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.eps is not None:
        overrides["eps_list"] = tuple(e / 255 for e in args.eps)
    for name in ("budget_steps", "budget_restarts"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.budget_eps is not None:
        overrides["budget_eps"] = tuple(e / 255 for e in args.budget_eps)
    if args.large_eps is not None:
        overrides["large_eps"] = args.large_eps / 255
    if args.train_eps is not None:
        overrides["train_eps"] = args.train_eps / 255
    models = config.models
    if args.models is not None:
        unknown = set(args.models) - {m.name for m in models}
        if unknown:
            raise ValueError(
                f"unknown models {sorted(unknown)}; this profile has {[m.name for m in models]}"
            )
        models = tuple(m for m in models if m.name in args.models)
    if args.reference_train_size is not None or args.reference_epochs is not None:
        models = tuple(
            dataclasses.replace(
                m,
                train_size=args.reference_train_size or m.train_size,
                epochs=args.reference_epochs or m.epochs,
            )
            if m.name == "fgsm_reference"
            else m
            for m in models
        )
    if args.epochs is not None:
        models = tuple(dataclasses.replace(m, epochs=args.epochs) for m in models)
    if args.train_size is not None:
        models = tuple(
            dataclasses.replace(m, train_size=min(m.train_size, args.train_size)) for m in models
        )
    return dataclasses.replace(config, models=models, **overrides)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    config = config_from_args(args)
    if args.dry_run:
        return dry_run(config)
    out = args.out or (
        tempfile.mkdtemp(prefix="advjax-quick-") if args.profile == "quick" else "results"
    )
    command = "python -m experiments.cifar_robustness " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    print(f"advjax CIFAR-10 robustness study, profile {config.profile}, output {out}")
    results = run_study(
        config,
        out,
        data_dir=args.data_dir,
        force=args.force,
        show_progress=not args.no_progress,
        command=command,
        **({"policy_path": args.policy} if args.policy else {}),
    )
    write_report(results, out)
    print(f"wrote {out}/results.json")
    return results


if __name__ == "__main__":
    main()
