"""End-to-end study wall time at two git revisions, back to back on one machine.

`python -m benchmarks.end_to_end --before 300ca2f --after HEAD`

Checks each revision out into a temporary git worktree and runs its study from there
(`python -m experiments.cifar_robustness --no-progress --out <dir>` plus the side's
arguments; the worktree's own `advjax` is imported, with the interpreter of this
process), one after the other, timing the whole process. Each side's output folder gets
`e2e_wall.json` (revision, command, wall seconds, load averages); the report pairs the
study's own phase timings (`results.json` `timings_seconds`: training and attack phases)
side by side and writes `benchmarks/results/end_to_end.{json,md}`.

The study at revision 300ca2f (the "before" default) trained three models and attacked them with FGSM
and PGD-20 at 4 eps; the current study also runs budget curves, a transfer attack from a
surrogate it trains, a large-eps probe and replay checks. To compare the same models,
`--after-args` defaults to `--models standard fgsm_reference fgsm_matched`; the training
phases are then the same work, and the table says which attack work differs.

`--report-only` rebuilds the report from output folders that already hold `e2e_wall.json`;
`--only-after` runs the after side alone and pairs it with the before side of the report
already in `--out` (the same machine; its revision and numbers as they were measured).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from advjax import backend
from benchmarks.machine import describe_machine, load_average
from benchmarks.report import write_atomic

REPO = str(Path(__file__).resolve().parents[1])
WALL_FILE = "e2e_wall.json"
DEFAULT_AFTER_ARGS = "--models standard fgsm_reference fgsm_matched"


def run_side(repo: str, revision: str, out: Path, extra: list[str]) -> dict:
    """Run the study of `revision` from a fresh worktree into `out`; store and return timing."""
    with tempfile.TemporaryDirectory(prefix="advjax-e2e-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", repo, "worktree", "add", "--detach", str(tree), revision],
            check=True,
            capture_output=True,
        )
        try:
            sha = subprocess.run(
                ["git", "-C", str(tree), "rev-parse", "HEAD"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            command = [sys.executable, "-m", "experiments.cifar_robustness", "--no-progress"]
            command += ["--out", str(out), *extra]
            load_start = load_average()
            start = time.perf_counter()
            with open(out.with_suffix(".log"), "w") as log:
                done = subprocess.run(command, cwd=tree, stdout=log, stderr=subprocess.STDOUT)
            wall = time.perf_counter() - start
        finally:
            subprocess.run(
                ["git", "-C", repo, "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
    if done.returncode != 0:
        raise SystemExit(f"{revision}: the study exited with {done.returncode}; see {out}.log")
    record = {
        "revision": sha,
        "command": shlex.join(command),
        "wall_seconds": wall,
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "matmul_gflops": machine_speed(),
    }
    write_atomic(out / WALL_FILE, json.dumps(record, indent=2))
    return record


def machine_speed() -> float:
    """This machine's float32 matmul speed right after a side's run (median GFLOP/s of a
    2048^2 `jnp.dot`): the same 2 cores are not always equally fast from day to day, so a
    side's wall time is read beside it."""
    from benchmarks.jax_workloads import matmul_peak

    return matmul_peak(2048, 10)["gflops_median"]


def read_side(out: Path) -> dict:
    """A finished side: its wall record and its study's phase timings and models."""
    wall_path, results_path = out / WALL_FILE, out / "results.json"
    for path in (wall_path, results_path):
        if not path.exists():
            raise SystemExit(f"{path} is missing: run that side first")
    results = json.loads(results_path.read_text())
    attacks = out / "attack_seconds.json"
    return json.loads(wall_path.read_text()) | {
        "attack_seconds": json.loads(attacks.read_text()) if attacks.exists() else None,
        "budget_restarts": results.get("config", {}).get("budget_restarts"),
        "timings_seconds": results["timings_seconds"],
        "models": sorted(results["models"]),
        "environment_xla_flags": results.get("environment", {}).get("xla_flags_set_by_advjax")
        or results.get("environment", {}).get("xla_flags"),
    }


def _seconds(t: float | None) -> str:
    return f"{t:,.0f}" if t is not None else "not run"


def _phase_rows(before: dict, after: dict) -> list[str]:
    """Each timed phase, then the rest of the wall time (start-up, summary, checks, gate,
    tables, figures and report; on a side that did not time its surrogate, that too)."""
    b, a = before["timings_seconds"], after["timings_seconds"]
    rows = []
    for phase in [p for p in b if p in a] + [p for p in a if p not in b]:
        tb, ta = b.get(phase), a.get(phase)
        ratio = f"{tb / ta:.2f}x" if tb and ta else ""
        rows.append(f"| {phase} | {_seconds(tb)} | {_seconds(ta)} | {ratio} |")
    rb, ra = (s["wall_seconds"] - sum(s["timings_seconds"].values()) for s in (before, after))
    rows.append(
        f"| everything else | {_seconds(rb)} | {_seconds(ra)} | "
        f"{f'{rb / ra:.2f}x' if rb and ra else ''} |"
    )
    rows.append(
        f"| **wall** | **{_seconds(before['wall_seconds'])}** | "
        f"**{_seconds(after['wall_seconds'])}** | "
        f"**{before['wall_seconds'] / after['wall_seconds']:.2f}x** |"
    )
    return rows


