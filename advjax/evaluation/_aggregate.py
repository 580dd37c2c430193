"""Every aggregate number of a run, computed from its per-case records alone.

Pure: takes `advjax.evaluation.CaseRecord`s, returns JSON-ready dicts; every rate is an
`advjax.evaluation.stats.rate` (value, count, total and Wilson 95 % interval).

How cases are counted, per (model, attack, eps) group of n records:

- clean accuracy = cases with clean_pred == true_class, over n;
- `invalid` cases (the attack returned an input outside the threat model's ball or pixel
  range) are neither robust nor broken: they are left out of the denominators of robust
  accuracy and attack success rate and reported as a count and as `valid_share`
  = (n - invalid) / n. A run with many invalid cases is an attack bug, not a result;
- robust accuracy = (failed + budget_exhausted) / (n - invalid): correct on the clean
  input and still correct on a valid adversarial input; clean-wrong cases stay in the
  denominator as not robust (as AutoAttack counts). With no invalid case this is exactly
  `advjax.evaluation.stats.attack_summary`'s robust accuracy;
- attack success rate = success / (success + failed + budget_exhausted): the share of
  initially-correct, validly attacked cases that the attack broke;
- budget curves: robust accuracy after k = 0..K steps of the first restart counts a case
  as broken when its status is success and restart 0 broke it within k steps; after
  r = 1..R restarts (each of the full K steps) when its status is success and
  first_break_restart < r. So the steps curve ends at the robust accuracy of one restart,
  the restarts curve at the final robust accuracy, both from one run. They are None for
  a group whose success records lack that tracking.
"""

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from advjax.evaluation._metrics import rate
from advjax.records import ROBUST_STATUSES, STATUSES, CaseRecord

GroupKey = tuple[str, str, float]
"""(model, attack, eps)."""


def group_records(records: Iterable[CaseRecord]) -> dict[GroupKey, list[CaseRecord]]:
    """Records by (model, attack, eps), each group sorted by case_id.

    Raises:
      TypeError: an item is not a CaseRecord.
      ValueError: two records share (model, attack, eps, case_id), or one group mixes
        model, attack-config or threat-model hashes (records of different runs).
    """
    groups: dict[GroupKey, list[CaseRecord]] = {}
    seen = set()
    for record in records:
        if not isinstance(record, CaseRecord):
            raise TypeError(f"expected CaseRecord, got {type(record).__name__}: {record!r}")
        if record.key in seen:
            raise ValueError(f"duplicate record for (model, attack, eps, case_id)={record.key}")
        seen.add(record.key)
        groups.setdefault((record.model, record.attack, record.eps), []).append(record)
    for key, group in groups.items():
        for field in ("model_hash", "attack_config_hash", "threat_model_hash"):
            values = sorted({getattr(r, field) for r in group})
            if len(values) > 1:
                raise ValueError(
                    f"group {key} mixes {field} values {values}: records of different runs"
                )
        group.sort(key=lambda r: r.case_id)
    return dict(sorted(groups.items()))


def _robust_count(records: Sequence[CaseRecord]) -> int:
    return sum(r.status in ROBUST_STATUSES for r in records)


def _valid(records: Sequence[CaseRecord]) -> list[CaseRecord]:
    return [r for r in records if r.status != "invalid"]


def per_class(records: Sequence[CaseRecord], num_classes: int | None = None) -> list[dict]:
    """Clean and robust accuracy per true class, each a `rate`, counted as the module says.

    Args:
      records: one group's records.
      num_classes: list classes 0..num_classes-1 (empty ones with total 0); default the
        classes present.

    Returns:
      [{"class": c, "cases": n_c, "invalid": i_c, "clean_accuracy": rate,
        "robust_accuracy": rate}, ...] in class order.
    """
    classes = (
        range(num_classes) if num_classes is not None else sorted({r.true_class for r in records})
    )
    rows = []
    for c in classes:
        members = [r for r in records if r.true_class == c]
        valid = _valid(members)
        rows.append(
            {
                "class": c,
                "cases": len(members),
                "invalid": len(members) - len(valid),
                "clean_accuracy": rate(
                    sum(r.status != "skipped_clean_wrong" for r in members), len(members)
                ),
                "robust_accuracy": rate(_robust_count(valid), len(valid)),
            }
        )
    return rows


def worst_class(rows: Sequence[dict]) -> dict | None:
    """The class with the lowest robust accuracy (ties: lowest class id); None if all empty."""
    candidates = [row for row in rows if row["robust_accuracy"]["total"] > 0]
    if not candidates:
        return None
    row = min(candidates, key=lambda row: (row["robust_accuracy"]["value"], row["class"]))
    return {"class": row["class"], "robust_accuracy": row["robust_accuracy"]}


def _budget(value: int | Mapping[str, int] | None, attack: str) -> int | None:
    if isinstance(value, Mapping):
        value = value.get(attack)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"budget {value!r} for attack {attack!r} must be an integer >= 0")
    return value


def _first_restart_break(record: CaseRecord) -> int | None:
    """The step at which the first restart broke the case, None if it did not."""
    if record.break_steps_by_restart is not None:
        return record.break_steps_by_restart[0]
    return record.first_break_step if record.first_break_restart == 0 else None


