"""Fast Adaptive Boundary attack (FAB, targeted FAB-T), L-inf and L2, as used by AutoAttack.

FAB linearises the classifier at the current iterate, projects both the iterate and the
original point onto the linearised decision hyperplane intersected with the box [0, 1],
and moves to a convex combination of the two projections biased toward the original point;
once an iterate is adversarial it steps back toward the original point. The smallest
adversarial perturbation found is kept. FAB-T attacks, one at a time, the classes ranked
2nd .. 10th by the clean logits (`targets=9`), with one gradient per step.

Reference: Croce & Hein, "Minimally distorted adversarial examples with a fast adaptive
boundary attack", ICML 2020; fra31/auto-attack `fab_base.py`, `fab_projections.py`.
"""

import functools
import math
import numbers
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from advjax.attacks._attack import Attack, BatchRun
from advjax.attacks._checks import _check_inputs, check_finite_logits, check_labels
from advjax.attacks._fab_projection import projection_l2, projection_linf
from advjax.backend import fast_path
from advjax.types import LogitsFn

_NORMS = ("linf", "l2")


class FABResult(NamedTuple):
    """Per-example outcome of `fab`.

    Attributes:
      x_adv: the smallest adversarial point found if its distance is <= eps, else x.
      broken: bool (B,): misclassified at x_adv (already-misclassified inputs included).
      distance: (B,) norm of the smallest adversarial perturbation found; 0 for inputs
        misclassified already, inf where none was found.
    """

    x_adv: chex.Array
    broken: chex.Array
    distance: chex.Array


def _flat_norm(v: chex.Array, norm: str) -> chex.Array:
    v = v.reshape(v.shape[0], -1)
    if norm == "linf":
        return jnp.max(jnp.abs(v), axis=1)
    return jnp.sqrt(jnp.sum(v**2, axis=1))


def _dual_norm(g: chex.Array, norm: str) -> chex.Array:
    return jnp.sum(jnp.abs(g), -1) if norm == "linf" else jnp.sqrt(jnp.sum(g**2, -1))


def _hyperplane(logits_fn, x1, y, target, *, norm, targeted):
    """Linearised boundary (df, dg), flat dg: the target's (one VJP of f_t - f_y) or,
    untargeted, the closest class's in the original's distance estimate (full Jacobian)."""
    batch = x1.shape[0]
    logits, vjp_fn = jax.vjp(logits_fn, x1)
    n_classes = logits.shape[-1]
    onehot_y = jax.nn.one_hot(y, n_classes, dtype=logits.dtype)
    if targeted:
        onehot_t = jax.nn.one_hot(target, n_classes, dtype=logits.dtype)
        (dg,) = vjp_fn(onehot_t - onehot_y)
        return jnp.sum(logits * (onehot_t - onehot_y), -1), dg.reshape(batch, -1)
    eye = jnp.eye(n_classes, dtype=logits.dtype)
    jac = jax.vmap(lambda e: vjp_fn(jnp.broadcast_to(e, logits.shape))[0])(eye)
    jac = jnp.moveaxis(jac, 0, 1).reshape(batch, n_classes, -1)
    f_y = jnp.sum(logits * onehot_y, -1, keepdims=True)
    df = jnp.where(onehot_y > 0, 1e10, logits - f_y)
    dg = jac - jnp.einsum("bk,bkd->bd", onehot_y, jac)[:, None]
    ind = jnp.argmin(jnp.abs(df) / (1e-12 + _dual_norm(dg, norm)), axis=1)
    pick = lambda a: jnp.take_along_axis(a, ind.reshape((-1,) + (1,) * (a.ndim - 1)), 1)[:, 0]  # noqa: E731
    return pick(df), pick(dg)