def _same_attack_rows(before: dict, after: dict, attacks=("fgsm", "pgd")) -> list[str]:
    """Per model: the before side's whole attack phase (it ran only `attacks`) against the
    after side's time in those attacks alone (from its `attack_seconds.json`)."""
    if before.get("attack_seconds") is not None or not after.get("attack_seconds"):
        return []
    rows = []
    for model, per_attack in after["attack_seconds"].items():
        tb = before["timings_seconds"].get(f"attack_{model}")
        if tb is None or not all(a in per_attack for a in attacks):
            continue
        ta = sum(per_attack[a] for a in attacks)
        rows.append(f"| {model}: {' + '.join(attacks)} | {tb:,.0f} | {ta:,.0f} | {tb / ta:.2f}x |")
    return rows


def markdown(report: dict) -> str:
    before, after = report["before"], report["after"]
    train = [p for p in before["timings_seconds"] if p.startswith("train_")]
    tb = sum(before["timings_seconds"][p] for p in train)
    ta = sum(after["timings_seconds"].get(p, float("nan")) for p in train)
    lines = [
        "# End-to-end study wall time, before and after",
        "",
        f"`{report['command']}` · machine: {report['machine']['cpu_model']}, "
        f"{report['machine']['usable_cores']} usable cores",
        "",
        "| side | revision | models | wall (s) | load average at start / end | "
        "float32 matmul GFLOP/s after the run | XLA_FLAGS in effect |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, side in (("before", before), ("after", after)):
        speed = side.get("matmul_gflops")
        lines.append(
            f"| {name} | `{side['revision'][:10]}` | {', '.join(side['models'])} | "
            f"{side['wall_seconds']:,.0f} | {side['load_average_start']} / "
            f"{side['load_average_end']} | {f'{speed:.0f}' if speed else 'not measured'} | "
            f"{side['environment_xla_flags'] or 'none'} |"
        )
    speeds = [s.get("matmul_gflops") for s in (before, after)]
    if not all(speeds):
        lines.append(
            "\nOne side's machine speed was not measured: if the two sides ran on different "
            "days, their ratios mix the code's speed with the machine's."
        )
    for name, side in (("before", before), ("after", after)):
        lines.append(
            f"\n{name}: `{side['command']}`"
            + (f" (timed by {side['timed_by']})" if side.get("timed_by") else "")
        )
    lines += [
        "",
        "Phases as the study timed them (seconds; ratio = before / after, above 1: faster now):",
        "",
        "| phase | before | after | speed-up |",
        "|---|---|---|---|",
        *_phase_rows(before, after),
        "",
        f"Training the same models with the same data, epochs and batch size: {tb:,.0f} s before, "
        f"{ta:,.0f} s after ({tb / ta:.2f}x). The attack phases differ in work: before, FGSM and "
        "PGD-20 at 4 eps; after, the same plus a 64/255 probe, budget curves (100 steps x "
        f"{after.get('budget_restarts') or 10} restarts at 2 budget eps, early-stopped), a "
        "transfer attack and replay checks; the after side also trains a transfer surrogate"
        + (
            " (`train_surrogate`)."
            if "train_surrogate" in after["timings_seconds"]
            else " (inside its wall time, not a phase above)."
        ),
    ]
    same = _same_attack_rows(before, after)
    if same:
        lines += [
            "",
            "The same attacks only (before: its whole attack phase, FGSM and PGD-20 at 0, 2, 4 "
            "and 8/255; after: its FGSM and PGD-20 time, which also covers PGD-20 at 64/255):",
            "",
            "| model: attacks | before | after | speed-up |",
            "|---|---|---|---|",
            *same,
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--before", default="300ca2f", help="git revision (default: 300ca2f, the three-model study)"
    )
    p.add_argument("--after", default="HEAD")
    p.add_argument("--before-args", default="", help="extra study arguments, one string")
    p.add_argument("--after-args", default=DEFAULT_AFTER_ARGS)
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "advjax-e2e"))
    p.add_argument("--report-only", action="store_true", help="report runs already in --work")
    p.add_argument(
        "--only-after",
        action="store_true",
        help="run the after side alone; the before side is the one in --out's end_to_end.json",
    )
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results"))
    args = p.parse_args(argv)
    work = Path(args.work)
    sides = {
        "before": (args.before, shlex.split(args.before_args)),
        "after": (args.after, shlex.split(args.after_args)),
    }
    out = Path(args.out)
    kept_before = None
    if args.only_after:
        kept_before = json.loads((out / "end_to_end.json").read_text())["before"]
        sides.pop("before")
    if not args.report_only:
        work.mkdir(parents=True, exist_ok=True)
        for name, (revision, extra) in sides.items():
            print(f"[e2e] {name}: {revision} {shlex.join(extra)}", flush=True)
            record = run_side(REPO, revision, work / name, extra)
            print(f"[e2e] {name}: {record['wall_seconds']:,.0f} s", flush=True)
    machine = describe_machine(REPO)
    report = {
        "command": "python -m benchmarks.end_to_end " + shlex.join(argv or sys.argv[1:]),
        "machine": machine,
        "before": kept_before or read_side(work / "before"),
        "after": read_side(work / "after"),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "end_to_end.json", json.dumps(report, indent=2))
    text = markdown(report)
    write_atomic(out / "end_to_end.md", text)
    print(text)
    return report


if __name__ == "__main__":
    main()
