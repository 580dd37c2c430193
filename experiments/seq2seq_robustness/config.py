"""The translation-attack study's config: one frozen dataclass and its named profiles."""

import dataclasses

from advjax.text.translate import SETTINGS, TrainConfig
from experiments.seq2seq_robustness.models import (
    ARCHS,
    ModelSpec,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Every hyper-parameter of the study; profiles are small overrides of the default."""

    profile: str = "default"
    archs: tuple[str, ...] = ("lstm",)  # "lstm" and/or "transformer"
    src_langs: tuple[str, ...] = ("fr",)
    units: tuple[str, ...] = ("word",)  # "word" and/or "bpe"
    test_split: str = "test_2016_flickr"
    n_attack: int = 1000
    n_clean: int | None = None  # test sentences for clean BLEU/chrF (None: all)
    settings: tuple[str, ...] = SETTINGS
    top_k: int = 5
    knn_k: int = 10
    attack_batch: int = 50
    model: ModelSpec = ModelSpec(train=TrainConfig(epochs=5, batch_size=128, learning_rate=2e-3))
    # The spec the word-level fr-en Transformer in results/seq2seq/models was trained with.
    transformer: ModelSpec = ModelSpec(
        arch="transformer",
        dropout_rate=0.1,
        train=TrainConfig(epochs=5, batch_size=128, learning_rate=1e-3),
    )

    def __post_init__(self):
        if self.n_attack < 1 or self.top_k < 1 or self.knn_k < 1 or self.attack_batch < 1:
            raise ValueError(f"bad study config: {self}")
        if not self.units or set(self.units) - {"word", "bpe"}:
            raise ValueError(f"units={self.units!r} must be a non-empty subset of ('word', 'bpe')")
        if not self.archs or set(self.archs) - set(ARCHS):
            raise ValueError(f"archs={self.archs!r} must be a non-empty subset of {ARCHS}")
        if self.model.arch != "lstm" or self.transformer.arch != "transformer":
            raise ValueError(
                f"model.arch={self.model.arch!r} must be 'lstm' and "
                f"transformer.arch={self.transformer.arch!r} must be 'transformer'"
            )
        unknown = set(self.settings) - set(SETTINGS)
        if unknown:
            raise ValueError(f"unknown attack settings {sorted(unknown)}; choose from {SETTINGS}")

    def spec(self, arch: str, src_lang: str, unit: str) -> ModelSpec:
        """The model spec of one architecture, source language and unit."""
        if arch not in ARCHS:
            raise ValueError(f"arch={arch!r} must be one of {ARCHS}")
        base = self.model if arch == "lstm" else self.transformer
        return dataclasses.replace(base, src_lang=src_lang, unit=unit)


def profile(name: str) -> Config:
    """The named profile: "default" (the reported study) or "quick" (CI, well under 60 s)."""
    if name == "default":
        return Config()
    if name == "quick":
        quick_model = ModelSpec(
            train_size=600, embed_dim=32, hidden_dim=32, dropout_rate=0.0, min_count=2,
            train=TrainConfig(epochs=1, batch_size=100, learning_rate=3e-3, max_len=16),
        )  # fmt: skip
        quick_transformer = ModelSpec(
            arch="transformer", train_size=600, embed_dim=32, num_heads=2, num_layers=1, ff_dim=64,
            dropout_rate=0.0, min_count=2,
            train=TrainConfig(epochs=1, batch_size=100, learning_rate=3e-3, max_len=16),
        )  # fmt: skip
        return Config(
            profile="quick", n_attack=10, n_clean=50, attack_batch=10, top_k=3,
            model=quick_model, transformer=quick_transformer,
        )  # fmt: skip
    raise ValueError(f"profile={name!r} must be 'default' or 'quick'")
