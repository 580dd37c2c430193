"""An attack of a campaign as its records name it, and its fit inside a declared threat model."""

import dataclasses
import hashlib
import json

from advjax.attacks import ATTACKS, LOSSES, NORMS, check_budget
from advjax.evaluation._threat_model import ThreatModel, format_eps

METHODS = tuple(ATTACKS)
"""The methods a campaign can run: every attack of `advjax.attacks.ATTACKS`."""
_HASHED_FIELDS = ("targets", "p_init")  # hashed only for the methods that read them
_HASHED_SPELLING = {
    "pgd-t": "pgd_t",
    "apgd-ce": "apgd_ce",
    "apgd-dlr": "apgd_dlr",
    "apgd-t": "apgd_t",
}
"""Config hashes spell these methods with underscores, as the committed records' hashes do."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttackSpec:
    """One attack of a campaign, as the records name it.

    Attributes:
      name: the records' attack name, e.g. "pgd" or "pgd_budget".
      method: an attack of `advjax.attacks.ATTACKS` (e.g. "pgd", "apgd-t", "square").
      eps: the budgets to run, each one of the threat model's.
      steps: steps per restart (FGSM: 1; targeted methods: per target class; square: the
        query budget per case).
      restarts: PGD random restarts, run one after another over the unbroken cases.
      step_fraction: PGD step size as a fraction of eps.
      batch_size: cases per compiled batch (part of the config: replay uses it).
      chunk_steps: PGD steps between two compactions of the still-unbroken cases, after
        first chunks of 1, 2, 4, ... steps; an execution detail that never changes a
        result, so it is not part of the hash.
      source: None for a white-box attack on the evaluated model; else the name of the
        surrogate model whose gradients craft the inputs (a transfer attack, gradient
        methods only).
      targets: targeted methods only: target classes tried, the 2nd .. (targets + 1)th
        highest clean logit, one after another on the cases not yet broken.
      p_init: square only: initial share of pixels in a square (Andriushchenko et al.
        use 0.05 for L-inf and 0.8 for L2).
      norm: "linf" or "l2"; must be the threat model's and one the method attacks in.
      loss: methods with a loss option (pgd, pgd-t): "ce" or "margin" (the CW margin loss).
    """

    name: str
    method: str
    eps: tuple[float, ...]
    steps: int = 1
    restarts: int = 1
    step_fraction: float = 0.25
    batch_size: int = 250
    source: str | None = None
    chunk_steps: int = 10
    targets: int = 9
    p_init: float = 0.05
    norm: str = "linf"
    loss: str = "ce"

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"name={self.name!r} must be a non-empty string")
        if self.method not in ATTACKS:
            raise ValueError(f"unknown attack method {self.method!r}; choose from {METHODS}")
        info = ATTACKS[self.method]
        object.__setattr__(self, "eps", tuple(float(e) for e in self.eps))
        if not self.eps:
            raise ValueError(f"attack {self.name!r} needs at least one eps")
        if self.norm not in NORMS:
            raise ValueError(f"norm={self.norm!r} must be one of {NORMS}")
        info.check_norm(self.norm)
        if self.loss not in LOSSES:
            raise ValueError(f"loss={self.loss!r} must be one of {LOSSES}")
        if self.loss != "ce" and "loss" not in info.options:
            raise ValueError(f"{self.method} has a fixed loss; loss={self.loss!r} is for pgd")
        for e in self.eps:
            check_budget(e, self.norm)
        for field in ("steps", "restarts", "batch_size", "chunk_steps", "targets"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field}={value!r} must be an integer >= 1")
        if info.steps is not None and self.steps != info.steps:
            raise ValueError(f"{self.method} takes {info.steps} step(s): steps={info.steps}")
        if not info.restarts and self.restarts != 1:
            raise ValueError(f"{self.method} takes no random restarts: restarts=1")
        if self.source is not None and info.kind != "gradient":
            raise ValueError(f"transfer attacks craft with gradients, got method={self.method!r}")
        if not 0 < self.p_init <= 1:
            raise ValueError(f"p_init={self.p_init!r} must be in (0, 1]")
        if not 0 < self.step_fraction <= 1:
            raise ValueError(f"step_fraction={self.step_fraction!r} must be in (0, 1]")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["eps"] = list(self.eps)
        return d

    def config_hash(self, source_hash: str | None = None) -> str:
        """Hash of everything that decides the attack's output (with the surrogate's hash)."""
        d = self.to_dict() | {"source_hash": source_hash}
        d["method"] = _HASHED_SPELLING.get(self.method, self.method)
        d.pop("chunk_steps")
        for field in _HASHED_FIELDS:
            if field not in ATTACKS[self.method].options:
                d.pop(field)
        for field, default in (("norm", "linf"), ("loss", "ce")):
            if d[field] == default:
                d.pop(field)  # older records' hashes stay valid
        blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def steps_per_restart(self) -> int:
        """Queries one restart spends on an unbroken case (targeted methods: every target)."""
        info = ATTACKS[self.method]
        return info.queries(self.steps) * (self.targets if info.targeted else 1)

    def max_queries(self) -> int:
        """Gradient (score-based: forward) queries per case per eps in the worst case."""
        return self.steps_per_restart * self.restarts


def check_within_threat_model(spec: AttackSpec, threat_model: ThreatModel) -> None:
    """Refuse an attack whose eps, steps, restarts or queries exceed the declared budget."""
    problems = [f"eps {format_eps(e)} not declared" for e in spec.eps if e not in threat_model.eps]
    if spec.norm != threat_model.norm:
        problems.append(f"norm {spec.norm} but the threat model declares {threat_model.norm}")
    kind = ATTACKS[spec.method].kind
    if kind != "score" and spec.steps > max(threat_model.steps, 1):
        problems.append(f"steps {spec.steps} > declared {threat_model.steps}")
    if spec.restarts > threat_model.restarts:
        problems.append(f"restarts {spec.restarts} > declared {threat_model.restarts}")
    if threat_model.queries is not None and spec.max_queries() > threat_model.queries:
        problems.append(f"queries {spec.max_queries()} > declared {threat_model.queries}")
    if kind == "score" and threat_model.queries is None:
        problems.append("a score-based attack needs a declared query budget (queries=...)")
    if kind == "gradient" and threat_model.knowledge != "white-box":
        problems.append(
            f"a gradient attack needs white-box knowledge, declared {threat_model.knowledge!r}"
        )
    if kind == "score" and threat_model.knowledge == "labels":
        problems.append("a score-based attack needs scores, declared 'labels'")
    if problems:
        raise ValueError(
            f"attack {spec.name!r} is outside threat model {threat_model.digest()}: "
            + "; ".join(problems)
        )
