"""Auto-PGD (APGD): step-size-free PGD with momentum, CE / DLR losses, L-inf and L2.

APGD starts with step size 2 * eps and halves it per example at fixed checkpoints when the
attack loss stalls, restarting from the best point found so far; this removes PGD's step
size as a tuning knob, the main reason plain PGD over-estimates robustness. The DLR loss
is invariant to shifting and rescaling the logits, so it is not fooled by saturated
softmax outputs. Same conventions as `advjax.attacks`: a pure `logits_fn`, pixels in
[0, 1], vmapped restarts, per-example keys and first-break tracking (`SearchResult` rules).

Reference: Croce & Hein, "Reliable evaluation of adversarial robustness with an ensemble
of diverse parameter-free attacks", ICML 2020.
"""

import functools
import math
import numbers
from typing import Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from advjax.attacks import _norms as norms
from advjax.attacks._attack import Attack, BatchRun, per_case
from advjax.attacks._checks import (
    _check_inputs,
    _check_positive_int,
    check_budget,
    check_finite_logits,
    check_key,
    check_labels,
)
from advjax.attacks._iterative import SearchResult, checked_restart_keys
from advjax.attacks._iterative import loss_and_grad as _loss_and_grad
from advjax.attacks._losses import (
    per_example_cross_entropy,
    per_example_dlr,
    per_example_targeted_dlr,
)
from advjax.attacks._norms import ascent_direction, per_example, random_start
from advjax.backend import fast_path
from advjax.types import Array, ArrayLike, LogitsFn

__all__ = ["apgd", "apgd_targeted", "per_example_dlr", "per_example_targeted_dlr"]

LossFn = Callable[[Array, Array], Array]  # (logits, labels) -> per-example loss to maximise


# ---------------------------------------------------------------------------
# Losses (per example; the attacker maximises them).


_LOSS_FNS: dict[str, LossFn] = {"ce": per_example_cross_entropy, "dlr": per_example_dlr}


# ---------------------------------------------------------------------------
# The single-restart search.


