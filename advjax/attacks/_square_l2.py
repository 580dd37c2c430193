"""Square attack (L2): a score-based black-box attack by random search.

The attack only evaluates `logits_fn(x)` (never its gradient). The perturbation is built
from "meta-pseudo-Gaussian" blocks `eta(s)`: on an s x s window, two halves of nested
rectangles of weight 1 / k^2 (k the rectangle's distance from the half's centre), one
half positive and one negative, of unit L2 norm. The start tiles the image with such
blocks of random sign per channel; each iteration moves the perturbation's mass of two
random windows into one of them, plus a fresh random block, and rescales the whole
perturbation to L2 norm eps (then clips to [0, 1]).

Reference: Andriushchenko, Croce, Flammarion & Hein, "Square Attack: a query-efficient
black-box adversarial attack via random search", ECCV 2020 (the L2 branch of
`attack_single_run` in fra31/auto-attack `autoattack/square.py`).
"""

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attacks._attack import Attack, BatchRun, option
from advjax.attacks._checks import (
    check_budget,
)
from advjax.attacks._norms import check_norm
from advjax.attacks._square import (
    SquareResult,
    _square_window,
    checked_search_inputs,
    p_schedule,
    random_search,
    square_linf,
)
from advjax.types import Array, ArrayLike, LogitsFn

_TINY = 1e-12  # the reference's guard against division by a zero norm


