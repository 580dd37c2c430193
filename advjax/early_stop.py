"""Attacking many cases without spending compute on cases that are already broken.

Under the "ever broken" rule a case's outcome is final at the first misclassified
iterate, so PGD runs in chunks of steps, and between chunks the still-unbroken cases are
compacted into fixed-size batches (padded, so one compiled program serves every batch);
restarts run one after another over the cases no earlier restart broke. The result is
the one of running every step of every restart on every case (tested), at a fraction of
the cost on an undefended model.

Per-example results do not depend on the other cases of a batch (one PRNG key per case,
batch size fixed), which is what makes compaction and single-case replay exact.
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attack_spec import AttackSpec
from advjax.attacks import (
    PGDState,
    fgsm,
    per_example_cross_entropy,
    pgd_finish,
    pgd_start,
    restart_keys,
)
from advjax.attacks import pgd_steps as run_pgd_steps
from advjax.progress import Progress
from advjax.types import LogitsFn


class Program(NamedTuple):
    """The jitted pieces of one attack on one model.

    fgsm(x, y, eps) -> (clean_pred, x_adv, adv_pred, loss, broken_step)
    start(x, y, eps, keys, restart) -> (clean_pred, PGDState)
    steps(state, x, y, eps, start, stop) -> PGDState
    finish(state, y) -> (x_adv, adv_pred, loss, broken_step)
    """

    fgsm: Callable
    start: Callable
    steps: Callable
    finish: Callable


def make_program(logits_fn: LogitsFn, spec: AttackSpec, source_fn: LogitsFn | None = None):
    """The attack's jitted pieces; inputs are crafted on `source_fn` when given (transfer).

    A transfer attack tracks breaks on the surrogate (it stops where the surrogate is
    fooled, as `pgd_search` would) and reports broken_step -1: no search ran on the target.
    """
    craft_fn = logits_fn if source_fn is None else source_fn

    def target_outcome(x_adv, y):
        logits = logits_fn(x_adv)
        return jnp.argmax(logits, axis=-1), per_example_cross_entropy(logits, y)

    def one_shot(x, y, eps):
        x_adv = fgsm(craft_fn, x, y, eps)
        adv_pred, loss = target_outcome(x_adv, y)
        broken = jnp.where((adv_pred != y) & (source_fn is None), 1, -1).astype(jnp.int32)
        return jnp.argmax(logits_fn(x), axis=-1), x_adv, adv_pred, loss, broken

    def start(x, y, eps, keys, restart):
        state = pgd_start(x, eps, restart_keys(keys, 1, restart)[0])
        return jnp.argmax(logits_fn(x), axis=-1), state

    def steps(state, x, y, eps, lo, hi):
        return run_pgd_steps(craft_fn, state, x, y, eps, spec.step_fraction * eps, lo, hi)

    def finish(state, y):
        state = pgd_finish(craft_fn, state, y, spec.steps)
        adv_pred, loss = target_outcome(state.best, y)
        broken = state.broken_step if source_fn is None else jnp.full_like(y, -1)
        return state.best, adv_pred, loss, broken

    return Program(
        jax.jit(one_shot), jax.jit(start, static_argnums=4), jax.jit(steps), jax.jit(finish)
    )


@dataclasses.dataclass
class Outcome:
    """Host-side outcome of every case at one eps, filled in as cases become final."""

    clean_pred: np.ndarray
    adv_pred: np.ndarray
    loss: np.ndarray
    x_adv: np.ndarray
    by_restart: np.ndarray  # (restarts, n): break step, -1 never, -2 not run


def _batches(index: np.ndarray, size: int):
    """Chunks of `index`, each padded with its first entry to `size` (one compiled shape)."""
    for start in range(0, len(index), size):
        part = index[start : start + size]
        yield part, np.concatenate([part, np.full(size - len(part), part[0], part.dtype)])


def attack_cases(
    program: Program,
    spec: AttackSpec,
    x: np.ndarray,
    y: np.ndarray,
    eps: float,
    keys: jax.Array,
    *,
    on_final: Callable[[np.ndarray, Outcome], None],
    progress: Progress | None = None,
) -> Outcome:
    """Attack every case at eps; call `on_final(positions, outcome)` as cases become final.

    A case is final when a restart breaks it (the earliest breaking restart decides, at
    its first misclassified iterate) or after the last restart (the highest-loss input
    over its restarts is kept).
    """
    n = len(y)
    out = Outcome(
        clean_pred=np.full(n, -1, np.int64),
        adv_pred=np.full(n, -1, np.int64),
        loss=np.full(n, -np.inf, np.float64),
        x_adv=np.array(x, np.float32, copy=True),
        by_restart=np.full((spec.restarts, n), -2, np.int32),
    )
    eps_value = jnp.float32(eps)

    def settle(index: np.ndarray, x_adv, adv, loss, broken, restart, last) -> None:
        out.by_restart[restart, index] = broken
        better = (broken >= 0) | (loss > out.loss[index])
        take = index[better]
        out.adv_pred[take], out.loss[take], out.x_adv[take] = (
            adv[better],
            loss[better],
            x_adv[better],
        )
        done = index[(broken >= 0) | last]
        if len(done):
            on_final(done, out)
            if progress is not None:
                progress.update(len(done))

    if spec.method == "fgsm":
        for part, index in _batches(np.arange(n), spec.batch_size):
            clean, x_adv, adv, loss, broken = (
                np.asarray(a)[: len(part)] for a in program.fgsm(x[index], y[index], eps_value)
            )
            out.clean_pred[part] = clean
            settle(part, x_adv, adv, loss, broken, 0, True)
        return out

    remaining = np.arange(n)
    for restart in range(spec.restarts):
        last = restart == spec.restarts - 1
        fields = [
            np.zeros((n, *x.shape[1:]), np.float32),
            None,
            np.zeros(n, np.float32),
            np.zeros(n, np.int32),
        ]
        fields[1] = np.zeros_like(fields[0])
        for part, index in _batches(remaining, spec.batch_size):
            clean, state = program.start(x[index], y[index], eps_value, keys[index], restart)
            out.clean_pred[part] = np.asarray(clean)[: len(part)]
            for field, value in zip(fields, state):
                field[part] = np.asarray(value)[: len(part)]
        active = remaining
        for lo in range(0, spec.steps, spec.chunk_steps):
            hi = min(spec.steps, lo + spec.chunk_steps)
            for part, index in _batches(active, spec.batch_size):
                state = PGDState(*(jnp.asarray(f[index]) for f in fields))
                state = program.steps(state, x[index], y[index], eps_value, lo, hi)
                for field, value in zip(fields, state):
                    field[part] = np.asarray(value)[: len(part)]
            ended = active if hi == spec.steps else active[fields[3][active] >= 0]
            for part, index in _batches(ended, spec.batch_size):
                state = PGDState(*(jnp.asarray(f[index]) for f in fields))
                results = (np.asarray(a)[: len(part)] for a in program.finish(state, y[index]))
                settle(part, *results, restart, last)
            active = np.setdiff1d(active, ended)
        remaining = remaining[out.by_restart[restart, remaining] < 0]
        if not len(remaining):
            break
    return out
