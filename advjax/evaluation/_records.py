"""Per-case evaluation records and their append-only JSON-lines log.

One `CaseRecord` per (model, attack, eps, case), written before any aggregate is computed;
every number of a run is then derived from these records alone (`advjax.evaluation`).

File format: UTF-8 JSON lines, one record object per line, each line ending in "\\n" and
written whole (`RecordLog.append` issues one `os.write` per batch on a descriptor opened
with O_APPEND, then fsyncs). Non-finite floats (`final_loss`, `linf`, `l2`) are written as
the strings "NaN", "Infinity" and "-Infinity" so that every line is strict JSON. A line
without its terminating newline can only come from a process killed during a write: readers
ignore it and `RecordLog` truncates it away when it reopens the file, so the resumed run
re-computes that case instead of duplicating or losing it.
"""

import dataclasses
import json
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

STATUSES = ("skipped_clean_wrong", "success", "failed", "budget_exhausted", "invalid")
"""skipped_clean_wrong: the model is wrong on the clean input (never an attack success);
success: a valid adversarial input is misclassified; failed: the attack found none;
budget_exhausted: as failed, but the search stopped at its query/step cap while it could
still tell that it was not done (attacks that cannot tell report failed); invalid: the
returned input breaks the threat model's validity rule (outside the ball or the pixel
range): neither a model failure nor a model success."""

