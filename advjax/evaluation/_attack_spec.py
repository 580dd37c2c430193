"""An attack of a campaign as its records name it, and its fit inside a declared threat model."""

import dataclasses
import hashlib
import json

from advjax.attacks._checks import check_budget
from advjax.attacks._losses import LOSSES
from advjax.attacks._norms import NORMS
from advjax.evaluation._threat_model import ThreatModel, format_eps

METHODS = ("fgsm", "pgd", "pgd_t", "apgd_ce", "apgd_dlr", "apgd_t", "square")
"""fgsm, pgd, pgd_t (targeted PGD): `advjax.attacks`; apgd_ce / apgd_dlr / apgd_t:
`advjax.attacks` (APGD with the cross-entropy, the DLR and the targeted DLR loss); square:
`advjax.attacks` (score-based: `square_linf`, or `square_l2` under norm="l2")."""
GRADIENT_METHODS = METHODS[:6]
_METHOD_FIELDS = {"pgd_t": ("targets",), "apgd_t": ("targets",), "square": ("p_init",)}
_LOSS_METHODS = ("pgd", "pgd_t")  # methods whose loss is a choice
_L2_METHODS = METHODS


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttackSpec:
    """One attack of a campaign, as the records name it.

    Attributes:
      name: the records' attack name, e.g. "pgd" or "pgd_budget".
      method: one of `METHODS`.
      eps: the budgets to run, each one of the threat model's.
      steps: steps per restart (FGSM: 1; apgd_t: per target class; square: the query
        budget per case).
      restarts: PGD random restarts, run one after another over the unbroken cases.
      step_fraction: PGD step size as a fraction of eps.
      batch_size: cases per compiled batch (part of the config: replay uses it).
      chunk_steps: PGD steps between two compactions of the still-unbroken cases, after
        first chunks of 1, 2, 4, ... steps; an execution detail that never changes a
        result, so it is not part of the hash.
      source: None for a white-box attack on the evaluated model; else the name of the
        surrogate model whose gradients craft the inputs (a transfer attack).
      targets: apgd_t / pgd_t only: target classes tried, the 2nd .. (targets + 1)th
        highest clean logit, one after another on the cases not yet broken.
      p_init: square only: initial share of pixels in a square (Andriushchenko et al.
        use 0.05 for L-inf and 0.8 for L2).
      norm: "linf" or "l2"; must be the threat model's.
      loss: pgd / pgd_t only: "ce" or "margin" (the CW margin loss).
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
        if self.method not in METHODS:
            raise ValueError(f"unknown attack method {self.method!r}; choose from {METHODS}")
        object.__setattr__(self, "eps", tuple(float(e) for e in self.eps))
        if not self.eps:
            raise ValueError(f"attack {self.name!r} needs at least one eps")
        if self.norm not in NORMS:
            raise ValueError(f"norm={self.norm!r} must be one of {NORMS}")
        if self.norm != "linf" and self.method not in _L2_METHODS:
            raise ValueError(f"{self.method} runs in L-inf only, got norm={self.norm!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss={self.loss!r} must be one of {LOSSES}")
        if self.loss != "ce" and self.method not in _LOSS_METHODS:
            raise ValueError(f"{self.method} has a fixed loss; loss={self.loss!r} is for pgd")
        for e in self.eps:
            check_budget(e, self.norm)
        for field in ("steps", "restarts", "batch_size", "chunk_steps", "targets"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field}={value!r} must be an integer >= 1")
        if self.method == "fgsm" and (self.steps, self.restarts) != (1, 1):
            raise ValueError("fgsm takes one step and no restarts: steps=1, restarts=1")
        if self.method == "square" and (self.restarts != 1 or self.source is not None):
            raise ValueError("square is one score-based search per case: restarts=1, no source")
        if self.method == "pgd_t" and self.restarts != 1:
            raise ValueError("pgd_t runs one start per target class: restarts=1")
        if self.source is not None and self.method != "pgd":
            raise ValueError(f"transfer attacks craft with pgd, got method={self.method!r}")
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
        for field in ("chunk_steps", "targets", "p_init"):
            if field not in _METHOD_FIELDS.get(self.method, ()):
                d.pop(field)
        for field, default in (("norm", "linf"), ("loss", "ce")):
            if d[field] == default:
                d.pop(field)  # older records' hashes stay valid
        blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def steps_per_restart(self) -> int:
        """Queries one restart spends on an unbroken case (apgd_t, pgd_t: every target)."""
        return self.steps * (self.targets if self.method in ("apgd_t", "pgd_t") else 1)

    def max_queries(self) -> int:
        """Gradient (square: score) queries per case per eps in the worst case."""
        return self.steps_per_restart * self.restarts


def check_within_threat_model(spec: AttackSpec, threat_model: ThreatModel) -> None:
    """Refuse an attack whose eps, steps, restarts or queries exceed the declared budget."""
    problems = [f"eps {format_eps(e)} not declared" for e in spec.eps if e not in threat_model.eps]
    if spec.norm != threat_model.norm:
        problems.append(f"norm {spec.norm} but the threat model declares {threat_model.norm}")
    if spec.method != "square" and spec.steps > max(threat_model.steps, 1):
        problems.append(f"steps {spec.steps} > declared {threat_model.steps}")
    if spec.restarts > threat_model.restarts:
        problems.append(f"restarts {spec.restarts} > declared {threat_model.restarts}")
    if threat_model.queries is not None and spec.max_queries() > threat_model.queries:
        problems.append(f"queries {spec.max_queries()} > declared {threat_model.queries}")
    if spec.method == "square" and threat_model.queries is None:
        problems.append("a score-based attack needs a declared query budget (queries=...)")
    if spec.method in GRADIENT_METHODS and threat_model.knowledge != "white-box":
        problems.append(
            f"a gradient attack needs white-box knowledge, declared {threat_model.knowledge!r}"
        )
    if spec.method == "square" and threat_model.knowledge == "labels":
        problems.append("a score-based attack needs scores, declared 'labels'")
    if problems:
        raise ValueError(
            f"attack {spec.name!r} is outside threat model {threat_model.digest()}: "
            + "; ".join(problems)
        )
