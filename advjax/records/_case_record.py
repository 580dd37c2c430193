"""Per-case evaluation records: what happened to one case under one attack at one eps.

One `CaseRecord` per (model, attack, eps, case), written before any aggregate is computed;
every number of a run is then derived from these records alone (`aggregate_records`). They
are stored by `advjax.records.RecordLog`, the append-only JSON-lines log. Non-finite floats
(`final_loss`, `linf`, `l2`) are written as the strings "NaN", "Infinity" and "-Infinity" so
that every line is strict JSON.
"""

import dataclasses
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

STATUSES = ("skipped_clean_wrong", "success", "failed", "budget_exhausted", "invalid")
"""skipped_clean_wrong: the model is wrong on the clean input (never an attack success);
success: a valid adversarial input is misclassified; failed: the attack found none;
budget_exhausted: as failed, but the search stopped at its query/step cap while it could
still tell that it was not done (attacks that cannot tell report failed); invalid: the
returned input breaks the threat model's validity rule (outside the ball or the pixel
range): neither a model failure nor a model success."""

ROBUST_STATUSES = ("failed", "budget_exhausted")
_FLOAT_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaseRecord:
    """Everything about one case under one attack at one eps, enough to audit and replay it.

    Attributes:
      case_id: index of the case in the evaluation set, >= 0.
      true_class, clean_pred, adv_pred: true label and predictions on the clean and the
        returned adversarial input.
      final_loss: the attack's loss at the returned input (may be NaN/inf: sanity checks).
      linf, l2: L-inf and L2 size of the returned perturbation.
      first_break_step: fewest steps after which any restart misclassified the case
        (0 = at the random start), None if none did.
      first_break_restart: lowest restart index (0-based) that ever misclassified it.
      queries: gradient (or score) queries spent on the case until it was decided: every
        step of the restarts that did not break it, plus the steps to the first
        misclassified iterate of the one that did (FGSM: 1).
      status: one of `STATUSES`, consistent with the predictions.
      model, model_hash, attack, attack_config_hash, threat_model_hash: provenance.
      eps: the budget, in input units.
      key_path: the `fold_in` path from the root seed to this case's PRNG key.
      break_steps_by_restart: optional, per restart the first-break step or None.

    Raises:
      ValueError: a field has the wrong type or value, or the fields contradict each
        other (e.g. status "success" with adv_pred == true_class).
    """

    case_id: int
    true_class: int
    clean_pred: int
    adv_pred: int
    final_loss: float
    linf: float
    l2: float
    first_break_step: int | None
    first_break_restart: int | None
    queries: int
    status: str
    model: str
    model_hash: str
    attack: str
    attack_config_hash: str
    threat_model_hash: str
    eps: float
    key_path: tuple[int | str, ...]
    break_steps_by_restart: tuple[int | None, ...] | None = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        for name in ("case_id", "true_class", "clean_pred", "adv_pred", "queries"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"{name}={value!r} must be an integer >= 0")
            put(name, int(value))
        for name in ("first_break_step", "first_break_restart"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise ValueError(f"{name}={value!r} must be None or an integer >= 0")
            put(name, None if value is None else int(value))
        for name in ("final_loss", "linf", "l2", "eps"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise ValueError(f"{name}={value!r} must be a real number")
            put(name, float(value))
        if not 0 <= self.eps < math.inf:
            raise ValueError(f"eps={self.eps!r} must be finite and >= 0")
        for name in ("model", "model_hash", "attack", "attack_config_hash", "threat_model_hash"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name}={value!r} must be a non-empty string")
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} must be one of {STATUSES}")
        if isinstance(self.key_path, (str, bytes)) or not isinstance(self.key_path, Sequence):
            raise ValueError(f"key_path={self.key_path!r} must be a list of ints and strings")
        if not all(_is_int(k) or isinstance(k, str) for k in self.key_path):
            raise ValueError(f"key_path={self.key_path!r} must hold only ints and strings")
        put("key_path", tuple(int(k) if _is_int(k) else k for k in self.key_path))
        if (self.first_break_step is None) != (self.first_break_restart is None):
            raise ValueError(
                f"first_break_step={self.first_break_step!r} and "
                f"first_break_restart={self.first_break_restart!r} must both be None or both set"
            )
        if self.break_steps_by_restart is not None:
            steps = tuple(self.break_steps_by_restart)
            if not steps or not all(s is None or (_is_int(s) and s >= 0) for s in steps):
                raise ValueError(
                    f"break_steps_by_restart={self.break_steps_by_restart!r} must be a non-empty "
                    "list of None or integers >= 0"
                )
            steps = tuple(None if s is None else int(s) for s in steps)
            broke = [r for r, s in enumerate(steps) if s is not None]
            expected = (min(steps[r] for r in broke), broke[0]) if broke else (None, None)
            if (self.first_break_step, self.first_break_restart) != expected:
                raise ValueError(
                    f"break_steps_by_restart={steps} implies first_break_step, "
                    f"first_break_restart = {expected}, got "
                    f"{(self.first_break_step, self.first_break_restart)}"
                )
            put("break_steps_by_restart", steps)
        clean_ok = self.clean_pred == self.true_class
        adv_ok = self.adv_pred == self.true_class
        if (self.status == "skipped_clean_wrong") == clean_ok:
            raise ValueError(
                f"status={self.status!r} with clean_pred={self.clean_pred} and "
                f"true_class={self.true_class}: skipped_clean_wrong is exactly the "
                "clean-wrong cases"
            )
        if (self.status == "success" and adv_ok) or (self.status in ROBUST_STATUSES and not adv_ok):
            raise ValueError(
                f"status={self.status!r} contradicts adv_pred={self.adv_pred} and "
                f"true_class={self.true_class}"
            )

    @property
    def key(self) -> tuple[str, str, float, int]:
        """(model, attack, eps, case_id): at most one record per key in a run."""
        return (self.model, self.attack, self.eps, self.case_id)

    def to_dict(self) -> dict:
        """JSON-ready dict: tuples as lists, non-finite floats as 'NaN' / 'Infinity' strings."""
        d = dataclasses.asdict(self)
        for name in ("final_loss", "linf", "l2"):
            if not math.isfinite(d[name]):
                d[name] = (
                    "NaN" if math.isnan(d[name]) else ("Infinity" if d[name] > 0 else "-Infinity")
                )
        d["key_path"] = list(self.key_path)
        if self.break_steps_by_restart is not None:
            d["break_steps_by_restart"] = list(self.break_steps_by_restart)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CaseRecord":
        """Inverse of `to_dict`. Raises ValueError on unknown, missing or bad fields."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a record must be a JSON object, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        missing = sorted(fields - {"break_steps_by_restart"} - set(d))
        if unknown or missing:
            raise ValueError(f"record has unknown fields {unknown} / missing fields {missing}")
        d = dict(d)
        for name in ("final_loss", "linf", "l2"):
            if isinstance(d[name], str):
                if d[name] not in _FLOAT_TEXT:
                    raise ValueError(f"{name}={d[name]!r} must be a number, 'NaN' or '[-]Infinity'")
                d[name] = _FLOAT_TEXT[d[name]]
        return cls(**d)

    def to_json(self) -> str:
        """One strict-JSON line (no trailing newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)


def classify_status(
    clean_correct: bool,
    adv_correct: bool,
    *,
    linf: float,
    eps: float,
    x_min: float,
    x_max: float,
    tol: float = 1e-6,
    budget_capped: bool = False,
    pixel_range: tuple[float, float] = (0.0, 1.0),
    l2: float | None = None,
    norm: str = "linf",
) -> str:
    """The status of one case, by these rules, first match wins.

    1. clean input misclassified -> "skipped_clean_wrong" (never an attack success);
    2. perturbation size (L-inf, or L2 when norm="l2") > eps + tol, or not finite, or the
       adversarial input leaves [low - tol, high + tol] -> "invalid" (takes precedence over
       success: an invalid input is never counted as a model failure);
    3. adversarial input misclassified -> "success";
    4. the search stopped at its budget cap (`budget_capped`) -> "budget_exhausted";
    5. otherwise -> "failed".

    Args:
      clean_correct, adv_correct: whether the clean / adversarial prediction is the label.
      linf: L-inf size of the perturbation; l2: its L2 size (required when norm="l2").
      eps: the budget; x_min, x_max: the smallest / largest value of the adversarial input.
      tol: numeric slack on the ball and range checks (the threat model's tolerance).
      budget_capped: the attack can tell it hit its cap without success.
      pixel_range: (low, high) valid input values.
      norm: "linf" or "l2".

    Returns:
      One of `STATUSES`.

    Raises:
      ValueError: unknown norm, or norm="l2" without l2.

    Example:
      >>> classify_status(True, False, linf=8 / 255, eps=8 / 255, x_min=0.0, x_max=1.0)
      'success'
    """
    if norm not in ("linf", "l2"):
        raise ValueError(f"norm={norm!r} must be 'linf' or 'l2'")
    if norm == "l2" and l2 is None:
        raise ValueError("norm='l2' needs the perturbation's l2 size")
    if not clean_correct:
        return "skipped_clean_wrong"
    size = float(linf if norm == "linf" else l2)
    low, high = pixel_range
    inside = math.isfinite(size) and size <= eps + tol
    in_range = low - tol <= float(x_min) and float(x_max) <= high + tol
    if not (inside and in_range):
        return "invalid"
    if not adv_correct:
        return "success"
    return "budget_exhausted" if budget_capped else "failed"
