"""Score attacks on translation models made anywhere (Michel et al. 2019's framework).

Each file holds one sentence per line, aligned across files:

    python -m advjax.text.score --src src.fr --adv-src adv.charswap.fr --ref ref.en \\
        --out base.en --adv-out adv.charswap.en [--metric chrf|bleu] [--per-line scores.tsv]

prints the mean source similarity s_src and mean relative target decrease d_tgt (both in
percent) and the success rate (s_src + d_tgt > 1), and with ``--per-line`` writes one
tab-separated row of scores per input line. Mismatched line counts and empty files are
errors (exit status 2).
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from advjax.evaluation._metrics import format_rate
from advjax.io._atomic import atomic_write_text
from advjax.text.translate._metrics import METRICS, PairScore, score_corpus, summarize

_FILES = ("src", "adv_src", "ref", "out", "adv_out")


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file without their newline characters.

    Raises:
      ValueError: the file is empty.
    """
    text = Path(path).read_text(encoding="utf-8")
    if not text:
        raise ValueError(f"{path} is empty")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def per_line_tsv(scores: Sequence[PairScore]) -> str:
    """A TSV table (header + one row per line) of s_src, s_tgt, s_tgt_adv, d_tgt, success."""
    rows = ["line\ts_src\ts_tgt\ts_tgt_adv\td_tgt\tsuccess"]
    for i, s in enumerate(scores, start=1):
        rows.append(
            f"{i}\t{s.s_src:.6f}\t{s.s_tgt:.6f}\t{s.s_tgt_adv:.6f}\t{s.d_tgt:.6f}\t{int(s.success)}"
        )
    return "\n".join(rows) + "\n"


def format_summary(summary: dict, metric: str) -> str:
    """Three human-readable lines: s_src, d_tgt and success rate."""
    return "\n".join(
        [
            f"source similarity ({metric}) s_src: {summary['s_src']:.3f} "
            f"(std {summary['s_src_std']:.3f})",
            f"relative target decrease ({metric}) d_tgt: {summary['d_tgt']:.3f}",
            f"success rate (s_src + d_tgt > 1): {format_rate(summary['success'])}",
        ]
    )


def main(argv: Sequence[str] | None = None) -> dict:
    """Parse arguments, score the files, print the summary; return it."""
    parser = argparse.ArgumentParser(
        prog="python -m advjax.text.score", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--src", required=True, help="original source sentences")
    parser.add_argument("--adv-src", required=True, help="perturbed source sentences")
    parser.add_argument("--ref", required=True, help="reference translations")
    parser.add_argument("--out", required=True, help="model outputs on --src")
    parser.add_argument("--adv-out", required=True, help="model outputs on --adv-src")
    parser.add_argument("--metric", choices=METRICS, default="chrf")
    parser.add_argument("--per-line", help="write per-line scores (TSV) here")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    try:
        columns = {name: read_lines(getattr(args, name)) for name in _FILES}
        lengths = {name: len(col) for name, col in columns.items()}
        if len(set(lengths.values())) != 1:
            paths = {name: getattr(args, name) for name in _FILES}
            raise ValueError(
                "mismatched line counts: "
                + ", ".join(f"{paths[k]}: {v}" for k, v in lengths.items())
            )
        scores = score_corpus(*(columns[name] for name in _FILES), metric=args.metric)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    summary = summarize(scores)
    if args.per_line:
        atomic_write_text(args.per_line, per_line_tsv(scores))
    if args.json:
        print(json.dumps({"metric": args.metric, **summary}, indent=2))
    else:
        print(format_summary(summary, args.metric))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
