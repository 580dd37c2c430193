"""Data-parallel training and evaluation through JAX's own sharding (`jax.jit` + `NamedSharding`).

One 1-D device mesh with the axis "data": parameters and optimiser state are replicated on
every device, every batch is split along its leading (example) axis. The step functions are
the ordinary single-device ones; `jax.jit` with `in_shardings` / `out_shardings` partitions
them, and XLA inserts the collectives itself (the all-reduce of the gradients and of the
batch-norm statistics, which stay global-batch statistics). Nothing here depends on the
platform: the same code runs on one CPU, several GPUs or a TPU slice. Results equal the
single-device ones up to float reduction order.

Example (one host, every local device):

    >>> mesh = data_mesh()
    >>> state = replicate(mesh, create_train_state(key, config, total_steps))
    >>> step = sharded_train_step(make_train_step(config), mesh)
    >>> state, metrics = step(state, shard_batch(mesh, batch), step_key)
    >>> predict = sharded_eval(lambda v, x: jnp.argmax(model.apply(v, x, train=False), -1),
    ...                        mesh, replicated_argnums=(0,))

Several devices on a CPU-only machine (for tests) come from setting
`XLA_FLAGS=--xla_force_host_platform_device_count=N` before JAX starts.

Multi-host (documented, not tested here: this project has only run on one host). Start
every process with

    jax.distributed.initialize(coordinator_address="host0:1234", num_processes=P, process_id=i)

before any other JAX call; `jax.devices()` then spans all hosts, so `data_mesh()` and the
step functions are unchanged. Each process should load only its own slice of the global
batch and assemble the global array with
`jax.make_array_from_process_local_data(batch_sharding(mesh), local_batch)` instead of
`shard_batch` (which `device_put`s a batch every process holds in full). Keys and the initial
state must be identical on every process (same seed), and host-side reads of sharded outputs
need `jax.experimental.multihost_utils.process_allgather`.
"""

from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"


def data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh with the axis "data" over `devices` (default: `jax.devices()`, all hosts).

    The axis type is `Auto` (the compiler propagates shardings), so the model code needs no
    sharding annotations.

    Raises:
      ValueError: `devices` is empty.
    """
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("data_mesh needs at least one device, got an empty list")
    return Mesh(np.asarray(devices), (DATA_AXIS,), axis_types=(AxisType.Auto,))


def num_shards(mesh: Mesh) -> int:
    """The number of devices the batch axis is split over."""
    return int(mesh.shape[DATA_AXIS])


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (example) axis split over "data", all other axes whole on each device."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    """A full copy on every device of the mesh (parameters, optimiser state, keys)."""
    return NamedSharding(mesh, PartitionSpec())


def check_batch(mesh: Mesh, tree: Any) -> int:
    """The common leading size of every leaf of `tree`, checked to split evenly over `mesh`.

    Raises:
      ValueError: a leaf is a scalar, the leaves' leading sizes differ, or the batch size is
        not divisible by the number of devices.
    """
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise ValueError("a batch needs at least one array, got an empty tree")
    sizes = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
    if None in sizes:
        raise ValueError("every leaf of a batch needs a leading example axis; got a scalar")
    if len(sizes) != 1:
        raise ValueError(f"every leaf of a batch must have the same leading size, got {sizes}")
    (size,) = sizes
    return check_batch_size(mesh, size)


def check_batch_size(mesh: Mesh, size: int) -> int:
    """`size`, checked to split evenly over the devices of `mesh`.

    Raises:
      ValueError: `size` is not a multiple of the number of devices.
    """
    devices = num_shards(mesh)
    if size % devices:
        raise ValueError(
            f"batch size {size} is not divisible by the {devices} devices of the mesh; "
            f"use a batch size that is a multiple of {devices} (or drop or pad the remainder)"
        )
    return size


def shard_batch(mesh: Mesh, tree: Any) -> Any:
    """Place every leaf of `tree` on the mesh with its leading axis split over "data".

    Raises:
      ValueError: see `check_batch` (the batch size must be a multiple of the device count).
    """
    check_batch(mesh, tree)
    return jax.device_put(tree, batch_sharding(mesh))


def replicate(mesh: Mesh, tree: Any) -> Any:
    """Place a full copy of every leaf of `tree` on each device of the mesh."""
    return jax.device_put(tree, replicated(mesh))


def sharded_train_step(train_step: Callable, mesh: Mesh) -> Callable:
    """`train_step(state, batch, key) -> (state, metrics)` jitted data-parallel over `mesh`.

    The state and key are replicated, the batch split over "data" (give it `shard_batch`ed or
    as host arrays), and the new state and the metrics come back replicated. `train_step` may
    be a pure step (`standard_train_step`, `fgsm_train_step` with its keywords bound) or the
    jitted one from `make_train_step`. As in `make_train_step`, the input state's buffers are
    donated: keep the returned state, never reuse the one passed in. The returned function's
    `lower` is that of the underlying `jax.jit` (to inspect the compiled program).

    Raises:
      ValueError: at call time, the batch size is not a multiple of the device count.
    """
    repl = replicated(mesh)
    jitted = jax.jit(
        train_step,
        in_shardings=(repl, batch_sharding(mesh), repl),
        out_shardings=(repl, repl),
        donate_argnums=0,
    )

    def step(state: Any, batch: Any, key: jax.Array) -> tuple[Any, Any]:
        check_batch(mesh, batch)
        return jitted(state, batch, key)

    step.lower = jitted.lower
    return step


def sharded_eval(fn: Callable, mesh: Mesh, *, replicated_argnums: Sequence[int] = ()) -> Callable:
    """A per-example `fn(*args)` jitted with the batch split over "data", in and out.

    Positional arguments are batches split along their leading axis, except those at
    `replicated_argnums` (model variables, eps, ...), which are copied to every device. Every
    output leaf must have the examples as its leading axis (e.g. return
    `SearchResult.broken_step.T`, whose axis 0 is the restarts); outputs come back split.
    Suited to predictions and attacks, whose examples are independent, so the result equals
    the single-device one. Keyword arguments are not supported (bind them with
    `functools.partial`).

    Raises:
      ValueError: a replicated argnum is negative or out of range (at call time), or the
        batch arguments do not share a leading size that is a multiple of the device count.
    """
    replicated_argnums = tuple(sorted(set(replicated_argnums)))
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in replicated_argnums):
        raise ValueError(f"{replicated_argnums=} must be non-negative integers")
    repl, batch = replicated(mesh), batch_sharding(mesh)
    jitted: dict[int, Callable] = {}  # one jit per call arity: in_shardings is per argument

    def call(*args: Any) -> Any:
        n = len(args)
        if replicated_argnums and replicated_argnums[-1] >= n:
            raise ValueError(f"{replicated_argnums=} out of range for {n} arguments")
        check_batch(mesh, [a for i, a in enumerate(args) if i not in replicated_argnums])
        if n not in jitted:
            shardings = tuple(repl if i in replicated_argnums else batch for i in range(n))
            jitted[n] = jax.jit(fn, in_shardings=shardings, out_shardings=batch)
        return jitted[n](*args)

    return call


__all__ = [
    "DATA_AXIS",
    "batch_sharding",
    "check_batch",
    "check_batch_size",
    "data_mesh",
    "num_shards",
    "replicate",
    "replicated",
    "shard_batch",
    "sharded_eval",
    "sharded_train_step",
]
