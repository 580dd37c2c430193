"""AutoAttack on a model advjax never saw, against the original AutoAttack, in one run.

    python -m benchmarks.any_model_autoattack [--checkpoint results/cifar10/robust_cnn/checkpoints/pgd_silu_scratch.msgpack]
        [--n 500] [--torch-python .torchvenv/bin/python] [--out benchmarks/results]

The model: a trained study checkpoint written again as a user's plain-`jax.numpy` port
(`benchmarks.user_models.plain_compact_cnn`: `lax.conv_general_dilated`, batch norm as
arithmetic, `lax.reduce_window` pooling, no advjax layer). advjax runs
`advjax.evaluation.autoattack(version="standard")` on it as the README shows (fast path on, the
default); the original AutoAttack (`pyautoattack`, Croce & Hein's code) runs the standard
version on the same weights in the PyTorch `Net` (`--torch-python`: torch==2.13.0,
pyautoattack), 2 threads, seed 0. Images: the first n of the study's stratified test cases.
Reports robust accuracy, per-case agreement, each member's seconds and advjax's model
evaluations, to `<out>/any_model_autoattack.{json,md}`. Run it on an otherwise idle machine.
"""

import resource
import sys
from pathlib import Path

import numpy as np

from advjax import backend

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = REPO / "results/cifar10/robust_cnn/checkpoints/pgd_silu_scratch.msgpack"
DEFAULT_STUDY = REPO / "results" / "cifar10" / "default"


def main(argv=None) -> dict:
    backend.configure()
    from benchmarks.autoattack_peer import peer_parser

    p = peer_parser(__doc__, n=500)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.set_defaults(study=str(DEFAULT_STUDY))
    args = p.parse_args(argv)

    from advjax.evaluation.engine import resolve_members
    from advjax.evaluation.stats import format_rate, rate
    from advjax.io import environment, load_checkpoint
    from advjax_train import CompactCNN, eval_logits_fn
    from benchmarks.autoattack_peer import (
        batched_logits,
        full_budget,
        run_advjax,
        run_torch_script,
        study_images,
    )
    from benchmarks.machine import load_average
    from benchmarks.report import write_report
    from benchmarks.user_models import plain_compact_cnn

    x, y = study_images(args.study, args.n, args.data_dir)
    model, variables = load_checkpoint(args.checkpoint, CompactCNN)
    plain = plain_compact_cnn(variables, model.activation)
    logits = batched_logits(plain, x)
    own = batched_logits(eval_logits_fn(model, variables), x)
    load_start = load_average()
    result, seconds, member_seconds = run_advjax(plain, x, y, 8 / 255, args.seed)
    advjax_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peer = run_torch_script(
        args.torch_python, "torch_original_autoattack.py", model, variables, x, y,
        ("--threads", 2, "--seed", args.seed), logits=logits,
    )  # fmt: skip
    load_end = load_average()
    members = resolve_members("standard", None, "linf")
    original = np.asarray(peer["robust"], bool)
    broken_a, broken_o = ~result.robust & result.clean_correct, ~original & result.clean_correct
    report = {
        "command": "python -m benchmarks.any_model_autoattack " + " ".join(argv or sys.argv[1:]),
        "checkpoint": str(Path(args.checkpoint).resolve().relative_to(REPO)),
        "n": int(len(y)),
        "load_average": {"start": load_start, "end": load_end},
        "machine": environment(),
        "plain_port_vs_compact_cnn_max_logit_difference": float(np.abs(logits - own).max()),
        "advjax": {
            "robust": int(result.robust.sum()),
            "robust_text": format_rate(rate(int(result.robust.sum()), len(y))),
            "seconds": seconds,
            "member_seconds": member_seconds,
            "after": {m.name: r["count"] for m, r in zip(members, result.robust_accuracy[1:])},
            "model_evaluations": int(result.queries.sum()),
            "full_budget": full_budget(members, int(result.clean_correct.sum())),
            "peak_rss_mib": advjax_rss,
        },
        "original": {
            "robust": int(original.sum()),
            "robust_text": format_rate(rate(int(original.sum()), len(y))),
            "seconds": peer["seconds"],
            "member_seconds": {row["member"]: row["seconds"] for row in peer["members"]},
            "after": {
                row["member"]: round(row["robust_accuracy"] * len(y)) for row in peer["members"]
            },
            "max_logit_difference": peer["max_logit_difference"],
            "peak_rss_mib": peer["peak_rss_mib"],
            "versions": {"torch": peer["torch"], "pyautoattack": peer["autoattack"]},
        },
        "agreement": {
            "both_robust": int((result.robust & original).sum()),
            "both_broken": int((broken_a & broken_o).sum()),
            "advjax_only_broken": int((broken_a & ~broken_o).sum()),
            "original_only_broken": int((broken_o & ~broken_a).sum()),
        },
        "robust_advjax": result.robust.astype(int).tolist(),
        "robust_original": original.astype(int).tolist(),
    }
    write_report(args.out, "any_model_autoattack", report, markdown(report))
    return report


def markdown(r: dict) -> str:
    a, o, m = r["advjax"], r["original"], r["machine"]
    lines = [
        "# AutoAttack on a plain-`jax.numpy` model: advjax against the original",
        "",
        f"`{r['command'].strip()}` · git {m.get('git_revision', '')} · `{r['checkpoint']}` as a "
        f"plain-jnp port (largest logit difference to advjax's CompactCNN "
        f"{r['plain_port_vs_compact_cnn_max_logit_difference']:.1e}) · the first {r['n']} of the "
        "study's test images · eps 8/255 L-inf · standard version",
        "",
        f"Load average {r['load_average']['start']} at the start, {r['load_average']['end']} at "
        "the end (the benchmark alone keeps the 1-minute load near the core count).",
        "",
        "| | advjax | original AutoAttack | original / advjax |",
        "|---|---|---|---|",
        f"| robust accuracy | {a['robust_text']} | {o['robust_text']} | {a['robust'] - o['robust']:+d} cases |",
        f"| seconds, all members | {a['seconds']:.0f} | {o['seconds']:.0f} | {o['seconds'] / a['seconds']:.2f}x |",
    ]  # fmt: skip
    for name in ("apgd-ce", "apgd-t", "fab-t", "square"):
        sa, so = a["member_seconds"].get(name, 0.0), o["member_seconds"].get(name, 0.0)
        ratio = f"{so / sa:.2f}x" if sa else "-"
        lines.append(
            f"| {name} seconds (robust after: {a['after'].get(name)} / {o['after'].get(name)}) | "
            f"{sa:.0f} | {so:.0f} | {ratio} |"
        )
    g = r["agreement"]
    lines += [
        f"| peak memory (MiB) | {a['peak_rss_mib']:.0f} | {o['peak_rss_mib']:.0f} | |",
        "",
        f"Per case: {g['both_robust']} robust under both, {g['both_broken']} broken by both, "
        f"{g['advjax_only_broken']} by advjax only, {g['original_only_broken']} by the original "
        f"only. Largest logit difference between the two frameworks: "
        f"{o['max_logit_difference']:.1e}. advjax's model evaluations: {a['model_evaluations']:,} "
        f"({100 * a['model_evaluations'] / a['full_budget']:.1f} % of every member on every "
        "clean-correct case).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
