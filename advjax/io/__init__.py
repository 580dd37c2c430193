"""Files: atomic writes, output-folder locks, the per-case record (`CaseRecord`) and the
append-only record log with its repair, an output folder's attack times, msgpack
checkpoints, progress, and the provenance of a result."""

from advjax.io._atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_lines,
    atomic_write_npz,
    atomic_write_text,
)
from advjax.io._attack_times import (
    ATTACK_TIME_FILE,
    add_attack_time,
    read_attack_times,
    untimed_records,
)
from advjax.io._case_record import (
    ROBUST_STATUSES,
    STATUSES,
    CaseRecord,
    classify_status,
)
from advjax.io._checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_logits_fn,
    model_hash,
    read_checkpoint,
    save_checkpoint,
    seal_checkpoint,
)
from advjax.io._lock import (
    LockedError,
    OutputLock,
)
from advjax.io._progress import (
    Progress,
)
from advjax.io._provenance import (
    environment,
    git_state,
)
from advjax.io._record_codec import (
    read_lines,
)
from advjax.io._record_log import (
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
    "add_attack_time",
    "ATTACK_TIME_FILE",
    "read_attack_times",
    "untimed_records",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_lines",
    "atomic_write_npz",
    "atomic_write_text",
    "CaseRecord",
    "CheckpointError",
    "classify_status",
    "environment",
    "git_state",
    "load_checkpoint",
    "load_logits_fn",
    "LockedError",
    "merge_record_files",
    "model_hash",
    "OutputLock",
    "ProcessRecordLog",
    "Progress",
    "read_checkpoint",
    "read_lines",
    "read_records",
    "record_file",
    "RecordError",
    "RecordLog",
    "RecordRepair",
    "repair_records",
    "ROBUST_STATUSES",
    "save_checkpoint",
    "seal_checkpoint",
    "STATUSES",
]
