"""One writer per output folder: a lock file holding the owner's pid and command.

Two runs writing into one folder would interleave their records; the second is refused at
once, with the first one's pid and command in the message. A lock whose process is gone
(killed, machine restarted) is stale and taken over; the lock is released on exit. A new
holder removes the temporary files that killed atomic writes left in the folder tree,
except in subfolders that another live process holds.
"""

import json
import os
import socket
import sys
from pathlib import Path

from advjax.records import is_temporary

LOCK_NAME = ".advjax.lock"


class LockedError(RuntimeError):
    """The output folder is in use by another running process."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(lock_path: Path) -> dict:
    """The lock file's {pid, host, command}, or {} when it is missing or unreadable."""
    try:
        owner = json.loads(lock_path.read_text())
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _stale(lock_path: Path) -> bool:
    """Whether no live process can own this lock file: an unreadable or half-written file,
    or a pid that is gone on this host (a lock from another host is never stale here)."""
    owner = _owner(lock_path)
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return True
    same_host = owner.get("host") in (None, socket.gethostname())
    return same_host and not _alive(pid)


def held_by_a_live_process(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds a lock file whose owner is running (this process included)."""
    lock_path = Path(folder) / LOCK_NAME
    return lock_path.is_file() and not _stale(lock_path)


def clear_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove the atomic writes' leftover temporary files under `folder`; return them.

    Subfolders held by a live process are skipped whole: their temporaries may be writes
    in progress. Call it only while holding `folder`'s lock, so that none below it are.
    """
    removed = []
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = [d for d in dirs if not held_by_a_live_process(here / d)]
        for name in files:
            if is_temporary(name):
                try:
                    (here / name).unlink()
                except OSError:  # gone already, or not ours to remove: left as it is
                    continue
                removed.append(here / name)
    return removed


class OutputLock:
    """`with OutputLock(folder):` holds `folder/.advjax.lock` for this process.

    On taking the lock it removes the temporary files of atomic writes that a killed run
    left in the folder tree (`cleared` lists them), outside subfolders that other live
    runs hold.

    Raises:
      LockedError: another live process on this machine holds the lock.

    Example:
      >>> with OutputLock("results"):
      ...     run_study(config, "results")
    """

    def __init__(self, folder: str | os.PathLike):
        self.path = Path(folder) / LOCK_NAME
        self.cleared: list[Path] = []
        self._held = False

    def acquire(self) -> "OutputLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                if _stale(self.path):
                    self.path.unlink(missing_ok=True)
                    continue
                raise LockedError(self._message()) from None
            with os.fdopen(fd, "w") as f:
                json.dump(owner, f)
            self._held = True
            self.cleared = clear_temporaries(self.path.parent)
            return self
        raise LockedError(self._message())

    def _message(self) -> str:
        owner = _owner(self.path)
        return (
            f"{self.path.parent} is in use by process {owner.get('pid')} "
            f"({owner.get('command', 'unknown command')}); wait for it to finish, or remove "
            f"{self.path} if that process is gone"
        )

    def release(self) -> None:
        if self._held:
            self.path.unlink(missing_ok=True)
            self._held = False

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
