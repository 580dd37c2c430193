"""Every hyper-parameter of the CIFAR-10 robustness study, and its named profiles (the
models themselves: `model_specs`)."""

import dataclasses
import hashlib
import json

from advjax.attacks import check_budget
from experiments.cifar_robustness.model_specs import (
    FGSM_MATCHED,
    FGSM_REFERENCE,
    RESEARCH_MODELS,
    ROBUST_CNN_MODELS,
    STANDARD,
    SURROGATE,
    TRAIN_SPLIT_SIZE,
    ModelSpec,
    check_fraction,
    check_positive,
)

DEFAULT_BUDGET_RESTARTS = 2
DEFAULT_BUDGET_CASES = 500
"""The default's budget curves: 100 PGD steps x 2 restarts on 500 of the 1,000 evaluation
cases (50 per class), sized so that the main job's budget-curve phases together take about
3 minutes. Over the budget curves of the study's 12 models at 10 restarts on 1,000 cases,
restarts 6-10 broke at most 2 cases per curve and restarts 2-5 at most 5. The research
profiles keep 10 restarts on every case (`RESEARCH_BUDGET_RESTARTS`), as their results
were made."""
RESEARCH_BUDGET_RESTARTS = 10

DEFAULT_TRANSFER_SOURCES = (
    ("standard", "fgsm_matched"),
    ("fgsm_reference", "standard"),
    ("fgsm_matched", "standard"),
)
"""(model, source) pairs of the default's transfer check: each model is attacked with PGD
inputs crafted on another model of the same run, trained independently (the standard CNN
for the FGSM-trained models, FGSM-AT matched for the standard CNN). A transfer attack
stronger than white-box PGD means masked gradients."""


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """The study protocol; defaults are the reference study's numbers."""

    profile: str = "default"
    seed: int = 42
    train_size: int = 15000
    val_size: int = 3000
    eval_size: int = 1000
    models: tuple[ModelSpec, ...] = (STANDARD, FGSM_REFERENCE, FGSM_MATCHED)
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 5e-4
    dropout_rate: float = 0.5
    train_eps: float = 8 / 255
    eps_list: tuple[float, ...] = (0.0, 2 / 255, 4 / 255, 8 / 255)
    pgd_steps: int = 20
    pgd_restarts: int = 1
    pgd_step_fraction: float = 0.25
    attack_batch_size: int = 250
    saved_examples: int = 8
    budget_eps: tuple[float, ...] = (2 / 255, 8 / 255)
    budget_steps: int = 100
    budget_restarts: int = DEFAULT_BUDGET_RESTARTS
    budget_batch_size: int = 100
    budget_cases: int | None = DEFAULT_BUDGET_CASES
    large_eps: float = 64 / 255
    surrogate: ModelSpec | None = None
    transfer_sources: tuple[tuple[str, str], ...] = DEFAULT_TRANSFER_SOURCES

    def __post_init__(self):
        for name in ("train_size", "val_size", "eval_size", "batch_size", "attack_batch_size",
                     "budget_batch_size", "budget_restarts"):  # fmt: skip
            check_positive(name, getattr(self, name))
        if (
            isinstance(self.saved_examples, bool)
            or not isinstance(self.saved_examples, int)
            or self.saved_examples < 0
        ):
            raise ValueError(f"saved_examples={self.saved_examples!r} must be an integer >= 0")
        check_fraction("dropout_rate", self.dropout_rate, high_open=True)
        for name in ("learning_rate",):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay={self.weight_decay!r} must be >= 0")
        if self.eval_size % 10:
            raise ValueError(f"eval_size={self.eval_size} must be a multiple of the 10 classes")
        for i, eps in enumerate(self.eps_list):
            check_budget(eps, name=f"eps_list[{i}]")
        check_budget(self.train_eps, name="train_eps")
        for spec in self.models:
            if spec.full_split:
                if spec.train_size > TRAIN_SPLIT_SIZE - self.val_size:
                    raise ValueError(
                        f"{spec.name}: train_size {spec.train_size} > the "
                        f"{TRAIN_SPLIT_SIZE - self.val_size} training images outside validation"
                    )
            elif spec.train_size > self.train_size:
                raise ValueError(
                    f"{spec.name}: train_size {spec.train_size} > study's {self.train_size}"
                )
        if not 0 < self.pgd_step_fraction <= 1:
            raise ValueError(f"pgd_step_fraction={self.pgd_step_fraction} must be in (0, 1]")
        for i, eps in enumerate(self.budget_eps):
            check_budget(eps, name=f"budget_eps[{i}]")
        check_budget(self.large_eps, name="large_eps")
        if self.budget_cases is not None:
            check_positive("budget_cases", self.budget_cases)
            if self.budget_cases % 10:
                raise ValueError(
                    f"budget_cases={self.budget_cases} must be a multiple of the 10 classes"
                )
        self._check_transfer_sources()
        if self.pgd_steps < 1 or self.pgd_restarts < 1 or self.budget_steps < 1:
            raise ValueError(
                f"pgd_steps={self.pgd_steps} and pgd_restarts={self.pgd_restarts} must be >= 1"
            )

    def _check_transfer_sources(self) -> None:
        pairs = self.transfer_sources
        if not isinstance(pairs, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and all(isinstance(n, str) for n in p)
            for p in pairs
        ):
            raise ValueError(f"transfer_sources={pairs!r} must be a tuple of (model, source) pairs")
        targets = [model for model, _ in pairs]
        if len(set(targets)) != len(targets) or any(model == src for model, src in pairs):
            raise ValueError(
                f"transfer_sources={pairs!r}: one source per model, never the model itself"
            )
        if pairs and self.surrogate is not None:
            raise ValueError("give either a surrogate or transfer_sources, not both")

    def transfer_source(self, model: str) -> str | None:
        """The model whose PGD inputs `model`'s transfer check uses: the surrogate where the
        profile trains one, else the model's source among this run's models (None when
        it has none, or its source is not trained in this run)."""
        if self.surrogate is not None:
            return self.surrogate.name
        names = {m.name for m in self.models}
        source = dict(self.transfer_sources).get(model)
        return source if source in names else None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        """A short hash of everything that changes the numbers (not the profile name; the
        fields a profile leaves unset are left out, which keeps older digests valid)."""
        d = self.to_dict()
        d.pop("profile")
        for optional in ("budget_cases", "transfer_sources"):
            if not d[optional]:
                d.pop(optional)
        return _hash(d)

    def model_digest(self, spec: ModelSpec) -> str:
        """Hash of what one model's training depends on.

        A trained checkpoint is reused only when this matches, so changing an attack
        setting does not retrain, and other models do not matter.
        """
        d = self.to_dict()
        for key in ("profile", "models", "surrogate") + _ATTACK_FIELDS:
            d.pop(key)
        d["model"] = spec.to_dict()
        return _hash(d)


