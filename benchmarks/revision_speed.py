"""The CIFAR study's speed at two git revisions doing the same work, alternated on one machine.

`python -m benchmarks.revision_speed --before 079f300 --after HEAD`

This benchmark runs one workload at two revisions: each side's study command (its own flags: the
revisions' command lines differ, the work must not) from a fresh git worktree, `--repeats`
times, alternating before / after so that drift in the machine's speed falls on both
sides. The default workload is the reference profile's two models (standard CNN, FGSM-AT
at the reference budget) on the full training split for 2 epochs, attacked on 300 images
with budget curves of 2 restarts. Both sides' `results.json` configs are compared
field by field, and the report lists every field that differs, so a reader sees that the
work is the same. Per phase (the study's `timings_seconds`): the median seconds of each
side and their ratio.

`--report-only` rebuilds the report from the runs already in `--work`.
"""

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from advjax import backend
from benchmarks.end_to_end import WALL_FILE, machine_speed
from benchmarks.machine import describe_machine, load_average
from benchmarks.report import write_atomic, write_report

REPO = str(Path(__file__).resolve().parents[1])
BEFORE_ARGS = "--profile reference --epochs 2 --eval-size 300 --budget-restarts 2"
AFTER_ARGS = (
    "--profile reference --set models.*.epochs=2 --set eval_size=300 --set budget_restarts=2"
)
NAME = "revision_speed"


def _flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out |= _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(v, dict) for v in obj):
        out = {}
        for i, v in enumerate(obj):
            out |= _flatten(v, f"{prefix}[{v.get('name', i)}]")
        return out
    return {prefix: list(obj) if isinstance(obj, tuple) else obj}


def config_differences(before: dict, after: dict) -> list[str]:
    """Dotted config fields whose values differ, or that only one side has."""
    b, a = _flatten(before), _flatten(after)
    lines = []
    for key in sorted(set(b) | set(a)):
        if key not in a:
            lines.append(f"`{key}`: {b[key]!r} before, absent after")
        elif key not in b:
            lines.append(f"`{key}`: absent before, {a[key]!r} after")
        elif b[key] != a[key]:
            lines.append(f"`{key}`: {b[key]!r} before, {a[key]!r} after")
    return lines


@contextlib.contextmanager
def worktree(repo: str, revision: str) -> Iterator[tuple[Path, str]]:
    """A fresh detached git worktree of `revision` and its full commit; removed on exit."""
    with tempfile.TemporaryDirectory(prefix="advjax-revision-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", repo, "worktree", "add", "--detach", str(tree), revision],
                       check=True, capture_output=True)  # fmt: skip
        try:
            sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip()  # fmt: skip
            yield tree, sha
        finally:
            subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", str(tree)],
                           capture_output=True)  # fmt: skip


def run_side(repo: str, revision: str, out: Path, extra: list[str]) -> dict:
    """Run the study of `revision` from a fresh worktree into `out`; store and return timing."""
    with worktree(repo, revision) as (tree, sha):
        command = [sys.executable, "-m", "experiments.cifar_robustness", "--no-progress"]
        command += ["--out", str(out), *extra]
        load_start = load_average()
        start = time.perf_counter()
        with open(out.with_suffix(".log"), "w") as log:
            done = subprocess.run(command, cwd=tree, stdout=log, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{revision}: the study exited with {done.returncode}; see {out}.log")
    record = side_record(sha, command, wall, load_start, machine_speed())
    write_atomic(str(out / WALL_FILE), json.dumps(record, indent=2))
    return record


def side_record(sha: str, command: list[str], wall: float, load_start, gflops: float) -> dict:
    """What a side's run keeps beside its outputs: revision, command, wall seconds, the load
    averages at its start and end, and the machine's matmul GFLOP/s."""
    return {
        "revision": sha,
        "command": shlex.join(command),
        "wall_seconds": wall,
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "matmul_gflops": gflops,
    }


def read_run(folder: Path) -> dict:
    """One finished run: its wall record, its study's phase timings, models and config."""
    wall_path, results_path = folder / WALL_FILE, folder / "results.json"
    for path in (wall_path, results_path):
        if not path.exists():
            raise SystemExit(f"{path} is missing: run that side first")
    results = json.loads(results_path.read_text())
    return json.loads(wall_path.read_text()) | {
        "timings_seconds": results["timings_seconds"],
        "models": sorted(results["models"]),
        "config": results["config"],
    }


def phase_table(before: list[dict], after: list[dict]) -> list[dict]:
    """Per phase both sides timed (and the wall): every run's seconds and the medians' ratio."""
    return median_rows(
        [r["timings_seconds"] | {"wall": r["wall_seconds"]} for r in before],
        [r["timings_seconds"] | {"wall": r["wall_seconds"]} for r in after],
    )


def median_rows(before: list[dict], after: list[dict]) -> list[dict]:
    """Per phase of both sides' runs ({phase: seconds} each, in the first before-run's order):
    every run's seconds and the ratio of the medians, before / after (> 1: after faster)."""
    rows = []
    for phase in [p for p in before[0] if p in after[0]]:
        tb, ta = [r[phase] for r in before], [r[phase] for r in after]
        mb, ma = statistics.median(tb), statistics.median(ta)
        rows.append(dict(phase=phase, before=tb, after=ta, ratio=mb / ma if ma else None))
    return rows


def median_lines(rows: list[dict]) -> list[str]:
    """The markdown table of `median_rows`: median seconds with every run's, and the ratio."""
    lines = ["| phase | before | after | ratio |", "|---|---|---|---|"]
    for row in rows:
        b = ", ".join(f"{t:,.1f}" for t in row["before"])
        a = ", ".join(f"{t:,.1f}" for t in row["after"])
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] else ""
        mb, ma = statistics.median(row["before"]), statistics.median(row["after"])
        lines.append(f"| {row['phase']} | {mb:,.1f} ({b}) | {ma:,.1f} ({a}) | {ratio} |")
    return lines


