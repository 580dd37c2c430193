"""Square attack (L-inf): a score-based black-box attack by random search.

The attack only evaluates `logits_fn(x)` (never its gradient), so it is not fooled by
gradient masking. Each example keeps its best point; every iteration proposes one random
square of the image set to a random vertex of the eps-ball (one +-eps sign per channel),
queries the model once, and keeps the proposal if the margin loss decreased.

Reference: Andriushchenko, Croce, Flammarion & Hein, "Square Attack: a query-efficient
black-box adversarial attack via random search", ECCV 2020 (reference implementation:
github.com/max-andr/square-attack, `attack.py`).
"""

import math
import numbers
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from advjax.attacks._checks import (
    _check_inputs,
    _check_positive_int,
    check_eps,
    check_finite_logits,
    check_key,
    check_labels,
)
from advjax.attacks._norms import project
from advjax.backend import fast_path
from advjax.types import Array, ArrayLike, LogitsFn

# The reference schedule, written for a budget of 10,000 queries: p is p_init up to
# iteration 10, then halves after each breakpoint. Other budgets rescale the iteration index.
_SCHEDULE_BUDGET = 10_000
_SCHEDULE_BREAKPOINTS = (10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000)
# Random vertices drawn per proposal; the first one that changes the image is used.
_VERTEX_DRAWS = 32


class SquareResult(NamedTuple):
    """Per-example outcome of `square_linf`.

    Attributes:
      x_adv: the best point found (lowest margin loss); x itself for examples that were
        misclassified before the attack.
      queries_used: int32 model queries spent on the example while it was not yet
        misclassified, the clean query included (1 for an example misclassified from the
        start; at most the budget).
      success: whether `x_adv` is misclassified (margin loss < 0).
      budget_exhausted: not `success` and `queries_used` reached the budget.
      loss: the margin loss z_y - max_{i != y} z_i at `x_adv`; the attacker *minimises* it
        (negative = misclassified).
    """

    x_adv: Array
    queries_used: Array
    success: Array
    budget_exhausted: Array
    loss: Array


class _SquareState(NamedTuple):
    step: Array  # iteration index after the initialisation, a scalar
    x_best: Array
    margin: Array
    queries_used: Array


def margin_loss(logits: Array, labels: Array) -> Array:
    """Per-example z_y - max_{i != y} z_i; the attacker *minimises* it (< 0 = misclassified)."""
    true_logit = jnp.take_along_axis(logits, labels[:, None], axis=1)[:, 0]
    is_true = jax.nn.one_hot(labels, logits.shape[-1], dtype=jnp.bool_)
    other = jnp.max(jnp.where(is_true, -jnp.inf, logits), axis=1)
    return true_logit - other


def p_schedule(p_init: float, step: np.ndarray, queries: int) -> np.ndarray:
    """The paper's piecewise-constant share p of pixels changed at each iteration `step`.

    As in the reference implementation, the iteration index is rescaled to a budget of
    10,000 (`int(step / queries * 10000)`) and p halves after 10, 50, 200, 500, 1000, 2000,
    4000, 6000 and 8000 rescaled iterations.
    """
    rescaled = np.floor(np.asarray(step) / queries * _SCHEDULE_BUDGET).astype(np.int64)
    halvings = np.searchsorted(np.asarray(_SCHEDULE_BREAKPOINTS), rescaled, side="left")
    return p_init / 2.0**halvings


def square_sides(p_init: float, queries: int, height: int, width: int) -> np.ndarray:
    """Side of the square at each iteration: round(sqrt(p * h * w)), in [1, min(h, w)]."""
    p = p_schedule(p_init, np.arange(max(queries - 2, 1)), queries)
    sides = np.round(np.sqrt(p * height * width)).astype(np.int32)
    return np.clip(sides, 1, min(height, width))


def _stripes(key: jax.Array, x: Array, eps: Array) -> Array:
    """The initial point of one example: vertical stripes of +-eps (one sign per column and
    channel), projected to the eps-ball and [0, 1]."""
    _, width, channels = x.shape
    signs = jax.random.rademacher(key, (1, width, channels), x.dtype)
    return project(x + eps * signs, x, eps, "linf")


