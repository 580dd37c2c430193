"""Fast Minimum-Norm attack (FMN), L-inf and L2: the smallest adversarial perturbation it finds.

FMN ascends the logit difference max_{j != y} z_j - z_y with L2-normalised gradient steps
while projecting onto an eps-ball whose radius adapts every step: it shrinks by a factor
(1 - gamma) while the iterate is adversarial (and never exceeds the smallest adversarial
norm found), grows by (1 + gamma) once an adversarial point has been found and the iterate
is not adversarial, and before that jumps to the current norm plus the linear estimate of
the distance to the boundary, |z_y - max_{j != y} z_j| / ||gradient||_dual. Step size and
gamma follow cosine schedules (alpha_init to alpha_init / 100, gamma_init to 0.001). The
attack starts at x itself and draws no randomness.

The iterates settle on the decision boundary, where whether a point is adversarial can
depend on the last bit of the logits, and so on how the forward pass was compiled. The
point returned is confirmed by a plain forward pass with a margin of a few float32 ulps
(`MARGIN`, relative to the largest logit); a point closer to the boundary is pushed
further along its perturbation (the last iterate, where no iterate was adversarial), by
the linear estimate of what moves its gap `PUSH` margins past the boundary, confirmed
again, and the push then bisected `BISECT` times down to the smallest that still clears
`PUSH` margins: one more forward and backward pass and 2 + `BISECT` forward passes per case.
FMN's radius shrinks by at most a factor (1 - gamma) per step, so its best point can lie
inside the adversarial region; the point is then drawn toward x along its perturbation, to
the smallest x + t (point - x), t in [`SHRINK_FROM`, 1], that still clears `PUSH` margins,
found by `SHRINK` halvings (`SHRINK` forward passes per case).

Reference: Pintor, Roli, Brendel & Biggio, "Fast Minimum-norm Adversarial Attacks through
Adaptive Norm Constraints", NeurIPS 2021.
"""

import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from advjax.attacks import _norms as norms
from advjax.attacks._attack import Attack, BatchRun, per_case
from advjax.attacks._checks import (
    _check_inputs,
    _check_positive_int,
    check_budget,
    check_finite_logits,
    check_labels,
)
from advjax.backend import fast_path
from advjax.types import Array, ArrayLike, LogitsFn

_DUAL = {"linf": 1, "l2": 2}
GAMMA_FINAL = 0.001
MARGIN = 2.5e-7
PUSH = 2
FAR = 16
MAX_PUSH = 1e-2
BISECT = 4
SHRINK_FROM = 0.95
SHRINK = 10


class FMNResult(NamedTuple):
    """Per-example outcome of `fmn`.

    Attributes:
      x_adv: the adversarial point of smallest norm found, as a plain forward pass confirms
        it (see the module docstring); x itself where none was found.
      distance: its perturbation's norm; inf where no adversarial point was found (0 for an
        input misclassified already).
      first_step: the first step whose iterate was adversarial within `eps` (0: x itself;
        `steps` where only the pushed last iterate is), -1 if none was.
    """

    x_adv: Array
    distance: Array
    first_step: Array


class _State(NamedTuple):
    delta: Array
    radius: Array
    best_norm: Array
    best_adv: Array
    found: Array
    first_step: Array


def _size(delta: Array, order) -> Array:
    flat = delta.reshape(delta.shape[0], -1)
    if order == "linf":
        return jnp.max(jnp.abs(flat), axis=-1)
    if order == 1:
        return jnp.sum(jnp.abs(flat), axis=-1)
    return jnp.sqrt(jnp.sum(jnp.square(flat), axis=-1))


def _project(delta: Array, radius: Array, norm: str) -> Array:
    """delta projected onto the ball of per-example `radius` around 0."""
    r = norms.per_example(radius, delta)
    if norm == "linf":
        return jnp.clip(delta, -r, r)
    size = norms.per_example(_size(delta, "l2"), delta)
    return jnp.where(size > r, delta * r / jnp.maximum(size, norms.TINY), delta)


