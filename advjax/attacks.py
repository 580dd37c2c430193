"""Pure white-box L-inf attacks: FGSM and PGD with random restarts.

Every attack takes a pure `logits_fn(x) -> logits` and arrays, works under `jit`, `vmap`
and `grad` of the caller, and never modifies its inputs. Inputs are pixels in [0, 1]; eps
and step sizes are in the same pixel units.
"""

import math
import numbers
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax
from jax import lax

from advjax.types import Array, ArrayLike, LogitsFn


def per_example_cross_entropy(logits: Array, labels: Array) -> Array:
    """Cross-entropy per example; the attacker *maximises* it (higher = more adversarial)."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def _is_concrete(value) -> bool:
    return not isinstance(value, jax.core.Tracer)


def check_eps(eps, name: str = "eps") -> None:
    """Raise ValueError for a budget that is concretely outside [0, 1] or NaN.

    Traced values (inside the caller's `jit`) cannot be checked and pass through.
    """
    if isinstance(eps, numbers.Number) or (_is_concrete(eps) and jnp.ndim(eps) == 0):
        value = float(eps)
        if math.isnan(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}={eps!r} must be in [0, 1] (pixel units, e.g. 8/255)")


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r} must be an integer >= 1")


def _check_inputs(x: ArrayLike, y: ArrayLike) -> tuple[Array, Array]:
    x, y = jnp.asarray(x), jnp.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D array of labels, got {y.shape=}")
    if x.ndim < 2:
        raise ValueError(f"x must be a batch with a leading example axis, got {x.shape=}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"x and y must hold the same number of examples, got {x.shape=} {y.shape=}"
        )
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must be floating point pixels in [0, 1], got {x.dtype=}")
    if not jnp.issubdtype(y.dtype, jnp.integer):
        raise TypeError(f"y must hold integer class labels, got {y.dtype=}")
    return x, y


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
    return jnp.clip(jnp.clip(x_adv, x - eps, x + eps), 0.0, 1.0)


def fgsm(logits_fn: LogitsFn, x: ArrayLike, y: ArrayLike, eps: float | ArrayLike) -> Array:
    """Fast Gradient Sign Method: one signed-gradient step of size eps, clipped to [0, 1].

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of inputs in [0, 1], leading axis the examples.
      y: integer true labels, shape (batch,).
      eps: L-inf budget in pixel units, in [0, 1]; eps=0 returns x unchanged.

    Returns:
      The adversarial batch, same shape and dtype as x.

    Raises:
      ValueError / TypeError: eps outside [0, 1] or NaN; wrong ranks, shapes or dtypes.

    Example:
      >>> x_adv = fgsm(logits_fn, x, y, eps=8 / 255)

    Reference: Goodfellow, Shlens & Szegedy, "Explaining and Harnessing Adversarial
    Examples", ICLR 2015.
    """
    check_eps(eps)
    x, y = _check_inputs(x, y)
    eps = jnp.asarray(eps, x.dtype)
    _, _, grad = _loss_and_grad(logits_fn, x, y)
    chex.assert_equal_shape((grad, x))
    return jnp.clip(x + eps * jnp.sign(grad), 0.0, 1.0)


class PGDResult(NamedTuple):
    """Per-example outcome of `pgd_search`.

    Attributes:
      x_adv: the chosen adversarial point: the first misclassified iterate of the earliest
        restart that broke the example, else the highest-loss iterate over all restarts.
      broken_step: for each restart (axis 0) and example, the number of signed-gradient
        steps after which the example was first misclassified (0 = at the random start), or
        -1 if it never was. Robust accuracy after k steps is the share with no restart in
        [0, k].
      loss: cross-entropy at `x_adv`.
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


def _track(state: PGDState, step, losses: Array, logits: Array, y: Array) -> PGDState:
    """Record the point just evaluated: first misclassified point wins, else highest loss."""
    wrong = jnp.argmax(logits, axis=-1) != y
    unbroken = state.broken_step < 0
    newly_broken = unbroken & wrong
    improved = unbroken & (newly_broken | (losses > state.best_loss))
    mask = improved.reshape((-1,) + (1,) * (state.x_adv.ndim - 1))
    return state._replace(
        best=jnp.where(mask, state.x_adv, state.best),
        best_loss=jnp.where(improved, losses, state.best_loss),
        broken_step=jnp.where(newly_broken, step, state.broken_step),
    )


def _random_start(key: jax.Array, x: Array, eps) -> Array:
    """Uniform noise in the eps-ball: one draw for the batch (scalar key) or one per example."""
    if key.ndim == 0:
        return jax.random.uniform(key, x.shape, x.dtype, minval=-eps, maxval=eps)
    return jax.vmap(lambda k: jax.random.uniform(k, x.shape[1:], x.dtype, minval=-eps, maxval=eps))(
        key
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


def pgd_start(x: Array, eps, key: jax.Array) -> PGDState:
    """A restart's state at its uniform random start in the eps-ball (clipped to [0, 1]).

    `key` is one key or one key per example (see `restart_keys`).
    """
    x0 = jnp.clip(x + _random_start(key, x, eps), 0.0, 1.0)
    return PGDState(
        x_adv=x0,
        best=x0,
        best_loss=jnp.full(x.shape[:1], -jnp.inf, x.dtype),
        broken_step=jnp.full(x.shape[:1], -1, jnp.int32),
    )


def pgd_steps(
    logits_fn: LogitsFn, state: PGDState, x: Array, y: Array, eps, step_size, start, stop
) -> PGDState:
    """Steps start..stop-1 of a restart: evaluate and track the iterate, then step and project.

    Running steps [0, k) then [k, n) gives the same state as [0, n) at once, so a caller
    can stop spending steps on examples that are already broken (their outcome is final).
    """

    def body(i, state: PGDState) -> PGDState:
        losses, logits, grad = _loss_and_grad(logits_fn, state.x_adv, y)
        state = _track(state, i, losses, logits, y)
        x_next = _project(state.x_adv + step_size * jnp.sign(grad), x, eps)
        return state._replace(x_adv=x_next)

    return lax.fori_loop(start, stop, body, state)


def pgd_finish(logits_fn: LogitsFn, state: PGDState, y: Array, steps) -> PGDState:
    """Evaluate and track the last iterate, reached after `steps` steps."""
    logits = logits_fn(state.x_adv)
    return _track(state, steps, per_example_cross_entropy(logits, y), logits, y)


def _pgd_single_restart(logits_fn, x, y, eps, step_size, steps, key) -> PGDState:
    state = pgd_steps(logits_fn, pgd_start(x, eps, key), x, y, eps, step_size, 0, steps)
    return pgd_finish(logits_fn, state, y, steps)


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
) -> PGDResult:
    """L-inf PGD with per-example first-break tracking; see `pgd` for the arguments.

    Returns a `PGDResult` holding the adversarial batch, the step at which each example
    first broke in each restart, and the final loss, so that attack-budget curves (robust
    accuracy against steps and restarts) come out of one run. `first_restart` numbers the
    restarts from there (their keys, see `restart_keys`), to run them one at a time.
    """
    check_eps(eps)
    _check_positive_int("steps", steps)
    _check_positive_int("restarts", restarts)
    if step_size is not None:
        check_eps(step_size, name="step_size")
    x, y = _check_inputs(x, y)
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
    states = jax.vmap(lambda k: _pgd_single_restart(logits_fn, x, y, eps, step_size, steps, k))(
        keys
    )
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
) -> Array:
    """Projected Gradient Descent (L-inf) with uniform random start and vmapped restarts.

    Each restart starts uniformly in the eps-ball, takes `steps` signed-gradient steps of
    `step_size` (default eps/4) on the cross-entropy, and projects to the eps-ball and to
    [0, 1] after every step. An example counts as broken if any iterate of any restart is
    misclassified; the earliest such point is returned, otherwise the highest-loss one.

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

    Returns:
      The adversarial batch, same shape and dtype as x.

    Raises:
      ValueError / TypeError: eps outside [0, 1] or NaN, steps or restarts < 1, wrong
        ranks, shapes or dtypes.

    Example:
      >>> x_adv = pgd(logits_fn, x, y, 8 / 255, key=jax.random.key(0), steps=20)

    Reference: Madry et al., "Towards Deep Learning Models Resistant to Adversarial
    Attacks", ICLR 2018.
    """
    return pgd_search(
        logits_fn, x, y, eps, key=key, steps=steps, step_size=step_size, restarts=restarts
    ).x_adv