def _single_run(logits_fn, x0, y, target, x_start, *, norm, targeted, steps, alpha_max, eta, beta):
    """One FAB run from x_start: the best adversarial point found and its distance (inf if none)."""
    batch, shape = x0.shape[0], x0.shape
    x0_flat = x0.reshape(batch, -1)
    project = jax.vmap(projection_linf if norm == "linf" else projection_l2)
    bcast = lambda v: v.reshape((batch,) + (1,) * (x0.ndim - 1))  # noqa: E731

    def step(_, carry):
        x1, adv, res = carry
        df, w = _hyperplane(logits_fn, x1, y, target, norm=norm, targeted=targeted)
        x1_flat = x1.reshape(batch, -1)
        b = -df + jnp.sum(w * x1_flat, -1)
        d3 = project(
            jnp.concatenate([x1_flat, x0_flat]), jnp.concatenate([w, w]), jnp.concatenate([b, b])
        )
        a0 = jnp.maximum(_flat_norm(d3, norm), 1e-8)
        a1, a2 = a0[:batch], a0[batch:]
        alpha = bcast(jnp.clip(a1 / (a1 + a2), 0.0, alpha_max))
        d1, d2 = d3[:batch].reshape(shape), d3[batch:].reshape(shape)
        x1 = jnp.clip((x1 + eta * d1) * (1 - alpha) + (x0 + eta * d2) * alpha, 0.0, 1.0)
        is_adv = jnp.argmax(logits_fn(x1), -1) != y
        dist = _flat_norm(x1 - x0, norm)
        better = is_adv & (dist < res)
        adv = jnp.where(bcast(better), x1, adv)
        res = jnp.where(better, dist, res)
        x1 = jnp.where(bcast(is_adv), x0 + (x1 - x0) * beta, x1)
        return x1, adv, res

    init = (x_start, x0, jnp.full((batch,), jnp.inf, x0.dtype))
    _, adv, res = lax.fori_loop(0, steps, step, init)
    return adv, res


def _random_start(key: chex.Array, x0: chex.Array, radius: chex.Array, norm: str) -> chex.Array:
    """Original's restart point: x0 + radius / 2 in the norm along a random direction."""
    shape = x0.shape[1:]
    if norm == "linf":
        t = jax.vmap(lambda k: jax.random.uniform(k, shape, x0.dtype, -1.0, 1.0))(key)
    else:
        t = jax.vmap(lambda k: jax.random.normal(k, shape, x0.dtype))(key)
    scale = 0.5 * radius / jnp.maximum(_flat_norm(t, norm), 1e-12)
    return jnp.clip(x0 + scale.reshape((-1,) + (1,) * len(shape)) * t, 0.0, 1.0)


def _is_concrete(v: Any) -> bool:
    return not isinstance(v, jax.core.Tracer)


