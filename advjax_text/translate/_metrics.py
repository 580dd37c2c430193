"""The evaluation framework of Michel et al. (NAACL 2019) for attacks on seq2seq models.

For a source x, its reference y, the model output y_M on x and y_M_adv on the perturbed
source x_adv:

- source similarity   s_src = s(x_adv, x) / 100
- target decrease     d_tgt = max(0, s(y_M, y) - s(y_M_adv, y)) / s(y_M, y)  (0 when s(y_M, y) = 0)
- success             s_src + d_tgt > 1

with s a sentence-level similarity from sacrebleu: chrF2 (`CHRF()` defaults: 6 character
n-grams, no word n-grams, beta = 2) by default, or sentence BLEU (exponential smoothing,
effective order) for the BLEU variant the paper compares it with. Pure functions: no I/O.

Reference: Michel, Li, Neubig & Pino, "On Evaluation of Adversarial Perturbations for
Sequence-to-Sequence Models", NAACL 2019; their tool is github.com/pmichel31415/teapot-nlp.
"""

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from advjax.evaluation.stats import rate
from advjax.records import read_lines

METRICS = ("chrf", "bleu")

_CHRF = CHRF()
_BLEU = BLEU(effective_order=True)


def chrf(hypothesis: str, reference: str) -> float:
    """Sentence chrF2 of `hypothesis` against one `reference`, in [0, 100] (sacrebleu defaults)."""
    return float(_CHRF.sentence_score(hypothesis, [reference]).score)


def sentence_bleu(hypothesis: str, reference: str) -> float:
    """Sentence BLEU (exp smoothing, effective order) against one reference, in [0, 100]."""
    return float(_BLEU.sentence_score(hypothesis, [reference]).score)


def similarity_fn(metric: str) -> Callable[[str, str], float]:
    """The sentence similarity (in [0, 100]) named by `metric`: "chrf" or "bleu".

    Raises:
      ValueError: unknown metric.
    """
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} must be one of {METRICS}")
    return chrf if metric == "chrf" else sentence_bleu


def relative_decrease(base: float, adv: float) -> float:
    """max(0, base - adv) / base, and 0 when base is 0 (nothing left to destroy)."""
    if base <= 0:
        return 0.0
    return max(0.0, base - adv) / base


@dataclasses.dataclass(frozen=True)
class PairScore:
    """Scores of one attacked sentence, all in [0, 1]."""

    s_src: float
    s_tgt: float
    s_tgt_adv: float
    d_tgt: float

    @property
    def success(self) -> bool:
        """The paper's criterion: s_src + d_tgt > 1."""
        return self.s_src + self.d_tgt > 1.0


def score_pair(
    src: str, adv_src: str, ref: str, out: str, adv_out: str, *, metric: str = "chrf"
) -> PairScore:
    """Score one attack: source similarity, target similarities and relative decrease.

    Args:
      src, adv_src: original and perturbed source sentences.
      ref: the reference translation.
      out, adv_out: the model outputs on `src` and on `adv_src`.
      metric: "chrf" (the paper's choice) or "bleu".

    Returns:
      A `PairScore` with every score divided by 100.

    Example:
      >>> score_pair("le chat", "le caht", "the cat", "the cat", "the dog").success
      True
    """
    sim = similarity_fn(metric)
    s_src = sim(adv_src, src) / 100.0
    base, adv = sim(out, ref), sim(adv_out, ref)
    return PairScore(s_src, base / 100.0, adv / 100.0, relative_decrease(base, adv))


def _check_columns(columns: dict[str, Sequence[str]]) -> int:
    lengths = {name: len(col) for name, col in columns.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"mismatched line counts: {lengths}")
    n = next(iter(lengths.values()))
    if n == 0:
        raise ValueError(f"nothing to score: every input is empty ({lengths})")
    return n


def score_corpus(
    src: Sequence[str],
    adv_src: Sequence[str],
    ref: Sequence[str],
    out: Sequence[str],
    adv_out: Sequence[str],
    *,
    metric: str = "chrf",
) -> list[PairScore]:
    """`score_pair` on every aligned line.

    Raises:
      ValueError: the five sequences differ in length or are empty (the message gives
        every length); unknown metric.
    """
    _check_columns({"src": src, "adv_src": adv_src, "ref": ref, "out": out, "adv_out": adv_out})
    similarity_fn(metric)
    return [score_pair(*line, metric=metric) for line in zip(src, adv_src, ref, out, adv_out)]


def score_files(
    src: str | Path,
    adv_src: str | Path,
    ref: str | Path,
    out: str | Path,
    adv_out: str | Path,
    *,
    metric: str = "chrf",
) -> list[PairScore]:
    """`score_corpus` on five aligned files, one sentence per line (`advjax.records.read_lines`;
    a carriage return ending a line is dropped).

    Raises:
      ValueError: an empty file, or line counts that differ (every file named with its count).
      OSError: a file that cannot be read.
    """
    paths = {"src": src, "adv_src": adv_src, "ref": ref, "out": out, "adv_out": adv_out}
    columns = {}
    for name, path in paths.items():
        columns[name] = [line.rstrip("\r") for line in read_lines(path)]
        if not columns[name]:
            raise ValueError(f"{path} is empty")
    if len({len(c) for c in columns.values()}) != 1:
        raise ValueError("mismatched line counts: "
                         + ", ".join(f"{paths[k]}: {len(v)}" for k, v in columns.items()))  # fmt: skip
    return score_corpus(*columns.values(), metric=metric)


def per_line_tsv(scores: Sequence[PairScore]) -> str:
    """A TSV table (header + one row per line) of s_src, s_tgt, s_tgt_adv, d_tgt, success."""
    rows = ["line\ts_src\ts_tgt\ts_tgt_adv\td_tgt\tsuccess"]
    for i, s in enumerate(scores, start=1):
        rows.append(
            f"{i}\t{s.s_src:.6f}\t{s.s_tgt:.6f}\t{s.s_tgt_adv:.6f}\t{s.d_tgt:.6f}\t{int(s.success)}"
        )
    return "\n".join(rows) + "\n"


def summarize(scores: Sequence[PairScore]) -> dict:
    """Means (in percent) of s_src, d_tgt and target similarities, and the success rate.

    Returns:
      {"n", "s_src", "s_src_std" (sample std, as teapot), "d_tgt", "s_tgt", "s_tgt_adv", "success": rate-dict}
      where rate-dict has value, count, total and a Wilson 95 % interval.

    Raises:
      ValueError: no scores.
    """
    if not scores:
        raise ValueError("cannot summarize zero scores")
    s_src = np.array([s.s_src for s in scores])
    successes = sum(s.success for s in scores)
    return {
        "n": len(scores),
        "s_src": 100 * float(s_src.mean()),
        "s_src_std": 100 * float(s_src.std(ddof=1)) if len(scores) > 1 else 0.0,
        "d_tgt": 100 * float(np.mean([s.d_tgt for s in scores])),
        "s_tgt": 100 * float(np.mean([s.s_tgt for s in scores])),
        "s_tgt_adv": 100 * float(np.mean([s.s_tgt_adv for s in scores])),
        "success": rate(successes, len(scores)),
    }


def is_finite_summary(summary: dict) -> bool:
    """Whether every mean in a `summarize` result is finite (a sanity check for tables)."""
    return all(math.isfinite(summary[k]) for k in ("s_src", "d_tgt", "s_tgt", "s_tgt_adv"))
