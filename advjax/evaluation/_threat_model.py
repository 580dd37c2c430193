"""The declared threat model of an evaluation: what is attacked, by whom, with what budget.

A robustness number means nothing without the threat model it was measured under. Every
evaluation declares one `ThreatModel` before it starts (`require_threat_model` refuses to
go on without one), prints `describe()` at the top of its log, stores `to_dict()` with its
results and writes `digest()` into every per-case record.

Pure: no file I/O.
"""

import dataclasses
import hashlib
import json
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

KNOWLEDGE = ("white-box", "scores", "labels")
"""Attacker knowledge: input gradients of the loss, output scores only, or top-1 labels only."""

NORMS = ("linf", "l2")

UNTARGETED = "untargeted misclassification of an initially correct case"
SUCCESS_CONDITIONS = (UNTARGETED,)
"""The success conditions this library can score (see `advjax.evaluation.classify_status`)."""

DEFAULT_VALIDITY_RULE = (
    "the true label stays the same; the perturbation stays inside the eps-ball of the declared "
    "norm and every input value stays inside the pixel range"
)
DEFAULT_ASSET = "the classifier's top-1 decision on each test input"

_KNOWLEDGE_TEXT = {
    "white-box": "white-box: architecture, weights and input gradients of the loss",
    "scores": "score-based black-box: output scores (logits / probabilities) only",
    "labels": "decision-based black-box: the top-1 label only",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def parse_eps(text: Any) -> float:
    """'8/255' -> 8/255, '0.5' or 0.5 -> 0.5; ValueError otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    elif isinstance(text, str) and (m := re.fullmatch(r"\s*([0-9.]+)\s*/\s*([0-9.]+)\s*", text)):
        try:
            value = float(m.group(1)) / float(m.group(2))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"eps {text!r} must be a number or 'k/255'") from None
    else:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise ValueError(f"eps {text!r} must be a number or 'k/255'") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"eps {text!r} must be finite and >= 0")
    return value


def format_eps(eps: float) -> str:
    """eps as 'k/255' when it is a whole number of 8-bit levels, else as a decimal."""
    levels = eps * 255
    if abs(levels - round(levels)) < 1e-9:
        return "0" if round(levels) == 0 else f"{round(levels)}/255"
    return f"{eps:g}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ThreatModel:
    """A declared threat model; immutable, hashable and serialisable to JSON.

    Attributes:
      eps: perturbation budgets, in input units (pixels in `pixel_range`), e.g. (0, 8/255).
      steps: gradient steps (or iterations) per restart, >= 0 (0: no iterative search).
      restarts: random restarts per case, >= 1.
      knowledge: one of `KNOWLEDGE`: "white-box", "scores" or "labels".
      norm: "linf" or "l2"; the ball the perturbation must stay inside.
      queries: model queries allowed per case; required for "scores" and "labels"
        attackers, optional (None: bounded only by steps x restarts) for white-box.
      protected_asset: what the attacker tries to change.
      pixel_range: (low, high) of valid input values, default (0.0, 1.0).
      validity_rule: what must stay unchanged for an adversarial input to count.
      tolerance: numeric slack on the ball and range checks, default 1e-6.
      success_condition: one of `SUCCESS_CONDITIONS`.

    Raises:
      ValueError: any field outside its allowed values (the message names it).

    Example:
      >>> tm = ThreatModel(eps=(0.0, 8 / 255), steps=20, restarts=1)
      >>> print(tm.describe())
      >>> record_hash = tm.digest()
    """

    eps: tuple[float, ...]
    steps: int
    restarts: int = 1
    knowledge: str = "white-box"
    norm: str = "linf"
    queries: int | None = None
    protected_asset: str = DEFAULT_ASSET
    pixel_range: tuple[float, float] = (0.0, 1.0)
    validity_rule: str = DEFAULT_VALIDITY_RULE
    tolerance: float = 1e-6
    success_condition: str = UNTARGETED

    def __post_init__(self):
        if self.knowledge not in KNOWLEDGE:
            raise ValueError(f"knowledge={self.knowledge!r} must be one of {KNOWLEDGE}")
        if self.norm not in NORMS:
            raise ValueError(f"norm={self.norm!r} must be one of {NORMS}")
        if self.success_condition not in SUCCESS_CONDITIONS:
            raise ValueError(
                f"success_condition={self.success_condition!r} must be one of {SUCCESS_CONDITIONS}"
            )
        for name in ("protected_asset", "validity_rule"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name}={value!r} must be a non-empty string")
        if not _is_int(self.steps) or self.steps < 0:
            raise ValueError(f"steps={self.steps!r} must be an integer >= 0")
        if not _is_int(self.restarts) or self.restarts < 1:
            raise ValueError(f"restarts={self.restarts!r} must be an integer >= 1")
        if self.queries is not None and (not _is_int(self.queries) or self.queries < 1):
            raise ValueError(f"queries={self.queries!r} must be None or an integer >= 1")
        if self.knowledge != "white-box" and self.queries is None:
            raise ValueError(
                f"knowledge={self.knowledge!r} is a black-box attacker: declare its query "
                "budget per case (queries=...)"
            )
        for name in ("steps", "restarts", "queries"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))
        pixel_range = (
            tuple(self.pixel_range) if isinstance(self.pixel_range, (list, tuple)) else None
        )
        if (
            pixel_range is None
            or len(pixel_range) != 2
            or not all(_is_real(v) and math.isfinite(v) for v in pixel_range)
            or not pixel_range[0] < pixel_range[1]
        ):
            raise ValueError(
                f"pixel_range={self.pixel_range!r} must be (low, high), finite, low < high"
            )
        object.__setattr__(self, "pixel_range", (float(pixel_range[0]), float(pixel_range[1])))
        if not _is_real(self.tolerance) or not 0 <= self.tolerance < 1e-2:
            raise ValueError(f"tolerance={self.tolerance!r} must be in [0, 0.01)")
        object.__setattr__(self, "tolerance", float(self.tolerance))
        if isinstance(self.eps, (str, bytes)) or not hasattr(self.eps, "__iter__"):
            raise ValueError(f"eps={self.eps!r} must be a sequence of budgets")
        eps = tuple(self.eps)
        width = pixel_range[1] - pixel_range[0]
        limit = width if self.norm == "linf" else math.inf
        if not eps:
            raise ValueError(f"eps={self.eps!r} must list at least one budget")
        for e in eps:
            if not _is_real(e) or not math.isfinite(e) or not 0 <= e <= limit:
                bound = f"[0, {limit:g}]" if self.norm == "linf" else ">= 0"
                raise ValueError(f"eps value {e!r} in eps={self.eps!r} must be finite and {bound}")
        if len(set(eps)) != len(eps):
            raise ValueError(f"eps={self.eps!r} lists a budget twice")
        object.__setattr__(self, "eps", tuple(float(e) for e in eps))

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (tuples as lists) that `from_dict` reads back."""
        d = dataclasses.asdict(self)
        d["eps"] = list(self.eps)
        d["pixel_range"] = list(self.pixel_range)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ThreatModel":
        """Inverse of `to_dict`.

        Raises:
          ValueError: `d` is not a mapping, has unknown or missing fields, or bad values.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"a threat model must be a JSON object, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(f"unknown threat model fields {unknown}; known: {sorted(fields)}")
        missing = sorted({"eps", "steps"} - set(d))
        if missing:
            raise ValueError(f"threat model is missing required fields {missing}")
        return cls(**dict(d))

    def digest(self) -> str:
        """First 16 hex digits of the SHA-256 of the canonical JSON (sorted keys, no spaces)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def describe(self) -> str:
        """Several lines of plain text to print at the top of a run's log and report."""
        norm = {"linf": "L-inf", "l2": "L2"}[self.norm]
        low, high = self.pixel_range
        queries = (
            "unlimited beyond steps x restarts" if self.queries is None else f"{self.queries:,}"
        )
        eps = ", ".join(format_eps(e) for e in self.eps)
        lines = [
            f"Threat model {self.digest()}",
            f"  protected asset  : {self.protected_asset}",
            f"  attacker knows   : {_KNOWLEDGE_TEXT[self.knowledge]}",
            f"  budget           : {norm} eps in {{{eps}}} (input units),"
            + f" {self.steps} steps x {self.restarts} restart(s), queries per case: {queries}",
            f"  input space      : values in [{low:g}, {high:g}]",
            f"  validity rule    : {self.validity_rule} (tolerance {self.tolerance:g})",
            f"  success condition: {self.success_condition}",
        ]
        return "\n".join(lines)


def require_threat_model(threat_model: Any) -> ThreatModel:
    """Return `threat_model` if it is a `ThreatModel`; refuse to start an evaluation otherwise.

    Args:
      threat_model: the evaluation's declared threat model.

    Returns:
      The same object, typed.

    Raises:
      ValueError: it is None (no threat model declared).
      TypeError: it is something else than a `ThreatModel`.

    Example:
      >>> tm = require_threat_model(config.threat_model)
    """
    if threat_model is None:
        raise ValueError(
            "threat_model=None: an evaluation refuses to start without a declared ThreatModel "
            "(protected asset, attacker knowledge, budget, validity rule, success condition)"
        )
    if not isinstance(threat_model, ThreatModel):
        raise TypeError(
            f"threat_model={threat_model!r} must be an advjax.evaluation.ThreatModel, "
            f"got {type(threat_model).__name__}"
        )
    return threat_model
