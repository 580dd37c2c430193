"""The append-only JSON-lines log of per-case records: kill-safe, resumes without duplicates.

File format: UTF-8 JSON lines, one `CaseRecord` object per line, each line ending in "\\n"
and written whole (`RecordLog.append` issues one `os.write` per batch on a descriptor
opened with O_APPEND, then fsyncs). A line without its terminating newline can only come
from a process killed during a write: readers ignore it and `RecordLog` truncates it away
when it reopens the file, so the resumed run re-computes that case instead of duplicating
or losing it.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advjax.evaluation._records import CaseRecord


class RecordError(ValueError):
    """A malformed record line; the message starts with 'path:line:'."""


def _case_record():
    """`CaseRecord`, imported when first needed (the evaluation layer imports this module)."""
    from advjax.evaluation._records import CaseRecord

    return CaseRecord


def _parse(data: bytes, path: Path) -> list[CaseRecord]:
    """Records from complete lines (`data` ends with a newline or is empty)."""
    records = []
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            records.append(_case_record().from_dict(json.loads(line.decode("utf-8"))))
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError, TypeError) as error:
            raise RecordError(f"{path}:{number}: not a valid case record: {error}") from error
    return records


def read_records(path: str | os.PathLike, *, strict: bool = False) -> list[CaseRecord]:
    """Every complete record of a JSON-lines file, validated, in file order.

    Args:
      path: the record file.
      strict: also reject a trailing line without its newline (a write cut short by a
        kill); by default it is ignored, as `RecordLog` would drop it on resume.

    Returns:
      The records.

    Raises:
      FileNotFoundError: no such file.
      RecordError: a line is not a valid record; the message names 'file:line'.

    Example:
      >>> records = read_records("results/records.jsonl")
    """
    path = Path(path)
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if strict and end < len(data):
        line = data[:end].count(b"\n") + 1
        raise RecordError(f"{path}:{line}: incomplete last line (no newline): {data[end:][:80]!r}")
    return _parse(data[:end], path)


class RecordLog:
    """An append-only JSON-lines record file that survives kills and resumes without duplicates.

    Opening scans the file: a trailing partial line (a write cut short by a kill) is
    truncated away, every complete line is validated (RecordError names file:line), and
    the keys (model, attack, eps, case_id) already present are kept in `keys`, so that a
    resumed run skips those cases. One process writes a log at a time.

    Example:
      >>> log = RecordLog(out / "records.jsonl")
      >>> todo = [i for i in case_ids if ("standard", "pgd", eps, i) not in log]
      >>> log.append(records_for(todo))
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.dropped_bytes = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size else b""
            end = data.rfind(b"\n") + 1
            records = _parse(data[:end], self.path)
            if end < len(data):
                os.ftruncate(fd, end)
                os.fsync(fd)
                self.dropped_bytes = len(data) - end
        finally:
            os.close(fd)
        if self.dropped_bytes:
            warnings.warn(
                f"{self.path}: dropped a partial last line ({self.dropped_bytes} bytes) left by "
                "an interrupted write; its case is computed again",
                stacklevel=2,
            )
        if created:
            _fsync_dir(self.path.parent)
        self._keys: set = set()
        self._hashes: dict[tuple[str, str], set] = {}
        self._records: list[CaseRecord] = list(records)
        for number, record in enumerate(records, start=1):
            if record.key in self._keys:
                raise RecordError(f"{self.path}:{number}: duplicate record for {record.key}")
            self._keys.add(record.key)
            self._note_hashes(record)

    def _note_hashes(self, record: CaseRecord) -> None:
        self._hashes.setdefault((record.model, record.attack), set()).add(
            (record.model_hash, record.attack_config_hash, record.threat_model_hash)
        )

    def hashes(self, model: str, attack: str) -> set:
        """(model_hash, attack_config_hash, threat_model_hash) of that model's attack records."""
        return set(self._hashes.get((model, attack), ()))

    @property
    def keys(self) -> frozenset:
        """(model, attack, eps, case_id) of every record in the file."""
        return frozenset(self._keys)

    def read(self) -> list[CaseRecord]:
        """Every record in the file, in file order (kept in memory since opening: the file
        is parsed once per run, not once per call)."""
        return list(self._records)

    def __contains__(self, key: tuple) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def append(self, records: Iterable[CaseRecord], *, skip_existing: bool = False) -> int:
        """Append records as complete lines with one write, then fsync; return how many.

        Args:
          records: `CaseRecord`s, at most one per key.
          skip_existing: silently drop records whose key is already in the file
            (otherwise that raises).

        Raises:
          TypeError: an item is not a CaseRecord.
          ValueError: a key is already in the file (unless skip_existing) or repeats in
            `records`; nothing is written then.
        """
        batch, seen = [], set()
        for record in records:
            if not isinstance(record, _case_record()):
                raise TypeError(f"expected CaseRecord, got {type(record).__name__}: {record!r}")
            if record.key in seen:
                raise ValueError(f"record {record.key} appears twice in one append to {self.path}")
            if record.key in self._keys and not skip_existing:
                raise ValueError(f"record {record.key} is already in {self.path}")
            if record.key not in self._keys:
                batch.append(record)
                seen.add(record.key)
        if not batch:
            return 0
        data = "".join(r.to_json() + "\n" for r in batch).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # one write in practice; loop only on a short write
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        self._keys |= seen
        self._records.extend(batch)
        for record in batch:
            self._note_hashes(record)
        return len(batch)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
