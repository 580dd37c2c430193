"""Fast Minimum-Norm attack (FMN), L-inf and L2: the smallest adversarial perturbation it finds.

FMN ascends the logit difference max_{j != y} z_j - z_y with L2-normalised gradient steps
while projecting onto an eps-ball whose radius adapts every step: it shrinks by a factor
(1 - gamma) while the iterate is adversarial (and never exceeds the smallest adversarial
norm found), grows by (1 + gamma) once an adversarial point has been found and the iterate
is not adversarial, and before that jumps to the current norm plus the linear estimate of
the distance to the boundary, |z_y - max_{j != y} z_j| / ||gradient||_dual. Step size and
gamma follow cosine schedules (alpha_init to alpha_init / 100, gamma_init to 0.001). The
attack starts at x itself and draws no randomness.

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
from advjax.attacks._attack_info import AttackInfo, BatchRun, per_case
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


class FMNResult(NamedTuple):
    """Per-example outcome of `fmn`.

    Attributes:
      x_adv: the adversarial point of smallest norm found that a plain forward pass confirms
        (a minimum-norm point lies on the boundary: where the smallest one rounds to the true
        class there, the second smallest); x itself where none was found.
      distance: its perturbation's norm; inf where no adversarial point was found (0 for an
        input misclassified already).
      first_step: the first step whose iterate was adversarial within `eps` (0: x itself),
        -1 if none was.
    """

    x_adv: Array
    distance: Array
    first_step: Array


class _State(NamedTuple):
    delta: Array
    radius: Array
    best_norm: Array
    best_adv: Array
    runner_norm: Array  # the second-smallest adversarial point, a fallback (see `_confirmed`)
    runner_adv: Array
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
        second = adversarial & ~better & (size < s.runner_norm)
        runner_norm = jnp.where(better, s.best_norm, jnp.where(second, size, s.runner_norm))
        runner_adv = jnp.where(norms.per_example(better, x), s.best_adv,
                               jnp.where(norms.per_example(second, x), x + s.delta, s.runner_adv))  # fmt: skip
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
        return _State(delta, radius, best_norm, best_adv, runner_norm, runner_adv, found, first)

    batch = x.shape[0]
    init = _State(
        delta=jnp.zeros_like(x),
        radius=jnp.full((batch,), jnp.inf, x.dtype),
        best_norm=jnp.full((batch,), jnp.inf, x.dtype),
        best_adv=x,
        runner_norm=jnp.full((batch,), jnp.inf, x.dtype),
        runner_adv=x,
        found=jnp.zeros((batch,), bool),
        first_step=jnp.full((batch,), -1, jnp.int32),
    )
    return lax.fori_loop(0, steps, step, init)


def _confirmed(logits_fn, s: _State, x, y) -> tuple[Array, Array]:
    """(point, norm) of the smallest adversarial point that a plain forward pass confirms.

    A minimum-norm point lies on the decision boundary, and the loop judged it in a pass
    fused with the gradient: another evaluation of the same point may round to the true
    class. The runner-up, at least a step further, is kept for that case; where neither is
    confirmed, x and inf."""
    best_ok = jnp.argmax(logits_fn(s.best_adv), axis=-1) != y
    runner_ok = jnp.argmax(logits_fn(s.runner_adv), axis=-1) != y
    point = jnp.where(norms.per_example(best_ok, x), s.best_adv,
                      jnp.where(norms.per_example(runner_ok, x), s.runner_adv, x))  # fmt: skip
    size = jnp.where(best_ok, s.best_norm, jnp.where(runner_ok, s.runner_norm, jnp.inf))
    return point, size


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
    s = _search(logits_fn, x, y, norm=norm, steps=steps, alpha_init=alpha_init,
                gamma_init=gamma_init, eps=jnp.asarray(eps, x.dtype))  # fmt: skip
    point, size = _confirmed(logits_fn, s, x, y)
    chex.assert_equal_shape((point, x))
    return FMNResult(x_adv=point, distance=size, first_step=s.first_step)


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
    point, size = _confirmed(logits_fn, s, x, y)
    within = size <= eps
    inside = jnp.clip(x + _project(s.delta, jnp.broadcast_to(eps, y.shape), norm), 0.0, 1.0)
    x_adv = jnp.where(norms.per_example(within, x), point, inside)
    broken = jnp.where(within, s.first_step, -1).astype(jnp.int32)
    return BatchRun(x_adv, broken, per_case(steps + 2, y), per_case(False, y, bool))


DECLARED = (
    AttackInfo(
        name="fmn", run=_run, norms=("linf", "l2"), targeted=False, kind="gradient", stream=9,
        queries=lambda steps: steps + 2, passes=lambda steps, classes: (steps + 2, steps),
        restarts=False, reference="Pintor et al., NeurIPS 2021",
    ),
)  # fmt: skip
