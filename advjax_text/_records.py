"""Per-case records of the text attacks and every aggregate computed from them alone.

Status of a case, first rule that matches:

1. clean sentence misclassified -> ``skipped_clean_wrong`` (never an attack success);
2. the label flipped on a sentence that breaks the declared validity rule -> ``invalid``
   (neither a model failure nor a model success: left out of the denominators below);
3. label flipped on a valid sentence -> ``success``;
4. the search stopped at its query cap with work left -> ``budget_exhausted``;
5. otherwise (slots exhausted, edited-word cap reached) -> ``failed``.

Validity is judged and recorded (``valid``, ``validity_reasons``) for every attacked case,
but only a label-flipping sentence can make a case invalid: a search that never flipped the
label returned no adversarial example, and the model kept its label on every sentence it
was shown (unlike `advjax.evaluation.classify_status`, where an out-of-ball input is an attack
bug whatever the prediction).

Denominators (`summarise`): clean accuracy = not skipped / n; valid attack success rate =
success / (success + failed + budget_exhausted); robust accuracy = (failed +
budget_exhausted) / (n - invalid), clean-wrong cases counted as not robust (as AutoAttack
and `advjax.evaluation` count); every rate carries its Wilson 95 % interval. Pure: no I/O.
"""

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from advjax.evaluation.stats import per_class, rate, worst_class
from advjax.records import ROBUST_STATUSES, STATUSES, CaseRecord
from advjax_text._validity import Validity
from advjax_text.classify import Edit, GreedyResult, max_changes, truncate_result

Judge = Callable[[str, str, Sequence[Edit], float], Validity]
"""(original, perturbed, edits, max_share) -> Validity: the declared rule at a share cap."""


