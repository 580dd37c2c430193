"""The attack engine at two git revisions doing the same work, alternated on one machine.

`python -m benchmarks.engine_speed --before 9cf2aff --after HEAD`

The default `--before` is the last revision before the attack registry and the one early-stop
engine (51411bc, f303e7f): campaigns ran on `_early_stop.attack_cases`, AutoAttack on its own
member loop. Each side runs `benchmarks/engine_speed_side.py` with a git worktree of its
revision first on `PYTHONPATH`: the CIFAR study's default attack phases (FGSM, PGD-20, the
budget curves, the transfer check, per model) on the committed checkpoints of
`results/cifar10/default/`, timed per attack by the study's own `evaluate_model`, then
`advjax.evaluation.autoattack` standard at 8/255 on the first `--aa-cases` study images of the best model.
Sides alternate before / after `--repeats` times so that drift in the machine's speed falls on
both. The report gives each phase's median seconds and the ratio, and whether every case
came out the same on both sides (status, predictions, queries, first break step, key path;
AutoAttack's breaking member and queries per case).

`--report-only` rebuilds the report from the runs already in `--work`.
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
from benchmarks.end_to_end import machine_speed
from benchmarks.machine import describe_machine, load_average
from benchmarks.report import write_report
from benchmarks.revision_speed import median_lines, median_rows, side_record, worktree

REPO = Path(__file__).resolve().parents[1]
SIDE = Path(__file__).with_name("engine_speed_side.py")
STUDY = REPO / "results" / "cifar10" / "default"
NAME = "engine_speed"
WALL_FILE = "wall.json"


def best_model(study: Path) -> str:
    """The study's model with the highest PGD robust accuracy at its largest eps."""
    models = json.loads((study / "results.json").read_text())["models"]

    def robust(name: str) -> float:
        pgd = models[name]["attacks"]["pgd"]
        return pgd[max(pgd, key=int)]["robust_accuracy"]["value"]

    return max(models, key=robust)


