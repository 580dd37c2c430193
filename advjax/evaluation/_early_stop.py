"""A campaign attack's programs, and its restarts at one eps as a stage of the engine
(`advjax.evaluation._engine`).

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
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax._jit_argument import as_jit_argument
from advjax.attacks import ATTACKS, IterateState, attack_loss, restart_keys
from advjax.evaluation._attack_spec import AttackSpec
from advjax.evaluation._engine import RunResult, attack_stages, padded_batches
from advjax.io import Progress
from advjax.types import LogitsFn


class Program(NamedTuple):
    """The jitted pieces of one attack on one model.

    search(x, y, eps, keys, restart) -> (clean_pred, x_adv, adv_pred, loss, broken, capped):
      one whole restart of any method but pgd (broken: queries to the first break).
    start(x, y, eps, keys, restart) -> (clean_pred, IterateState)
    steps(state, x, y, eps, start, stop) -> IterateState
    finish(state, y) -> (x_adv, adv_pred, loss, broken_step): an iterative gradient attack
      (one with a `StepRule`, e.g. pgd), in chunks of steps.
    """

    search: Callable
    start: Callable
    steps: Callable
    finish: Callable


def _options(spec: AttackSpec) -> dict:
    return {name: getattr(spec, name) for name in ATTACKS[spec.method].options}


def _search(craft_fn: LogitsFn, spec: AttackSpec, x, y, eps, keys, restart):
    """(x_adv, broken, capped) of one restart of a method run whole (one without a step rule).

    A targeted method runs its targets one after another; a case is final at the first
    target that breaks it (broken: the queries of the earlier targets plus this one's),
    else keeps the point of highest cross-entropy over the targets."""
    info = ATTACKS[spec.method]
    common = dict(keys=keys, restart=restart, norm=spec.norm, steps=spec.steps,
                  options=_options(spec))  # fmt: skip
    if not info.targeted:
        r = info.run(craft_fn, x, y, eps, target=0, **common)
        return r.x_adv, r.broken, r.capped
    x_adv, broken = x, jnp.full(y.shape, -1, jnp.int32)
    best_loss = jnp.full(y.shape, -jnp.inf, x.dtype)
    spent = jnp.zeros(y.shape, jnp.int32)
    for t in range(spec.targets):
        r = info.run(craft_fn, x, y, eps, target=t, **common)
        untargeted = attack_loss("ce")(craft_fn(r.x_adv), y)
        first = (broken < 0) & (r.broken >= 0)
        keep = first | ((broken < 0) & (r.broken < 0) & (untargeted > best_loss))
        x_adv = jnp.where(keep[:, None, None, None], r.x_adv, x_adv)
        best_loss = jnp.where(keep, untargeted, best_loss)
        broken = jnp.where(first, spent + r.broken, broken)
        spent = spent + r.queries
    return x_adv, broken, jnp.zeros(y.shape, bool)


def _target_outcome(logits_fn, x_adv, y):
    logits = logits_fn(x_adv)
    return jnp.argmax(logits, axis=-1), attack_loss("ce")(logits, y)


@functools.partial(jax.jit, static_argnums=(0, 7))
def _search_program(spec, logits_fn, source_fn, x, y, eps, keys, restart):
    craft_fn = logits_fn if source_fn is None else source_fn
    x_adv, broken, capped = _search(craft_fn, spec, x, y, eps, keys, restart)
    adv_pred, loss = _target_outcome(logits_fn, x_adv, y)
    if source_fn is not None:
        broken = jnp.full_like(broken, -1)
    return jnp.argmax(logits_fn(x), axis=-1), x_adv, adv_pred, loss, broken, capped


@functools.partial(jax.jit, static_argnums=(0, 7))
def _start_program(spec, logits_fn, source_fn, x, y, eps, keys, restart):
    rule = ATTACKS[spec.method].rule
    state = rule.start(x, eps, restart_keys(keys, 1, restart)[0], spec.norm)
    return jnp.argmax(logits_fn(x), axis=-1), state


@functools.partial(jax.jit, static_argnums=0)
def _steps_program(spec, logits_fn, source_fn, state, x, y, eps, lo, hi):
    craft_fn = logits_fn if source_fn is None else source_fn
    rule = ATTACKS[spec.method].rule
    step_size = rule.step_size(eps, spec.steps, _options(spec))
    return rule.run_steps(
        craft_fn, state, x, y, eps, step_size, lo, hi, norm=spec.norm, loss=spec.loss
    )


@functools.partial(jax.jit, static_argnums=0)
def _finish_program(spec, logits_fn, source_fn, state, y):
    craft_fn = logits_fn if source_fn is None else source_fn
    state = ATTACKS[spec.method].rule.finish(craft_fn, state, y, spec.steps, loss=spec.loss)
    adv_pred, loss = _target_outcome(logits_fn, state.best, y)
    broken = state.broken_step if source_fn is None else jnp.full_like(y, -1)
    return state.best, adv_pred, loss, broken


def make_program(logits_fn: LogitsFn, spec: AttackSpec, source_fn: LogitsFn | None = None):
    """The attack's jitted pieces; inputs are crafted on `source_fn` when given (transfer).

    A transfer attack tracks breaks on the surrogate (it stops where the surrogate is
    fooled, as `pgd` would) and reports broken_step -1: no search ran on the target.
    The logits functions are arguments of the compiled pieces (`as_jit_argument`), so
    models of one architecture share them.
    """
    fns = (spec, as_jit_argument(logits_fn), as_jit_argument(source_fn))
    return Program(*(functools.partial(piece, *fns) for piece in _PIECES))


_PIECES = (_search_program, _start_program, _steps_program, _finish_program)


def chunk_bounds(steps: int, chunk_steps: int) -> list[tuple[int, int]]:
    """The [lo, hi) step ranges between two compactions: 1, 2, 4, ... steps, then
    `chunk_steps` at a time. Most cases that break do so in the first few steps, so short
    early chunks let them leave the batch before it spends a whole chunk on them."""
    bounds, lo, size = [], 0, 1
    while lo < steps:
        hi = min(steps, lo + size)
        bounds.append((lo, hi))
        lo, size = hi, min(2 * size, chunk_steps)
    return bounds


@dataclasses.dataclass
class CampaignOutcome:
    """Host-side outcome of every case at one eps, filled in as cases become final."""

    clean_pred: np.ndarray
    adv_pred: np.ndarray
    loss: np.ndarray
    x_adv: np.ndarray
    by_restart: np.ndarray  # (restarts, n): break step, -1 never, -2 not run
    capped: np.ndarray  # the search stopped at its query cap without success


class _CampaignStage:
    """A campaign attack at one eps as a stage of the engine: its restarts, in batches of
    `spec.batch_size` (part of the config: replay uses it); an iterative gradient attack
    (pgd, mi-fgsm) in chunks of steps with the broken cases compacted out between chunks,
    every other method one whole restart per batch. `out` collects what the records need."""

    def __init__(self, program: Program, spec: AttackSpec, x, y, eps: float, keys, out):
        self.program, self.spec, self.out = program, spec, out
        self.x, self.y, self.keys = x, y, keys
        self.eps = jnp.float32(eps)
        self.chunked = ATTACKS[spec.method].rule is not None
        # At eps 0 every iterate of every restart is x itself: the first evaluation decides.
        self.steps, restarts = (1, 1) if eps == 0 and self.chunked else (
            spec.steps, spec.restarts)  # fmt: skip
        self.runs = list(range(restarts))

    def _result(self, part, x_adv, adv, loss, broken, capped=None) -> RunResult:
        spent = np.where(broken >= 0, broken, self.spec.steps_per_restart)
        capped = np.zeros(len(part), bool) if capped is None else capped
        return RunResult(x_adv, adv, loss, broken >= 0, broken, spent, capped)

    def run_cases(self, todo, restart, number):
        if not self.chunked:
            yield from self._search(todo, restart)
        else:
            yield from self._chunked(todo, restart)

    def _search(self, todo, restart):
        x, y, keys, out = self.x, self.y, self.keys, self.out
        for part, index in padded_batches(todo, self.spec.batch_size):
            clean, x_adv, adv, loss, broken, capped = (
                np.asarray(a)[: len(part)]
                for a in self.program.search(x[index], y[index], self.eps, keys[index], restart)
            )
            out.clean_pred[part] = clean
            yield part, self._result(part, x_adv, adv, loss, broken, capped)

    def _chunked(self, todo, restart):
        x, y, keys, out = self.x, self.y, self.keys, self.out
        spec, program = self.spec, self.program
        n = len(y)
        fields, treedef = None, None  # the state's leaves, one host array each over every case
        for part, index in padded_batches(todo, spec.batch_size):
            clean, state = program.start(x[index], y[index], self.eps, keys[index], restart)
            out.clean_pred[part] = np.asarray(clean)[: len(part)]
            leaves, treedef = jax.tree_util.tree_flatten(state)
            if fields is None:
                fields = [np.zeros((n, *leaf.shape[1:]), leaf.dtype) for leaf in leaves]
            for field, value in zip(fields, leaves):
                field[part] = np.asarray(value)[: len(part)]

        def state_of(index):
            return treedef.unflatten([jnp.asarray(f[index]) for f in fields])

        broken_step = IterateState._fields.index("broken_step")
        active = todo
        for lo, hi in chunk_bounds(self.steps, spec.chunk_steps):
            for part, index in padded_batches(active, spec.batch_size):
                state = program.steps(state_of(index), x[index], y[index], self.eps, lo, hi)
                for field, value in zip(fields, jax.tree_util.tree_leaves(state)):
                    field[part] = np.asarray(value)[: len(part)]
            ended = active if hi == self.steps else active[fields[broken_step][active] >= 0]
            for part, index in padded_batches(ended, spec.batch_size):
                results = [
                    np.asarray(a)[: len(part)] for a in program.finish(state_of(index), y[index])
                ]
                if len(self.runs) < spec.restarts:  # eps 0: the restarts not run repeat this one
                    out.by_restart[len(self.runs) :, part[results[3] < 0]] = -1
                yield part, self._result(part, *results)
            active = np.setdiff1d(active, ended)


def attack_cases(
    program: Program,
    spec: AttackSpec,
    x: np.ndarray,
    y: np.ndarray,
    eps: float,
    keys: jax.Array,
    *,
    on_final: Callable[[np.ndarray, CampaignOutcome], None],
    progress: Progress | None = None,
) -> CampaignOutcome:
    """Attack every case at eps on the engine (`attack_stages`, one stage); call
    `on_final(positions, outcome)` as cases become final.

    A case is final when a restart breaks it (the earliest breaking restart decides, at
    its first misclassified iterate) or after the last restart (the highest-loss input
    over its restarts is kept).
    """
    n = len(y)
    out = CampaignOutcome(
        clean_pred=np.full(n, -1, np.int64),
        adv_pred=np.full(n, -1, np.int64),
        loss=np.full(n, -np.inf, np.float64),
        x_adv=np.array(x, np.float32, copy=True),
        by_restart=np.full((spec.restarts, n), -2, np.int32),
        capped=np.zeros(n, bool),
    )

    stage = _CampaignStage(program, spec, x, y, eps, keys, out)

    def settle(_, restart: int, index: np.ndarray, r: RunResult) -> None:
        """Keep the run's points, and report the final cases of the batch in case order."""
        out.by_restart[restart, index] = r.step
        if not stage.chunked:
            out.capped[index] = r.capped & (r.step < 0)
        better = r.broken | (r.loss > out.loss[index])
        take = index[better]
        out.adv_pred[take], out.loss[take], out.x_adv[take] = (
            r.adv_pred[better],
            r.loss[better],
            r.x_adv[better],
        )
        done = index[r.broken | (restart == len(stage.runs) - 1)]
        if len(done):
            on_final(done, out)
            if progress is not None:
                progress.update(len(done))

    attack_stages([stage], x, y, on_result=settle)
    return out
