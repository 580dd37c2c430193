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
