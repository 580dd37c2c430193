"""Validation curves of lever runs against the recipe they change, finished or not:
`python -m tools.lever_curves`.

Each lever run (`--models`, default: every training in `--run`, finished in checkpoints/ or
unfinished in training_progress/) is set epoch by epoch beside the baseline checkpoint's
history (`--baseline`, the recipe it changes in one setting): validation PGD-10 of the
weights the run evaluates (averaged ones where it averages) on the same validation images,
and the share of its own PGD-5 training examples it fits. A lever that fits more while its
validation robustness falls behind overfits (Rice et al. 2020); the curves are what the
models guide says to stop a line on. No model is run: the numbers are the trainings' own
logs. Writes <out>/lever_curves.json, lever_curves.md and lever_curves.png (default
<run>/lever_curves/); one run writes a folder at a time.
"""

import argparse
import shlex
import sys
from pathlib import Path

from advjax.io import environment, read_checkpoint
from advjax.records import atomic_write_json, atomic_write_text
from advjax_train import read_fit_history
from experiments import plots
from experiments.cifar_robustness.config import profile
from experiments.cifar_robustness.study import progress_path
from experiments.cli import hold_output_folder, run_command

PROG = "tools.lever_curves"
CURVES = {
    "val_pgd_accuracy": "validation PGD-10",
    "train_adv_accuracy": "own PGD-5 training examples fitted",
}
"""The history fields compared, and what each is."""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--run", default="results/cifar10/robust_cnn/levers", help="the levers' run")
    p.add_argument(
        "--baseline",
        default="results/cifar10/robust_cnn/checkpoints/pgd_silu_scratch_ema.msgpack",
        help="the checkpoint of the recipe the levers change",
    )
    p.add_argument("--models", nargs="+", default=None, help="default: every training in --run")
    p.add_argument("--profile", default="robust_cnn", help="where unfinished runs' specs are")
    p.add_argument("--out", default=None, help="output folder (default <run>/lever_curves)")
    return p.parse_args(argv)


def trainings(run: Path, exclude: str) -> list[str]:
    """The trainings in `run`: unfinished ones and finished checkpoints that are neither another
    training's live weights nor without the compared curves (a standard training, such as a
    reused transfer surrogate), less `exclude` (the baseline's copy)."""
    names = {p.stem for p in (run / "training_progress").glob("*.msgpack")}
    for path in (run / "checkpoints").glob("*.msgpack"):
        meta = read_checkpoint(path)["metadata"]
        if "trained_by" not in meta and _has_curves(meta["history"]):
            names.add(path.stem)
    names.discard(exclude)
    if not names:
        raise FileNotFoundError(f"--run {run}: no training in checkpoints/ or training_progress/")
    return sorted(names)


def _has_curves(history: list[dict]) -> bool:
    return bool(history) and all(field in history[0] for field in CURVES)


def lever_history(run: Path, name: str, planned: dict[str, int]) -> dict:
    """Model `name`'s history, whether it finished and how many epochs it was to run."""
    checkpoint = run / "checkpoints" / f"{name}.msgpack"
    if checkpoint.is_file():
        meta = read_checkpoint(checkpoint)["metadata"]
        return {"source": str(checkpoint), "finished": True,
                "epochs": meta["train_config"]["epochs"], "history": meta["history"]}  # fmt: skip
    progress = progress_path(run, name)
    if not progress.is_file():
        raise FileNotFoundError(f"--models {name}: neither {checkpoint} nor {progress} exists")
    if name not in planned:
        raise ValueError(
            f"--models {name}: not a model of the profile; choose from {sorted(planned)}"
        )
    return {"source": str(progress), "finished": False, "epochs": planned[name],
            "history": read_fit_history(progress)}  # fmt: skip


def compare(lever: list[dict], baseline: list[dict]) -> list[dict]:
    """Per epoch the lever ran: each curve's value for the lever and the baseline."""
    missing = [key for key in CURVES if any(key not in h for h in lever)]
    if missing or not lever:
        raise ValueError(f"the lever's history has no {missing or 'epoch'}: it was not trained "
                         "adversarially with the robust sentinel")  # fmt: skip
    by_epoch = {h["epoch"]: h for h in baseline}
    rows = []
    for h in lever:
        b = by_epoch.get(h["epoch"], {})
        row = {"epoch": h["epoch"]}
        for key in CURVES:
            row[key] = {"lever": h.get(key), "baseline": b.get(key)}
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """Best validation PGD-10 of each side over the lever's epochs, and the last epoch's gap."""
    key = "val_pgd_accuracy"
    best = {side: max((r[key][side], r["epoch"]) for r in rows if r[key][side] is not None)
            for side in ("lever", "baseline")}  # fmt: skip
    last = rows[-1][key]
    return {
        "best_lever": {"value": best["lever"][0], "epoch": best["lever"][1]},
        "best_baseline_same_epochs": {"value": best["baseline"][0], "epoch": best["baseline"][1]},
        "last_epoch": rows[-1]["epoch"],
        "last_gap": last["lever"] - last["baseline"],
    }


