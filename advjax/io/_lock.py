"""One writer per output folder: a lock file holding the owner's pid and command.

Two runs writing into one folder would interleave their records; the second is refused at
once, with the first one's pid and command in the message. A lock whose process is gone
(killed, machine restarted) is stale and taken over; the lock is released on exit.
"""

import json
import os
import socket
import sys
from pathlib import Path

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


class OutputLock:
    """`with OutputLock(folder):` holds `folder/.advjax.lock` for this process.

    Raises:
      LockedError: another live process on this machine holds the lock.
    """

    def __init__(self, folder: str | os.PathLike):
        self.path = Path(folder) / LOCK_NAME
        self._held = False

    def acquire(self) -> "OutputLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv)}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                if self._stale():
                    self.path.unlink(missing_ok=True)
                    continue
                raise LockedError(self._message()) from None
            with os.fdopen(fd, "w") as f:
                json.dump(owner, f)
            self._held = True
            return self
        raise LockedError(self._message())

    def _owner(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def _stale(self) -> bool:
        owner = self._owner()
        pid = owner.get("pid")
        if not isinstance(pid, int):
            return True  # unreadable or half-written: no live owner can be named
        same_host = owner.get("host") in (None, socket.gethostname())
        return same_host and not _alive(pid)

    def _message(self) -> str:
        owner = self._owner()
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
