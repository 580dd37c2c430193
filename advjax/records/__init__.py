"""Records at the bottom: the per-case record (`CaseRecord`) and its verdict rules
(`classify_status`), the append-only, kill-safe record log with its repair and merge, and the
atomic writes every output file goes through. Everything else reads and writes records
through this package; it imports nothing of the rest of advjax."""

from advjax.records._atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_lines,
    atomic_write_npz,
    atomic_write_text,
    is_temporary,
)
from advjax.records._case_record import (
    ROBUST_STATUSES,
    STATUSES,
    CaseRecord,
    classify_status,
)
from advjax.records._record_codec import (
    read_lines,
)
from advjax.records._record_log import (
    REPAIR_FLAG,
    ProcessRecordLog,
    RecordError,
    RecordLog,
    RecordRepair,
    merge_record_files,
    read_records,
    record_file,
    repair_records,
)

__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_lines",
    "atomic_write_npz",
    "atomic_write_text",
    "CaseRecord",
    "classify_status",
    "is_temporary",
    "merge_record_files",
    "ProcessRecordLog",
    "read_lines",
    "read_records",
    "record_file",
    "RecordError",
    "RecordLog",
    "RecordRepair",
    "REPAIR_FLAG",
    "repair_records",
    "ROBUST_STATUSES",
    "STATUSES",
]
