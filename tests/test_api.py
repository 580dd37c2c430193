"""The public API: every exported name exists, and documented signatures hold."""

import importlib
import inspect

import pytest

import advjax

P = inspect.Parameter


def test_every_name_in_dunder_all_imports_and_exists():
    """Each name in advjax.__all__ is an attribute of the package and `from advjax import`
    works for it; __all__ has no duplicates."""
    assert len(advjax.__all__) == len(set(advjax.__all__))
    namespace: dict = {}
    exec(f"from advjax import {', '.join(advjax.__all__)}", namespace)  # noqa: S102
    for name in advjax.__all__:
        assert getattr(advjax, name) is namespace[name], name


@pytest.mark.parametrize("module", ["aggregate", "apgd", "attack_spec", "attacks", "augment",
                                    "campaign", "checkpoint", "data", "early_stop", "ensemble",
                                    "evaluate", "fit", "gate", "io", "keys", "layers", "losses", "metrics", "norms",
                                    "model", "plots", "records", "sanity", "scoring", "sentinel", "sharding",
                                    "square", "summary", "threat_model", "train", "train_steps"])  # fmt: skip
def test_submodules_export_what_they_list(module):
    """Every name in a submodule's __all__ (where it has one) exists in that submodule."""
    mod = importlib.import_module(f"advjax.{module}")
    for name in getattr(mod, "__all__", []):
        assert hasattr(mod, name), f"advjax.{module}.{name}"


def _params(fn) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter, `self` dropped."""
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
    ]


PK, KW = P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY
EMPTY = P.empty

SIGNATURES = {
    "advjax.data.load_cifar10": [("data_dir", PK, None)],
    "advjax.model.CompactCNN.__call__": [("x", PK, EMPTY), ("train", PK, EMPTY)],
    "advjax.model.eval_logits_fn": [("model", PK, EMPTY), ("variables", PK, EMPTY)],
    "advjax.attacks.fgsm": [
        ("logits_fn", PK, EMPTY), ("x", PK, EMPTY), ("y", PK, EMPTY), ("eps", PK, EMPTY),
        ("norm", KW, "linf"),
    ],
    "advjax.attacks.pgd": [
        ("logits_fn", PK, EMPTY), ("x", PK, EMPTY), ("y", PK, EMPTY), ("eps", PK, EMPTY),
        ("key", KW, EMPTY), ("steps", KW, 20), ("step_size", KW, None), ("restarts", KW, 1),
        ("norm", KW, "linf"), ("loss", KW, "ce"), ("target", KW, None),
    ],
    "advjax.attacks.pgd_search": [
        ("logits_fn", PK, EMPTY), ("x", PK, EMPTY), ("y", PK, EMPTY), ("eps", PK, EMPTY),
        ("key", KW, EMPTY), ("steps", KW, 20), ("step_size", KW, None), ("restarts", KW, 1), ("first_restart", KW, 0),
        ("norm", KW, "linf"), ("loss", KW, "ce"), ("target", KW, None),
    ],
    "advjax.train.load_checkpoint": [("path", PK, EMPTY)],
}  # fmt: skip


def _resolve(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_documented_signatures(name):
    """The documented public functions have exactly the documented parameters, kinds
    (keyword-only hyper-parameters) and defaults."""
    assert _params(_resolve(name)) == SIGNATURES[name]


def test_top_level_names_are_the_module_objects():
    """Top-level re-exports are the same objects as in their modules."""
    assert advjax.fgsm is advjax.attacks.fgsm
    assert advjax.pgd is advjax.attacks.pgd
    assert advjax.load_checkpoint is advjax.checkpoint.load_checkpoint
    assert advjax.train.load_checkpoint is advjax.checkpoint.load_checkpoint
    assert advjax.CompactCNN is advjax.model.CompactCNN
    assert advjax.eval_logits_fn is advjax.model.eval_logits_fn
    assert advjax.load_cifar10 is advjax.data.load_cifar10


def test_text_subpackage_exports_its_modules():
    """advjax.text lists its public modules in __all__ and each imports."""
    import advjax.text

    for name in advjax.text.__all__:
        assert hasattr(advjax.text, name), f"advjax.text.{name}"
