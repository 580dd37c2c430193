"""An evaluation spread over processes with `jax.distributed`: each process attacks its share
of the cases on its own devices and writes its own kill-safe record file; process 0 merges
them once every process is done.

Attacks need no communication between cases, and the early-stop engine drops each case as
soon as it is decided, so the processes run independently (no program spans processes:
one that did would hold every process to the slowest one's batches) and meet at the end, in
a barrier over every device; the fast version also meets between its phases, to exchange
the positions each process left robust and its probe's findings
(`gather_from_every_process`). Both use `jax.experimental.multihost_utils`; on CPUs they
need collectives: `jax.config.update("jax_cpu_collectives_implementation", "gloo")` before
`jax.distributed.initialize`.
"""

from pathlib import Path

import jax
import numpy as np

PROCESS_FOLDER = "processes"


def this_process() -> tuple[int, int]:
    """(index, count) of this process among `jax.distributed`'s ((0, 1) without it): the
    share of the cases it attacks (`advjax.data.share_positions`)."""
    return jax.process_index(), jax.process_count()


def process_folder(out: str | Path, *, index: int | None = None, count: int | None = None) -> Path:
    """Where process `index` of `count` (default: this one) writes its records in `out`."""
    index = jax.process_index() if index is None else index
    count = jax.process_count() if count is None else count
    return Path(out) / PROCESS_FOLDER / f"{index}-of-{count}"


def process_record_files(out: str | Path) -> list[Path]:
    """Every process record file in `out`, of this run's process count or an earlier one's."""
    return sorted((Path(out) / PROCESS_FOLDER).glob("*-of-*/records.jsonl*"))


def wait_for_every_process(name: str) -> None:
    """Return once every process has reached the barrier `name` (at once in one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def gather_from_every_process(values) -> np.ndarray:
    """Every process's 1-D int32 `values` (lengths may differ), concatenated in process order;
    `values` itself in one process. A collective: every process must call it."""
    values = np.asarray(values, np.int32).reshape(-1)
    if jax.process_count() == 1:
        return values
    from jax.experimental import multihost_utils

    lengths = np.asarray(multihost_utils.process_allgather(np.array([len(values)], np.int32)))
    padded = np.zeros(int(lengths.max()), np.int32)
    padded[: len(values)] = values
    every = np.asarray(multihost_utils.process_allgather(padded))
    return np.concatenate([row[: int(n)] for row, n in zip(every, lengths.reshape(-1))])