def _check_number(name: str, value, lo: float, hi: float, *, lo_open=False, hi_open=False) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real Python number, got {value!r}")
    v = float(value)
    bad = math.isnan(v) or v < lo or v > hi or (lo_open and v == lo) or (hi_open and v == hi)
    if bad:
        raise ValueError(
            f"{name}={v!r} must lie in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        )


def _check_int(name: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a Python int, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"{name}={value} must lie in [{lo}, {'inf' if hi is None else hi}]")


def _check_budget(name: str, value, norm: str, batch: int) -> chex.Array:
    value = jnp.asarray(value)
    if not jnp.issubdtype(value.dtype, jnp.number) or jnp.iscomplexobj(value):
        raise TypeError(f"{name} must be real, got dtype {value.dtype}")
    if value.ndim != 0 and value.shape != (batch,):
        raise ValueError(f"{name} must be a scalar or have shape ({batch},), got {value.shape}")
    if _is_concrete(value):
        v = np.asarray(value, np.float64)
        if not np.all(np.isfinite(v) & (v >= 0) & (v <= (1.0 if norm == "linf" else np.inf))):
            rng = "in [0, 1] for norm='linf'" if norm == "linf" else "finite and >= 0 for norm='l2'"
            raise ValueError(f"{name} must be {rng}, got {v}")
    return value


def _example_keys(key, batch: int) -> chex.Array:
    key = jnp.asarray(key)
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.dtype != jnp.uint32 or key.shape[-1:] != (2,):
            raise TypeError(
                f"key must be a PRNG key or a batch of keys, got {key.dtype} {key.shape}"
            )
        key = jax.random.wrap_key_data(key)
    if key.ndim == 0:
        return jax.random.split(key, batch)
    if key.shape != (batch,):
        raise ValueError(
            f"key must be one key or one per example (shape ({batch},)), got {key.shape}"
        )
    return key


def fab(
    logits_fn: LogitsFn,
    x: chex.Array,
    y: chex.Array,
    eps,
    *,
    key: chex.Array,
    norm: str = "linf",
    targets: int | None = 9,
    steps: int = 100,
    restarts: int = 1,
    alpha_max: float = 0.1,
    eta: float = 1.05,
    beta: float = 0.9,
    eps_init=None,
) -> FABResult:
    """Eps-bounded FAB / FAB-T attack (AutoAttack's `FABAttack_PT.perturb`).

    Runs `restarts` restarts for each of the `targets` target classes in turn (untargeted:
    `restarts` runs), `steps` steps each; an example is skipped once broken within eps.
    Restart 0 starts at x, restart r > 0 at x + 0.5 * min(distance found so far, eps_init)
    along a random direction. Run (target t, restart r) of example i draws its noise from
    fold_in(fold_in(key_i, t), r) (untargeted: t = 0), so with one key per example its outcome does not depend
    on the rest of the batch (a single key is split into one per example). Examples already
    misclassified at x are returned as broken with distance 0 and x_adv = x, unattacked.
    `logits_fn` must treat examples independently. Jittable with static hyper-parameters;
    eps and eps_init may be traced.

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits (B, K).
      x: float (B, ...) clean inputs in [0, 1].
      y: int (B,) true labels in [0, K).
      eps: threat-model budget, scalar or (B,): in [0, 1] for L-inf, finite >= 0 for L2.
      key: a PRNG key, or one per example (shape (B,)).
      norm: "linf" or "l2".
      targets: FAB-T (one VJP per step) toward the classes ranked 2nd .. (targets + 1)th by
        the clean logits, in turn (AutoAttack's 9, the default), in 1 .. K - 1; None:
        untargeted FAB (full Jacobian).
      steps: iterations per run, >= 1.
      restarts: runs per target, >= 1.
      alpha_max: cap on the bias toward the original point, in [0, 1].
      eta: extrapolation factor of the projection step, >= 1.
      beta: backward step toward x after an adversarial iterate, in (0, 1].
      eps_init: random-start budget (defaults to eps), same range as eps.

    Returns:
      A `FABResult` (x_adv, broken, distance).

    Raises:
      TypeError: for non-float x, non-integer y, non-int integer hyper-parameters or a
        malformed key.
      ValueError: for mismatched shapes, a concrete x outside [0, 1] or y outside [0, K),
        an unknown norm, eps or eps_init out of range, or hyper-parameters out of range.

    Example:
      >>> res = fab(model_fn, images, labels, 8 / 255, key=jax.random.key(0))
      >>> robust_accuracy = 1.0 - res.broken.mean()

    Reference:
      Croce & Hein, ICML 2020, https://arxiv.org/abs/1907.02044;
      https://github.com/fra31/auto-attack (fab_base.py, fab_projections.py).
    """
    if targets is not None:
        _check_int("targets", targets, 1)
    ranks = None if targets is None else tuple(range(2, targets + 2))
    return _fab_ranks(logits_fn, x, y, eps, key, ranks, norm, steps, restarts, alpha_max, eta,
                      beta, eps_init)  # fmt: skip


def _fab_ranks(logits_fn, x, y, eps, key, target_ranks, norm="linf", steps=100, restarts=1,
               alpha_max=0.1, eta=1.05, beta=0.9, eps_init=None) -> FABResult:  # fmt: skip
    """`fab` toward the classes of `target_ranks` (rank r: the r-th highest clean logit) in
    turn, None for untargeted; the ranks may be a traced integer array, so the runners run
    one target per call with one compiled program for every target."""
    if norm not in _NORMS:
        raise ValueError(f"norm={norm!r} must be one of {_NORMS}")
    x, y = _check_inputs(x, y)
    batch = x.shape[0]
    _check_int("steps", steps, 1)
    _check_int("restarts", restarts, 1)
    _check_number("alpha_max", alpha_max, 0.0, 1.0)
    _check_number("eta", eta, 1.0, math.inf, hi_open=True)
    _check_number("beta", beta, 0.0, 1.0, lo_open=True)
    eps = _check_budget("eps", eps, norm, batch)
    eps_init = eps if eps_init is None else _check_budget("eps_init", eps_init, norm, batch)
    if batch == 0:
        return FABResult(x_adv=x, broken=jnp.zeros((0,), bool), distance=jnp.zeros((0,), x.dtype))
    check_labels(logits_fn, x, y)
    n_classes = jax.eval_shape(logits_fn, x).shape[1]
    if n_classes < 2:
        raise ValueError(f"logits_fn must return at least 2 classes, got {n_classes}")
    targeted = target_ranks is not None
    if target_ranks is None:
        ranks = jnp.asarray((2,))
    elif isinstance(target_ranks, (range, list, tuple)):
        ranks = jnp.asarray(tuple(target_ranks), jnp.int32)
    else:
        ranks = jnp.asarray(target_ranks)
    if ranks.ndim != 1 or ranks.shape[0] == 0 or not jnp.issubdtype(ranks.dtype, jnp.integer):
        raise ValueError(
            f"target_ranks must be a non-empty sequence of integers, got {target_ranks!r}"
        )
    if _is_concrete(ranks) and not (int(ranks.min()) >= 2 and int(ranks.max()) <= n_classes):
        raise ValueError(
            f"targets (target ranks {target_ranks!r}) must lie in 1 .. {n_classes - 1}, the "
            "other classes"
        )
    check_finite_logits(logits_fn, x)
    logits_fn = fast_path(logits_fn)
    keys = _example_keys(key, batch)

    eps = jnp.broadcast_to(eps.astype(x.dtype), (batch,))
    eps_init = jnp.broadcast_to(jnp.asarray(eps_init).astype(x.dtype), (batch,))
    clean_logits = logits_fn(x)
    correct = jnp.argmax(clean_logits, -1) == y
    ranked = jnp.argsort(clean_logits, axis=-1)
    n_targets = ranks.shape[0]
    hyper = dict(norm=norm, targeted=targeted, steps=steps, alpha_max=alpha_max, eta=eta, beta=beta)

    def one_run(j, carry):
        best_dist = carry[1]
        t, r = ranks[j // restarts] - 2, j % restarts
        active = correct & ~(best_dist <= eps)
        target = ranked[:, n_classes - 2 - t]
        run_keys = jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, t), r))(keys)
        radius = jnp.minimum(best_dist, eps_init)
        start = jnp.where(r == 0, x, _random_start(run_keys, x, radius, norm))

        def attack(c):
            adv, res = _single_run(logits_fn, x, y, target, start, **hyper)
            better = active & (res < c[1])
            mask = better.reshape((-1,) + (1,) * (x.ndim - 1))
            return jnp.where(mask, adv, c[0]), jnp.where(better, res, c[1])

        return lax.cond(jnp.any(active), attack, lambda c: c, carry)

    init = (x, jnp.full((batch,), jnp.inf, x.dtype))
    best_adv, best_dist = lax.fori_loop(0, n_targets * restarts, one_run, init)
    found = correct & (best_dist <= eps)
    x_adv = jnp.where(found.reshape((-1,) + (1,) * (x.ndim - 1)), best_adv, x)
    return FABResult(
        x_adv=x_adv, broken=found | ~correct, distance=jnp.where(correct, best_dist, 0.0)
    )


