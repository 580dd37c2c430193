"""The one config object of the text robustness study and its named profiles."""

import dataclasses

from advjax.text.classify import FAMILIES, ClassifierConfig

ATTACKS = ("textfooler", "char")
"""textfooler: counter-fitted word substitution (the family the defense is trained on);
char: CharSwap / homoglyph / zero-width / spacing edits (held out from the defense)."""


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
        unknown = [a for a in self.attacks if a not in ATTACKS]
        if unknown or not self.attacks:
            raise ValueError(
                f"attacks={self.attacks!r}: unknown attack(s) {unknown}; known {ATTACKS}"
            )
        if not isinstance(self.max_queries, int) or self.max_queries < 1:
            raise ValueError(f"max_queries={self.max_queries!r} must be an integer >= 1")
        if not 0.0 < self.max_share <= 1.0:
            raise ValueError(f"max_share={self.max_share!r} must be in (0, 1]")
        for q in self.query_caps + tuple(q for q, _ in self.points):
            if not 1 <= q <= self.max_queries:
                raise ValueError(f"query cap {q!r} must be in [1, max_queries={self.max_queries}]")
        for s in self.share_caps + tuple(s for _, s in self.points):
            if not 0.0 < s <= self.max_share:
                raise ValueError(f"share cap {s!r} must be in (0, max_share={self.max_share}]")
        if not 0.0 <= self.chrf_floor <= 1.0:
            raise ValueError(f"chrf_floor={self.chrf_floor!r} must be in [0, 1]")
        if self.eval_size is not None and not 1 <= self.eval_size <= 872:
            raise ValueError(f"eval_size={self.eval_size!r} must be in [1, 872] or None")

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