def config_hash(config: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of an attack config."""
    text = json.dumps(dict(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def status_of(stop: str, broken: bool, valid: bool) -> str:
    """The status of a case by the module's rules."""
    if stop == "clean_wrong":
        return "skipped_clean_wrong"
    if broken:
        return "success" if valid else "invalid"
    return "budget_exhausted" if stop == "query_cap" else "failed"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextCaseRecord:
    """One case under one attack at declared caps: provenance, verdict and both texts."""

    case_id: int
    seed: int
    key_path: tuple
    model: str
    model_version: str
    attack: str
    attack_config: dict
    attack_config_hash: str
    max_queries: int
    max_share: float
    true_class: int
    clean_pred: int
    adv_pred: int
    status: str
    stop: str
    valid: bool
    validity_reasons: tuple
    chrf: float
    changed_words: int
    n_words: int
    max_changes: int
    queries: int
    first_flip_query: int | None
    edits: tuple
    original: str
    perturbed: str

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} must be one of {STATUSES}")
        if self.queries < 0 or self.queries > self.max_queries:
            raise ValueError(f"queries={self.queries} must be in [0, {self.max_queries}]")
        if self.changed_words > self.max_changes and self.status not in ("invalid",):
            raise ValueError(f"changed_words={self.changed_words} > max_changes={self.max_changes}")
        clean_ok, adv_ok = self.clean_pred == self.true_class, self.adv_pred == self.true_class
        if (self.status == "skipped_clean_wrong") == clean_ok:
            raise ValueError(f"status={self.status!r} contradicts clean_pred={self.clean_pred}")
        if (self.status == "success" and adv_ok) or (self.status in ROBUST_STATUSES and not adv_ok):
            raise ValueError(f"status={self.status!r} contradicts adv_pred={self.adv_pred}")
        object.__setattr__(self, "key_path", tuple(self.key_path))
        object.__setattr__(self, "validity_reasons", tuple(self.validity_reasons))
        object.__setattr__(self, "edits", tuple(Edit(*e) for e in self.edits))

    def to_json(self) -> str:
        """One strict-JSON line."""
        d = dataclasses.asdict(self)
        d["edits"] = [list(e) for e in self.edits]
        return json.dumps(d, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TextCaseRecord":
        """Inverse of `to_json` (after json.loads); ValueError on unknown or missing fields."""
        fields = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(d, Mapping) or set(d) != fields:
            got = set(d) if isinstance(d, Mapping) else set()
            raise ValueError(
                f"record fields differ: missing {sorted(fields - got)}, "
                f"unknown {sorted(got - fields)}"
            )
        return cls(**d)

    def to_greedy(self) -> GreedyResult:
        """The attack trace this record was made from."""
        return GreedyResult(
            self.stop,
            self.clean_pred,
            self.adv_pred,
            self.queries,
            self.first_flip_query,
            self.edits,
            tuple(self.original.split()),
            self.max_changes,
            self.max_queries,
            self.perturbed,
        )


def make_record(
    result: GreedyResult,
    validity: Validity,
    *,
    case_id: int,
    label: int,
    seed: int,
    key_path: Sequence,
    model: str,
    model_version: str,
    attack: str,
    attack_config: Mapping[str, Any],
    max_share: float,
) -> TextCaseRecord:
    """The record of one attacked case (status by the module's rules)."""
    broken = result.stop == "flipped"
    status = status_of(result.stop, broken, validity.valid)
    return TextCaseRecord(
        case_id=case_id,
        seed=seed,
        key_path=tuple(key_path),
        model=model,
        model_version=model_version,
        attack=attack,
        attack_config=dict(attack_config),
        attack_config_hash=config_hash(attack_config),
        max_queries=result.max_queries,
        max_share=float(max_share),
        true_class=int(label),
        clean_pred=result.clean_pred,
        adv_pred=result.adv_pred,
        status=status,
        stop=result.stop,
        valid=validity.valid,
        validity_reasons=validity.reasons,
        chrf=round(validity.chrf, 6),
        changed_words=validity.changed,
        n_words=len(result.words),
        max_changes=result.max_changes,
        queries=result.queries,
        first_flip_query=result.first_flip_query,
        edits=result.edits,
        original=" ".join(result.words),
        perturbed=result.perturbed,
    )


def derive_record(
    record: TextCaseRecord, *, max_queries: int, max_share: float, judge: Judge
) -> TextCaseRecord:
    """The record the same search would have produced under smaller caps, from its trace.

    Status, success and queries are exact (`clf_greedy.truncate_result`); validity is judged
    again, by `judge`, on the text kept at those caps.
    """
    out = truncate_result(record.to_greedy(), max_queries=max_queries, max_share=max_share)
    validity = judge(record.original, out.perturbed, out.edits, max_share)
    status = status_of(out.stop, out.broken, validity.valid)
    adv_pred = (
        (record.adv_pred if out.broken else record.true_class)
        if out.stop != "clean_wrong"
        else record.clean_pred
    )
    return dataclasses.replace(
        record,
        max_queries=max_queries,
        max_share=float(max_share),
        status=status,
        stop=out.stop,
        valid=validity.valid,
        validity_reasons=validity.reasons,
        chrf=round(validity.chrf, 6),
        changed_words=validity.changed,
        adv_pred=adv_pred,
        max_changes=max_changes(record.n_words, max_share),
        queries=out.queries,
        first_flip_query=record.first_flip_query if out.broken else None,
        edits=out.edits,
        perturbed=out.perturbed,
    )


def _quantile(values: Sequence[int], q: float) -> float | None:
    return float(np.quantile(np.asarray(values, float), q)) if values else None


def summarise(records: Sequence[TextCaseRecord]) -> dict:
    """Every number of one (model, attack, caps) group, counted as the module docstring says.

    Raises:
      ValueError: no records, or records of several groups.
    """
    if not records:
        raise ValueError("summarise needs at least one record")
    groups = {(r.model, r.attack, r.max_queries, r.max_share) for r in records}
    if len(groups) != 1:
        raise ValueError(f"records of several groups {sorted(groups)}")
    counts = Counter(r.status for r in records)
    n, invalid = len(records), counts["invalid"]
    robust = counts["failed"] + counts["budget_exhausted"]
    attacked = [r for r in records if r.status != "skipped_clean_wrong"]
    successes = [r for r in records if r.status == "success"]
    first = records[0]
    return {
        "model": first.model,
        "model_version": first.model_version,
        "attack": first.attack,
        "attack_config_hash": first.attack_config_hash,
        "max_queries": first.max_queries,
        "max_share": first.max_share,
        "cases": n,
        "status_counts": {s: counts[s] for s in STATUSES},
        "invalid": invalid,
        "budget_exhausted": counts["budget_exhausted"],
        "clean_accuracy": rate(n - counts["skipped_clean_wrong"], n),
        "attack_success_rate": rate(counts["success"], counts["success"] + robust),
        "robust_accuracy": rate(robust, n - invalid),
        "valid_share": rate(n - invalid, n),
        "queries_attacked": {
            "median": _quantile([r.queries for r in attacked], 0.5),
            "p90": _quantile([r.queries for r in attacked], 0.9),
            "max": max((r.queries for r in attacked), default=None),
        },
        "queries_success": {
            "median": _quantile([r.queries for r in successes], 0.5),
            "p90": _quantile([r.queries for r in successes], 0.9),
        },
        "success_changed_share_mean": (
            float(np.mean([r.changed_words / r.n_words for r in successes])) if successes else None
        ),
        "success_chrf_mean": float(np.mean([r.chrf for r in successes])) if successes else None,
        "invalid_reasons": dict(
            Counter(
                reason.split(":")[0]
                for r in records
                if r.status == "invalid"
                for reason in r.validity_reasons
            )
        ),
    }


def gate_group(records: Sequence[TextCaseRecord], *, attack: str, threat_model_hash: str) -> dict:
    """A group summary in `advjax.evaluation.stats.summarise_group`'s schema, for `advjax.gate`.

    eps is the group's maximum share of changed words; `attack` names the operating point
    (e.g. "textfooler@q500").
    """
    s = summarise(records)
    image_like = [
        CaseRecord(
            case_id=r.case_id,
            true_class=r.true_class,
            clean_pred=r.clean_pred,
            adv_pred=r.adv_pred,
            final_loss=0.0,
            linf=r.changed_words / r.n_words,
            l2=0.0,
            first_break_step=None,
            first_break_restart=None,
            queries=r.queries,
            status=r.status,
            model=r.model,
            model_hash=r.model_version,
            attack=attack,
            attack_config_hash=r.attack_config_hash,
            threat_model_hash=threat_model_hash,
            eps=r.max_share,
            key_path=tuple(r.key_path),
        )
        for r in records
    ]
    rows = per_class(image_like, 2)
    return {
        "model": s["model"],
        "attack": attack,
        "eps": s["max_share"],
        "model_hash": s["model_version"],
        "attack_config_hash": s["attack_config_hash"],
        "threat_model_hash": threat_model_hash,
        "cases": s["cases"],
        "status_counts": s["status_counts"],
        "invalid": s["invalid"],
        "clean_accuracy": s["clean_accuracy"],
        "robust_accuracy": s["robust_accuracy"],
        "attack_success_rate": s["attack_success_rate"],
        "valid_share": s["valid_share"],
        "per_class": rows,
        "worst_class": worst_class(rows),
        "queries": {"median": s["queries_attacked"]["median"], "p90": s["queries_attacked"]["p90"]},
    }
