"""Train the PyTorch peer's reference CNN with the study's protocol on the study's split.

`python -m tools.peer_protocol_check [--no-augment] [--with-advjax]`

The reproduced study reports 75.5 % clean accuracy for its standard CNN. This check trains
the peer's own PyTorch model (`../shared/peers/torch_reference.py`: `Net`, `augment`) with
the same protocol (15k stratified images, 12 epochs, batch 128, AdamW 1e-3 / 5e-4, cosine,
crop + flip) on advjax's exact split, so the two frameworks can be compared on equal terms.
`--no-augment` drops crop + flip; `--with-advjax` also trains advjax's CompactCNN with the
same setting in this process. Needs a PyTorch environment (`pip install torch==2.13.0 numpy`).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from advjax import backend
from advjax.data import load_cifar10, study_splits
from advjax.io import environment
from advjax.records import atomic_write_json
from advjax_train import Batch, evaluate, fit
from experiments.cifar_robustness.config import StudyConfig
from experiments.cifar_robustness.model_specs import STANDARD
from experiments.cifar_robustness.study import train_config

ROOT = Path(__file__).resolve().parent.parent


def run_torch(args, split_path: Path) -> dict:
    """Run `torch_protocol.py` in the PyTorch environment; return its summary."""
    command = [
        args.torch_python,
        str(Path(__file__).with_name("torch_protocol.py")),
        "--peer-dir",
        str(Path(args.peer).resolve().parent),
        "--split",
        str(split_path),
        "--epochs",
        str(args.epochs),
    ] + (["--no-augment"] if args.no_augment else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    summary = None
    for line in process.stdout:
        record = json.loads(line)
        if record.get("summary"):
            summary = record
        else:
            print(
                f"torch epoch {record['epoch']}: val {record['val_correct']}/{record['val_total']}"
                f" eval {record['eval_correct']}/{record['eval_total']} ({record['seconds']:.0f}s)",
                flush=True,
            )
    if process.wait() != 0 or summary is None:
        raise RuntimeError(f"PyTorch run failed (exit {process.returncode}): {' '.join(command)}")
    summary["command"] = command
    return summary


def main(argv: list[str] | None = None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data-dir", default=None)
    p.add_argument("--epochs", type=int, default=STANDARD.epochs)
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--with-advjax", action="store_true")
    p.add_argument(
        "--torch-python",
        default=os.environ.get("ADVJAX_TORCH_PYTHON", str(ROOT / ".torchvenv/bin/python")),
    )
    p.add_argument(
        "--peer",
        default=os.environ.get(
            "ADVJAX_TORCH_REFERENCE", str(ROOT.parent / "shared/peers/torch_reference.py")
        ),
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    config = StudyConfig()
    data = load_cifar10(args.data_dir)
    splits = study_splits(data.train_labels, data.test_labels, seed=config.seed)
    setting = "no_augment" if args.no_augment else "augment"
    out = Path(
        args.out
        or ROOT / "results" / "cifar10" / "default" / "peer_protocol_check" / f"{setting}.json"
    )
    result = {
        "command": "python -m tools.peer_protocol_check " + " ".join(argv or sys.argv[1:]),
        "setting": setting,
        "epochs": args.epochs,
        "environment": environment(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        split_path = Path(tmp) / "split.npz"
        np.savez(
            split_path,
            x_train=data.train_images[splits.train],
            y_train=data.train_labels[splits.train],
            x_val=data.train_images[splits.val],
            y_val=data.train_labels[splits.val],
            x_eval=data.test_images[splits.eval],
            y_eval=data.test_labels[splits.eval],
        )
        started = time.perf_counter()
        result["torch"] = run_torch(args, split_path)
        result["torch"]["seconds"] = time.perf_counter() - started
    if args.with_advjax:
        import dataclasses

        spec = dataclasses.replace(STANDARD, epochs=args.epochs)
        tc = dataclasses.replace(train_config(config, spec), augment=not args.no_augment)
        started = time.perf_counter()
        fitted = fit(
            tc,
            Batch(data.train_images[splits.train], data.train_labels[splits.train]),
            Batch(data.train_images[splits.val], data.train_labels[splits.val]),
            name="advjax",
        )
        x_eval = data.test_images[splits.eval]
        clean = evaluate(fitted.state, x_eval, data.test_labels[splits.eval])
        result["advjax"] = {
            "history": fitted.history,
            "best_epoch": fitted.best_epoch,
            "best_val_accuracy": fitted.best_val_accuracy,
            "eval_at_best": clean,
            "seconds": time.perf_counter() - started,
        }
    atomic_write_json(out, result)
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