# ---------------------------------------------------------------------------
# Declarations for the runners (`advjax.attacks.ATTACKS`).


def _declare(targeted: bool):
    def run(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
        del restart, options
        ranks = jnp.reshape(target + 2, (1,)) if targeted else None
        r = _fab_ranks(logits_fn, x, y, eps, keys, ranks, norm, steps, restarts=1, eps_init=eps)
        broken = jnp.where(r.broken & (r.distance <= eps), 2 * steps + 1, -1).astype(jnp.int32)
        queries = jnp.full(y.shape, 2 * steps + 1, jnp.int32)
        return BatchRun(r.x_adv, broken, queries, jnp.zeros(y.shape, bool))

    def passes(steps: int, classes: int) -> tuple[int, int]:
        return 2 * steps + 1, steps * (1 if targeted else classes)

    return Attack(
        name="fab-t" if targeted else "fab", run=run,
        function=fab if targeted else functools.partial(fab, targets=None), norms=("linf", "l2"), targeted=targeted,
        kind="gradient", queries=lambda steps: 2 * steps + 1,
        passes=passes, options=("targets",) if targeted else (), restarts=False,
        reference="Croce & Hein, ICML 2020 (FAB)",
    )  # fmt: skip


DECLARED = (_declare(targeted=False), _declare(targeted=True))
