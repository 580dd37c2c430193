"""AutoAttack's members as stages of the engine (`advjax.evaluation._engine`): each
member's runs (targets and restarts) in compiled batches, over the cases still robust, with
broken cases leaving the batch between runs.

A run is one jitted program per member (target and restart are traced), applied to padded
batches whose size follows the number of cases left, so few shapes compile and little work
is padding. Every case uses its own key, so the batching never changes a case's outcome.
"""

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from advjax._jit_argument import as_jit_argument
from advjax.attacks import ATTACKS, attack_loss
from advjax.evaluation._engine import Outcome, RunResult, attack_stages, padded_batches

JUDGE_DRAWS = 20  # a random model's verdict: the mean logits over this many fresh draws


def eot_logits(logits_fn, keys: jax.Array, draws: int, offset: int = 0):
    """A deterministic stand-in for a random `logits_fn(x, key)`: per case i, the mean
    logits over `draws` draws with keys fold_in(keys[i], offset + d), each case on its own
    (so the draws of a case do not depend on the rest of its batch)."""

    def one_case(z, k):
        ks = jax.vmap(lambda d: jax.random.fold_in(k, offset + d))(jnp.arange(draws))
        return jnp.mean(jax.vmap(lambda kd: logits_fn(z[None], kd)[0])(ks), axis=0)

    return lambda z: jax.vmap(one_case)(z, keys)


def make_run(logits_fn, member, *, norm: str, random_model: bool) -> Callable:
    """The jitted run `(x, y, eps, keys, target, restart) -> (x_adv, pred, loss, queries)`.

    `keys` are the cases' member keys; target and restart are traced, so one program
    serves every run of the member. `loss` is the true-class cross-entropy at x_adv, by
    which the worst case of a robust case is chosen across members. The logits function
    is an argument of the program, so models of one architecture share it.
    """
    return functools.partial(_run_program, member, norm, random_model, as_jit_argument(logits_fn))


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _run_program(member, norm, random_model, logits_fn, x, y, eps, keys, target, restart):
    run_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, 1000 * target + restart)
    if random_model:
        # EOT: the attack ascends the mean over `eot` draws; the verdict takes fresh draws
        craft = eot_logits(logits_fn, run_keys, member.eot)
        judge = eot_logits(logits_fn, run_keys, JUDGE_DRAWS, offset=member.eot)
    else:
        craft = judge = logits_fn
    info = ATTACKS[member.method]
    r = info.run(
        craft, x, y, eps, keys=run_keys, restart=0, target=target, norm=norm,
        steps=member.run_steps,
        options={"p_init": member.p_init, "targets": member.targets, "loss": "ce",
                 "step_fraction": 0.25},
    )  # fmt: skip
    x_adv, spent = r.x_adv, r.queries * member.eot
    logits = judge(x_adv)
    queries = jnp.broadcast_to(jnp.asarray(spent, jnp.int32), y.shape)
    return x_adv, jnp.argmax(logits, axis=-1), attack_loss("ce")(logits, y), queries


PADDING_SLACK = 0.125
"""Extra padded work a member accepts to reuse a batch shape it has already compiled
rather than compile a new one (a new shape of an attack's program costs seconds on a CPU
and tens of seconds on an accelerator; each run shrinks the cases left a little)."""