def _eta_rectangles(rows: int, cols: int) -> np.ndarray:
    """Nested rectangles around the centre of a rows x cols block, the k-th (k = 1, 2, ...)
    adding 1 / k^2, normalised to unit L2 norm (empty for rows = 0)."""
    delta = np.zeros((rows, cols))
    if rows == 0:
        return delta
    top, left = rows // 2, cols // 2
    for k in range(max(rows // 2 + 1, cols // 2 + 1)):
        delta[max(top - k, 0) : top + k + 1, max(left - k, 0) : left + k + 1] += 1.0 / (k + 1) ** 2
    return delta / np.sqrt(np.sum(delta**2))


def eta(side: int) -> np.ndarray:
    """The side x side block of the L2 Square attack, before its random transpose: the top
    side // 2 rows positive, the others negative, of unit L2 norm."""
    half = side // 2
    delta = np.concatenate([_eta_rectangles(half, side), -_eta_rectangles(side - half, side)])
    return delta / np.sqrt(np.sum(delta**2))


def square_sides_l2(p_init: float, queries: int, height: int, width: int) -> np.ndarray:
    """Window side at each iteration: round(sqrt(p * h * w)), at least 3, made odd, then at
    most min(h, w) (p from `p_schedule`)."""
    p = p_schedule(p_init, np.arange(max(queries - 2, 1)), queries)
    sides = np.maximum(np.round(np.sqrt(p * height * width)).astype(np.int32), 3)
    sides = sides + (sides % 2 == 0)
    return np.minimum(sides, min(height, width)).astype(np.int32)


def _tiling(height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The start's grid of blocks of side s = h // 5 (at least 1), from offset (h - 5 s) // 2
    (at least 0) on both axes, h // s block rows and w // s block columns, cut at the image's
    edge: per pixel its block (-1 outside every block) and its row and column in the block."""
    side = max(height // 5, 1)
    offset = max((height - 5 * side) // 2, 0)

    def axis(length: int, blocks: int) -> tuple[np.ndarray, np.ndarray]:
        index = np.arange(length) - offset
        block = np.where((index >= 0) & (index < blocks * side), index // side, -1)
        return block, np.mod(index, side)

    block_cols = width // side
    row_block, local_rows = axis(height, height // side)
    col_block, local_cols = axis(width, block_cols)
    valid = (row_block[:, None] >= 0) & (col_block[None, :] >= 0)
    block = np.where(valid, row_block[:, None] * block_cols + col_block[None, :], -1)
    return block, local_rows, local_cols, (height // side) * block_cols


def _unit_l2(delta: Array) -> Array:
    return delta / (jnp.sqrt(jnp.sum(jnp.square(delta))) + _TINY)


def _make_start(height: int, width: int, dtype):
    """The start `(key, x_i, eps) -> x0_i`: the tiling of random-sign blocks (one sign per
    block and channel, each block transposed with probability 1/2), rescaled to L2 norm
    eps and clipped to [0, 1]."""
    block, local_rows, local_cols, blocks = _tiling(height, width)
    pattern = eta(max(height // 5, 1))
    plain = jnp.asarray(pattern[local_rows[:, None], local_cols[None, :]], dtype)
    flipped = jnp.asarray(pattern.T[local_rows[:, None], local_cols[None, :]], dtype)
    inside = jnp.asarray(block >= 0)
    block = jnp.asarray(np.maximum(block, 0))

    def start(key: jax.Array, x: Array, eps: Array) -> Array:
        flip_key, sign_key = jax.random.split(key)
        flips = jax.random.bernoulli(flip_key, 0.5, (blocks,))
        signs = jax.random.rademacher(sign_key, (blocks, x.shape[-1]), x.dtype)
        values = jnp.where(inside & ~flips[block], plain, jnp.where(inside, flipped, 0))
        delta = values[:, :, None] * signs[block]
        return jnp.clip(x + _unit_l2(delta) * eps, 0.0, 1.0)

    return start


def _make_proposal(sides: np.ndarray, dtype):
    """The proposal `(key, x_i, x_best_i, side, eps) -> candidate` of one iteration, with the
    blocks eta(s) (and their transposes) of every side in `sides` precomputed."""
    distinct = np.unique(sides)
    largest = int(distinct.max())
    table = np.zeros((len(distinct), 2, largest, largest))
    for i, side in enumerate(distinct):
        table[i, 0, :side, :side] = eta(int(side))
        table[i, 1, :side, :side] = eta(int(side)).T
    table, distinct = jnp.asarray(table, dtype), jnp.asarray(distinct)

    def place(block: Array, window: Array) -> Array:
        """`block`'s top-left side x side corner written into `window`, zero elsewhere."""
        rows = jnp.clip(jnp.cumsum(window.any(axis=(1, 2))) - 1, 0, largest - 1)
        cols = jnp.clip(jnp.cumsum(window.any(axis=(0, 2))) - 1, 0, largest - 1)
        return jnp.where(window, block[rows[:, None], cols[None, :]][:, :, None], 0)

    def propose(key: jax.Array, x: Array, x_best: Array, side: Array, eps: Array) -> Array:
        height, width, channels = x.shape
        key_1, key_2, flip_key, sign_key = jax.random.split(key, 4)
        window_1 = _square_window(key_1, side, height, width)
        window_2 = _square_window(key_2, side, height, width)
        delta = x_best - x
        in_1 = jnp.where(window_1, delta, 0)
        norm_window_1 = jnp.sqrt(jnp.sum(jnp.square(in_1), axis=(0, 1), keepdims=True))
        norm_image = jnp.sqrt(jnp.sum(jnp.square(delta)))
        norm_windows = jnp.sqrt(jnp.sum(jnp.square(jnp.where(window_1 | window_2, delta, 0))))
        flip = jax.random.bernoulli(flip_key, 0.5).astype(jnp.int32)
        block = table[jnp.searchsorted(distinct, side), flip]
        signs = jax.random.rademacher(sign_key, (1, 1, channels), x.dtype)
        new = place(block, window_1) * signs + in_1 / (_TINY + norm_window_1)
        new_norm = jnp.sqrt(jnp.sum(jnp.square(new), axis=(0, 1), keepdims=True))
        room = jnp.maximum(eps**2 - norm_image**2, 0.0) / channels + norm_windows**2
        new = new / (_TINY + new_norm) * jnp.sqrt(room)
        delta = jnp.where(window_1, new, jnp.where(window_2, 0, delta))
        return jnp.clip(x + _unit_l2(delta) * eps, 0.0, 1.0)

    return propose


def square_l2(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    queries: int = 5000,
    p_init: float = 0.8,
) -> SquareResult:
    """Square attack in L2: score-based black-box random search on the margin loss.

    Query 1 classifies the clean batch; examples already misclassified stop there. Query 2
    evaluates the paper's start: the image tiled with blocks `eta(h // 5)` of random sign
    per block and channel, rescaled to L2 norm eps. Each further query proposes, per
    example, two random windows of side s (`square_sides_l2`: round(sqrt(p * h * w)) with
    p from the schedule of `p_init`, see `p_schedule`, at least 3 and odd): the second
    window's perturbation is cleared, the first's becomes its own (per channel of unit
    norm) plus a fresh block `eta(s)` of random sign per channel, scaled per channel to
    sqrt(max(eps^2 - ||delta||^2, 0) / channels + ||delta on both windows||^2); the whole
    perturbation is then rescaled to L2 norm eps and clipped to [0, 1], and kept only if
    the margin loss decreases. Examples stop spending queries once misclassified; the loop
    ends when every example is misclassified or the budget is spent. Only `logits_fn`
    itself is called, never its gradient.

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of NHWC images in [0, 1], shape (batch, height, width, channels).
      y: integer true labels, shape (batch,).
      eps: L2 budget in pixel units over the whole image, finite and >= 0; eps=0 returns x
        unchanged.
      key: PRNG key: one key (split into one key per example) or one key per example,
        shape (batch,); an example's random choices depend on its own key alone (the
        start on one half of `split(key_i)`, iteration t on `fold_in(other half, t)`).
      queries: model queries per example, the clean query included, >= 1.
      p_init: initial share of pixels in a window, in (0, 1]; AutoAttack uses 0.8.

    Returns:
      A `SquareResult`: the adversarial batch (same shape and dtype as x), queries used,
      success and budget-exhausted flags, and the margin loss at x_adv.

    Raises:
      ValueError / TypeError: eps negative, infinite or NaN, queries < 1, p_init outside
        (0, 1], x not of rank 4, wrong shapes or dtypes, a key of the wrong shape.

    Example:
      >>> result = square_l2(logits_fn, x, y, 0.5, key=jax.random.key(0))
      >>> robust_accuracy = 1.0 - result.success.mean()

    Reference: Andriushchenko, Croce, Flammarion & Hein, "Square Attack: a query-efficient
    black-box adversarial attack via random search", ECCV 2020.
    """
    check_budget(eps, "l2")
    x, y, eps, keys = checked_search_inputs(logits_fn, x, y, eps, key, queries, p_init)
    height, width = x.shape[1:3]
    sides = square_sides_l2(p_init, queries, height, width)
    return random_search(
        logits_fn, x, y, eps, keys, queries=queries, sides=jnp.asarray(sides),
        start=_make_start(height, width, x.dtype), propose=_make_proposal(sides, x.dtype),
    )  # fmt: skip


def square(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    norm: str = "linf",
    queries: int = 5000,
    p_init: float | None = None,
) -> SquareResult:
    """Square attack in the threat model's norm: `square_linf` or `square_l2`, with their
    arguments (`p_init=None`: 0.05 for L-inf, as Andriushchenko et al.; 0.8 for L2).

    Example:
      >>> result = square(logits_fn, x, y, 0.5, key=jax.random.key(0), norm="l2")

    Reference: Andriushchenko, Croce, Flammarion & Hein, "Square Attack: a query-efficient
    black-box adversarial attack via random search", ECCV 2020.
    """
    check_norm(norm)
    search = square_linf if norm == "linf" else square_l2
    options = {} if p_init is None else {"p_init": p_init}
    return search(logits_fn, x, y, eps, key=key, queries=queries, **options)


# ---------------------------------------------------------------------------
# Declaration for the runners (`advjax.attacks.ATTACKS`): Square in either norm.


def _run(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
    """Restart 0 draws from `keys`, restart r > 0 from fold_in(keys, r); `steps` is the
    query budget."""
    del target
    if restart:
        keys = jax.vmap(jax.random.fold_in, (0, None))(keys, restart)
    r = square(logits_fn, x, y, eps, key=keys, norm=norm, queries=steps,
               p_init=option(options, "p_init"))  # fmt: skip
    return BatchRun(
        r.x_adv, jnp.where(r.success, r.queries_used, -1), r.queries_used, r.budget_exhausted
    )


DECLARED = (
    Attack(
        name="square", run=_run, function=square, norms=("linf", "l2"), targeted=False, kind="score",
        queries=lambda steps: steps, passes=lambda steps, classes: (steps, 0),
        options=("p_init",), reference="Andriushchenko et al., ECCV 2020",
    ),
)  # fmt: skip
