"""An attack and its budget as the records name it (a campaign's attack or an AutoAttack
member), and a campaign attack's fit inside a declared threat model."""

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


DEFAULT_STEPS = {"gradient": 100, "score": 5000}
"""Steps per run where an `AttackSpec` names none and its attack fixes none: AutoAttack's 100
iterations of a gradient attack, 5,000 queries of a score-based one."""
_MEMBER_DEFAULTS = {"steps": 100, "queries": 5000}
"""The unused budget field of an AutoAttack member, as its records' hashes name it."""


@dataclasses.dataclass(frozen=True)
class AttackSpec:
    """One attack and its budget, as the records name it: a campaign's attack
    (`run_attack`) or a member of an AutoAttack ensemble (`autoattack`, `AutoAttackConfig`).

    Attributes:
      method: an attack of `advjax.attacks.ATTACKS` (e.g. "pgd", "apgd-t", "square").
      name: the records' attack name (default: the method, "-eot" added for eot > 1).
      eps: a campaign's budgets, each one of its threat model's (a member runs at its
        evaluation's eps and leaves this empty).
      steps: steps per run (targeted attacks: per target class; a score-based attack: its
        query budget); default the attack's fixed steps (FGSM: 1), else `DEFAULT_STEPS`.
      restarts: random restarts, run one after another over the unbroken cases.
      targets: targeted attacks only: target classes tried in turn (the 2nd .. (targets +
        1)th highest clean logit; MALT: its nearest classes).
      p_init: Square only: initial share of pixels in a square (AutoAttack's 0.8).
      eot: gradient draws averaged per step (expectation over transformation) of an
        AutoAttack member on a random `logits_fn(x, key)`; 1 for a deterministic model.
      norm: a campaign's norm, "linf" or "l2" (a member runs in its evaluation's).
      loss: methods with a loss option (pgd, pgd-t): "ce" or "margin" (the CW margin loss).
      step_fraction: PGD step size as a fraction of eps.
      batch_size: a campaign's cases per compiled batch (part of the config: replay uses it).
      chunk_steps: PGD steps between two compactions of the still-unbroken cases, after
        first chunks of 1, 2, 4, ... steps; an execution detail that never changes a
        result, so it is not part of the hash.
      source: None for a white-box attack on the evaluated model; else the name of the
        surrogate model whose gradients craft the inputs (a transfer attack, gradient
        methods only).
    """

    method: str
    _: dataclasses.KW_ONLY
    name: str = ""
    eps: tuple[float, ...] = ()
    steps: int | None = None
    restarts: int = 1
    targets: int = 9
    p_init: float = 0.8
    eot: int = 1
    norm: str = "linf"
    loss: str = "ce"
    step_fraction: float = 0.25
    batch_size: int = 250
    chunk_steps: int = 10
    source: str | None = None

    def __post_init__(self):
        if self.method not in ATTACKS:
            raise ValueError(f"unknown attack method {self.method!r}; choose from {METHODS}")
        info = ATTACKS[self.method]
        if self.steps is None:
            object.__setattr__(self, "steps", info.steps or DEFAULT_STEPS[info.kind])
        if not self.name:
            object.__setattr__(self, "name", self.method + ("-eot" if self.eot > 1 else ""))
        if not isinstance(self.name, str):
            raise ValueError(f"name={self.name!r} must be a non-empty string")
        object.__setattr__(self, "eps", tuple(float(e) for e in self.eps))
        if self.norm not in NORMS:
            raise ValueError(f"norm={self.norm!r} must be one of {NORMS}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss={self.loss!r} must be one of {LOSSES}")
        if self.loss != "ce" and "loss" not in info.options:
            raise ValueError(f"{self.method} has a fixed loss; loss={self.loss!r} is for pgd")
        for e in self.eps:
            check_budget(e, self.norm)
        for field in ("steps", "restarts", "batch_size", "chunk_steps", "targets", "eot"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field}={value!r} must be an integer >= 1")
        if info.steps is not None and self.steps != info.steps:
            raise ValueError(f"{self.method} takes {info.steps} step(s): steps={info.steps}")
        if self.source is not None and info.kind != "gradient":
            raise ValueError(f"transfer attacks craft with gradients, got method={self.method!r}")
        if self.eot > 1 and info.kind != "gradient":
            raise ValueError(f"eot={self.eot} is for gradient attacks, not {self.method!r}")
        if not 0 < self.p_init <= 1:
            raise ValueError(f"p_init={self.p_init!r} must be in (0, 1]")
        if not 0 < self.step_fraction <= 1:
            raise ValueError(f"step_fraction={self.step_fraction!r} must be in (0, 1]")

    @property
    def info(self):
        """The method's registry entry (`advjax.attacks.Attack`)."""
        return ATTACKS[self.method]

    @property
    def stream(self) -> int:
        """The key stream: fold_in(case key, stream), its method's fixed stream in the
        registry, so an attack run alone draws what it draws inside any ensemble."""
        return self.info.stream

    @property
    def queries_per_run(self) -> int:
        """Model queries one run spends on a case at most (the registry's count, e.g. APGD
        steps + 1 gradients, FAB 2 steps + 1, Square its budget), times `eot` draws. The
        records' per-case queries are counted the same way."""
        return self.info.queries(self.steps) * self.eot

    def passes(self, queries: int, classes: int) -> dict:
        """{"member", "forward", "backward"}: the model passes `queries` (the attack's, on
        all cases together) stand for: a gradient attack's queries are whole runs
        (`queries_per_run` each, the registry's passes per run times `eot` draws), a
        score-based attack's one forward pass each."""
        if self.info.kind == "score":
            return {"member": self.name, "forward": queries, "backward": 0}
        runs = queries // self.queries_per_run
        forward, backward = self.info.passes(self.steps, classes)
        return {
            "member": self.name,
            "forward": runs * forward * self.eot,
            "backward": runs * backward * self.eot,
        }

    def runs(self) -> list[tuple[int, int]]:
        """(target, restart) of every run, in order (target 0 for untargeted attacks)."""
        targets = self.targets if self.info.targeted else 1
        return [(t, r) for t in range(targets) for r in range(self.restarts)]

    def member_fields(self) -> dict:
        """The fields an AutoAttack member's records hash (`member_hash`), as they were first
        written: the budget in `steps` (gradient) or `queries` (score-based), the other at
        its unused default."""
        score = self.info.kind == "score"
        return {
            "method": self.method, "restarts": self.restarts,
            "steps": _MEMBER_DEFAULTS["steps"] if score else self.steps, "targets": self.targets,
            "queries": self.steps if score else _MEMBER_DEFAULTS["queries"],
            "p_init": self.p_init, "eot": self.eot,
        }  # fmt: skip

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["eps"] = list(self.eps)
        return d

    def config_hash(self, source_hash: str | None = None) -> str:
        """Hash of everything that decides a campaign attack's output (with the surrogate's
        hash)."""
        d = self.to_dict() | {"source_hash": source_hash}
        d["method"] = _HASHED_SPELLING.get(self.method, self.method)
        d.pop("chunk_steps")
        for field in _HASHED_FIELDS:
            if field not in ATTACKS[self.method].options:
                d.pop(field)
        for field, default in (("norm", "linf"), ("loss", "ce"), ("eot", 1)):
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


def check_campaign(spec: AttackSpec) -> None:
    """Refuse a spec a campaign cannot run: no eps, a norm its attack does not declare,
    restarts for an attack without them, or draws averaged over a random model."""
    if not spec.eps:
        raise ValueError(f"attack {spec.name!r} needs at least one eps")
    spec.info.check_norm(spec.norm)
    if not spec.info.restarts and spec.restarts != 1:
        raise ValueError(f"{spec.method} takes no random restarts: restarts=1")
    if spec.eot != 1:
        raise ValueError(f"eot={spec.eot} is for AutoAttack members; a campaign runs eot=1")


def check_within_threat_model(spec: AttackSpec, threat_model: ThreatModel) -> None:
    """Refuse an attack whose eps, steps, restarts or queries exceed the declared budget (and
    one a campaign cannot run, `check_campaign`)."""
    check_campaign(spec)
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