_ATTACK_FIELDS = (
    "eps_list",
    "pgd_steps",
    "pgd_restarts",
    "pgd_step_fraction",
    "attack_batch_size",
    "saved_examples",
    "budget_eps",
    "budget_steps",
    "budget_restarts",
    "budget_batch_size",
    "budget_cases",
    "large_eps",
    "transfer_sources",
)


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


_RESEARCH_EVALUATION = {
    "budget_restarts": RESEARCH_BUDGET_RESTARTS,
    "budget_cases": None,
    "surrogate": SURROGATE,
    "transfer_sources": (),
}
"""How the research profiles evaluate: budget curves of 10 restarts on every case, and a
transfer check from a separately trained surrogate."""

PROFILES = ("default", "research", "robust_cnn", "reference", "quick")
PROFILE_OUTPUTS = {
    "default": "results/cifar10/default",
    "research": "results/cifar10/research",
    "robust_cnn": "results/cifar10/robust_cnn",
    "reference": "results/cifar10/default",
}
"""Each profile's output folder when --out is not given (quick: a new temporary folder)."""
PROFILE_POLICIES = {"research": "research_policy.json"}
"""A profile's release policy beside this file, where it is not `release_policy.json` (a
profile with groups takes its group's)."""

_ONE_EPS = ("eps_list=0,8/255", "budget_eps=8/255", "budget_restarts=1")

PHASES = ("strong_evaluation", "attack_variants")
"""Phases a profile or group may run after its campaign, each into its own subfolder of the
run as its own command would (`python -m experiments.cifar_robustness.<phase> --study RUN`):
AutoAttack's standard version at 8/255, and the margin-loss, targeted and L2 attacks. A
phase is (name, *that command's further arguments)."""


@dataclasses.dataclass(frozen=True)
class Group:
    """A named run of a profile (`--group NAME`): which of its models, the overrides of its
    protocol, its output folder and release policy (declared before its models were
    trained), the run whose trained and attacked models it takes (`--reuse-from`), and the
    phases it runs after its campaign (`PHASES`)."""

    models: tuple[str, ...]
    out: str
    policy: str
    overrides: tuple[str, ...] = ()
    reuse_from: str | None = None
    phases: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self):
        unknown = [phase[0] for phase in self.phases if phase[0] not in PHASES]
        if unknown:
            raise ValueError(f"phases {unknown}: expected among {PHASES}")


_STRONG = ("strong_evaluation",)
PROFILE_PHASES = {"research": (_STRONG, ("attack_variants",))}
"""The phases of a profile without groups, where it has any."""

