"""The one config object of the text robustness study and its named profiles."""

import dataclasses

from advjax_text.classify import FAMILIES, ClassifierConfig
from experiments.overrides import check_choices, check_int, check_real

ATTACKS = ("textfooler", "char")
"""textfooler: counter-fitted word substitution (the family the defense is trained on);
char: CharSwap / homoglyph / zero-width / spacing edits (held out from the defense)."""

SST2_SIZES = {"train": 67349, "dev": 872}
"""Sentences in the official GLUE SST-2 training and dev splits."""
SEED_MAX = 2**32 - 1
"""The largest root seed (`jax.random.key` takes an unsigned 32-bit seed without loss)."""


def check_classifier(config: ClassifierConfig, where: str = "classifier") -> None:
    """Raise ValueError for any classifier field outside its range, named `where.field`.

    `augment_rate` must stay 0: the study trains the standard model at 0 and the defense at
    its own `defense_augment_rate`, so a value here would be silently ignored.
    """
    for name in ("embed_dim", "filters", "batch_size", "epochs", "max_len", "min_count"):
        check_int(f"{where}.{name}", getattr(config, name), low=1)
    if not config.widths:
        raise ValueError(f"{where}.widths=() must name at least one convolution width")
    for i, width in enumerate(config.widths):
        check_int(f"{where}.widths[{i}]", width, low=1)
    check_real(f"{where}.dropout_rate", config.dropout_rate, low=0, high=1, closed="[)")
    check_real(f"{where}.learning_rate", config.learning_rate, low=0, closed="()")
    check_real(f"{where}.weight_decay", config.weight_decay, low=0)
    if config.augment_rate != 0:
        raise ValueError(
            f"{where}.augment_rate={config.augment_rate!r} must be 0: the standard model trains "
            "without augmentation and the defense at defense_augment_rate (set that instead)"
        )
    if config.train_size is not None:
        check_int(
            f"{where}.train_size", config.train_size,
            low=config.batch_size, high=SST2_SIZES["train"],
        )  # fmt: skip


def check_budgets(config: "TextStudyConfig") -> None:
    """Raise ValueError for a budget-curve point or operating point outside the largest
    budgets (queries in [1, max_queries], shares in (0, max_share]), or for none declared."""
    for name in ("query_caps", "share_caps", "points"):
        if not getattr(config, name):
            raise ValueError(f"{name}=() must declare at least one point")
    queries = [(f"query_caps[{i}]", q) for i, q in enumerate(config.query_caps)]
    shares = [(f"share_caps[{i}]", s) for i, s in enumerate(config.share_caps)]
    for i, point in enumerate(config.points):
        if not isinstance(point, tuple) or len(point) != 2:
            raise ValueError(f"points[{i}]={point!r} must be a (queries, share) pair, e.g. 100:0.1")
        queries.append((f"points[{i}] queries", point[0]))
        shares.append((f"points[{i}] share", point[1]))
    for name, q in queries:
        try:
            check_int(name, q, low=1, high=config.max_queries)
        except ValueError as error:
            raise ValueError(f"{error} (a query cap: max_queries={config.max_queries})") from None
    for name, s in shares:
        check_real(name, s, low=0, high=config.max_share, closed="(]")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextStudyConfig:
    """Every hyper-parameter of `python -m experiments.text_robustness`.

    Budgets and the validity rule are declared here, before any attack runs. One attack
    run per (model, attack) at the largest caps (max_queries, max_share); every smaller
    operating point (query_caps, share_caps, points) is derived from its per-case trace.

    Attributes:
      seed: root seed; every key is a fold_in of jax.random.key(seed).
      classifier: the standard model's config; the defense differs only in augment_rate.
      defense_augment_rate: share of training tokens replaced by a valid neighbour.
      eval_size: SST-2 dev cases attacked (None: all 872), a seeded subset otherwise.
      attacks: attack families to run (subset of `ATTACKS`).
      max_queries, max_share: the largest declared budgets (queries per case, share of
        changed words).
      query_caps, share_caps: budget-curve points (<= the largest budgets).
      points: the declared (queries, share) operating points of the tables and the gate.
      chrf_floor: validity floor on chrF2 similarity (0-1) to the original sentence.
      char_candidates: candidates per word of the char attack.
      char_families: its edit families.
      rerun_cases: cases re-attacked directly at each declared point to check the
        derived outcomes (0: skip).
    """

    seed: int = 0
    classifier: ClassifierConfig = ClassifierConfig(epochs=2)
    defense_augment_rate: float = 0.25
    eval_size: int | None = None
    attacks: tuple[str, ...] = ATTACKS
    max_queries: int = 2000
    max_share: float = 0.3
    query_caps: tuple[int, ...] = (5, 10, 20, 50, 100, 200, 500, 1000, 2000)
    share_caps: tuple[float, ...] = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
    points: tuple[tuple[int, float], ...] = ((100, 0.1), (500, 0.2), (2000, 0.3))
    chrf_floor: float = 0.6
    char_candidates: int = 8
    char_families: tuple[str, ...] = FAMILIES
    rerun_cases: int = 40

    def __post_init__(self):
        check_int("seed", self.seed, low=0, high=SEED_MAX)
        check_classifier(self.classifier)
        check_real("defense_augment_rate", self.defense_augment_rate, low=0, high=1, closed="[)")
        if self.eval_size is not None:
            check_int("eval_size", self.eval_size, low=1, high=SST2_SIZES["dev"])
        if self.attacks and all(a in ATTACKS for a in self.attacks):
            check_choices("attacks", self.attacks, ATTACKS)
        else:
            unknown = [a for a in self.attacks if a not in ATTACKS]
            raise ValueError(
                f"attacks={self.attacks!r}: unknown attack(s) {unknown}; known {ATTACKS}"
            )
        check_int("max_queries", self.max_queries, low=1)
        check_real("max_share", self.max_share, low=0, high=1, closed="(]")
        check_budgets(self)
        check_real("chrf_floor", self.chrf_floor, low=0, high=1)
        check_int("char_candidates", self.char_candidates, low=1)
        check_choices("char_families", self.char_families, FAMILIES)
        check_int("rerun_cases", self.rerun_cases, low=0)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


PROFILES = {
    "default": {},
    "quick": dict(
        classifier=ClassifierConfig(epochs=2, train_size=20000, embed_dim=32, filters=32),
        eval_size=40,
        max_queries=500,
        query_caps=(5, 10, 20, 50, 100, 500),
        points=((100, 0.1), (500, 0.3)),
        rerun_cases=8,
    ),
}


def profile(name: str, **overrides) -> TextStudyConfig:
    """The named profile with `overrides` (None values ignored).

    Raises:
      ValueError: unknown profile or a bad override.
    """
    if name not in PROFILES:
        raise ValueError(f"profile={name!r} must be one of {sorted(PROFILES)}")
    fields = {**PROFILES[name], **{k: v for k, v in overrides.items() if v is not None}}
    return TextStudyConfig(**fields)
