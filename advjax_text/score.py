"""`python -m advjax_text.score`: scores of attacks on translation models made anywhere
(Michel et al. 2019's framework).

Each file holds one sentence per line, aligned across files:

    python -m advjax_text.score --src src.fr --adv-src adv.charswap.fr --ref ref.en \\
        --out base.en --adv-out adv.charswap.en [--metric chrf|bleu] [--per-line scores.tsv]

prints the mean source similarity s_src and mean relative target decrease d_tgt (both in
percent) and the success rate (s_src + d_tgt > 1), and with ``--per-line`` writes one
tab-separated row of scores per input line (`advjax_text.translate.score_files`). Mismatched
line counts and empty files are one-line errors (exit status 2).
"""

import argparse
import json
import sys
from collections.abc import Sequence

from advjax.cli import run_command

PROG = "advjax_text.score"

__all__ = ["main"]


def format_summary(summary: dict, metric: str) -> str:
    """Three human-readable lines: s_src, d_tgt and success rate."""
    from advjax.evaluation.stats import format_rate

    return "\n".join(
        [
            f"source similarity ({metric}) s_src: {summary['s_src']:.3f} "
            f"(std {summary['s_src_std']:.3f})",
            f"relative target decrease ({metric}) d_tgt: {summary['d_tgt']:.3f}",
            f"success rate (s_src + d_tgt > 1): {format_rate(summary['success'])}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, score the files, print the summary; return the exit code."""
    from advjax_text.translate import METRICS

    parser = argparse.ArgumentParser(
        prog="python -m advjax_text.score", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--src", required=True, help="original source sentences")
    parser.add_argument("--adv-src", required=True, help="perturbed source sentences")
    parser.add_argument("--ref", required=True, help="reference translations")
    parser.add_argument("--out", required=True, help="model outputs on --src")
    parser.add_argument("--adv-out", required=True, help="model outputs on --adv-src")
    parser.add_argument("--metric", choices=METRICS, default="chrf")
    parser.add_argument("--per-line", help="write per-line scores (TSV) here")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return run_command(PROG, lambda: score(args))


def score(args) -> int:
    from advjax.records import atomic_write_text
    from advjax_text.translate import per_line_tsv, score_files, summarize

    scores = score_files(
        args.src, args.adv_src, args.ref, args.out, args.adv_out, metric=args.metric
    )
    summary = summarize(scores)
    if args.per_line:
        atomic_write_text(args.per_line, per_line_tsv(scores))
    if args.json:
        print(json.dumps({"metric": args.metric, **summary}, indent=2))
    else:
        print(format_summary(summary, args.metric))
    return 0


if __name__ == "__main__":
    sys.exit(main())
