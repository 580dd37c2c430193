"""Pure white-box attacks: FGSM and PGD with random restarts, L-inf or L2, with the
cross-entropy or the margin (CW) loss, untargeted or targeted.

Every attack takes a pure `logits_fn(x) -> logits` and arrays, works under `jit`, `vmap`
and `grad` of the caller, and never modifies its inputs. Inputs are pixels in [0, 1]; eps
and step sizes are in the same pixel units (L2: the Euclidean norm over the whole image).
"""

import numbers
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from advjax.attacks import _norms as norms
from advjax.attacks._attack_info import AttackInfo, BatchRun, option, per_case
from advjax.attacks._checks import (
    _check_inputs,
    _check_positive_int,
    _is_concrete,
    check_budget,
    check_finite_logits,
    check_key,
    check_labels,
)
from advjax.attacks._losses import (
    LOSSES,
    attack_loss,
    attack_success,
    per_example_cross_entropy,
)
from advjax.backend import fast_path
from advjax.types import Array, ArrayLike, LogitsFn


def _loss_and_grad(
    logits_fn: LogitsFn, x: Array, y: Array, loss_fn=per_example_cross_entropy
) -> tuple[Array, Array, Array]:
    """Per-example loss (`loss_fn(logits, y)`, to maximise), logits and the input gradient
    of the summed loss."""

    def total(z):
        logits = logits_fn(z)
        losses = loss_fn(logits, y)
        return losses.sum(), (losses, logits)

    (_, (losses, logits)), grad = jax.value_and_grad(total, has_aux=True)(x)
    return losses, logits, grad


def _project(x_adv: Array, x: Array, eps) -> Array:
    return norms.project(x_adv, x, eps, "linf")


def fgsm(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    norm: str = "linf",
) -> Array:
    """Fast Gradient Sign Method: one signed-gradient step of size eps, clipped to [0, 1].

    With `norm="l2"` it is the fast gradient method: one step of L2 length eps along the
    gradient (Goodfellow et al.'s L2 variant), clipped to [0, 1].

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of inputs in [0, 1], leading axis the examples.
      y: integer true labels, shape (batch,).
      eps: L-inf budget in pixel units, in [0, 1] (L2: >= 0); eps=0 returns x unchanged.
      norm: "linf" or "l2".

    Returns:
      The adversarial batch, same shape and dtype as x.

    Raises:
      ValueError / TypeError: eps outside its range or NaN; unknown norm; wrong ranks,
        shapes or dtypes.

    Example:
      >>> x_adv = fgsm(logits_fn, x, y, eps=8 / 255)

    Reference: Goodfellow, Shlens & Szegedy, "Explaining and Harnessing Adversarial
    Examples", ICLR 2015.
    """
    check_budget(eps, norm)
    x, y = _check_inputs(x, y)
    check_labels(logits_fn, x, y)
    eps = jnp.asarray(eps, x.dtype)
    losses, _, grad = _loss_and_grad(fast_path(logits_fn), x, y)
    if _is_concrete(losses) and not bool(jnp.all(jnp.isfinite(losses))):
        raise ValueError("logits_fn returned NaN or infinite logits on the clean inputs x")
    chex.assert_equal_shape((grad, x))
    return jnp.clip(x + eps * norms.ascent_direction(grad, norm), 0.0, 1.0)


class PGDResult(NamedTuple):
    """Per-example outcome of `pgd_search`.

    Attributes:
      x_adv: the chosen adversarial point: the first misclassified iterate of the earliest
        restart that broke the example, else the highest-loss iterate over all restarts.
      broken_step: for each restart (axis 0) and example, the number of signed-gradient
        steps after which the example was first misclassified (0 = at the random start), or
        -1 if it never was. Robust accuracy after k steps is the share with no restart in
        [0, k].
      loss: the attack loss (see `attack_loss`) at `x_adv`.
    """

    x_adv: Array
    broken_step: Array
    loss: Array


class PGDState(NamedTuple):
    """The state of one PGD restart between steps (see `pgd_start`, `pgd_steps`, `pgd_finish`).

    Attributes:
      x_adv: the current iterate.
      best: the point kept so far: the first misclassified iterate, else the highest-loss one.
      best_loss: loss at `best` (-inf before the first evaluation).
      broken_step: steps after which the example was first misclassified, -1 if not yet.
    """

    x_adv: Array
    best: Array
    best_loss: Array
    broken_step: Array


