"""The per-case validity rule of the text attacks, declared before any attack runs.

A perturbed sentence is valid when (1) no substitution replaces a word by one of its
antonyms, (2) the share of changed word slots is within the declared budget, (3) every
substitution is allowed by the attack family (for the word attack: a counter-fitted
neighbour of the word), and (4) its chrF similarity to the original (sacrebleu chrF2,
character 6-grams, beta 2; Popović 2015) is at least the floor. The rule is checked here,
independently of the attack's own bookkeeping; an invalid case is never a model failure.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import NamedTuple

from sacrebleu.metrics import CHRF

from advjax_text.classify import Edit, apply_edits

_CHRF = CHRF()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValidityRule:
    """The declared rule: max share of changed words, chrF floor in [0, 1], antonyms banned."""

    max_share: float
    chrf_floor: float
    forbid_antonyms: bool = True

    def __post_init__(self):
        if not 0.0 < self.max_share <= 1.0:
            raise ValueError(f"max_share={self.max_share!r} must be in (0, 1]")
        if not 0.0 <= self.chrf_floor <= 1.0:
            raise ValueError(f"chrf_floor={self.chrf_floor!r} must be in [0, 1]")

    def describe(self) -> str:
        """One line for threat models and reports."""
        return (
            f"no antonym substitution; changed words <= {100 * self.max_share:g} % of the "
            f"sentence (floor); every substitution allowed by the attack family; chrF2 "
            f"similarity to the original >= {100 * self.chrf_floor:g}"
        )


class Validity(NamedTuple):
    """The verdict on one case and the numbers behind it."""

    valid: bool
    reasons: tuple[str, ...]
    changed: int
    share: float
    chrf: float


def chrf_similarity(original: str, perturbed: str) -> float:
    """sacrebleu sentence chrF2 of `perturbed` against `original`, in [0, 1]."""
    return _CHRF.sentence_score(perturbed, [original]).score / 100.0


def check_validity(
    original: str,
    perturbed: str,
    edits: Sequence[Edit],
    rule: ValidityRule,
    *,
    antonyms: frozenset[tuple[str, str]] = frozenset(),
    allowed: Callable[[str, str], bool] | None = None,
) -> Validity:
    """Judge one perturbed sentence against the declared rule.

    Args:
      original: the clean sentence (whitespace-tokenised).
      perturbed: the sentence the attack returned.
      edits: the attack's substitutions (slot, old, new, query).
      rule: the declared `ValidityRule`.
      antonyms: (word, antonym) pairs, lowercase.
      allowed: (old, new) -> whether the family allows that substitution; None: any.

    Returns:
      A `Validity`; reasons name every broken condition ("antonym:good->bad",
      "share", "not_allowed:w->v", "chrf", "inconsistent").

    Example:
      >>> check_validity("a good film", "a nice film", [Edit(1, "good", "nice", 5)],
      ...                ValidityRule(max_share=0.5, chrf_floor=0.3)).valid
      True
    """
    words = original.split()
    reasons = []
    if apply_edits(words, edits) != perturbed or any(
        not 0 <= e.slot < len(words) or words[e.slot] != e.old for e in edits
    ):
        reasons.append("inconsistent")
    changed = {e.slot for e in edits if e.old != e.new}
    share = len(changed) / max(len(words), 1)
    if len(changed) > int(rule.max_share * len(words) + 1e-9):
        reasons.append("share")
    for e in edits:
        pair = (e.old.lower(), e.new.lower())
        if rule.forbid_antonyms and pair in antonyms:
            reasons.append(f"antonym:{pair[0]}->{pair[1]}")
        if allowed is not None and e.old != e.new and not allowed(e.old, e.new):
            reasons.append(f"not_allowed:{pair[0]}->{pair[1]}")
    chrf = chrf_similarity(original, perturbed) if changed else 1.0
    if chrf < rule.chrf_floor:
        reasons.append("chrf")
    return Validity(not reasons, tuple(reasons), len(changed), share, chrf)