def _square_window(key: jax.Array, side: Array, height: int, width: int) -> Array:
    """A (h, w, 1) mask of a side x side square at a uniformly random position."""
    top_key, left_key = jax.random.split(key)
    top = jax.random.randint(top_key, (), 0, height - side + 1)
    left = jax.random.randint(left_key, (), 0, width - side + 1)
    rows, cols = jnp.arange(height), jnp.arange(width)
    in_rows = (rows >= top) & (rows < top + side)
    in_cols = (cols >= left) & (cols < left + side)
    return (in_rows[:, None] & in_cols[None, :])[:, :, None]


def _linf_proposal(key: jax.Array, x: Array, x_best: Array, side: Array, eps: Array) -> Array:
    """One example's candidate: a random square of x_best set to a random +-eps vertex.

    Like the reference implementation, vertices that would leave the image unchanged (the
    square's current values, or clipping at 0 / 1) are redrawn: the first of
    `_VERTEX_DRAWS` random vertices that changes a pixel is used (the first draw if none).
    """
    height, width, channels = x.shape
    window_key, sign_key = jax.random.split(key)
    window = _square_window(window_key, side, height, width)
    up, down = project(x + eps, x, eps, "linf"), project(x - eps, x, eps, "linf")
    changes_up = jnp.any(window & (up != x_best), axis=(0, 1))  # (channels,)
    changes_down = jnp.any(window & (down != x_best), axis=(0, 1))
    signs = jax.random.rademacher(sign_key, (_VERTEX_DRAWS, channels), x.dtype)
    changes = jnp.where(signs > 0, changes_up[None, :], changes_down[None, :]).any(axis=1)
    vertex = signs[jnp.argmax(changes)][None, None, :]
    return jnp.where(window, jnp.where(vertex > 0, up, down), x_best)


def _example_keys(key: jax.Array, batch: int) -> jax.Array:
    """One key per example: split a single key, or validate per-example keys."""
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)  # legacy uint32 keys, shape (2,) or (batch, 2)
    if key.ndim not in (0, 1) or (key.ndim == 1 and key.shape[0] != batch):
        raise ValueError(
            f"key must be one PRNG key or one per example (shape ({batch},)), got shape {key.shape}"
        )
    return jax.random.split(key, batch) if key.ndim == 0 else key


def _check_p_init(p_init) -> None:
    if (
        isinstance(p_init, bool)
        or not isinstance(p_init, numbers.Real)
        or math.isnan(p_init)
        or not 0.0 < p_init <= 1.0
    ):
        raise ValueError(f"p_init={p_init!r} must be a number in (0, 1]")


def checked_search_inputs(logits_fn, x, y, eps, key, queries: int, p_init: float):
    """(x, y, eps, per-example keys) of a Square attack, every argument but eps checked
    (its range depends on the norm) before any work."""
    _check_positive_int("queries", queries)
    _check_p_init(p_init)
    check_key(key)
    x, y = _check_inputs(x, y)
    if x.ndim != 4:
        raise ValueError(f"x must be a batch of NHWC images, got {x.shape=}")
    keys = _example_keys(key, y.shape[0])
    check_labels(logits_fn, x, y)
    check_finite_logits(logits_fn, x)
    return x, y, jnp.asarray(eps, x.dtype), keys


def _initial_state(logits_fn, x, y, eps, init_keys, queries: int, start) -> _SquareState:
    """Query the clean batch (query 1), then the start `start(key, x_i, eps)` of unbroken
    examples (query 2)."""
    margin = margin_loss(logits_fn(x), y)
    queries_used = jnp.ones(y.shape, jnp.int32)
    state = _SquareState(jnp.zeros((), jnp.int32), x, margin, queries_used)
    if queries == 1:
        return state
    x_init = jax.vmap(start, in_axes=(0, 0, None))(init_keys, x, eps)
    margin_init = margin_loss(logits_fn(x_init), y)
    active = ~(margin < 0)
    return state._replace(
        x_best=jnp.where(active[:, None, None, None], x_init, x),
        margin=jnp.where(active, margin_init, margin),
        queries_used=queries_used + active.astype(jnp.int32),
    )


