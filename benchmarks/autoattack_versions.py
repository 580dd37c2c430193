"""AutoAttack's fast and standard versions against the original AutoAttack, in one run.

    python -m benchmarks.autoattack_versions [--model pgd_continue2_silu] [--n 1000]
        [--study results/cifar10/research] [--torch-python .torchvenv/bin/python] [--out benchmarks/results]

The same weights (a study checkpoint; the peer gets them in its PyTorch `Net`), the same
images (the first n of the study's stratified test cases), eps 8/255 L-inf, seed 0:
`advjax.evaluation.autoattack(version="fast")`, then `advjax.evaluation.autoattack(version="standard")`, both with
their checks on, as a user calls them; then the original AutoAttack (`pyautoattack`, Croce &
Hein's code: APGD-CE without restarts, APGD-T and FAB-T with 9 targets, Square with 5,000
queries, the paper's standard settings) on 2 threads. Reports robust accuracy, per-case
agreement, wall seconds (advjax's include compilation) and model passes: advjax's from each
stage's queries (`AutoAttackResult.passes`), the original's counted row by row through the
network (`benchmarks/torch_original_autoattack.py`). Writes
`<out>/autoattack_versions.{json,md}`. Run it on an otherwise idle machine (~1 h on 2 cores).
"""

import resource
import sys
from pathlib import Path

import numpy as np

from advjax import backend

REPO = Path(__file__).resolve().parents[1]


def advjax_row(result, seconds, by_stage, n) -> dict:
    from advjax.evaluation.stats import format_rate, rate

    robust = int(result.robust.sum())
    forward = sum(p["forward"] for p in result.passes)
    backward = sum(p["backward"] for p in result.passes)
    return {
        "robust": robust,
        "robust_text": format_rate(rate(robust, n)),
        "seconds": seconds,
        "stage_seconds": by_stage,
        "passes": {"forward": int(forward), "backward": int(backward)},
        "passes_by_member": [dict(p) for p in result.passes],
        "schedule": result.schedule,
        "checks": {c.name: c.passed for c in result.checks},
    }


def agreement(a: np.ndarray, b: np.ndarray) -> dict:
    return {
        "both_robust": int((a & b).sum()),
        "first_only_robust": int((a & ~b).sum()),
        "second_only_robust": int((~a & b).sum()),
        "differ": np.flatnonzero(a != b).tolist(),
    }