def _track(state: PGDState, step, losses: Array, wrong: Array) -> PGDState:
    """Record the point just evaluated: first successful point wins, else highest loss."""
    unbroken = state.broken_step < 0
    newly_broken = unbroken & wrong
    improved = unbroken & (newly_broken | (losses > state.best_loss))
    mask = improved.reshape((-1,) + (1,) * (state.x_adv.ndim - 1))
    return state._replace(
        best=jnp.where(mask, state.x_adv, state.best),
        best_loss=jnp.where(improved, losses, state.best_loss),
        broken_step=jnp.where(newly_broken, step, state.broken_step),
    )


def restart_keys(key: jax.Array, restarts: int, first_restart: int = 0) -> jax.Array:
    """Keys of restarts first_restart .. first_restart + restarts - 1, shape (restarts,) + key.shape.

    A scalar key is split; per-example keys (shape (batch,)) give restart r of example i
    the key `fold_in(key[i], r)`, so each example's random starts depend on its own key
    alone, not on the batch it is in (replayable case by case), and restarts can run one
    at a time (`first_restart`) with the same starts as all at once.
    """
    if key.ndim == 0:
        return jax.random.split(key, first_restart + restarts)[first_restart:]
    return jax.vmap(lambda r: jax.vmap(lambda k: jax.random.fold_in(k, r))(key))(
        first_restart + jnp.arange(restarts)
    )


def pgd_start(x: Array, eps, key: jax.Array, norm: str = "linf") -> PGDState:
    """A restart's state at its uniform random start in the eps-ball (clipped to [0, 1]).

    `key` is one key or one key per example (see `restart_keys`).
    """
    x0 = jnp.clip(x + norms.random_start(key, x, eps, norm), 0.0, 1.0)
    return PGDState(
        x_adv=x0,
        best=x0,
        best_loss=jnp.full(x.shape[:1], -jnp.inf, x.dtype),
        broken_step=jnp.full(x.shape[:1], -1, jnp.int32),
    )


def pgd_steps(
    logits_fn: LogitsFn,
    state: PGDState,
    x: Array,
    y: Array,
    eps,
    step_size,
    start,
    stop,
    *,
    norm: str = "linf",
    loss: str = "ce",
    targeted: bool = False,
) -> PGDState:
    """Steps start..stop-1 of a restart: evaluate and track the iterate, then step and project.

    Running steps [0, k) then [k, n) gives the same state as [0, n) at once, so a caller
    can stop spending steps on examples that are already broken (their outcome is final).
    `y` holds the targets when `targeted`.
    """
    logits_fn = fast_path(logits_fn)
    loss_fn = attack_loss(loss, targeted)

    def body(i, state: PGDState) -> PGDState:
        losses, logits, grad = _loss_and_grad(logits_fn, state.x_adv, y, loss_fn)
        state = _track(state, i, losses, attack_success(logits, y, targeted))
        x_next = norms.project(
            state.x_adv + step_size * norms.ascent_direction(grad, norm), x, eps, norm
        )
        return state._replace(x_adv=x_next)

    return lax.fori_loop(start, stop, body, state)


def pgd_finish(
    logits_fn: LogitsFn,
    state: PGDState,
    y: Array,
    steps,
    *,
    loss: str = "ce",
    targeted: bool = False,
) -> PGDState:
    """Evaluate and track the last iterate, reached after `steps` steps."""
    logits_fn = fast_path(logits_fn)
    logits = logits_fn(state.x_adv)
    losses = attack_loss(loss, targeted)(logits, y)
    return _track(state, steps, losses, attack_success(logits, y, targeted))


def _pgd_single_restart(
    logits_fn, x, y, eps, step_size, steps, key, norm="linf", loss="ce", targeted=False
) -> PGDState:
    state = pgd_start(x, eps, key, norm)
    objective = dict(loss=loss, targeted=targeted)
    state = pgd_steps(logits_fn, state, x, y, eps, step_size, 0, steps, norm=norm, **objective)
    return pgd_finish(logits_fn, state, y, steps, **objective)


def _select_restart(states: PGDState) -> tuple[Array, Array]:
    """Per example: earliest broken restart if any broke, else the highest-loss restart."""
    broken = states.broken_step >= 0
    first_broken = jnp.argmax(broken, axis=0)
    highest_loss = jnp.argmax(states.best_loss, axis=0)
    choice = jnp.where(broken.any(axis=0), first_broken, highest_loss)

    def take(a: Array) -> Array:
        index = choice.reshape((1, -1) + (1,) * (a.ndim - 2))
        return jnp.take_along_axis(a, index, axis=0)[0]

    return take(states.best), take(states.best_loss)