def _search(logits_fn, x, y, *, norm, steps, alpha_init, gamma_init, eps) -> _State:
    """FMN's loop; `eps` only dates the first adversarial iterate within it."""
    alpha_final = alpha_init / 100
    worst = _size(jnp.maximum(x, 1 - x), norm)

    def difference(delta):
        logits = logits_fn(x + delta)
        true = jnp.take_along_axis(logits, y[:, None], axis=1)[:, 0]
        other = jnp.max(jnp.where(jax.nn.one_hot(y, logits.shape[-1], dtype=bool), -jnp.inf,
                                  logits), axis=-1)  # fmt: skip
        return jnp.sum(other - true), (other - true, jnp.argmax(logits, axis=-1))

    def step(i, s: _State) -> _State:
        cosine = (1 + jnp.cos(math.pi * i / steps)) / 2
        alpha = alpha_final + (alpha_init - alpha_final) * cosine
        gamma = GAMMA_FINAL + (gamma_init - GAMMA_FINAL) * cosine
        size = _size(s.delta, norm)
        (_, (gap, pred)), grad = jax.value_and_grad(difference, has_aux=True)(s.delta)
        adversarial = pred != y
        better = adversarial & (size < s.best_norm)
        best_norm = jnp.where(better, size, s.best_norm)
        best_adv = jnp.where(norms.per_example(better, x), x + s.delta, s.best_adv)
        found = s.found | adversarial
        first = jnp.where((s.first_step < 0) & adversarial & (size <= eps), i, s.first_step)
        to_boundary = jnp.abs(gap) / jnp.maximum(_size(grad, _DUAL[norm]), 1e-12)
        radius = jnp.where(
            adversarial,
            jnp.minimum(s.radius * (1 - gamma), best_norm),
            jnp.where(found, s.radius * (1 + gamma), size + to_boundary),
        )
        radius = jnp.minimum(radius, worst)
        grad = grad / norms.per_example(jnp.maximum(_size(grad, "l2"), 1e-12), grad)
        delta = _project(s.delta + alpha * grad, radius, norm)
        delta = jnp.clip(x + delta, 0.0, 1.0) - x
        return _State(delta, radius, best_norm, best_adv, found, first)

    batch = x.shape[0]
    init = _State(
        delta=jnp.zeros_like(x),
        radius=jnp.full((batch,), jnp.inf, x.dtype),
        best_norm=jnp.full((batch,), jnp.inf, x.dtype),
        best_adv=x,
        found=jnp.zeros((batch,), bool),
        first_step=jnp.full((batch,), -1, jnp.int32),
    )
    return lax.fori_loop(0, steps, step, init)


def _gap(logits_fn, point, y) -> tuple[Array, Array]:
    """max_{j != y} z_j - z_y at `point`, a plain forward pass, summed over the batch; and
    per example the gap and MARGIN times the largest |z|."""
    logits = logits_fn(point)
    true = jnp.take_along_axis(logits, y[:, None], axis=1)[:, 0]
    other = jnp.max(jnp.where(jax.nn.one_hot(y, logits.shape[-1], dtype=bool), -jnp.inf, logits),
                    axis=-1)  # fmt: skip
    return jnp.sum(other - true), (other - true, MARGIN * jnp.max(jnp.abs(logits), axis=-1))