def random_search(
    logits_fn: LogitsFn, x: Array, y: Array, eps: Array, keys: jax.Array, *, queries: int,
    sides: Array, start, propose,
) -> SquareResult:  # fmt: skip
    """The Square attack's random search on checked inputs, shared by every norm.

    Query 1 is the clean batch, query 2 `start(key, x_i, eps)` per unbroken example; each
    further query is `propose(key, x_i, x_best_i, sides[t], eps)` per example, kept if the
    margin loss decreases. Example i draws from `keys[i]` alone: the start on one half of
    `split(keys[i])`, iteration t on `fold_in(other half, t)`.
    """
    logits_fn = fast_path(logits_fn)
    init_keys, loop_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)

    def cond(state: _SquareState) -> Array:
        return (state.step < queries - 2) & jnp.any(~(state.margin < 0))

    def body(state: _SquareState) -> _SquareState:
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(loop_keys, state.step)
        x_new = jax.vmap(propose, in_axes=(0, 0, 0, None, None))(
            step_keys, x, state.x_best, sides[state.step], eps
        )
        margin_new = margin_loss(logits_fn(x_new), y)
        active = ~(state.margin < 0)
        improved = active & (margin_new < state.margin)
        return _SquareState(
            step=state.step + 1,
            x_best=jnp.where(improved[:, None, None, None], x_new, state.x_best),
            margin=jnp.where(improved, margin_new, state.margin),
            queries_used=state.queries_used + active.astype(jnp.int32),
        )

    state = lax.while_loop(
        cond, body, _initial_state(logits_fn, x, y, eps, init_keys, queries, start)
    )
    success = state.margin < 0
    chex.assert_equal_shape((state.x_best, x))
    return SquareResult(
        x_adv=state.x_best,
        queries_used=state.queries_used,
        success=success,
        budget_exhausted=~success & (state.queries_used >= queries),
        loss=state.margin,
    )


def square_linf(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    queries: int = 1000,
    p_init: float = 0.05,
) -> SquareResult:
    """Square attack in L-inf: score-based black-box random search on the margin loss.

    Query 1 classifies the clean batch; examples already misclassified stop there. Query 2
    evaluates the paper's start, vertical stripes of +-eps. Each further query proposes,
    per example, a random square of side round(sqrt(p * h * w)) (p from the paper's
    schedule of `p_init`, see `p_schedule`) set to a random vertex (+-eps per channel) of
    the eps-ball, clipped to [0, 1], and keeps it only if the margin loss decreases.
    Examples stop spending queries once misclassified; the loop ends when every example is
    misclassified or the budget is spent. Only `logits_fn` itself is called, never its
    gradient.

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of NHWC images in [0, 1], shape (batch, height, width, channels).
      y: integer true labels, shape (batch,).
      eps: L-inf budget in pixel units, in [0, 1]; eps=0 returns x unchanged.
      key: PRNG key: one key (split into one key per example) or one key per example,
        shape (batch,); an example's random choices depend on its own key alone (the
        stripes on one half of `split(key_i)`, iteration t on `fold_in(other half, t)`).
      queries: model queries per example, the clean query included, >= 1.
      p_init: initial share of pixels in the square, in (0, 1]; the paper uses 0.05.

    Returns:
      A `SquareResult`: the adversarial batch (same shape and dtype as x), queries used,
      success and budget-exhausted flags, and the margin loss at x_adv.

    Raises:
      ValueError / TypeError: eps outside [0, 1] or NaN, queries < 1, p_init outside
        (0, 1], x not of rank 4, wrong shapes or dtypes, a key of the wrong shape.

    Example:
      >>> result = square_linf(logits_fn, x, y, 8 / 255, key=jax.random.key(0))
      >>> robust_accuracy = 1.0 - result.success.mean()

    Reference: Andriushchenko, Croce, Flammarion & Hein, "Square Attack: a query-efficient
    black-box adversarial attack via random search", ECCV 2020.
    """
    check_eps(eps)
    x, y, eps, keys = checked_search_inputs(logits_fn, x, y, eps, key, queries, p_init)
    height, width = x.shape[1:3]
    sides = jnp.asarray(square_sides(p_init, queries, height, width))
    return random_search(
        logits_fn, x, y, eps, keys, queries=queries, sides=sides, start=_stripes,
        propose=_linf_proposal,
    )  # fmt: skip
