"""The tfds CIFAR-10 path runs on what advjax declares, not on what happens to be installed.

A fresh interpreter walks the path `load_cifar10(None)` takes through TensorFlow Datasets as
far as it goes offline: the `cifar10` builder class, its `code_path` (where tfds imports
`importlib_resources` lazily, through `epy.lazy_imports` in `core/dataset_builder.py`), the
ArrayRecord data source module, and `load_cifar10` itself on `tfds.testing.mock_data` (an
`ArrayRecordDataSource` read record by record, images decoded). Every third-party module it
loads must come from a distribution that `[project].dependencies` bring, directly or through
their own requirements (read from the installed metadata of `advjax`).
"""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement

PROBE = r"""
import json, socket, sys

before = set(sys.modules)
network = []


def offline(*args, **kwargs):
    network.append(repr(args)[:200])
    raise OSError("the dependency probe runs offline")


socket.socket.connect = offline
socket.create_connection = offline

import tensorflow_datasets as tfds
from tensorflow_datasets.core.data_sources import array_record  # noqa: F401

tfds.builder_cls("cifar10").code_path
from advjax.data import DataError, load_cifar10

with tfds.testing.mock_data(num_examples=4):
    try:
        load_cifar10(None, custom=True)
    except DataError:
        pass
loaded = {name: getattr(sys.modules[name], "__file__", None) for name in set(sys.modules) - before}
print(json.dumps({"modules": loaded, "network": network}))
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_closure(
    root: str = "advjax", *, without: frozenset = frozenset(), extras=frozenset({"studies"})
) -> set[str]:
    """Canonical names of `root` (with its `extras`: TFDS comes with the studies) and every
    distribution its requirements bring, transitively (markers evaluated here, extras
    followed), leaving out `without` from `root`'s own list."""
    todo, seen, names = [(root, frozenset(extras))], set(), set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(_canonical(name))
        try:
            requirements = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requirements:
            req = Requirement(text)
            if name == root and _canonical(req.name) in without:
                continue
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in {"", *extras}):
                continue
            todo.append((req.name, frozenset(req.extras)))
    return names


def file_owners() -> dict[str, str]:
    """Installed module file (normalised absolute path) -> canonical distribution name."""
    out = {}
    for dist in importlib.metadata.distributions():
        owner = _canonical(dist.metadata["Name"])
        for file in dist.files or ():
            if file.suffix in (".py", ".so"):
                out[os.path.normpath(dist.locate_file(file))] = owner
    return out


def _stdlib(path: str) -> bool:
    """A standard-library file: under the interpreter's library folders, outside
    site-packages (in a virtual environment site-packages lies inside `platstdlib`)."""
    paths = sysconfig.get_paths()
    inside = [paths[k] for k in ("stdlib", "platstdlib")]
    site = [paths[k] for k in ("purelib", "platlib")]
    return any(Path(path).is_relative_to(r) for r in inside) and not any(
        Path(path).is_relative_to(r) for r in site
    )


def undeclared(loaded: dict, closure: set[str]) -> list[str]:
    """'module (file): distribution' for each loaded third-party module whose distribution
    is outside `closure` (or that no installed distribution owns)."""
    owners = file_owners()
    bad = []
    for name, path in sorted(loaded.items()):
        if path is None or name.split(".")[0] == "advjax" or _stdlib(path):
            continue  # built in, a namespace package, the project itself, the standard library
        owner = owners.get(os.path.normpath(path), "no installed distribution")
        if owner not in closure:
            bad.append(f"{name} ({path}): {owner}")
    return bad


def probe(tmp_path) -> dict:
    """What the fresh interpreter loaded, and any network use it attempted."""
    env = {k: v for k, v in os.environ.items() if k != "ADVJAX_DATA_DIR"}
    env["TFDS_DATA_DIR"] = str(tmp_path / "tfds")
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_module_the_tfds_path_imports_comes_from_a_declared_dependency(tmp_path):
    found = probe(tmp_path)
    assert not found["network"], f"the probe reached for the network: {found['network']}"
    loaded = found["modules"]
    for expected in (
        "importlib_resources",
        "tensorflow_datasets.image_classification.cifar",
        "tensorflow_datasets.core.data_sources.array_record",
        "array_record",
    ):
        assert any(m == expected or m.startswith(expected + ".") for m in loaded), expected
    assert undeclared(loaded, {"advjax"}), "the check sees the third-party modules"
    missing = undeclared(loaded, declared_closure())
    assert not missing, "imported from undeclared distributions:\n" + "\n".join(missing)