def _confirmed(logits_fn, s: _State, x, y, *, norm, steps, eps) -> tuple[Array, Array, Array]:
    """(point, norm, first step) of the smallest adversarial point a plain forward pass confirms.

    Candidates, smallest first: the best point (where none was found, the last iterate),
    then that point pushed outward along its perturbation, x + t delta, by the linear
    estimate (the gap's gradient there, along delta) of what moves its gap `PUSH` margins
    past the boundary, and `FAR` times further. The first whose gap clears the margin is
    taken, its push bisected (`BISECT` halvings) between the candidate before it and it;
    else the first adversarial at all; else x, inf and -1. A pushed point of a
    search whose iterates were never adversarial within `eps` is dated `steps` if it lies
    within."""
    base = jnp.where(norms.per_example(s.found, x), s.best_adv, x + s.delta)
    (_, (gap, margin)), grad = jax.value_and_grad(_gap, argnums=1, has_aux=True)(logits_fn, base, y)
    rise = PUSH * margin - gap
    slope = jnp.sum((grad * (base - x)).reshape(y.shape[0], -1), axis=-1)
    near = jnp.clip(rise / jnp.maximum(slope, norms.TINY), 0, MAX_PUSH)
    points = [jnp.clip(x + norms.per_example(1 + t, x) * (base - x), 0.0, 1.0)
              for t in (near, jnp.minimum(FAR * near, MAX_PUSH))]  # fmt: skip
    candidates = [(base, gap, s.found)]
    candidates += [(p, _gap(logits_fn, p, y)[1][0], jnp.ones_like(s.found)) for p in points]
    chosen = jnp.full(y.shape, -1)
    for need in (margin, 0.0):
        for i, (_, candidate_gap, allowed) in enumerate(candidates):
            chosen = jnp.where((chosen < 0) & allowed & (candidate_gap > need), i, chosen)
    # a pushed point that clears the margin: bisect the push between the last candidate
    # that did not and it, keeping the end that clears PUSH margins, the push's own aim
    # (BISECT forward passes)
    cleared = (chosen > 0) & (jnp.where(chosen == 1, candidates[1][1], candidates[2][1]) > margin)
    far = jnp.minimum(FAR * near, MAX_PUSH)
    low = jnp.where(chosen == 2, near, 0.0)
    high = jnp.where(chosen == 2, far, near)
    for _ in range(BISECT):
        middle = (low + high) / 2
        probe = jnp.clip(x + norms.per_example(1 + middle, x) * (base - x), 0.0, 1.0)
        clears = _gap(logits_fn, probe, y)[1][0] > PUSH * margin
        high = jnp.where(cleared & clears, middle, high)
        low = jnp.where(cleared & ~clears, middle, low)
    pushed = jnp.clip(x + norms.per_example(1 + high, x) * (base - x), 0.0, 1.0)
    point, size = x, jnp.full(y.shape, jnp.inf, x.dtype)
    for i, (candidate, _, _) in enumerate(candidates):
        candidate = jnp.where(norms.per_example(cleared, x), pushed, candidate) if i else candidate
        point = jnp.where(norms.per_example(chosen == i, x), candidate, point)
        size = jnp.where(chosen == i, s.best_norm if i == 0 else _size(candidate - x, norm), size)
    first = jnp.where((chosen > 0) & (s.first_step < 0) & (size <= eps), steps, s.first_step)
    return point, size, first


def _shrunk(logits_fn, x, y, point, size, first, *, norm, steps, eps):
    """(point, norm, first step) with the point drawn toward x along its perturbation as far
    as a plain forward pass still finds it `PUSH` margins past the boundary (see the module
    docstring); a point that comes within `eps` only so is dated `steps`."""
    low = jnp.full(y.shape, SHRINK_FROM, x.dtype)
    high = jnp.ones(y.shape, x.dtype)
    for _ in range(SHRINK):
        middle = (low + high) / 2
        gap, margin = _gap(logits_fn, x + norms.per_example(middle, x) * (point - x), y)[1]
        clears = gap > PUSH * margin
        high = jnp.where(clears, middle, high)
        low = jnp.where(clears, low, middle)
    drawn = jnp.isfinite(size) & (high < 1)
    point = jnp.where(norms.per_example(drawn, x), x + norms.per_example(high, x) * (point - x),
                      point)  # fmt: skip
    size = jnp.where(drawn, _size(point - x, norm), size)
    first = jnp.where(drawn & (first < 0) & (size <= eps), steps, first)
    return point, size, first


def _check_positive(name: str, value) -> None:
    if isinstance(value, (int, float)) and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={value!r} must be a finite number > 0")


