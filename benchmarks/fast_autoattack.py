"""AutoAttack's fast version against the committed standard records, model by model.

    python -m benchmarks.fast_autoattack [--evaluation STUDY:STRONG ...] [--models M ...]
        [--out benchmarks/results] [--name fast_autoattack]

Each STUDY:STRONG pair names a study run (results.json, checkpoints/) and the folder of its
committed standard AutoAttack records (default: results/cifar10/default:results/cifar10/default/strong_evaluation, the
three default models). For every model there, `advjax.evaluation.autoattack(version="fast")` runs on
the same images with the same seed, and the benchmark reports: robust accuracy under both,
the cases on which they disagree, the model passes of each (the standard version's from
its records, by the same formula, `AttackSpec.passes`), which schedule fast took, and fast's
seconds (the standard version's seconds come from another day and machine, so none are
compared here). Run it on an otherwise idle machine.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from advjax import backend

REPO = Path(__file__).resolve().parents[1]
DEFAULT = "results/cifar10/default:results/cifar10/default/strong_evaluation"


def standard_outcome(records, model: str, case_count: int, classes: int) -> dict:
    """Per case robust under the committed standard records, and their passes."""
    from advjax.evaluation import AUTOATTACK, AttackSpec
    from advjax.evaluation._autoattack_records import member_passes

    mine = [r for r in records if r.model == model]
    final = {r.case_id: r for r in mine if r.attack == AUTOATTACK}
    if len(final) != case_count:
        raise ValueError(f"{model}: {len(final)} final records for {case_count} cases")
    robust = np.array([final[i].status == "failed" for i in range(case_count)])
    eps = final[0].eps
    members = [AttackSpec(m) for m in ("apgd-ce", "apgd-t", "fab-t", "square")]
    passes = member_passes(mine, members, model=model, eps=eps, classes=classes)
    return {"robust": robust, "passes": passes, "eps": eps}


def total(passes) -> int:
    return int(sum(p["forward"] + p["backward"] for p in passes))


def run_pair(study_dir: Path, strong_dir: Path, models, data_dir) -> list[dict]:
    import jax

    from advjax.evaluation import autoattack
    from advjax.records import read_records, record_file
    from advjax_train import load_logits_fn
    from benchmarks.autoattack_peer import study_images

    study = json.loads((study_dir / "results.json").read_text())
    records = read_records(record_file(strong_dir))
    names = [m for m in dict.fromkeys(r.model for r in records) if not models or m in models]
    rows = []
    for name in names:
        n = len({r.case_id for r in records if r.model == name})
        x, y = study_images(study_dir, n, data_dir)
        logits_fn, _ = load_logits_fn(study_dir / "checkpoints" / f"{name}.msgpack")
        std = standard_outcome(records, name, n, 10)
        started = time.perf_counter()
        fast = autoattack(logits_fn, x, y.astype(np.int32), std["eps"],
                          key=jax.random.key(study["config"]["seed"]), version="fast")  # fmt: skip
        seconds = time.perf_counter() - started
        differ = np.flatnonzero(fast.robust != std["robust"])
        rows.append({
            "study": str(study_dir), "model": name, "cases": n, "eps": std["eps"],
            "robust": {"standard": int(std["robust"].sum()), "fast": int(fast.robust.sum())},
            "disagree": differ.tolist(),
            "fast_robust_only": int(np.sum(fast.robust & ~std["robust"])),
            "passes": {"standard": total(std["passes"]), "fast": total(fast.passes)},
            "passes_by_member": {"standard": std["passes"], "fast": list(fast.passes)},
            "schedule": fast.schedule,
            "checks": {c.name: c.passed for c in fast.checks},
            "fast_seconds": seconds,
        })  # fmt: skip
        r = rows[-1]
        print(f"{name}: robust standard {r['robust']['standard']} fast {r['robust']['fast']}, "
              f"{len(differ)} disagree; passes {r['passes']['fast'] / r['passes']['standard']:.3f}"
              f" of standard; {seconds:.0f} s; {fast.schedule}", flush=True)  # fmt: skip
    return rows


def markdown(report: dict) -> str:
    lines = [
        "# AutoAttack fast against the committed standard records",
        "",
        f"`{report['command']}` at git {report['machine'].get('git_revision', '?')[:7]}. "
        f"Load average {report['load_average']['start']} at the start, "
        f"{report['load_average']['end']} at the end.",
        "",
        "| study | model | cases | robust (standard / fast) | cases that differ | "
        "model passes (fast / standard) | fast seconds | schedule |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        ratio = r["passes"]["fast"] / r["passes"]["standard"]
        lines.append(
            f"| {r['study']} | {r['model']} | {r['cases']} | {r['robust']['standard']} / "
            f"{r['robust']['fast']} | {len(r['disagree'])} ({r['fast_robust_only']} held only "
            f"by fast) | {ratio:.3f} ({r['passes']['fast']:,} / {r['passes']['standard']:,}) | "
            f"{r['fast_seconds']:.0f} | {r['schedule'].split(':')[0]} |"
        )
    worst = max((100 * (r["robust"]["fast"] - r["robust"]["standard"]) / r["cases"]
                 for r in report["rows"]), default=0.0)  # fmt: skip
    lines += [
        "",
        f"Largest robust-accuracy difference, fast minus standard: {worst:+.1f} points. "
        "Model passes are forward plus backward passes over all cases, the standard version's "
        "counted from its committed records by the same formula (`AttackSpec.passes`); they "
        "compare across machines, where seconds do not.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--evaluation", nargs="+", default=[DEFAULT], help="STUDY:STRONG folders")
    p.add_argument("--models", nargs="+", default=None)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--name", default="fast_autoattack", help="file stem of the JSON and markdown")
    args = p.parse_args(argv)
    from advjax.io import environment
    from benchmarks.machine import load_average
    from benchmarks.report import write_report

    pairs = []
    for text in args.evaluation:
        study, sep, strong = text.partition(":")
        if not sep or not study or not strong:
            p.error(f"--evaluation {text!r}: expected STUDY:STRONG folders")
        pairs.append((Path(study), Path(strong)))
    start = load_average()
    rows = [row for s, g in pairs for row in run_pair(s, g, args.models, args.data_dir)]
    report = {
        "command": "python -m benchmarks.fast_autoattack " + " ".join(argv or sys.argv[1:]),
        "load_average": {"start": start, "end": load_average()},
        "machine": environment(),
        "rows": rows,
    }
    write_report(args.out, args.name, report, markdown(report))
    return report


if __name__ == "__main__":
    main()
