"""Two models attacked on the same cases: the cases each holds that the other loses, and
whether that difference is more than chance (the exact McNemar test; McNemar 1947).

On 1,000 cases two robust accuracies a point apart are within each other's Wilson intervals,
yet a paired test can still separate them when the models disagree on few cases; and it can
show that two equal accuracies hide many cases traded both ways.
"""

import math
from collections.abc import Sequence

from advjax.evaluation._metrics import rate
from advjax.records import ROBUST_STATUSES, CaseRecord


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value for `only_a` cases only model A holds and `only_b`
    only model B holds: the chance, were both models equally robust, of a split of the
    discordant cases at least this uneven (binomial, n = only_a + only_b, p = 1/2).
    1.0 when the models never disagree."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"need only_a >= 0 and only_b >= 0, got {only_a=}, {only_b=}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_robustness(records_a: Sequence[CaseRecord], records_b: Sequence[CaseRecord]) -> dict:
    """Robust accuracy of two record groups on the same cases, case by case.

    Args:
      records_a, records_b: one (model, attack, eps) group each, one record per case; the
        two must cover the same case ids with the same true labels.

    Returns:
      {"cases", "a", "b" (robust accuracy as `rate` dicts), "both", "only_a", "only_b",
      "neither" (case counts), "difference" (a - b, as a share of the cases), "p_value"
      (`mcnemar_exact` of only_a and only_b)}.

    Raises:
      ValueError: a group is empty, repeats a case, or the two differ in cases or labels.
    """
    robust_a = _robust_by_case(records_a, "records_a")
    robust_b = _robust_by_case(records_b, "records_b")
    if robust_a.keys() != robust_b.keys():
        missing = sorted(robust_a.keys() ^ robust_b.keys())
        raise ValueError(
            f"records_a and records_b must cover the same cases; {len(missing)} case id(s) "
            f"are in one only (first: {missing[:5]})"
        )
    labels_differ = [c for c in robust_a if robust_a[c][0] != robust_b[c][0]]
    if labels_differ:
        raise ValueError(
            f"records_a and records_b give case ids {labels_differ[:5]} different true labels: "
            "not the same images"
        )
    pairs = [(robust_a[c][1], robust_b[c][1]) for c in robust_a]
    n = len(pairs)
    both = sum(a and b for a, b in pairs)
    only_a = sum(a and not b for a, b in pairs)
    only_b = sum(b and not a for a, b in pairs)
    return {
        "cases": n,
        "a": rate(both + only_a, n),
        "b": rate(both + only_b, n),
        "both": both,
        "only_a": only_a,
        "only_b": only_b,
        "neither": n - both - only_a - only_b,
        "difference": (only_a - only_b) / n,
        "p_value": mcnemar_exact(only_a, only_b),
    }


def _robust_by_case(records: Sequence[CaseRecord], name: str) -> dict[int, tuple[int, bool]]:
    if not records:
        raise ValueError(f"{name} is empty: need one record per case")
    groups = {(r.model, r.attack, r.eps) for r in records}
    if len(groups) > 1:
        raise ValueError(f"{name} mixes {len(groups)} (model, attack, eps) groups; pass one")
    by_case = {r.case_id: (r.true_class, r.status in ROBUST_STATUSES) for r in records}
    if len(by_case) != len(records):
        raise ValueError(f"{name} holds {len(records)} records for {len(by_case)} case ids")
    return by_case