def _checkpoints(steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Checkpoints w_j = ceil(p_j * steps), p_0 = 0, p_1 = 0.22, p_{j+1} = p_j +
    max(p_j - p_{j-1} - 0.03, 0.06), as a mask over iterate indices 0..steps and the
    length w_j - w_{j-1} of the interval ending at each (p in integer hundredths: exact)."""
    p = [0, 22]
    while p[-1] + max(p[-1] - p[-2] - 3, 6) <= 100:
        p.append(p[-1] + max(p[-1] - p[-2] - 3, 6))
    points = sorted({-(-q * steps // 100) for q in p[1:]} - {0, steps})
    is_check = np.zeros(steps + 1, bool)
    interval = np.zeros(steps + 1, np.int32)
    is_check[points] = True
    interval[points] = np.diff([0] + points)
    return is_check, interval


class _Kept(NamedTuple):
    """What a restart returns: the first misclassified iterate, else the highest-loss one."""

    best: Array
    best_loss: Array
    broken_step: Array


def _keep(kept: _Kept, step, x_k: Array, losses: Array, logits: Array, y: Array) -> _Kept:
    """Record iterate x_k reached after `step` steps (the rule of `pgd`)."""
    unbroken = kept.broken_step < 0
    newly_broken = unbroken & (jnp.argmax(logits, axis=-1) != y)
    improved = unbroken & (newly_broken | (losses > kept.best_loss))
    return _Kept(
        best=jnp.where(per_example(improved, x_k), x_k, kept.best),
        best_loss=jnp.where(improved, losses, kept.best_loss),
        broken_step=jnp.where(newly_broken, step, kept.broken_step),
    )


def _select_restart(kept: _Kept) -> tuple[Array, Array]:
    """Per example: earliest broken restart if any broke, else the highest-loss restart."""
    broken = kept.broken_step >= 0
    choice = jnp.where(
        broken.any(axis=0), jnp.argmax(broken, axis=0), jnp.argmax(kept.best_loss, axis=0)
    )
    best = jnp.take_along_axis(kept.best, per_example(choice, kept.best[0])[None], axis=0)[0]
    return best, jnp.take_along_axis(kept.best_loss, choice[None], axis=0)[0]


class _APGDState(NamedTuple):
    x: Array  # current iterate x_k
    x_prev: Array  # x_{k-1}, for the momentum term
    grad: Array  # attack-loss gradient at x_k
    loss: Array  # attack loss at x_k
    eta: Array  # per-example step size
    x_max: Array  # highest-loss point so far: where a halving restarts from
    grad_max: Array
    loss_max: Array
    loss_max_at_check: Array  # loss_max at the previous checkpoint (condition 2)
    halved_at_check: Array  # eta was halved at the previous checkpoint (condition 2)
    increases: Array  # steps since the previous checkpoint that raised the loss (condition 1)
    kept: _Kept


def _apgd_single_restart(logits_fn, loss_fn, x, y, eps, key, *, steps, norm, rho, alpha) -> _Kept:
    """One APGD run (Algorithm 1 of the paper) from a uniform random start."""
    project = lambda v: norms.project(v, x, eps, norm)  # noqa: E731
    is_check, interval = (jnp.asarray(a) for a in _checkpoints(steps))
    x0 = project(x + random_start(key, x, eps, norm))
    loss0, logits0, grad0 = _loss_and_grad(logits_fn, x0, y, loss_fn)
    kept = _Kept(x0, jnp.full(y.shape, -jnp.inf, loss0.dtype), jnp.full(y.shape, -1, jnp.int32))
    init = _APGDState(
        x=x0,
        x_prev=x0,
        grad=grad0,
        loss=loss0,
        eta=jnp.full(y.shape, 2 * eps, x.dtype),
        x_max=x0,
        grad_max=grad0,
        loss_max=loss0,
        loss_max_at_check=loss0,
        halved_at_check=jnp.zeros(y.shape, bool),
        increases=jnp.zeros(y.shape, jnp.int32),
        kept=_keep(kept, 0, x0, loss0, logits0, y),
    )

    def body(k, s: _APGDState) -> _APGDState:
        z = project(s.x + per_example(s.eta, x) * ascent_direction(s.grad, norm))
        a = jnp.where(k == 0, 1.0, alpha).astype(x.dtype)  # no momentum on the first step
        x_next = project(s.x + a * (z - s.x) + (1 - a) * (s.x - s.x_prev))
        loss, logits, grad = _loss_and_grad(logits_fn, x_next, y, loss_fn)
        better = loss > s.loss_max
        x_max = jnp.where(per_example(better, x), x_next, s.x_max)
        grad_max = jnp.where(per_example(better, x), grad, s.grad_max)
        loss_max = jnp.where(better, loss, s.loss_max)
        increases = s.increases + (loss > s.loss).astype(jnp.int32)

        # At a checkpoint: halve eta and go back to x_max where the loss rose in fewer than
        # a fraction rho of the steps (1), or neither eta nor the best loss moved (2).
        check = is_check[k + 1]
        cond1 = increases < rho * interval[k + 1]
        cond2 = ~s.halved_at_check & (loss_max <= s.loss_max_at_check)
        halve = check & (cond1 | cond2)
        back = per_example(halve, x)
        return _APGDState(
            x=jnp.where(back, x_max, x_next),
            x_prev=jnp.where(back, x_max, s.x),  # a restart carries no momentum
            grad=jnp.where(back, grad_max, grad),
            loss=jnp.where(halve, loss_max, loss),
            eta=jnp.where(halve, s.eta / 2, s.eta),
            x_max=x_max,
            grad_max=grad_max,
            loss_max=loss_max,
            loss_max_at_check=jnp.where(check, loss_max, s.loss_max_at_check),
            halved_at_check=jnp.where(check, halve, s.halved_at_check),
            increases=jnp.where(check, 0, increases),
            kept=_keep(s.kept, k + 1, x_next, loss, logits, y),
        )

    return lax.fori_loop(0, steps, body, init).kept


# ---------------------------------------------------------------------------
# Argument checks and the public attacks.


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


def _check_fraction(name: str, value, *, allow_zero: bool) -> None:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or math.isnan(value) or not (0.0 <= value <= 1.0) or (value == 0 and not allow_zero):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{name}={value!r} must be a number in {interval}")


def _prepare(x, y, eps, key, *, steps, norm, restarts, first_restart, rho, alpha):
    """Validate everything static before tracing; return x, y, eps and the restart keys."""
    check_budget(eps, norm)
    _check_positive_int("steps", steps)
    _check_positive_int("restarts", restarts)
    _check_int("first_restart", first_restart, 0)
    _check_fraction("rho", rho, allow_zero=True)
    _check_fraction("alpha", alpha, allow_zero=False)
    check_key(key)
    x, y = _check_inputs(x, y)
    keys = checked_restart_keys(key, y.shape[0], restarts, first_restart)
    return x, y, jnp.asarray(eps, x.dtype), keys


def _run(logits_fn, loss_fn, x, y, eps, keys, **options) -> SearchResult:
    """All restarts under `jax.vmap`, then the per-example choice of `pgd`."""
    logits_fn = fast_path(logits_fn)
    kept = jax.vmap(lambda k: _apgd_single_restart(logits_fn, loss_fn, x, y, eps, k, **options))(
        keys
    )
    x_adv, loss = _select_restart(kept)
    chex.assert_equal_shape((x_adv, x))
    chex.assert_shape(kept.broken_step, (keys.shape[0], y.shape[0]))
    return SearchResult(x_adv=x_adv, broken_step=kept.broken_step, loss=loss)


def apgd(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int = 100,
    norm: str = "linf",
    loss: str | LossFn = "ce",
    restarts: int = 1,
    first_restart: int = 0,
    rho: float = 0.75,
    alpha: float = 0.75,
) -> SearchResult:
    """Auto-PGD on the cross-entropy ("ce"), the DLR ("dlr") or any per-example loss.

    Each restart starts uniformly in the eps-ball, steps with momentum and step size
    2 * eps, and halves the step size per example at the checkpoints where the loss
    stalls, going back to its best point. Robust accuracy is the share of examples that
    no iterate of any restart misclassified.

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of inputs in [0, 1], leading axis the examples.
      y: integer true labels, shape (batch,).
      eps: budget in pixel units: in [0, 1] for "linf", finite >= 0 for "l2"; eps=0
        returns x unchanged. May be traced.
      key: one PRNG key, or one per example (shape (batch,)); restart r of example i then
        uses fold_in(key[i], r), as in `advjax.attacks.restart_keys`.
      steps: gradient steps per restart, >= 1 (steps + 1 gradient evaluations).
      norm: "linf" (sign steps) or "l2" (steps along grad / ||grad||_2).
      loss: "ce" (cross-entropy), "dlr" (Difference of Logits Ratio, >= 3 classes), or a
        function `loss_fn(logits, y) -> (batch,)` to maximise (e.g. a targeted DLR whose
        targets are traced).
      restarts: random restarts, >= 1, run with `jax.vmap`.
      first_restart: index of the first restart (its key), to run restarts one by one.
      rho: condition-1 threshold: halve where the loss rose in < rho of the steps.
      alpha: momentum weight in (0, 1]; 1 is plain projected steps.

    Returns:
      An `SearchResult` (x_adv like x, broken_step (restarts, batch), loss (batch,)).

    Raises:
      ValueError / TypeError: bad eps, steps, restarts, rho, alpha, key shape, unknown
        norm or loss, wrong ranks, shapes or dtypes.

    Example:
      >>> result = apgd(logits_fn, x, y, 8 / 255, key=jax.random.key(0), loss="dlr")

    Reference: Croce & Hein, "Reliable evaluation of adversarial robustness with an
    ensemble of diverse parameter-free attacks", ICML 2020.
    """
    if not callable(loss) and loss not in _LOSS_FNS:
        raise ValueError(f"loss={loss!r} must be one of {tuple(_LOSS_FNS)} or a function")
    loss_fn = loss if callable(loss) else _LOSS_FNS[loss]
    options = dict(steps=steps, norm=norm, rho=rho, alpha=alpha)
    x, y, eps, keys = _prepare(
        x, y, eps, key, restarts=restarts, first_restart=first_restart, **options
    )
    check_labels(logits_fn, x, y)
    check_finite_logits(logits_fn, x)
    return _run(logits_fn, loss_fn, x, y, eps, keys, **options)


def worst_start(x: Array, y: Array) -> tuple[Array, Array, Array]:
    """The carry of `keep_worst` before any target: x, loss -inf, nothing broken."""
    return x, jnp.full(y.shape, -jnp.inf, x.dtype), jnp.zeros(y.shape, bool)


def keep_worst(carry, result: SearchResult) -> tuple[Array, Array, Array]:
    """Per case, across targets run one after another: the first breaking target's point,
    else the highest-loss point; carry = (x_adv, loss, broken so far)."""
    x_sel, loss_sel, broken_sel = carry
    broken = (result.broken_step >= 0).any(axis=0)
    take = ~broken_sel & (broken | (result.loss > loss_sel))
    x_sel = jnp.where(per_example(take, x_sel), result.x_adv, x_sel)
    return x_sel, jnp.where(take, result.loss, loss_sel), broken_sel | broken


def apgd_targeted(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int = 100,
    norm: str = "linf",
    targets: int = 9,
    restarts: int = 1,
    first_restart: int = 0,
    rho: float = 0.75,
    alpha: float = 0.75,
) -> SearchResult:
    """APGD-T: APGD on the targeted DLR loss, toward each of `targets` classes in turn.

    The targets are the classes ranked 2nd .. (targets + 1)th by the clean logits (2nd: the
    runner-up; AutoAttack's 9, the default, needs 10 classes). Targets run one after
    another under `lax.scan`, each with the same restart keys, and the per-example worst
    case is kept: broken_step has shape (targets * restarts, batch), target-major, and
    x_adv is the first break of the earliest breaking (target, restart), else the
    highest-loss point. An example is broken when misclassified as any class. Other
    arguments as in `apgd`; the result's `loss` is the targeted DLR loss (>= 4 classes
    needed).

    Example:
      >>> result = apgd_targeted(logits_fn, x, y, 8 / 255, key=key, targets=9)
    """
    _check_int("targets", targets, 1)
    options = dict(steps=steps, norm=norm, rho=rho, alpha=alpha)
    x, y, eps, keys = _prepare(
        x, y, eps, key, restarts=restarts, first_restart=first_restart, **options
    )
    check_labels(logits_fn, x, y)
    check_finite_logits(logits_fn, x)
    clean_logits = logits_fn(x)
    if targets >= clean_logits.shape[-1]:
        raise ValueError(
            f"targets={targets} must be at most {clean_logits.shape[-1] - 1}, the other classes"
        )
    ranked = jnp.argsort(clean_logits, axis=-1, descending=True)

    def one_target(carry, rank):
        targets = lax.dynamic_index_in_dim(ranked, rank - 1, axis=1, keepdims=False)
        loss_fn = lambda logits, labels: per_example_targeted_dlr(logits, labels, targets)  # noqa: E731
        result = _run(logits_fn, loss_fn, x, y, eps, keys, **options)
        return keep_worst(carry, result), result.broken_step

    init = worst_start(x, y)
    (x_adv, loss, _), broken_step = lax.scan(one_target, init, jnp.arange(2, targets + 2))
    return SearchResult(x_adv, broken_step.reshape(-1, y.shape[0]), loss)


# ---------------------------------------------------------------------------
# Declarations for the runners (`advjax.attacks.ATTACKS`).


def _run_untargeted(loss: str):
    def run(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
        del target, options
        r = apgd(logits_fn, x, y, eps, key=keys, steps=steps, norm=norm, loss=loss,
                 first_restart=restart)  # fmt: skip
        return BatchRun(r.x_adv, r.broken_step[0], per_case(steps + 1, y), per_case(False, y, bool))

    return run


def _run_targeted(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
    del options
    ranked = jnp.argsort(logits_fn(x), axis=-1, descending=True)
    goal = jnp.take_along_axis(ranked, jnp.full((len(y), 1), target + 1), axis=1)[:, 0]
    loss_fn = lambda logits, labels: per_example_targeted_dlr(logits, labels, goal)  # noqa: E731
    r = apgd(logits_fn, x, y, eps, key=keys, steps=steps, norm=norm, loss=loss_fn,
             first_restart=restart)  # fmt: skip
    return BatchRun(r.x_adv, r.broken_step[0], per_case(steps + 1, y), per_case(False, y, bool))


_REFERENCE = "Croce & Hein, ICML 2020"
DECLARED = (
    Attack(
        name="apgd-ce", run=_run_untargeted("ce"), function=functools.partial(apgd, loss="ce"), norms=("linf", "l2"), targeted=False,
        kind="gradient", queries=lambda steps: steps + 1,
        passes=lambda steps, classes: (steps + 1, steps + 1), reference=_REFERENCE,
    ),
    Attack(
        name="apgd-dlr", run=_run_untargeted("dlr"), function=functools.partial(apgd, loss="dlr"), norms=("linf", "l2"), targeted=False,
        kind="gradient", queries=lambda steps: steps + 1,
        passes=lambda steps, classes: (steps + 1, steps + 1), reference=_REFERENCE,
    ),
    Attack(
        name="apgd-t", run=_run_targeted, function=apgd_targeted, norms=("linf", "l2"), targeted=True,
        kind="gradient", queries=lambda steps: steps + 1,
        passes=lambda steps, classes: (steps + 2, steps + 1), options=("targets",),
        reference=_REFERENCE,
    ),
)  # fmt: skip