ROBUST_STATUSES = ("failed", "budget_exhausted")
_FLOAT_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class RecordError(ValueError):
    """A malformed record line; the message starts with 'path:line:'."""


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaseRecord:
    """Everything about one case under one attack at one eps, enough to audit and replay it.

    Attributes:
      case_id: index of the case in the evaluation set, >= 0.
      true_class, clean_pred, adv_pred: true label and predictions on the clean and the
        returned adversarial input.
      final_loss: the attack's loss at the returned input (may be NaN/inf: sanity checks).
      linf, l2: L-inf and L2 size of the returned perturbation.
      first_break_step: fewest steps after which any restart misclassified the case
        (0 = at the random start), None if none did.
      first_break_restart: lowest restart index (0-based) that ever misclassified it.
      queries: gradient (or score) queries spent on the case until it was decided: every
        step of the restarts that did not break it, plus the steps to the first
        misclassified iterate of the one that did (FGSM: 1).
      status: one of `STATUSES`, consistent with the predictions.
      model, model_hash, attack, attack_config_hash, threat_model_hash: provenance.
      eps: the budget, in input units.
      key_path: the `fold_in` path from the root seed to this case's PRNG key.
      break_steps_by_restart: optional, per restart the first-break step or None.

    Raises:
      ValueError: a field has the wrong type or value, or the fields contradict each
        other (e.g. status "success" with adv_pred == true_class).
    """

    case_id: int
    true_class: int
    clean_pred: int
    adv_pred: int
    final_loss: float
    linf: float
    l2: float
    first_break_step: int | None
    first_break_restart: int | None
    queries: int
    status: str
    model: str
    model_hash: str
    attack: str
    attack_config_hash: str
    threat_model_hash: str
    eps: float
    key_path: tuple[int | str, ...]
    break_steps_by_restart: tuple[int | None, ...] | None = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        for name in ("case_id", "true_class", "clean_pred", "adv_pred", "queries"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"{name}={value!r} must be an integer >= 0")
            put(name, int(value))
        for name in ("first_break_step", "first_break_restart"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise ValueError(f"{name}={value!r} must be None or an integer >= 0")
            put(name, None if value is None else int(value))
        for name in ("final_loss", "linf", "l2", "eps"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise ValueError(f"{name}={value!r} must be a real number")
            put(name, float(value))
        if not 0 <= self.eps < math.inf:
            raise ValueError(f"eps={self.eps!r} must be finite and >= 0")
        for name in ("model", "model_hash", "attack", "attack_config_hash", "threat_model_hash"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name}={value!r} must be a non-empty string")
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} must be one of {STATUSES}")
        if isinstance(self.key_path, (str, bytes)) or not isinstance(self.key_path, Sequence):
            raise ValueError(f"key_path={self.key_path!r} must be a list of ints and strings")
        if not all(_is_int(k) or isinstance(k, str) for k in self.key_path):
            raise ValueError(f"key_path={self.key_path!r} must hold only ints and strings")
        put("key_path", tuple(int(k) if _is_int(k) else k for k in self.key_path))
        if (self.first_break_step is None) != (self.first_break_restart is None):
            raise ValueError(
                f"first_break_step={self.first_break_step!r} and "
                f"first_break_restart={self.first_break_restart!r} must both be None or both set"
            )
        if self.break_steps_by_restart is not None:
            steps = tuple(self.break_steps_by_restart)
            if not steps or not all(s is None or (_is_int(s) and s >= 0) for s in steps):
                raise ValueError(
                    f"break_steps_by_restart={self.break_steps_by_restart!r} must be a non-empty "
                    "list of None or integers >= 0"
                )
            steps = tuple(None if s is None else int(s) for s in steps)
            broke = [r for r, s in enumerate(steps) if s is not None]
            expected = (min(steps[r] for r in broke), broke[0]) if broke else (None, None)
            if (self.first_break_step, self.first_break_restart) != expected:
                raise ValueError(
                    f"break_steps_by_restart={steps} implies first_break_step, "
                    f"first_break_restart = {expected}, got "
                    f"{(self.first_break_step, self.first_break_restart)}"
                )
            put("break_steps_by_restart", steps)
        clean_ok = self.clean_pred == self.true_class
        adv_ok = self.adv_pred == self.true_class
        if (self.status == "skipped_clean_wrong") == clean_ok:
            raise ValueError(
                f"status={self.status!r} with clean_pred={self.clean_pred} and "
                f"true_class={self.true_class}: skipped_clean_wrong is exactly the "
                "clean-wrong cases"
            )
        if (self.status == "success" and adv_ok) or (self.status in ROBUST_STATUSES and not adv_ok):
            raise ValueError(
                f"status={self.status!r} contradicts adv_pred={self.adv_pred} and "
                f"true_class={self.true_class}"
            )

    @property
    def key(self) -> tuple[str, str, float, int]:
        """(model, attack, eps, case_id): at most one record per key in a run."""
        return (self.model, self.attack, self.eps, self.case_id)

    def to_dict(self) -> dict:
        """JSON-ready dict: tuples as lists, non-finite floats as 'NaN' / 'Infinity' strings."""
        d = dataclasses.asdict(self)
        for name in ("final_loss", "linf", "l2"):
            if not math.isfinite(d[name]):
                d[name] = (
                    "NaN" if math.isnan(d[name]) else ("Infinity" if d[name] > 0 else "-Infinity")
                )
        d["key_path"] = list(self.key_path)
        if self.break_steps_by_restart is not None:
            d["break_steps_by_restart"] = list(self.break_steps_by_restart)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CaseRecord":
        """Inverse of `to_dict`. Raises ValueError on unknown, missing or bad fields."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a record must be a JSON object, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        missing = sorted(fields - {"break_steps_by_restart"} - set(d))
        if unknown or missing:
            raise ValueError(f"record has unknown fields {unknown} / missing fields {missing}")
        d = dict(d)
        for name in ("final_loss", "linf", "l2"):
            if isinstance(d[name], str):
                if d[name] not in _FLOAT_TEXT:
                    raise ValueError(f"{name}={d[name]!r} must be a number, 'NaN' or '[-]Infinity'")
                d[name] = _FLOAT_TEXT[d[name]]
        return cls(**d)

    def to_json(self) -> str:
        """One strict-JSON line (no trailing newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)


def classify_status(
    clean_correct: bool,
    adv_correct: bool,
    *,
    linf: float,
    eps: float,
    x_min: float,
    x_max: float,
    tol: float = 1e-6,
    budget_capped: bool = False,
    pixel_range: tuple[float, float] = (0.0, 1.0),
    l2: float | None = None,
    norm: str = "linf",
) -> str:
    """The status of one case, by these rules, first match wins.

    1. clean input misclassified -> "skipped_clean_wrong" (never an attack success);
    2. perturbation size (L-inf, or L2 when norm="l2") > eps + tol, or not finite, or the
       adversarial input leaves [low - tol, high + tol] -> "invalid" (takes precedence over
       success: an invalid input is never counted as a model failure);
    3. adversarial input misclassified -> "success";
    4. the search stopped at its budget cap (`budget_capped`) -> "budget_exhausted";
    5. otherwise -> "failed".

    Args:
      clean_correct, adv_correct: whether the clean / adversarial prediction is the label.
      linf: L-inf size of the perturbation; l2: its L2 size (required when norm="l2").
      eps: the budget; x_min, x_max: the smallest / largest value of the adversarial input.
      tol: numeric slack on the ball and range checks (the threat model's tolerance).
      budget_capped: the attack can tell it hit its cap without success.
      pixel_range: (low, high) valid input values.
      norm: "linf" or "l2".

    Returns:
      One of `STATUSES`.

    Raises:
      ValueError: unknown norm, or norm="l2" without l2.

    Example:
      >>> classify_status(True, False, linf=8 / 255, eps=8 / 255, x_min=0.0, x_max=1.0)
      'success'
    """
    if norm not in ("linf", "l2"):
        raise ValueError(f"norm={norm!r} must be 'linf' or 'l2'")
    if norm == "l2" and l2 is None:
        raise ValueError("norm='l2' needs the perturbation's l2 size")
    if not clean_correct:
        return "skipped_clean_wrong"
    size = float(linf if norm == "linf" else l2)
    low, high = pixel_range
    inside = math.isfinite(size) and size <= eps + tol
    in_range = low - tol <= float(x_min) and float(x_max) <= high + tol
    if not (inside and in_range):
        return "invalid"
    if not adv_correct:
        return "success"
    return "budget_exhausted" if budget_capped else "failed"


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
