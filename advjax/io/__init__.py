"""Files of an output folder beside its records: the output-folder lock, msgpack checkpoints,
an output folder's attack times, progress, and the provenance of a result. The records
themselves and the atomic writes are `advjax.records`."""

from advjax.io._checkpoint import (
    CheckpointError,
    load_checkpoint,
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

__all__ = [
    "CheckpointError",
    "environment",
    "git_state",
    "load_checkpoint",
    "LockedError",
    "model_hash",
    "OutputLock",
    "Progress",
    "read_checkpoint",
    "save_checkpoint",
    "seal_checkpoint",
]