def pgd_search(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int = 20,
    step_size: float | ArrayLike | None = None,
    restarts: int = 1,
    first_restart: int = 0,
    norm: str = "linf",
    loss: str = "ce",
    target: ArrayLike | None = None,
) -> PGDResult:
    """PGD with per-example first-break tracking; see `pgd` for the arguments.

    Returns a `PGDResult` holding the adversarial batch, the step at which each example
    first broke in each restart, and the final loss, so that attack-budget curves (robust
    accuracy against steps and restarts) come out of one run. `first_restart` numbers the
    restarts from there (their keys, see `restart_keys`), to run them one at a time. With
    a `target`, "broken" means predicted as the target.
    """
    check_budget(eps, norm)
    _check_positive_int("steps", steps)
    _check_positive_int("restarts", restarts)
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r} must be one of {LOSSES}")
    if step_size is not None:
        check_budget(step_size, norm, name="step_size")
    check_key(key)
    x, y = _check_inputs(x, y)
    check_labels(logits_fn, x, y)
    check_finite_logits(logits_fn, x)
    targeted = target is not None
    if targeted:
        target = jnp.asarray(target)
        if target.shape != y.shape or not jnp.issubdtype(target.dtype, jnp.integer):
            raise ValueError(
                f"target must hold one integer class per example like y {y.shape}; "
                f"got {target.dtype} {target.shape}"
            )
        if _is_concrete(target) and _is_concrete(y) and bool(jnp.any(target == y)):
            raise ValueError("every target must differ from the example's true label")
    eps = jnp.asarray(eps, x.dtype)
    step_size = eps / 4 if step_size is None else jnp.asarray(step_size, x.dtype)
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)  # legacy uint32 keys, shape (2,) or (batch, 2)
    if key.ndim not in (0, 1) or (key.ndim == 1 and key.shape[0] != y.shape[0]):
        raise ValueError(
            f"key must be one PRNG key or one per example (shape ({y.shape[0]},)), "
            f"got shape {key.shape}"
        )
    if (
        isinstance(first_restart, bool)
        or not isinstance(first_restart, numbers.Integral)
        or first_restart < 0
    ):
        raise ValueError(f"first_restart={first_restart!r} must be an integer >= 0")
    keys = restart_keys(key, restarts, first_restart)
    labels = target if targeted else y
    objective = dict(norm=norm, loss=loss, targeted=targeted)
    states = jax.vmap(
        lambda k: _pgd_single_restart(logits_fn, x, labels, eps, step_size, steps, k, **objective)
    )(keys)
    x_adv, loss = _select_restart(states)
    chex.assert_equal_shape((x_adv, x))
    chex.assert_shape(states.broken_step, (restarts, y.shape[0]))
    return PGDResult(x_adv=x_adv, broken_step=states.broken_step, loss=loss)


def pgd(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int = 20,
    step_size: float | ArrayLike | None = None,
    restarts: int = 1,
    norm: str = "linf",
    loss: str = "ce",
    target: ArrayLike | None = None,
) -> Array:
    """Projected Gradient Descent with uniform random start and vmapped restarts.

    Each restart starts uniformly in the eps-ball, takes `steps` steepest-ascent steps of
    `step_size` (default eps/4; L-inf: signed gradient, L2: normalised gradient) on the
    attack loss, and projects to the eps-ball and to [0, 1] after every step. An example
    counts as broken if any iterate of any restart is misclassified (targeted: predicted
    as its target); the earliest such point is returned, otherwise the highest-loss one.

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of inputs in [0, 1], leading axis the examples.
      y: integer true labels, shape (batch,).
      eps: L-inf budget in pixel units, in [0, 1]; eps=0 returns x unchanged.
      key: PRNG key for the random starts: one key (split once per restart) or one
        key per example, shape (batch,) (restart r of example i uses fold_in(key[i], r)).
      steps: number of gradient steps, >= 1.
      step_size: step in pixel units; default eps / 4.
      restarts: number of random restarts, >= 1, run with `jax.vmap`.
      norm: "linf" (eps in [0, 1]) or "l2" (eps >= 0).
      loss: "ce" (cross-entropy) or "margin" (the CW margin loss, `per_example_margin`).
      target: optional target class per example (each different from y): a targeted
        attack that descends the target's loss.

    Returns:
      The adversarial batch, same shape and dtype as x.

    Raises:
      ValueError / TypeError: eps outside its range or NaN, steps or restarts < 1, unknown
        norm or loss, a target equal to the label, wrong ranks, shapes or dtypes.

    Example:
      >>> x_adv = pgd(logits_fn, x, y, 8 / 255, key=jax.random.key(0), steps=20)

    Reference: Madry et al., "Towards Deep Learning Models Resistant to Adversarial
    Attacks", ICLR 2018.
    """
    return pgd_search(
        logits_fn,
        x,
        y,
        eps,
        key=key,
        steps=steps,
        step_size=step_size,
        restarts=restarts,
        norm=norm,
        loss=loss,
        target=target,
    ).x_adv