def markdown(report: dict) -> str:
    before, after = report["before"], report["after"]
    lines = [
        "# The CIFAR study at two revisions, same work",
        "",
        f"`{report['command']}` · machine: {report['machine']['cpu_model']}, "
        f"{report['machine']['usable_cores']} usable cores · {len(before)} run(s) per side, "
        "alternated before / after",
        "",
        f"before: `{before[0]['revision'][:10]}`, `{before[0]['command']}`",
        "",
        f"after: `{after[0]['revision'][:10]}`, `{after[0]['command']}`",
        "",
        "Load averages (1, 5, 15 min) at the start of each run, in order: "
        + "; ".join(
            f"{side} {r['load_average_start']}"
            for pair in zip(before, after)
            for side, r in zip(("before", "after"), pair)
        ),
        "",
        "Seconds per phase as the study timed them (median, with every run's time); ratio = "
        "before / after, above 1: faster now:",
        "",
        *median_lines(report["phases"]),
    ]
    diffs = report["config_differences"]
    lines += ["", "Config fields that differ between the two sides' `results.json`:", ""]
    lines += [f"- {d}" for d in diffs] if diffs else ["- none: the same work"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--before", default="079f300", help="git revision (default: 079f300)")
    p.add_argument("--after", default="HEAD")
    p.add_argument("--before-args", default=BEFORE_ARGS, help="the before side's study flags")
    p.add_argument("--after-args", default=AFTER_ARGS, help="the after side's study flags")
    p.add_argument("--repeats", type=int, default=2, help="runs per side, alternated")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "advjax-revisions"))
    p.add_argument("--report-only", action="store_true", help="report runs already in --work")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results"))
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats={args.repeats} must be at least 1")
    work = Path(args.work)
    sides = {
        "before": (args.before, shlex.split(args.before_args)),
        "after": (args.after, shlex.split(args.after_args)),
    }
    if not args.report_only:
        work.mkdir(parents=True, exist_ok=True)
        for i in range(args.repeats):
            for name, (revision, extra) in sides.items():
                out = work / f"{name}_{i}"
                print(f"[revisions] {name} run {i + 1}/{args.repeats}: {revision}", flush=True)
                record = run_side(REPO, revision, out, [*extra, "--force"])
                print(f"[revisions] {name}: {record['wall_seconds']:,.0f} s", flush=True)
    runs = {
        name: [read_run(f) for f in sorted(work.glob(f"{name}_*")) if f.is_dir()] for name in sides
    }
    if not runs["before"] or not runs["after"]:
        raise SystemExit(f"{work} holds no finished run of both sides")
    report = {
        "command": "python -m benchmarks.revision_speed " + shlex.join(argv or sys.argv[1:]),
        "machine": describe_machine(REPO),
        "before": runs["before"],
        "after": runs["after"],
        "phases": phase_table(runs["before"], runs["after"]),
        "config_differences": config_differences(
            runs["before"][0]["config"], runs["after"][0]["config"]
        ),
    }
    write_report(args.out, NAME, report, markdown(report))
    return report


if __name__ == "__main__":
    main()