def markdown(r: dict) -> str:
    f, s, o, m = r["fast"], r["standard"], r["original"], r["machine"]

    def total(row):
        return row["passes"]["forward"] + row["passes"]["backward"]

    lines = [
        "# AutoAttack: advjax fast and standard against the original, one run",
        "",
        f"`{r['command'].strip()}` · git {m.get('git_revision', '')[:7]} · model `{r['model']}` · "
        f"the first {r['n']} of the study's test images · eps 8/255 L-inf · seed {r['seed']}",
        "",
        f"Machine: {m.get('cpu_model', '?')}, {m.get('cpu_count', '?')} cores, otherwise idle: "
        f"load average {r['load_average']['start']} at the start, {r['load_average']['end']} at the "
        "end (the benchmark itself keeps the cores busy). advjax's seconds include compilation.",
        "",
        "| | advjax fast | advjax standard | original AutoAttack (standard) |",
        "|---|---|---|---|",
        f"| robust accuracy | {f['robust_text']} | {s['robust_text']} | {o['robust_text']} |",
        f"| wall seconds | {f['seconds']:.0f} | {s['seconds']:.0f} | {o['seconds']:.0f} |",
        f"| original's seconds / this | {o['seconds'] / f['seconds']:.2f}x | "
        f"{o['seconds'] / s['seconds']:.2f}x | 1 |",
        f"| advjax standard's seconds / this | {s['seconds'] / f['seconds']:.2f}x | 1 | "
        f"{s['seconds'] / o['seconds']:.2f}x |",
        f"| model passes (forward + backward) | {total(f):,} | {total(s):,} | {total(o):,} |",
        f"| passes, original / this | {total(o) / total(f):.2f}x | {total(o) / total(s):.2f}x | 1 |",
        f"| peak memory (MiB) | {r['advjax_peak_rss_mib']:.0f} (both) | | {o['peak_rss_mib']:.0f} |",
    ]  # fmt: skip
    fs, fo, so = r["agreement"]["fast_standard"], r["agreement"]["fast_original"], r["agreement"]["standard_original"]  # fmt: skip
    lines += [
        "",
        f"Per case: fast and advjax standard differ on {len(fs['differ'])} "
        f"({fs['first_only_robust']} held only by fast); fast and the original on "
        f"{len(fo['differ'])} ({fo['first_only_robust']} held only by fast); advjax standard and the "
        f"original on {len(so['differ'])} ({so['first_only_robust']} held only by advjax). "
        f"Largest logit difference between the two frameworks: {o['max_logit_difference']:.1e}.",
        "",
        f"Fast's schedule: {f['schedule']}",
        "",
        "Seconds per stage (advjax: from the progress callback; the original: from its log):",
        "",
        "| stage | fast | standard | original |",
        "|---|---|---|---|",
    ]
    stages = list(dict.fromkeys([*f["stage_seconds"], *s["stage_seconds"], *o["member_seconds"]]))
    for name in stages:
        cells = [row.get(name) for row in (f["stage_seconds"], s["stage_seconds"], o["member_seconds"])]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join("-" if c is None else f"{c:.0f}" for c in cells) + " |")  # fmt: skip
    lines += [
        "",
        "Model passes count every row a network evaluates (forward) and every row a gradient "
        "flows back through (backward): advjax's from each stage's queries by the registry's "
        "per-run costs, the original's counted at the network in PyTorch. They compare across "
        "machines, where seconds do not.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()
    from benchmarks.autoattack_peer import peer_parser

    p = peer_parser(__doc__, n=1000)
    p.add_argument("--model", default="pgd_continue2_silu")
    args = p.parse_args(argv)

    from advjax.evaluation.stats import format_rate, rate
    from advjax.io import environment
    from advjax_train import eval_logits_fn
    from benchmarks.autoattack_peer import (
        batched_logits,
        run_advjax,
        run_torch_script,
        study_checkpoint,
        study_images,
    )
    from benchmarks.machine import cpu_model, load_average
    from benchmarks.report import write_report

    x, y = study_images(args.study, args.n, args.data_dir)
    y = y.astype(np.int32)
    model, variables = study_checkpoint(args.study, args.model)
    logits_fn = eval_logits_fn(model, variables)
    logits = batched_logits(logits_fn, x)
    machine = environment()  # the code as it runs, before any later edit of the tree
    machine["cpu_model"] = cpu_model()
    start = load_average()
    rows = {}
    for version in ("fast", "standard"):
        result, seconds, by_stage = run_advjax(logits_fn, x, y, 8 / 255, args.seed,
                                               version=version, checks=True)  # fmt: skip
        rows[version] = (result, advjax_row(result, seconds, by_stage, len(y)))
        print(f"advjax {version}: robust {rows[version][1]['robust']}, {seconds:.0f} s", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peer = run_torch_script(
        args.torch_python, "torch_original_autoattack.py", model, variables, x, y,
        ("--threads", 2, "--seed", args.seed), logits=logits,
    )  # fmt: skip
    end = load_average()
    original = np.asarray(peer["robust"], bool)
    fast, standard = rows["fast"][0].robust, rows["standard"][0].robust
    report = {
        "command": "python -m benchmarks.autoattack_versions " + " ".join(argv or sys.argv[1:]),
        "model": args.model,
        "study": str(Path(args.study).resolve().relative_to(REPO)),
        "n": int(len(y)),
        "seed": args.seed,
        "load_average": {"start": start, "end": end},
        "machine": machine,
        "fast": rows["fast"][1],
        "standard": rows["standard"][1],
        "advjax_peak_rss_mib": rss,
        "original": {
            "robust": int(original.sum()),
            "robust_text": format_rate(rate(int(original.sum()), len(y))),
            "seconds": peer["seconds"],
            "member_seconds": {row["member"]: row["seconds"] for row in peer["members"]},
            "passes": peer["passes"],
            "max_logit_difference": peer["max_logit_difference"],
            "peak_rss_mib": peer["peak_rss_mib"],
            "versions": {"torch": peer["torch"], "pyautoattack": peer["autoattack"]},
        },
        "agreement": {
            "fast_standard": agreement(fast, standard),
            "fast_original": agreement(fast, original),
            "standard_original": agreement(standard, original),
        },
        "robust": {
            "fast": fast.astype(int).tolist(),
            "standard": standard.astype(int).tolist(),
            "original": original.astype(int).tolist(),
        },
    }
    write_report(args.out, "autoattack_versions", report, markdown(report))
    return report


if __name__ == "__main__":
    main()
