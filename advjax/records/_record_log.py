"""The append-only JSON-lines log of per-case records: kill-safe, resumes without duplicates.

File format: UTF-8 JSON lines, one `CaseRecord` object per line, each line ending in "\\n"
and written whole (`RecordLog.append` issues one `os.write` per batch on a descriptor
opened with O_APPEND, then fsyncs). A line without its terminating newline can only come
from a process killed during a write: readers ignore it and `RecordLog` truncates it away
when it reopens the file, so the resumed run re-computes that case instead of duplicating
or losing it.

A record file whose name ends in `.gz` holds the same lines as gzip members, one per
append (`advjax.records._record_codec`); a member cut short by a kill is dropped like a partial
line. Every reader and writer here takes either.

Keys (model, attack, eps, case_id) are unique in a log. A file that holds a key twice (two
runs once wrote into one folder) is refused when opened; `repair_records` keeps the first
copy of each key and moves the others to the sibling `<name>.duplicates.jsonl`, so that
the study resumes without retraining and without losing a line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

from advjax.records._atomic import atomic_write_bytes
from advjax.records._case_record import CaseRecord
from advjax.records._record_codec import complete_prefix, encode


class RecordError(ValueError):
    """A malformed or duplicated record line; the message starts with 'path:line:'."""


REPAIR_FLAG = "--repair-records"
"""The commands' flag that runs `repair_records` on their output folder's record files."""


def _complete(path: Path, data: bytes) -> tuple[bytes, int]:
    try:
        return complete_prefix(path, data)
    except ValueError as error:
        raise RecordError(str(error)) from None


def _parse(data: bytes, path: Path) -> list[CaseRecord]:
    """Records from complete lines (`data` ends with a newline or is empty)."""
    records = []
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            records.append(CaseRecord.from_dict(json.loads(line.decode("utf-8"))))
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
      >>> records = read_records("results/cifar10/default/records.jsonl")
    """
    path = Path(path)
    data = path.read_bytes()
    lines, end = _complete(path, data)
    if strict and end < len(data):
        line = lines.count(b"\n") + 1
        raise RecordError(f"{path}:{line}: incomplete last line (no newline): {data[end:][:80]!r}")
    return _parse(lines, path)


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
            lines, end = _complete(self.path, data)
            records = _parse(lines, self.path)
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
        self._hashes: dict[tuple[str, str], set] = {}
        self._records: list[CaseRecord] = list(records)
        first_line: dict[tuple, int] = {}
        for number, record in enumerate(records, start=1):
            if record.key in first_line:
                raise RecordError(_duplicate_message(self.path, number, record.key, first_line))
            first_line[record.key] = number
            self._note_hashes(record)
        self._keys: set = set(first_line)

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
            if not isinstance(record, CaseRecord):
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
        lines = "".join(r.to_json() + "\n" for r in batch).encode("utf-8")
        _append_bytes(self.path, encode(self.path, lines))
        self._keys |= seen
        self._records.extend(batch)
        for record in batch:
            self._note_hashes(record)
        return len(batch)


class ProcessRecordLog(RecordLog):
    """One process's record file of a run spread over processes: it appends to its own file
    (`path`) and counts as written every record of the run's merged file (`merged`, read once
    on opening), so a process resumes past the cases any earlier run decided, however the
    cases were shared then.

    `read()`, `keys`, `in` and `hashes` cover both files; `append` writes to `path` only.
    """

    def __init__(self, path: str | os.PathLike, *, merged: str | os.PathLike):
        super().__init__(path)
        self.merged = Path(merged)
        for record in read_records(self.merged) if self.merged.is_file() else []:
            if record.key not in self._keys:
                self._keys.add(record.key)
                self._records.append(record)
                self._note_hashes(record)


def merge_record_files(target: str | os.PathLike, sources: Iterable[str | os.PathLike]) -> int:
    """Append to the record file `target` every record of `sources` whose key it lacks (the
    first copy of a key wins; the sources stay as they are); return how many.

    Merging again after a kill adds only what the first merge had not: never a duplicate.
    """
    log = RecordLog(target)
    return sum(log.append(read_records(source), skip_existing=True) for source in sources)


