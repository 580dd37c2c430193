"""Files: atomic writes, msgpack checkpoints, progress, and the provenance of a result."""

from advjax.io._atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_npz,
    atomic_write_text,
)
from advjax.io._checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from advjax.io._progress import (
    Progress,
)
from advjax.io._provenance import (
    environment,
    git_state,
)

__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_npz",
    "atomic_write_text",
    "CheckpointError",
    "environment",
    "git_state",
    "load_checkpoint",
    "Progress",
    "read_checkpoint",
    "save_checkpoint",
]