_ROBUST_CNN = PROFILE_OUTPUTS["robust_cnn"]
PROFILE_GROUPS = {
    "robust_cnn": {
        "finalists": Group(
            ("pgd_silu_scratch", "pgd_silu_scratch_ema"),
            _ROBUST_CNN,
            "robust_cnn_policy.json",
            phases=(_STRONG,),
        ),
        "capacity": Group(
            ("capacity_short", "capacity_short_wide"),
            f"{_ROBUST_CNN}/capacity",
            "capacity_policy.json",
            _ONE_EPS,
        ),
        "regularisation": Group(
            ("capacity_short", "short_no_decay", "short_flip_only", "short_batch64", "short_lr2x"),
            f"{_ROBUST_CNN}/regularisation",
            "regularisation_policy.json",
            _ONE_EPS,
        ),
        "levers": Group(
            (
                "pgd_silu_scratch",
                "pgd_silu_scratch_ema",
                "pgd_silu_scratch_batch64_ema",
                "pgd_silu_scratch_batch64",
            ),
            f"{_ROBUST_CNN}/levers",
            "full_length_levers_policy.json",
            reuse_from=_ROBUST_CNN,
            phases=(
                (*_STRONG, "--models", "pgd_silu_scratch_batch64_ema", "pgd_silu_scratch_batch64"),
            ),  # the baselines' is the finalists'
        ),  # fmt: skip
        "wide": Group(
            ("pgd_silu_scratch_wide",),
            f"{_ROBUST_CNN}/wide",
            "wide_policy.json",
            _ONE_EPS,
            phases=(_STRONG,),
        ),
    },
}
"""The named runs of a profile; the first is the profile's run without `--group`. The robust
CNN's candidates are trained and compared in five: the finalists, the capacity check, the
regularisation probes, the full-length levers and the double-width model."""


def phases(profile_name: str, group_name: str | None) -> tuple[tuple[str, ...], ...]:
    """The phases the profile (or its group) runs after its campaign."""
    chosen = group(profile_name, group_name)
    return chosen.phases if chosen else PROFILE_PHASES.get(profile_name, ())


def group(profile_name: str, name: str | None) -> Group | None:
    """The profile's group `name` (its first without a name); None for a profile without
    groups, where a name is an error."""
    groups = PROFILE_GROUPS.get(profile_name, {})
    if name is None:
        return next(iter(groups.values()), None)
    if name not in groups:
        raise ValueError(
            f"--group {name!r}: "
            + (f"profile {profile_name} has {sorted(groups)}" if groups else
               f"profile {profile_name} has no groups (robust_cnn has {sorted(PROFILE_GROUPS['robust_cnn'])})")
        )  # fmt: skip
    return groups[name]


def profile(name: str) -> StudyConfig:
    """A named protocol.

    `default`: the reference study's standard and FGSM-AT models plus FGSM-AT at the
    matched budget; `research`: every other model (`RESEARCH_MODELS`); `robust_cnn`: the
    candidates for the most robust CNN (`ROBUST_CNN_MODELS`); `reference`: the
    reference's two models; `quick`: the default's three models on small data, a smoke run.
    """
    if name == "default":
        return StudyConfig()
    if name == "research":
        return StudyConfig(profile="research", models=RESEARCH_MODELS, **_RESEARCH_EVALUATION)
    if name == "robust_cnn":
        return StudyConfig(profile="robust_cnn", models=ROBUST_CNN_MODELS, **_RESEARCH_EVALUATION)
    if name == "reference":
        return StudyConfig(
            profile="reference",
            models=(STANDARD, FGSM_REFERENCE),
            transfer_sources=(("standard", "fgsm_reference"), ("fgsm_reference", "standard")),
        )
    if name == "quick":
        return StudyConfig(
            profile="quick",
            train_size=2000,
            val_size=300,
            eval_size=100,
            models=(
                dataclasses.replace(STANDARD, train_size=2000, epochs=2),
                dataclasses.replace(FGSM_REFERENCE, train_size=1000, epochs=1),
                dataclasses.replace(FGSM_MATCHED, train_size=2000, epochs=2),
            ),
            pgd_steps=5,
            attack_batch_size=100,
            budget_eps=(8 / 255,),
            budget_steps=10,
            budget_restarts=3,
            budget_batch_size=50,
            budget_cases=50,
        )
    raise ValueError(f"unknown profile {name!r}; choose from {PROFILES}")


REFERENCE_RESULTS = {
    "standard": {
        "clean_accuracy": 0.755,
        "best_val_accuracy": 0.7557,
        "fgsm": {2: 0.261, 8: 0.030},
        "fgsm_success": {8: 0.9603},
        "pgd": {2: 0.126, 4: 0.003, 8: 0.0},
        "pgd_success": {2: 0.8331},
    },
    "fgsm_reference": {
        "clean_accuracy": 0.423,
        "best_val_accuracy": 0.392,
        "fgsm": {8: 0.278},
        "pgd": {8: 0.270},
        "pgd_success": {2: 0.078},
    },
}
REFERENCE_RESULTS["standard_flip"] = REFERENCE_RESULTS["standard"]
"""Numbers reported by the reproduced PyTorch study (robust accuracies; eps in /255); its one
standard model is the reference for both of ours."""
