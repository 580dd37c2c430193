"""The one engine of early-stopped, per-case attack runs.

An evaluation is a sequence of stages (AutoAttack's members; a campaign attack at one eps is
one stage); a stage is a sequence of runs (restarts, target classes), and every run attacks
only the cases no earlier run or stage has broken. A case's outcome under a stage is final
when a run breaks it or after the stage's last run, and the engine reports it at once
(`on_final`), batch by batch, so a caller appending records loses nothing when killed and
resumes from what it wrote (`start_stage`). Every case draws from its own keys, so which
cases share a batch never changes an outcome: batches are re-packed as cases leave.

A stage brings its own programs and batching (`Stage.run_cases`); the engine keeps the
per-case bookkeeping every caller needs: the stage that broke each case, the highest-loss
point within the stage and over all stages, the predictions and the queries.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol

import numpy as np


class RunResult(NamedTuple):
    """One run's outcome on a group of cases (arrays over the group).

    Attributes:
      x_adv: the run's point.
      adv_pred: the model's prediction there.
      loss: the true-class cross-entropy there (the worst case of an unbroken case is the
        highest-loss point).
      broken: the run broke the case (its outcome under the stage is final).
      step: queries into the run when the case first broke (-1 never, or not tracked).
      queries: model queries the run spent on the case.
      capped: a score-based search stopped at its budget without success.
    """

    x_adv: np.ndarray
    adv_pred: np.ndarray
    loss: np.ndarray
    broken: np.ndarray
    step: np.ndarray
    queries: np.ndarray
    capped: np.ndarray


class Stage(Protocol):
    """A stage: its runs, in order, and how one run attacks a set of cases."""

    runs: Sequence

    def run_cases(
        self, todo: np.ndarray, run, number: int
    ) -> Iterable[tuple[np.ndarray, RunResult]]:
        """Attack the cases `todo` (positions) with `run` (the `number`-th); yield (positions,
        result) groups as they finish, every case of `todo` exactly once."""


class Final(NamedTuple):
    """Cases whose outcome under stage `stage` became final; the arrays are over every case
    (index them with `positions`): the stage's own best point `stage_x` and its `stage_loss`
    (so a resumed evaluation reports what an uninterrupted one does), `adv_pred`, `queries`
    spent by this stage, `run` the breaking run's number (-1 for cases it left unbroken)."""

    stage: int
    positions: np.ndarray
    broken: bool
    adv_pred: np.ndarray
    stage_x: np.ndarray
    stage_loss: np.ndarray
    queries: np.ndarray
    run: int


class Outcome(NamedTuple):
    """Every case after the engine: the first breaking stage's point, else the highest-loss
    point over every stage (`x_adv`, `loss`), the breaking stage (-1 none), the prediction at
    `x_adv`, the queries of every stage (per case), and per stage the queries it spent on
    all cases together."""

    x_adv: np.ndarray
    loss: np.ndarray
    broken_by: np.ndarray
    adv_pred: np.ndarray
    queries: np.ndarray
    stage_queries: tuple[int, ...]


def padded_batches(index: np.ndarray, size: int):
    """Chunks of `index`, each padded with its first entry to `size` (one compiled shape)."""
    for start in range(0, len(index), size):
        part = index[start : start + size]
        yield part, np.concatenate([part, np.full(size - len(part), part[0], part.dtype)])


def attack_stages(
    stages: Sequence[Stage],
    x: np.ndarray,
    y: np.ndarray,
    *,
    start_stage: np.ndarray | None = None,
    on_final: Callable[[Final], None] | None = None,
    on_result: Callable[[int, int, np.ndarray, RunResult], None] | None = None,
    on_run: Callable[[int, int, int], None] | None = None,
) -> Outcome:
    """Run the stages in order over the cases still unbroken.

    `start_stage[i]` is the first stage case i still needs (`len(stages)`: decided, never
    attacked). `on_final(Final)` receives each group of cases whose outcome under a stage
    became final; `on_result(stage, run, positions, result)` every run's result, final or
    not; `on_run(stage, run, cases_left)` follows each run.
    """
    n = len(y)
    x_adv = np.array(x, np.float32, copy=True)
    best_loss = np.full(n, -np.inf, np.float32)
    stage_x, stage_loss = x_adv.copy(), best_loss.copy()
    broken_by = np.full(n, -1, np.int32)
    adv_pred = np.asarray(y).copy()
    queries = np.zeros(n, np.int64)
    stage_queries = [0] * len(stages)
    start = np.zeros(n, np.int64) if start_stage is None else np.asarray(start_stage)
    report = on_final or (lambda final: None)
    for s, stage in enumerate(stages):
        todo = np.flatnonzero((start <= s) & (broken_by < 0))
        if not len(todo):
            continue
        spent = np.zeros(n, np.int64)
        stage_loss[todo] = -np.inf
        for number, run in enumerate(stage.runs):
            last = number == len(stage.runs) - 1
            for part, r in stage.run_cases(todo, run, number):
                hit = np.asarray(r.broken, bool)
                open_ = hit | (broken_by[part] < 0)
                adv_pred[part[open_]] = r.adv_pred[open_]
                spent[part] += r.queries
                take = hit | (r.loss > best_loss[part])
                x_adv[part[take]], best_loss[part[take]] = r.x_adv[take], r.loss[take]
                own = hit | (r.loss > stage_loss[part])
                stage_x[part[own]], stage_loss[part[own]] = r.x_adv[own], r.loss[own]
                broken_by[part[hit]] = s
                if on_result is not None:
                    on_result(s, number, part, r)
                if hit.any():
                    report(Final(s, part[hit], True, adv_pred, stage_x, stage_loss, spent, number))
                if last and not hit.all():
                    report(Final(s, part[~hit], False, adv_pred, stage_x, stage_loss, spent, -1))
            todo = todo[broken_by[todo] < 0]
            if on_run is not None:
                on_run(s, number, len(todo))
            if not len(todo):
                break
        queries += spent
        stage_queries[s] = int(spent.sum())
    return Outcome(x_adv, best_loss, broken_by, adv_pred, queries, tuple(stage_queries))