def run_side(revision: str, out: Path, *, best: str, aa_cases: int) -> dict:
    """One side's run into `out` from a fresh worktree of `revision`; its wall record."""
    with worktree(str(REPO), revision) as (tree, sha):
        command = [sys.executable, str(SIDE), "--checkpoints", str(STUDY / "checkpoints")]
        command += ["--best", best, "--aa-cases", str(aa_cases), "--out", str(out)]
        env = os.environ | {"PYTHONPATH": str(tree)}
        load_start, gflops = load_average(), machine_speed()
        start = time.perf_counter()
        with open(out.with_suffix(".log"), "w") as log:
            done = subprocess.run(command, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{revision}: the side exited with {done.returncode}; see {out}.log")
    side = json.loads((out / "side.json").read_text())
    if not side["advjax_file"].startswith(str(tree)):
        raise SystemExit(f"{revision}: advjax came from {side['advjax_file']}, not the worktree")
    record = side_record(sha, command, wall, load_start, gflops)
    (out / WALL_FILE).write_text(json.dumps(record, indent=2))
    return record


def read_run(folder: Path) -> dict:
    """One finished side: its wall record and what the side wrote."""
    for name in (WALL_FILE, "side.json"):
        if not (folder / name).exists():
            raise SystemExit(f"{folder / name} is missing: run that side first")
    return json.loads((folder / WALL_FILE).read_text()) | json.loads(
        (folder / "side.json").read_text()
    )


def phase_seconds(run: dict) -> dict[str, float]:
    """Seconds per timed phase: each model's study attacks, then AutoAttack."""
    phases = {
        f"{model}: {attack}": s
        for model, attacks in run["attack_seconds"].items()
        for attack, s in attacks.items()
    }
    phases["study attacks, all"] = sum(phases.values())
    aa = run["autoattack"]
    phases[f"autoattack standard, {aa['model']}, {aa['cases']} cases"] = aa["seconds"]
    return phases


def phase_table(before: list[dict], after: list[dict]) -> list[dict]:
    """Per phase: every run's seconds on both sides, the medians' ratio (> 1: after faster)."""
    return median_rows([phase_seconds(r) for r in before], [phase_seconds(r) for r in after])


def same_work(before: dict, after: dict) -> dict:
    """Whether both sides' cases came out the same: counts and the keys that differ."""
    rb, ra = before["records"], after["records"]
    differ = sorted(k for k in set(rb) | set(ra) if rb.get(k) != ra.get(k))
    aa_fields = ("robust", "clean_correct", "broken_by", "queries")
    aa_same = all(before["autoattack"][f] == after["autoattack"][f] for f in aa_fields)
    return {
        "records": len(rb),
        "records_after": len(ra),
        "records_differing": differ[:20],
        "records_differing_count": len(differ),
        "autoattack_same": aa_same,
        "autoattack_robust": [before["autoattack"]["robust"], after["autoattack"]["robust"]],
    }


OUTCOME_FIELDS = ("status", "clean_pred", "adv_pred", "queries", "first_break_step", "key_path")
"""The record fields compared (the side writes the same, `engine_speed_side.OUTCOME_FIELDS`)."""
STANDARD = ("apgd-ce", "apgd-t", "fab-t", "square")


def committed_agreement(side: dict) -> dict:
    """How a side's cases compare with the committed records of `results/cifar10/default`:
    the study's attack records, field by field, and AutoAttack's cases (breaking member, -2
    wrong on the clean input, -1 robust; queries of every member together) against the
    committed standard evaluation in `strong_evaluation/`."""
    from advjax.records import read_records

    committed = {
        f"{r.model}|{r.attack}|{r.eps!r}|{r.case_id}": json.loads(
            json.dumps([getattr(r, f) for f in OUTCOME_FIELDS])
        )
        for r in read_records(STUDY / "records.jsonl.gz")
    }
    mine = side["records"]
    differ = sorted(k for k, v in mine.items() if committed.get(k) != v)
    aa = side["autoattack"]
    strong = [r for r in read_records(STUDY / "strong_evaluation" / "records.jsonl.gz")
              if r.model == aa["model"] and r.case_id < aa["cases"]]  # fmt: skip
    broken_by = [-1] * aa["cases"]
    queries = [0] * aa["cases"]
    for r in strong:
        if r.attack == "autoattack":
            queries[r.case_id] = r.queries
            if r.status == "skipped_clean_wrong":
                broken_by[r.case_id] = -2
    for r in sorted(strong, key=lambda r: -STANDARD.index(r.attack) if r.attack in STANDARD else 1):
        if r.attack in STANDARD and r.status == "success":
            broken_by[r.case_id] = STANDARD.index(r.attack)
    same_aa = sum(
        (a, b) == (c, d) for a, b, c, d in zip(aa["broken_by"], aa["queries"], broken_by, queries)
    )
    return {"records": len(mine), "records_equal": len(mine) - len(differ),
            "records_differing": differ[:10], "autoattack_cases": aa["cases"],
            "autoattack_equal": same_aa}  # fmt: skip


def markdown(report: dict) -> str:
    before, after, same = report["before"], report["after"], report["same_work"]
    lines = [
        "# The attack engine at two revisions, same work",
        "",
        f"`{report['command']}` · {report['machine']['cpu_model']}, "
        f"{report['machine']['usable_cores']} usable cores · {len(before)} run(s) per side, "
        "alternated before / after (the benchmark alone keeps the 1-minute load near the core "
        "count; the harness does not check that nothing else ran)",
        "",
        f"before: `{before[0]['revision'][:10]}` · after: `{after[0]['revision'][:10]}`",
        "",
        "Load averages (1, 5, 15 min) and matmul GFLOP/s at the start of each run, in order: "
        + "; ".join(
            f"{side} {r['load_average_start']}, {r['matmul_gflops']:.0f}"
            for pair in zip(before, after)
            for side, r in zip(("before", "after"), pair)
        ),
        "",
        "The study's default attack phases on the committed checkpoints (seconds as "
        "`evaluate_model` times each attack, compilation included) and `advjax.evaluation.autoattack` "
        "standard at 8/255 on the best model; median seconds with every run's, ratio = before "
        "/ after (above 1: faster now):",
        "",
        *median_lines(report["phases"]),
    ]
    n_diff = same["records_differing_count"]
    lines += [
        "",
        f"Same work: {same['records']:,} study records before, {same['records_after']:,} after; "
        + (
            "every one the same on both sides (status, predictions, queries, first break "
            "step, key path)"
            if n_diff == 0
            else f"**{n_diff} differ** (first: {', '.join(same['records_differing'][:5])})"
        )
        + "; AutoAttack robust "
        + " / ".join(str(v) for v in same["autoattack_robust"])
        + (
            ", every case's breaking member and queries the same."
            if same["autoattack_same"]
            else ", **cases differ**."
        ),
    ]
    for side, c in report.get("committed", {}).items():
        lines.append(
            f"\nAgainst the committed records ({STUDY.relative_to(REPO)}), {side}: "
            f"{c['records_equal']:,} of {c['records']:,} study records equal"
            + (
                f" (differing: {', '.join(c['records_differing'])})"
                if c["records_differing"]
                else ""
            )
            + "; AutoAttack "
            f"{c['autoattack_equal']} of {c['autoattack_cases']} cases with the committed "
            "standard evaluation's breaking member and queries."
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--before", default="9cf2aff", help="git revision (default: 9cf2aff)")
    p.add_argument("--after", default="HEAD")
    p.add_argument("--aa-cases", type=int, default=200, help="AutoAttack's cases (default 200)")
    p.add_argument("--repeats", type=int, default=1, help="runs per side, alternated")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "advjax-engine-speed"))
    p.add_argument("--report-only", action="store_true", help="report runs already in --work")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats={args.repeats} must be at least 1")
    if not 1 <= args.aa_cases <= 1000:
        p.error(f"--aa-cases={args.aa_cases} must be in [1, 1000]")
    work = Path(args.work)
    sides = {"before": args.before, "after": args.after}
    if not args.report_only:
        if work.exists() and any(work.iterdir()):
            p.error(f"--work {work} is not empty: remove it or pass --report-only")
        work.mkdir(parents=True, exist_ok=True)
        best = best_model(STUDY)
        for i in range(args.repeats):
            for name, revision in sides.items():
                out = work / f"{name}_{i}"
                print(f"[engine] {name} run {i + 1}/{args.repeats}: {revision}", flush=True)
                record = run_side(revision, out, best=best, aa_cases=args.aa_cases)
                print(f"[engine] {name}: {record['wall_seconds']:,.0f} s", flush=True)
    runs = {
        name: [read_run(f) for f in sorted(work.glob(f"{name}_*")) if f.is_dir()] for name in sides
    }
    if not runs["before"] or not runs["after"]:
        raise SystemExit(f"{work} holds no finished run of both sides")
    report = {
        "command": "python -m benchmarks.engine_speed " + shlex.join(argv or sys.argv[1:]),
        "machine": describe_machine(str(REPO)),
        "before": [{k: v for k, v in r.items() if k != "records"} for r in runs["before"]],
        "after": [{k: v for k, v in r.items() if k != "records"} for r in runs["after"]],
        "phases": phase_table(runs["before"], runs["after"]),
        "same_work": same_work(runs["before"][0], runs["after"][0]),
        "committed": {side: committed_agreement(runs[side][0]) for side in sides},
    }
    write_report(args.out, NAME, report, markdown(report))
    return report


if __name__ == "__main__":
    main()