def fmn(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    *,
    norm: str = "linf",
    steps: int = 100,
    alpha_init: float = 1.0,
    gamma_init: float = 0.05,
    eps: float | ArrayLike = float("inf"),
) -> FMNResult:
    """Fast Minimum-Norm attack: per example, the smallest adversarial perturbation found.

    Args:
      logits_fn: pure function from a batch of inputs in [0, 1] to logits.
      x: float batch in [0, 1], leading axis the examples; y: integer labels (batch,).
      norm: "linf" or "l2", the norm minimised.
      steps: gradient steps, >= 1 (one forward and one backward pass each).
      alpha_init: initial step size (cosine-annealed to alpha_init / 100), > 0.
      gamma_init: initial radius factor (cosine-annealed to 0.001), in (0, 1).
      eps: only for `first_step`: the budget whose first adversarial iterate is dated
        (default inf: the first adversarial iterate).

    Returns:
      An `FMNResult`; `x_adv` lies in [0, 1] and differs from x by `distance` in `norm`.

    Raises:
      ValueError / TypeError: unknown norm, steps < 1, alpha_init or gamma_init out of
        range, inputs outside [0, 1], labels outside the classes, NaN logits, wrong
        shapes or dtypes.

    Example:
      >>> result = fmn(logits_fn, x, y, norm="linf", steps=100)
      >>> robust_at_8 = result.distance > 8 / 255

    Reference: Pintor, Roli, Brendel & Biggio, "Fast Minimum-norm Adversarial Attacks
    through Adaptive Norm Constraints", NeurIPS 2021.
    """
    norms.check_norm(norm)
    _check_positive_int("steps", steps)
    _check_positive("alpha_init", alpha_init)
    if isinstance(gamma_init, (int, float)) and not 0 < gamma_init < 1:
        raise ValueError(f"gamma_init={gamma_init!r} must be in (0, 1)")
    if isinstance(eps, (int, float)) and (math.isnan(eps) or eps < 0):
        raise ValueError(f"eps={eps!r} must be >= 0")
    x, y = _check_inputs(x, y)
    check_labels(logits_fn, x, y)
    check_finite_logits(logits_fn, x)
    logits_fn = fast_path(logits_fn)
    eps = jnp.asarray(eps, x.dtype)
    s = _search(logits_fn, x, y, norm=norm, steps=steps, alpha_init=alpha_init,
                gamma_init=gamma_init, eps=eps)  # fmt: skip
    point, size, first = _confirmed(logits_fn, s, x, y, norm=norm, steps=steps, eps=eps)
    point, size, first = _shrunk(logits_fn, x, y, point, size, first, norm=norm, steps=steps,
                                 eps=eps)  # fmt: skip
    chex.assert_equal_shape((point, x))
    return FMNResult(x_adv=point, distance=size, first_step=first)


# ---------------------------------------------------------------------------
# Declaration for the runners (`advjax.attacks.ATTACKS`).


def _run(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
    """Broken: the smallest confirmed adversarial point (`_confirmed`) lies within eps; its
    point is returned, else the last iterate brought into the eps-ball."""
    del keys, restart, target, options
    check_budget(eps, norm)
    eps = jnp.asarray(eps, x.dtype)
    logits_fn = fast_path(logits_fn)
    s = _search(logits_fn, x, y, norm=norm, steps=steps, alpha_init=1.0, gamma_init=0.05,
                eps=eps)  # fmt: skip
    point, size, first = _confirmed(logits_fn, s, x, y, norm=norm, steps=steps, eps=eps)
    point, size, first = _shrunk(logits_fn, x, y, point, size, first, norm=norm, steps=steps,
                                 eps=eps)  # fmt: skip
    within = size <= eps
    inside = jnp.clip(x + _project(s.delta, jnp.broadcast_to(eps, y.shape), norm), 0.0, 1.0)
    x_adv = jnp.where(norms.per_example(within, x), point, inside)
    broken = jnp.where(within, first, -1).astype(jnp.int32)
    return BatchRun(
        x_adv, broken, per_case(steps + 3 + BISECT + SHRINK, y), per_case(False, y, bool)
    )


def _within(logits_fn, x, y, eps, **options) -> FMNResult:
    """`fmn` inside the budget eps, called as every attack is (eps the fourth argument)."""
    return fmn(logits_fn, x, y, eps=eps, **options)


DECLARED = (
    Attack(
        name="fmn", run=_run, function=_within, norms=("linf", "l2"), targeted=False, kind="gradient",
        queries=lambda steps: steps + 3 + BISECT + SHRINK,
        passes=lambda steps, classes: (steps + 3 + BISECT + SHRINK, steps + 1),
        restarts=False, reference="Pintor et al., NeurIPS 2021",
    ),
)  # fmt: skip
