"""The greedy black-box substitution search shared by the word and character attacks.

Given a score-only oracle (sentences -> logits), a sentence split into word slots and a
candidate generator per slot, the search (Jin et al., AAAI 2020, "TextFooler", without its
sentence-encoder filter):

1. scores the clean sentence (1 query); a clean-wrong case stops there;
2. ranks the attackable slots (not a stopword, at least one candidate) by the drop of the
   true-class probability when the slot is deleted (one batch, one query per slot);
3. for each slot in that order scores all its candidates in one batch and keeps the one
   that lowers the true-class probability most (if it lowers it at all), until the label
   flips, the edited-word cap is reached, the slots run out or the query cap is hit. A
   batch cut short by the query cap can only end the search: a flipping candidate in it is
   kept (success), otherwise the search stops there (budget exhausted).

Every sentence scored is one query, counted against `max_queries`; a batch that would
exceed the cap is cut to the queries left. Nothing the search does depends on the caps
except where it stops, so a run at caps (Q, S) contains the run at any (q <= Q, s <= S) as
a prefix: `truncate_result` derives it from the recorded trace without re-running.
"""

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

STOPS = ("clean_wrong", "flipped", "query_cap", "share_cap", "exhausted")
"""Why the search stopped: the clean sentence is misclassified; the label flipped; the
query cap was hit with work left; the edited-word cap was reached; every slot was tried."""


class Edit(NamedTuple):
    """One kept substitution: slot index, old and new word, queries used after its batch."""

    slot: int
    old: str
    new: str
    query: int


class GreedyResult(NamedTuple):
    """The trace of one case; enough to derive the outcome at any smaller caps."""

    stop: str
    clean_pred: int
    adv_pred: int
    queries: int
    first_flip_query: int | None
    edits: tuple[Edit, ...]
    words: tuple[str, ...]
    max_changes: int
    max_queries: int
    perturbed: str


def max_changes(n_words: int, max_share: float) -> int:
    """Most slots that may change: floor(max_share * n_words) (1e-9 slack for float error)."""
    return int(math.floor(max_share * n_words + 1e-9))


def check_budget(*, max_queries: int, max_share: float) -> None:
    """Raise ValueError unless max_queries is an int >= 1 and 0 < max_share <= 1."""
    if isinstance(max_queries, bool) or not isinstance(max_queries, int) or max_queries < 1:
        raise ValueError(f"max_queries={max_queries!r} must be an integer >= 1")
    if isinstance(max_share, bool) or not isinstance(max_share, (int, float)):
        raise ValueError(f"max_share={max_share!r} must be a number in (0, 1]")
    if not 0.0 < max_share <= 1.0:
        raise ValueError(f"max_share={max_share!r} must be in (0, 1]")


def apply_edits(words: Sequence[str], edits: Sequence[Edit]) -> str:
    """The sentence with `edits` applied to its slots, joined by single spaces."""
    slots = list(words)
    for e in edits:
        slots[e.slot] = e.new
    return " ".join(slots)


def _true_prob(logits: np.ndarray, label: int) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return (p / p.sum(axis=-1, keepdims=True))[:, label]