# ---------------------------------------------------------------------------
# Declarations for the runners (`advjax.attacks.ATTACKS`).


def _search_one(logits_fn, x, labels, eps, keys, first, steps, *, norm, options, target=None):
    """One restart of `pgd_search` whose key index `first` may be traced."""
    step_size = option(options, "step_fraction") * eps
    objective = dict(norm=norm, loss=option(options, "loss"), targeted=target is not None)
    states = jax.vmap(
        lambda k: _pgd_single_restart(
            logits_fn, x, labels if target is None else target, eps, step_size, steps, k,
            **objective,
        )
    )(restart_keys(keys, 1, first))  # fmt: skip
    x_adv, _ = _select_restart(states)
    return x_adv, states.broken_step[0]


def _run_fgsm(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
    del keys, restart, target, steps, options
    x_adv = fgsm(logits_fn, x, y, eps, norm=norm)
    wrong = jnp.argmax(logits_fn(x_adv), axis=-1) != y
    return BatchRun(x_adv, jnp.where(wrong, 1, -1).astype(jnp.int32), per_case(1, y),
                    per_case(False, y, bool))  # fmt: skip


def _run_pgd(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
    del target
    x_adv, broken = _search_one(logits_fn, x, y, eps, keys, restart, steps, norm=norm,
                                options=options)  # fmt: skip
    return BatchRun(x_adv, broken, per_case(steps, y), per_case(False, y, bool))


def _run_pgd_targeted(
    logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options
) -> BatchRun:
    """Towards the class of rank target + 2 (the top class for a case misclassified clean);
    run (restart, target) draws from fold_in(keys, restart + target). Broken means
    misclassified as any class; a case misclassified elsewhere than the target without the
    search noticing counts the whole run."""
    ranked = jnp.argsort(-logits_fn(x), axis=-1)
    goal = jnp.take_along_axis(ranked, jnp.full((len(y), 1), target + 1), axis=1)[:, 0]
    goal = jnp.where(goal == y, ranked[:, 0], goal)
    x_adv, step = _search_one(logits_fn, x, y, eps, keys, restart + target, steps, norm=norm,
                              options=options, target=goal)  # fmt: skip
    wrong = jnp.argmax(logits_fn(x_adv), axis=-1) != y
    broken = jnp.where(wrong, jnp.where(step >= 0, step, steps), -1).astype(jnp.int32)
    return BatchRun(x_adv, broken, per_case(steps, y), per_case(False, y, bool))


DECLARED = (
    AttackInfo(
        name="fgsm", run=_run_fgsm, norms=("linf", "l2"), targeted=False, kind="gradient",
        stream=6, queries=lambda steps: 1, passes=lambda steps, classes: (2, 1),
        restarts=False, steps=1, reference="Goodfellow, Shlens & Szegedy, ICLR 2015",
    ),
    AttackInfo(
        name="pgd", run=_run_pgd, norms=("linf", "l2"), targeted=False, kind="gradient",
        stream=7, queries=lambda steps: steps, passes=lambda steps, classes: (steps + 1, steps),
        options=("loss", "step_fraction"), reference="Madry et al., ICLR 2018",
    ),
    AttackInfo(
        name="pgd-t", run=_run_pgd_targeted, norms=("linf", "l2"), targeted=True,
        kind="gradient", stream=8, queries=lambda steps: steps,
        passes=lambda steps, classes: (steps + 3, steps),
        options=("loss", "step_fraction", "targets"), restarts=False,
        reference="Madry et al., ICLR 2018 (targeted)",
    ),
)  # fmt: skip
