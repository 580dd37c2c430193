"""The public API: every exported name exists, and documented signatures hold."""

import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

import advjax

P = inspect.Parameter


CORE = [
    "advjax.attacks",
    "advjax.backend",
    "advjax.cli",
    "advjax.data",
    "advjax.evaluation",
    "advjax.evaluation.checks",
    "advjax.evaluation.engine",
    "advjax.evaluation.gate",
    "advjax.evaluation.stats",
    "advjax.evaluation.summary",
    "advjax.io",
    "advjax.records",
    "advjax.types",
]
BESIDE = [
    "advjax_train",
    "advjax_text",
    "advjax_text.classify",
    "advjax_text.data",
    "advjax_text.tokenize",
    "advjax_text.translate",
]
PACKAGES = CORE + BESIDE


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_imports_from_its_package(package):
    """Each name in a package's __all__ imports with `from package import name`, is not a
    module (packages export objects), and __all__ has no duplicates."""
    mod = importlib.import_module(package)
    assert len(mod.__all__) == len(set(mod.__all__)), package
    namespace: dict = {}
    exec(f"from {package} import {', '.join(mod.__all__)}", namespace)  # noqa: S102
    for name in mod.__all__:
        assert getattr(mod, name) is namespace[name], f"{package}.{name}"
        assert not inspect.ismodule(namespace[name]), f"{package}.{name} is a module"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_object_is_exported_by_one_package_only(package):
    """No object is listed by two packages: each public name has one home."""
    mod = importlib.import_module(package)
    for other in PACKAGES:
        if other == package:
            continue
        shared = {
            name
            for name in set(mod.__all__) & set(importlib.import_module(other).__all__)
            if getattr(mod, name) is getattr(importlib.import_module(other), name)
        }
        assert not shared, (package, other, shared)


def test_the_top_level_lists_the_public_packages_only():
    """`advjax` re-exports no name: its `__all__` is its public subpackages, so every name
    is spelled one way, `advjax.<package>.<name>`."""
    assert sorted(advjax.__all__) == ["attacks", "backend", "data", "evaluation", "io", "records"]
    assert all(inspect.ismodule(getattr(advjax, name)) for name in advjax.__all__)


def test_the_public_surface_is_small():
    """advjax's public modules list at most 150 names in all (the study's models and trainers
    and the text stacks live beside it, in `advjax_train` and `advjax_text`), and docs/api.md
    walks exactly the modules listed here."""
    from tools.api_page import public_count, public_packages

    assert public_packages() == ["advjax"] + CORE
    assert public_count() <= 150, public_count()


