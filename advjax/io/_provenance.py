"""Which code produced a result: the git commit of a checkout and whether it was edited."""

import subprocess
from collections.abc import Sequence
from pathlib import Path


def git_state(repo: str | Path, paths: Sequence[str] = ()) -> dict:
    """HEAD's commit of the checkout holding `repo` and whether tracked files differ from it.

    `paths` (relative to the repository root, whatever folder `repo` names inside it) limits
    the dirty check, e.g. to the code and not the results it writes. Both values are None
    outside a git checkout or without git.
    """

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()

    try:
        status = git(
            "status", "--porcelain", "--untracked-files=no", "--", *(f":(top){p}" for p in paths)
        )
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def environment(extra_packages: Sequence[str] = ()) -> dict:
    """Package versions, machine, XLA flags and git revision: the provenance of a result.

    One schema for every study and benchmark. `extra_packages` adds the versions of other
    importable packages (e.g. "sacrebleu") under "versions".
    """
    import importlib
    import os
    import platform
    import sys

    import jax

    import advjax.backend as backend

    names = ("jax", "jaxlib", "flax", "optax", "chex", "numpy", *extra_packages)
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.import_module(name).__version__
        except ImportError:
            versions[name] = None
    git = git_state(Path(__file__).parent, ("advjax", "experiments", "benchmarks"))
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax_backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "versions": versions,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "xla_flags_set_by_advjax": list(backend.applied()),
        "git_revision": git["commit"],
        "git_dirty": git["dirty"],
    }