def _batch_for(cases: int, batch_size: int, devices: int, compiled=()) -> int:
    """The compiled batch for `cases` still to attack: at most `batch_size`, split evenly
    over the fewest batches and rounded up to a multiple of 32 (a power of two below 32),
    so padding stays small; a multiple of the devices. A size in `compiled` is reused when
    its padded work is within `PADDING_SLACK` of the new size's, so a member's runs share
    few shapes."""
    batches = -(-cases // batch_size)
    even = -(-cases // batches)
    size = 1 << max(even - 1, 0).bit_length() if even < 32 else min(batch_size, -(-even // 32) * 32)
    size = -(-size // devices) * devices
    work = lambda s: -(-cases // s) * s  # noqa: E731
    reusable = [s for s in compiled if work(s) <= work(size) * (1 + PADDING_SLACK)]
    return min(reusable, key=lambda s: (work(s), s)) if reusable else size


def _placer(mesh, axis: str):
    """Put a batch's cases on the mesh's devices along `axis`. The mesh is used with Auto
    axes (the compiler propagates shardings through the attacks' loops), whatever axis
    types it was made with."""
    if mesh is None:
        return lambda a: a
    auto = (jax.sharding.AxisType.Auto,) * len(mesh.axis_names)
    mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names, axis_types=auto)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))
    return lambda a: jax.device_put(a, sharding)


class _MemberStage:
    """A member as a stage of the engine: its runs (target, restart) in batches whose shape
    follows the cases left (`_batch_for`), on the mesh's devices when given."""

    def __init__(self, member, run, keys, x, y, eps, *, batch_size, devices, place, on_batch):
        self.member, self.runs, self.shapes = member, member.runs(), set()
        self._run, self._keys, self._x, self._y, self._eps = run, keys, x, y, eps
        self._batch_size, self._devices, self._place = batch_size, devices, place
        self._on_batch = on_batch

    def run_cases(self, todo, run, number):
        target, restart = run
        size = _batch_for(len(todo), self._batch_size, self._devices, self.shapes)
        self.shapes.add(size)
        done, place = 0, self._place
        for part, index in padded_batches(todo, size):
            out = self._run(
                place(jnp.asarray(self._x[index])), place(jnp.asarray(self._y[index])),
                jnp.float32(self._eps), place(self._keys[index]), jnp.int32(target),
                jnp.int32(restart),
            )  # fmt: skip
            adv, pred, loss, cost = (np.asarray(a)[: len(part)] for a in out)
            done += len(part)
            if self._on_batch is not None:
                self._on_batch(self.member, target, restart, done, len(todo))
            never = np.full(len(part), -1, np.int32)
            yield part, RunResult(adv, pred, loss, pred != self._y[part], never, cost,
                                  np.zeros(len(part), bool))  # fmt: skip


def attack_members(
    logits_fn,
    x: np.ndarray,
    y: np.ndarray,
    eps: float,
    *,
    key: jax.Array,
    members: Sequence,
    norm: str,
    batch_size: int,
    random_model: bool = False,
    start_member: np.ndarray | None = None,
    case_index: np.ndarray | None = None,
    mesh=None,
    mesh_axis: str = "data",
    on_decided: Callable | None = None,
    on_run: Callable | None = None,
    on_batch: Callable | None = None,
) -> Outcome:
    """AutoAttack on the engine (`attack_stages`): `members` in order on the cases still robust.

    `start_member[i]` is the first member case i still needs (`len(members)`: decided, never
    attacked); a resumed evaluation passes what its records already hold. A member's
    outcome for a case is final when a run breaks it (reported at once) or after its last
    run: `on_decided(Final(...))` receives each such group of positions, batch by batch, so
    a member interrupted in its last run keeps the batches that run finished.
    `on_run(member, target, restart, still_robust)` follows each run and
    `on_batch(member, target, restart, cases_done, cases_in_run)` each batch (progress).
    Returns the engine's `Outcome` (host arrays): x_adv, loss, broken_by (-1 none),
    adv_pred, queries (all members), stage_queries (per member, all cases together).
    """
    n = len(y)
    place = _placer(mesh, mesh_axis)
    if mesh is not None and batch_size % mesh.shape[mesh_axis]:
        raise ValueError(f"{batch_size=} must be a multiple of the {mesh.shape[mesh_axis]} devices")
    devices = 1 if mesh is None else mesh.shape[mesh_axis]
    index = jnp.arange(n) if case_index is None else jnp.asarray(case_index)
    case_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, index)
    stages = [
        _MemberStage(
            member,
            make_run(logits_fn, member, norm=norm, random_model=random_model),
            jax.vmap(jax.random.fold_in, (0, None))(case_keys, member.stream),
            x,
            y,
            eps,
            batch_size=batch_size,
            devices=devices,
            place=place,
            on_batch=on_batch,
        )
        for member in members
    ]

    def after_run(s, number, left):
        if on_run is not None:
            target, restart = stages[s].runs[number]
            on_run(members[s], target, restart, left)

    return attack_stages(stages, x, y, start_stage=start_member, on_final=on_decided,
                         on_run=after_run)  # fmt: skip