def _duplicate_message(path: Path, number: int, key: tuple, first_line: dict) -> str:
    return (
        f"{path}:{number}: duplicate record for {key} (first at line {first_line[key]}); run "
        f"the same command with {REPAIR_FLAG} to keep the first copy of each record and move "
        f"the others to {duplicates_path(path).name} (advjax.records.repair_records does the same)"
    )


def _append_bytes(path: Path, data: bytes) -> None:
    """Append `data` with one write (looping only on a short write), then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def record_file(folder: str | os.PathLike, stem: str = "records") -> Path:
    """A folder's record file: `<stem>.jsonl.gz` (new runs), or an existing `<stem>.jsonl`.

    Example:
      >>> log = RecordLog(record_file("results"))  # results/cifar10/default/records.jsonl.gz
    """
    folder = Path(folder)
    plain = folder / f"{stem}.jsonl"
    return (
        plain
        if plain.exists() and not (folder / f"{stem}.jsonl.gz").exists()
        else (folder / f"{stem}.jsonl.gz")
    )


def duplicates_path(path: str | os.PathLike) -> Path:
    """Where `repair_records` saves a record file's dropped lines: `records.duplicates.jsonl`
    beside `records.jsonl` (`.jsonl.gz` beside `.jsonl.gz`)."""
    path = Path(path)
    name, dot, suffix = path.name.partition(".")
    return path.with_name(f"{name}.duplicates{dot}{suffix}")


@dataclasses.dataclass(frozen=True)
class RecordRepair:
    """What `repair_records` did to one record file.

    Attributes:
      path: the record file.
      kept: records left in it, one per key (model, attack, eps, case_id).
      dropped: later copies of a key, removed from it.
      dropped_differing: how many of the dropped copies differ from the kept one (same
        key, other content: two runs disagreed on that case).
      duplicates_path: the sibling file the dropped lines were appended to (untouched when
        nothing was dropped).
    """

    path: Path
    kept: int
    dropped: int
    dropped_differing: int
    duplicates_path: Path

    def describe(self) -> str:
        """One line for a person: what was kept, dropped and where the dropped lines went."""
        if not self.dropped:
            return f"{self.path}: {self.kept:,} records, no duplicates; left as it was"
        return (
            f"{self.path}: kept the first copy of {self.kept:,} records, dropped "
            f"{self.dropped:,} duplicates ({self.dropped_differing:,} differing from the kept "
            f"copy), appended to {self.duplicates_path}"
        )


def repair_records(path: str | os.PathLike) -> RecordRepair:
    """Keep the first copy of each key in a record file; move the later copies aside.

    The dropped lines are appended to `duplicates_path(path)` (fsynced) before the record
    file is rewritten atomically (a temporary file, then a rename), so that a kill at any
    moment loses no line. A trailing partial line is kept as it is, for `RecordLog` to
    drop as usual. No process may write the file meanwhile: the commands hold the output
    folder's lock while they repair.

    Args:
      path: the record file (JSON lines of `CaseRecord`s).

    Returns:
      A `RecordRepair` with the counts.

    Raises:
      FileNotFoundError: no such file.
      RecordError: a line is not a valid record ('file:line'); duplicates are all that
        this repairs.

    Example:
      >>> repair = repair_records("results/cifar10/default/records.jsonl")
      >>> print(repair.describe())
    """
    path = Path(path)
    data = path.read_bytes()
    text, end = _complete(path, data)
    lines = text.split(b"\n")[:-1]
    first: dict[tuple, str] = {}
    kept, dropped, differing = [], [], 0
    for line, record in zip(lines, _parse(text, path)):
        text = record.to_json()
        if record.key not in first:
            first[record.key] = text
            kept.append(line + b"\n")
        else:
            dropped.append(line + b"\n")
            differing += text != first[record.key]
    repair = RecordRepair(path, len(kept), len(dropped), differing, duplicates_path(path))
    if dropped:
        _append_bytes(repair.duplicates_path, encode(repair.duplicates_path, b"".join(dropped)))
        atomic_write_bytes(path, encode(path, b"".join(kept)) + data[end:])
    return repair


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