def _advjax_imports(package: str):
    """(file name, imported advjax module) for every import in the package's modules."""
    import ast
    import pathlib

    folder = pathlib.Path(importlib.import_module(package).__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            yield from ((path.name, name) for name in names if name.startswith("advjax"))


def test_attacks_stand_alone():
    """The attack modules import only jax/numpy/chex, each other, `advjax.types` and
    `advjax.backend` (the fast-path rewrite of the logits function): nothing of the
    evaluation layer, I/O, training or text."""
    for path, name in _advjax_imports("advjax.attacks"):
        assert name.startswith(("advjax.attacks", "advjax.types", "advjax.backend")), (path, name)


def test_records_are_at_the_bottom_and_io_imports_no_model():
    """The layers import one way, downward: `advjax.records` (the record, its verdict rules,
    the record log) imports nothing of advjax; `advjax.io` (checkpoints, locks) only records,
    so a checkpoint's model is the caller's class; evaluation builds records on both."""
    for path, name in _advjax_imports("advjax.records"):
        assert name.startswith("advjax.records"), (path, name)
    for path, name in _advjax_imports("advjax.io"):
        assert name.startswith(("advjax.io", "advjax.records", "advjax.backend")), (path, name)


def _imports_of(root):
    """(file, imported module) for every `advjax*` module each file under `root` imports."""
    import ast
    import pathlib

    folder = pathlib.Path(importlib.import_module(root).__file__).parent
    for path in folder.rglob("*.py"):
        package = path.parent.relative_to(folder.parent).as_posix().replace("/", ".")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in (m for m in modules if m.startswith("advjax")):
                yield path.relative_to(folder.parent).as_posix(), package, module


@pytest.mark.parametrize("root", ["advjax", "advjax_train", "advjax_text"])
def test_no_library_module_imports_another_packages_private_module(root):
    """A module imports another package's names from its public face (`__all__`); private
    modules (`_name`) are reached only from inside their own package or below it, and the
    packages beside advjax build on its public names alone."""
    crossing = []
    for where, package, module in _imports_of(root):
        parts = module.split(".")
        private = next((i for i, p in enumerate(parts) if p.startswith("_")), None)
        if private is None:
            continue
        owner = ".".join(parts[:private])
        if not (package == owner or package.startswith(owner + ".")):
            crossing.append(f"{where}: {module}")
    assert not crossing, crossing


def test_the_core_imports_nothing_beside_it():
    """advjax imports neither the trainers nor the text stacks; only the evaluation command's
    `--checkpoint` loads the study's CNN from `advjax_train`, when asked to."""
    beside = [(where, module) for where, _, module in _imports_of("advjax")
              if module.split(".")[0] in ("advjax_train", "advjax_text")]  # fmt: skip
    assert beside == [("advjax/cli/evaluate.py", "advjax_train"),
                      ("advjax/cli/evaluate.py", "advjax_train.load_logits_fn")]  # fmt: skip


def test_the_commands_sit_on_top_of_the_library():
    """No library module imports `advjax.cli` but the two `python -m` entry points that keep
    their names; the commands import no experiment."""
    import ast
    import pathlib

    root = pathlib.Path(advjax.__file__).parent
    entry_points = {"evaluate.py", "gate.py"}
    seen = set()
    for path in root.rglob("*.py"):
        where = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [module]
            for name in filter(None, names):
                assert not name.startswith(("experiments", "benchmarks", "tools")), (where, name)
                if name.startswith("advjax.cli") and not where.startswith("cli/"):
                    assert where in entry_points, (where, name)
                    seen.add(where)
    assert seen == entry_points


def test_importing_advjax_leaves_the_environment_alone():
    """`import advjax` (and every subpackage) in a fresh process changes no environment
    variable: XLA flags are set only by `advjax.backend.configure()`."""
    code = (
        "import os, json; before = dict(os.environ); "
        "import advjax, advjax_text, advjax_text.translate, advjax_text.classify; "
        "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "{}"


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
    "advjax.data.load_cifar10": [
        ("data_dir", PK, None),
        ("custom", KW, None),
        ("splits", KW, ("train", "test")),
    ],
    "advjax_train.CompactCNN.__call__": [("x", PK, EMPTY), ("train", PK, EMPTY)],
    "advjax_train.eval_logits_fn": [("model", PK, EMPTY), ("variables", PK, EMPTY)],
    "advjax.attacks.fgsm": [
        ("logits_fn", PK, EMPTY), ("x", PK, EMPTY), ("y", PK, EMPTY), ("eps", PK, EMPTY),
        ("norm", KW, "linf"),
    ],
    "advjax.attacks.pgd": [
        ("logits_fn", PK, EMPTY), ("x", PK, EMPTY), ("y", PK, EMPTY), ("eps", PK, EMPTY),
        ("key", KW, EMPTY), ("steps", KW, 20), ("step_size", KW, None), ("restarts", KW, 1), ("first_restart", KW, 0),
        ("norm", KW, "linf"), ("loss", KW, "ce"), ("target", KW, None),
    ],
    "advjax.io.load_checkpoint": [
        ("path", PK, EMPTY), ("model_class", PK, EMPTY), ("input_shape", KW, (1, 32, 32, 3)),
    ],
    "advjax_train.load_logits_fn": [("path", PK, EMPTY)],
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


def test_text_subpackages_export_objects():
    """advjax_text's subpackages each list objects in __all__ (checked above); the text
    package itself re-exports the validity rule and the text records."""
    import advjax_text

    assert "ValidityRule" in advjax_text.__all__
    assert "TextCaseRecord" in advjax_text.__all__


def test_the_evaluation_page_stays_short():
    """`advjax.evaluation` is what a newcomer reads first: at most 25 names; the rest lives in
    its topic subpackages."""
    import advjax.evaluation

    assert len(advjax.evaluation.__all__) <= 25
    for topic in ("checks", "engine", "gate", "stats", "summary"):
        assert importlib.import_module(f"advjax.evaluation.{topic}").__all__


CORE_PROBE = r"""
import importlib.abc, sys

STUDY_ONLY = ("matplotlib", "sacrebleu", "tensorflow_datasets")


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in STUDY_ONLY:
            raise ImportError(f"{name} is not part of a core install")


sys.meta_path.insert(0, Refuse())
import jax, jax.numpy as jnp, numpy as np
import advjax, advjax.attacks, advjax.backend, advjax.data, advjax.evaluation, advjax.io
import advjax.cli.evaluate, advjax.evaluation.gate, advjax.evaluation.stats

w = jax.random.normal(jax.random.key(0), (48, 3))
logits_fn = lambda x: x.reshape(x.shape[0], -1) @ w
x = np.asarray(jax.random.uniform(jax.random.key(1), (6, 4, 4, 3)))
y = np.asarray(jnp.argmax(logits_fn(x), -1))
result = advjax.evaluation.autoattack(logits_fn, x, y, 0.1, key=jax.random.key(2),
                           members=[advjax.evaluation.AttackSpec("apgd-ce", steps=5)])
print(sorted(m for m in sys.modules if m.split(".")[0] in STUDY_ONLY), len(result.robust))
"""


def test_a_core_install_needs_no_study_dependency():
    """With matplotlib, sacrebleu and TFDS unimportable (what `pip install advjax` without
    extras leaves out), the library imports and AutoAttack runs."""
    done = subprocess.run([sys.executable, "-c", CORE_PROBE], capture_output=True, text=True,
                          env=os.environ | {"ADVJAX_XLA_DEFAULTS": "0"}, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[] 6"


def test_the_core_declares_only_what_it_needs():
    """pyproject's core dependencies are the JAX stack; the studies' come as extras."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(advjax.__file__).parents[1] / "pyproject.toml").read_text())
    core = {re.split(r"[=<>\[ ]", d)[0] for d in project["project"]["dependencies"]}
    assert core == {"jax", "jaxlib", "flax", "optax", "chex", "numpy"}
    extras = project["project"]["optional-dependencies"]
    assert {"matplotlib", "tensorflow-datasets"} <= {
        re.split(r"[=<>\[ ]", d)[0] for d in extras["studies"]
    }


def test_the_api_page_lists_every_public_name():
    """docs/api.md is what `python -m tools.api_page` writes from the packages' `__all__`."""
    from tools.api_page import PAGE, render

    assert PAGE.read_text() == render(), "run python -m tools.api_page"