def greedy_attack(
    logits_fn: Callable[[Sequence[str]], np.ndarray],
    words: Sequence[str],
    label: int,
    candidates: Sequence[Sequence[str]],
    *,
    max_queries: int,
    max_share: float,
) -> GreedyResult:
    """Run the greedy substitution search on one case (see the module docstring).

    Args:
      logits_fn: black-box scorer, a list of sentences -> (B, C) logits.
      words: the sentence's word slots (joined with single spaces to make the sentence).
      label: the true class.
      candidates: per slot, the replacement strings to try (empty: not attackable).
      max_queries: query cap per case, >= 1; every sentence scored counts.
      max_share: most edited slots as a share of len(words), in (0, 1].

    Returns:
      A `GreedyResult`.

    Raises:
      ValueError: bad caps, an empty sentence, or len(candidates) != len(words).
    """
    check_budget(max_queries=max_queries, max_share=max_share)
    words = tuple(words)
    if not words:
        raise ValueError("cannot attack an empty sentence")
    if len(candidates) != len(words):
        raise ValueError(f"{len(candidates)} candidate lists for {len(words)} words")
    cap_changes = max_changes(len(words), max_share)
    used = 0

    def score(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        nonlocal used
        texts = texts[: max_queries - used]
        if not texts:
            return np.zeros((0,)), np.zeros((0,), np.int64)
        logits = np.asarray(logits_fn(texts), np.float64)
        if logits.shape[0] != len(texts):
            raise ValueError(f"logits_fn returned {logits.shape[0]} rows for {len(texts)} texts")
        used += len(texts)
        return _true_prob(logits, label), logits.argmax(axis=-1)

    def result(stop, pred, edits, flip=None):
        return GreedyResult(
            stop,
            clean_pred,
            int(pred),
            used,
            flip,
            tuple(edits),
            words,
            cap_changes,
            max_queries,
            apply_edits(words, edits),
        )

    p0, pred0 = score([" ".join(words)])
    clean_pred = int(pred0[0])
    if clean_pred != label:
        return result("clean_wrong", clean_pred, ())
    slots = [i for i, c in enumerate(candidates) if c]
    if cap_changes == 0:
        return result("share_cap", clean_pred, ())
    if not slots:
        return result("exhausted", clean_pred, ())
    deleted = [" ".join(words[:i] + words[i + 1 :]) for i in slots]
    p_del, _ = score(deleted)
    if len(p_del) < len(deleted):
        return result("query_cap", clean_pred, ())
    order = [slots[j] for j in np.argsort(-(p0[0] - p_del), kind="stable")]
    current, p_cur, edits = list(words), float(p0[0]), []
    for n, slot in enumerate(order):
        texts = [" ".join(current[:slot] + [c] + current[slot + 1 :]) for c in candidates[slot]]
        before = used
        p, pred = score(texts)
        flipped = np.flatnonzero(pred != label)
        if len(flipped):  # keep the flipping candidate with the lowest true-class score
            best = int(flipped[np.argmin(p[flipped])])
            edits.append(Edit(slot, words[slot], candidates[slot][best], used))
            return result("flipped", pred[best], edits, before + int(flipped[0]) + 1)
        if len(p) < len(texts):  # a batch cut by the cap can only end the search
            return result("query_cap", clean_pred, edits)
        best = int(np.argmin(p))
        if p[best] < p_cur:
            current[slot] = candidates[slot][best]
            p_cur = float(p[best])
            edits.append(Edit(slot, words[slot], current[slot], used))
            if len(edits) >= cap_changes:
                return result("share_cap", clean_pred, edits)
        if used >= max_queries and n + 1 < len(order):
            return result("query_cap", clean_pred, edits)
    return result("exhausted", clean_pred, edits)


class GreedyOutcome(NamedTuple):
    """A case's outcome at some caps: stop reason, whether broken, queries, edits kept."""

    stop: str
    broken: bool
    queries: int
    edits: tuple[Edit, ...]
    perturbed: str


def truncate_result(r: GreedyResult, *, max_queries: int, max_share: float) -> GreedyOutcome:
    """The outcome the same search would have had under caps (max_queries, max_share).

    Exact in stop reason, success and query count for caps no larger than the run's own
    (the search is a prefix of the full run's). When the cap cuts the batch that flipped
    the label, the perturbed text keeps the full run's choice (the truncated run keeps the
    best flipping candidate among those it could still score).

    Raises:
      ValueError: bad caps, or caps larger than the run's own.
    """
    check_budget(max_queries=max_queries, max_share=max_share)
    cap = max_changes(len(r.words), max_share)
    if max_queries > r.max_queries or cap > r.max_changes:
        raise ValueError(
            f"caps ({max_queries=}, {max_share=}: {cap} edits) exceed the run's own "
            f"({r.max_queries} queries, {r.max_changes} edits)"
        )
    if r.stop == "clean_wrong":
        return GreedyOutcome("clean_wrong", False, min(r.queries, max_queries), (), r.perturbed)
    flip_edit = len(r.edits) if r.stop == "flipped" else None
    if flip_edit is not None and r.first_flip_query <= max_queries and flip_edit <= cap:
        return GreedyOutcome("flipped", True, min(r.queries, max_queries), r.edits, r.perturbed)
    if cap == 0:
        return GreedyOutcome("share_cap", False, 1, (), " ".join(r.words))
    non_flip = r.edits[: len(r.edits) - (flip_edit is not None)]
    if cap <= len(non_flip) and non_flip[cap - 1].query <= max_queries:
        kept = non_flip[:cap]
        return GreedyOutcome("share_cap", False, kept[-1].query, kept, apply_edits(r.words, kept))
    if r.queries > max_queries:
        kept = tuple(e for e in non_flip if e.query <= max_queries)
        return GreedyOutcome("query_cap", False, max_queries, kept, apply_edits(r.words, kept))
    if r.stop == "flipped":  # the flip needed more edits than the cap allows
        kept = non_flip[:cap]
        return GreedyOutcome("share_cap", False, r.queries, kept, apply_edits(r.words, kept))
    return GreedyOutcome(r.stop, False, r.queries, r.edits, r.perturbed)
