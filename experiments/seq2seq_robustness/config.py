"""The translation-attack study's config: one frozen dataclass and its named profiles."""

import dataclasses

from advjax_text.translate import SETTINGS, TrainConfig
from experiments.overrides import check_choice, check_choices, check_int, check_real
from experiments.seq2seq_robustness.models import (
    ARCHS,
    ModelSpec,
)

PROFILES = ("default", "quick")
LANGS = ("en", "de", "fr", "cs")
"""Multi30k task 1's languages."""
UNITS = ("word", "bpe")
MULTI30K_SIZES = {
    "train": 29000,
    "test_2016_flickr": 1000,
    "test_2017_flickr": 1000,
    "test_2017_mscoco": 461,
    "test_2018_flickr": 1071,
}
"""Sentence pairs in each official Multi30k task 1 split the study reads."""
TEST_SPLITS = tuple(split for split in MULTI30K_SIZES if split.startswith("test_"))
NO_CS = ("test_2017_flickr", "test_2017_mscoco")
"""Test splits released without a Czech side."""
SEED_MAX = 2**32 - 1
"""The largest training seed (`jax.random.key` takes an unsigned 32-bit seed without loss)."""
_SET_BY_STUDY = ("src_lang", "unit")


def check_train(config: TrainConfig, where: str) -> None:
    """Raise ValueError for any training field outside its range, named `where.field`."""
    for name in ("epochs", "batch_size"):
        check_int(f"{where}.{name}", getattr(config, name), low=1)
    check_int(f"{where}.max_len", config.max_len, low=2)
    check_int(f"{where}.seed", config.seed, low=0, high=SEED_MAX)
    check_real(f"{where}.learning_rate", config.learning_rate, low=0, closed="()")
    check_real(f"{where}.clip_norm", config.clip_norm, low=0, closed="()")


def check_spec(spec: ModelSpec, where: str) -> None:
    """Raise ValueError for any model field outside its range, named `where.field`.

    `src_lang` and `unit` must keep their defaults: `Config.spec` replaces them by the
    study's `src_langs` and `units`, so another value would be silently ignored.
    """
    for name in _SET_BY_STUDY:
        default = next(f.default for f in dataclasses.fields(ModelSpec) if f.name == name)
        if getattr(spec, name) != default:
            raise ValueError(
                f"{where}.{name}={getattr(spec, name)!r} is not used: the study sets it from "
                f"{name}s (e.g. --set {name}s={getattr(spec, name)})"
            )
    check_choice(f"{where}.tgt_lang", spec.tgt_lang, LANGS)
    for name in ("min_count", "bpe_merges", "embed_dim", "num_heads", "num_layers", "ff_dim"):
        check_int(f"{where}.{name}", getattr(spec, name), low=1)
    check_int(f"{where}.hidden_dim", spec.hidden_dim, low=2)
    if spec.arch == "lstm" and spec.hidden_dim % 2:
        raise ValueError(
            f"{where}.hidden_dim={spec.hidden_dim} must be even (two encoder directions)"
        )
    if spec.arch == "transformer" and spec.embed_dim % spec.num_heads:
        raise ValueError(
            f"{where}.num_heads={spec.num_heads} must divide {where}.embed_dim={spec.embed_dim} "
            "(the model width)"
        )
    check_real(f"{where}.dropout_rate", spec.dropout_rate, low=0, high=1, closed="[)")
    check_train(spec.train, f"{where}.train")
    if spec.train_size is not None:
        check_int(
            f"{where}.train_size", spec.train_size,
            low=spec.train.batch_size, high=MULTI30K_SIZES["train"],
        )  # fmt: skip


def check_pairs(config: "Config") -> None:
    """Raise ValueError for a language pair the data does not hold: a source language equal
    to the target, or Czech with a test split released without it."""
    for where in ("model", "transformer"):
        tgt = getattr(config, where).tgt_lang
        if tgt in config.src_langs:
            raise ValueError(
                f"src_langs={config.src_langs!r} must not hold {where}.tgt_lang={tgt!r}"
            )
    if "cs" in config.src_langs and config.test_split in NO_CS:
        raise ValueError(
            f"src_langs={config.src_langs!r} holds 'cs', which test_split={config.test_split!r} "
            "has no sentences of; use test_2016_flickr or test_2018_flickr"
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
        check_choice("profile", self.profile, PROFILES)
        check_choices("archs", self.archs, ARCHS)
        check_choices("src_langs", self.src_langs, LANGS)
        check_choices("units", self.units, UNITS)
        check_choices("settings", self.settings, SETTINGS)
        check_choice("test_split", self.test_split, TEST_SPLITS)
        check_int("n_attack", self.n_attack, low=1, high=MULTI30K_SIZES[self.test_split])
        if self.n_clean is not None:
            check_int("n_clean", self.n_clean, low=1, high=MULTI30K_SIZES[self.test_split])
        for name in ("top_k", "knn_k", "attack_batch"):
            check_int(name, getattr(self, name), low=1)
        if self.model.arch != "lstm" or self.transformer.arch != "transformer":
            raise ValueError(
                f"model.arch={self.model.arch!r} must be 'lstm' and "
                f"transformer.arch={self.transformer.arch!r} must be 'transformer'"
            )
        for where in ("model", "transformer"):
            check_spec(getattr(self, where), where)
        check_pairs(self)

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
    raise ValueError(f"profile={name!r} must be one of {PROFILES}")