def markdown(result: dict) -> str:
    lines = [f"Baseline: `{result['baseline']['name']}` ({result['baseline']['epochs']} epochs). "
             "Percent, per epoch; the numbers are the trainings' own logs.", ""]  # fmt: skip
    for name, lever in result["levers"].items():
        state = "finished" if lever["finished"] else "unfinished"
        lines += [f"## {name} ({len(lever['rows'])} of {lever['epochs']} epochs, {state})", ""]
        head = ["epoch"] + [f"{what}: {side}" for what in CURVES.values()
                            for side in ("lever", "baseline")]  # fmt: skip
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in lever["rows"]:
            cells = [str(r["epoch"])] + [
                "" if r[k][side] is None else f"{100 * r[k][side]:.1f}"
                for k in CURVES for side in ("lever", "baseline")
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def figure(result: dict, path: Path) -> None:
    """One panel per curve: each lever against the baseline, epoch by epoch."""
    base = result["baseline"]
    panels = {what: [] for what in CURVES.values()}
    for key, what in CURVES.items():
        panels[what].append({"x": [h["epoch"] for h in base["history"]],
                             "y": [100 * h[key] for h in base["history"]], "colour": "#555555",
                             "style": "-", "label": f"{base['name']} (baseline)"})  # fmt: skip
        for name, lever in result["levers"].items():
            ran = len(lever["rows"])
            span = f"{ran} epochs" if lever["finished"] else f"{ran} of {lever['epochs']} epochs"
            panels[what].append({"x": [r["epoch"] for r in lever["rows"]],
                                 "y": [100 * r[key]["lever"] for r in lever["rows"]],
                                 "colour": plots.model_colour(name), "style": "-",
                                 "label": f"{name} ({span})"})  # fmt: skip
    plots.line_panels(panels, title="Does the lever beat the recipe it changes?",
                      xlabel="epoch", ylabel="accuracy (%)", path=path)  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    run = Path(args.run)
    out = Path(args.out) if args.out else run / "lever_curves"
    return hold_output_folder(out, lambda: curves(args, run, out, argv))


def curves(args: argparse.Namespace, run: Path, out: Path, argv) -> dict:
    """Every lever's curves into `out` (the lock is held)."""
    baseline_path = Path(args.baseline)
    meta = read_checkpoint(baseline_path)["metadata"]
    planned = {m.name: m.epochs for m in profile(args.profile).models}
    levers = {}
    for name in args.models or trainings(run, baseline_path.stem):
        lever = lever_history(run, name, planned)
        try:
            rows = compare(lever.pop("history"), meta["history"])
        except ValueError as error:
            raise ValueError(f"--models {name}: {error}") from None
        levers[name] = {**lever, "rows": rows, "summary": summary(rows)}
        s = levers[name]["summary"]
        print(f"{name}: {len(rows)}/{lever['epochs']} epochs, best validation PGD-10 "
              f"{100 * s['best_lever']['value']:.1f} % (epoch {s['best_lever']['epoch']}) against "
              f"{100 * s['best_baseline_same_epochs']['value']:.1f} % for the baseline; epoch "
              f"{s['last_epoch']}: {100 * s['last_gap']:+.1f} points", flush=True)  # fmt: skip
    result = {
        "command": f"python -m {PROG} " + shlex.join(sys.argv[1:] if argv is None else argv),
        "baseline": {
            "name": baseline_path.stem,
            "source": str(baseline_path),
            "epochs": meta["train_config"]["epochs"],
            "history": meta["history"],
        },  # fmt: skip
        "levers": levers,
        "environment": environment(),
    }
    atomic_write_json(out / "lever_curves.json", result)
    atomic_write_text(out / "lever_curves.md", markdown(result))
    figure(result, out / "lever_curves.png")
    return result


if __name__ == "__main__":
    run_command(main, PROG)