def budget_curves(
    records: Sequence[CaseRecord], *, steps: int | None = None, restarts: int | None = None
) -> dict:
    """Robust accuracy against steps k = 0..K (first restart) and restarts r = 1..R.

    Args:
      records: one group's records.
      steps: K, the step cap; default the largest first_break_step of a success record.
      restarts: R; default the longest break_steps_by_restart, else 1 + the largest
        first_break_restart of a success record, else 1.

    Returns:
      {"steps": [rate at k=0, ..., rate at k=K] or None,
       "restarts": [rate at r=1, ..., rate at r=R] or None}; None where some success
      record has no first-break step (restart). Denominator: the valid cases.

    Raises:
      ValueError: steps < 0 or restarts < 1.
    """
    if steps is not None and steps < 0:
        raise ValueError(f"steps={steps!r} must be >= 0")
    if restarts is not None and restarts < 1:
        raise ValueError(f"restarts={restarts!r} must be >= 1")
    valid = _valid(records)
    broken = [r for r in valid if r.status == "success"]
    robust = _robust_count(valid)
    tracked = all(r.first_break_step is not None for r in broken)
    curves: dict = {"steps": None, "restarts": None}
    if not tracked:
        return curves
    if steps is None:
        steps = max((r.first_break_step for r in broken), default=0)
    if restarts is None:
        lengths = [len(r.break_steps_by_restart) for r in records if r.break_steps_by_restart]
        restarts = max(lengths, default=1 + max((r.first_break_restart for r in broken), default=0))
    first = [_first_restart_break(r) for r in broken]
    curves["steps"] = [
        rate(robust + sum(s is None or s > k for s in first), len(valid)) for k in range(steps + 1)
    ]
    curves["restarts"] = [
        rate(robust + sum(r.first_break_restart >= n for r in broken), len(valid))
        for n in range(1, restarts + 1)
    ]
    return curves


def _finite_max(values: Iterable[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) if finite else None


def summarise_group(
    records: Sequence[CaseRecord],
    *,
    num_classes: int | None = None,
    steps: int | None = None,
    restarts: int | None = None,
) -> dict:
    """All numbers of one (model, attack, eps) group; see the module docstring for the rules.

    Returns:
      A JSON-ready dict: model, attack, eps, the three hashes, cases, case_set (hash of the
      sorted case ids), status_counts (every status), invalid, clean_accuracy,
      robust_accuracy, attack_success_rate, valid_share, per_class, worst_class,
      budget_curves, perturbation {max_linf, max_l2 (finite values), non_finite} and
      loss {non_finite}.

    Raises:
      ValueError: `records` is empty or mixes groups.
    """
    if not records:
        raise ValueError("summarise_group needs at least one record")
    keys = {(r.model, r.attack, r.eps) for r in records}
    if len(keys) != 1:
        raise ValueError(f"records of several groups {sorted(keys)}; use aggregate_records")
    first = records[0]
    counts = Counter(r.status for r in records)
    n, invalid = len(records), counts["invalid"]
    attacked = counts["success"] + _robust_count(records)
    ids = ",".join(str(i) for i in sorted(r.case_id for r in records))
    rows = per_class(records, num_classes)
    return {
        "model": first.model,
        "attack": first.attack,
        "eps": first.eps,
        "model_hash": first.model_hash,
        "attack_config_hash": first.attack_config_hash,
        "threat_model_hash": first.threat_model_hash,
        "cases": n,
        "case_set": hashlib.sha256(ids.encode()).hexdigest()[:16],
        "status_counts": {s: counts[s] for s in STATUSES},
        "invalid": invalid,
        "clean_accuracy": rate(n - counts["skipped_clean_wrong"], n),
        "robust_accuracy": rate(_robust_count(records), n - invalid),
        "attack_success_rate": rate(counts["success"], attacked),
        "valid_share": rate(n - invalid, n),
        "per_class": rows,
        "worst_class": worst_class(rows),
        "budget_curves": budget_curves(records, steps=steps, restarts=restarts),
        "perturbation": {
            "max_linf": _finite_max(r.linf for r in records),
            "max_l2": _finite_max(r.l2 for r in records),
            "non_finite": sum(not (math.isfinite(r.linf) and math.isfinite(r.l2)) for r in records),
        },
        "loss": {"non_finite": sum(not math.isfinite(r.final_loss) for r in records)},
    }


def aggregate_records(
    records: Iterable[CaseRecord],
    *,
    num_classes: int | None = None,
    steps: int | Mapping[str, int] | None = None,
    restarts: int | Mapping[str, int] | None = None,
) -> list[dict]:
    """`summarise_group` for every (model, attack, eps), sorted by model, attack, eps.

    Args:
      records: a run's records (e.g. `advjax.evaluation.read_records(path)`).
      num_classes: for per-class slices; default the classes present in each group.
      steps, restarts: budget-curve caps, one int for all attacks or a mapping from
        attack name to its cap (attacks not in it infer theirs, see `budget_curves`).

    Returns:
      A list of group summaries.

    Raises:
      ValueError: duplicate records, mixed hashes in a group, bad caps.

    Example:
      >>> groups = aggregate_records(read_records(path), num_classes=10, steps={"pgd": 20})
    """
    return [
        summarise_group(
            group,
            num_classes=num_classes,
            steps=_budget(steps, attack),
            restarts=_budget(restarts, attack),
        )
        for (_, attack, _), group in group_records(records).items()
    ]


def find_group(groups: Sequence[dict], *, model: str, attack: str, eps: float) -> dict | None:
    """The summary of (model, attack, eps) in `groups` (eps matched within 1e-9), or None."""
    for group in groups:
        if (
            group["model"] == model
            and group["attack"] == attack
            and abs(group["eps"] - eps) <= 1e-9
        ):
            return group
    return None
