"""Atomic file writes: write to a temporary file beside the target, then rename.

The temporary file is `.<name>.<8 random characters>.tmp` in the target's folder; a write
killed before its rename leaves one behind, which `is_temporary` recognises so that the
folder's next lock holder can remove it.
"""

import io
import json
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from advjax.records._record_codec import encode

TEMPORARY_SUFFIX = ".tmp"
_TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(TEMPORARY_SUFFIX))


def is_temporary(name: str) -> bool:
    """Whether a file name is that of an atomic write's temporary file (`.<name>.XXXXXXXX.tmp`)."""
    return _TEMPORARY.fullmatch(name) is not None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` so that readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """UTF-8 text version of `atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_lines(path: str | os.PathLike, lines: Iterable[str]) -> Path:
    """Write text lines, each followed by a newline, atomically; gzip when `path` ends in `.gz`.

    A `.gz` file is one gzip member with mtime 0, as `RecordLog` writes each append, so
    `read_lines`, `read_records` and `RecordLog` all read it, and the same lines give the
    same bytes.

    Example:
      >>> atomic_write_lines("out/records.jsonl.gz", (json.dumps(r) for r in rows))
    """
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    return atomic_write_bytes(path, encode(path, data))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write `obj` as indented JSON, atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def atomic_write_npz(path: str | os.PathLike, **arrays: Any) -> Path:
    """Write `arrays` as a compressed .npz, atomically."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return atomic_write_bytes(path, buffer.getvalue())
