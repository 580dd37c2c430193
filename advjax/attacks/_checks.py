"""Checks of an attack's arguments, before any work: budgets, integer options, keys, and
concrete inputs (pixels in [0, 1], labels inside the logits' classes). Traced values, inside
the caller's `jit`, cannot be checked and pass through."""

import math
import numbers

import jax
import jax.numpy as jnp

from advjax.attacks import _norms as norms
from advjax.types import Array, ArrayLike, LogitsFn


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


def check_budget(eps, norm: str = "linf", name: str = "eps") -> None:
    """Raise ValueError for an unknown norm or a concrete budget outside its range: [0, 1]
    for L-inf, finite and >= 0 for L2."""
    norms.check_norm(norm)
    if norm == "linf":
        check_eps(eps, name)
    else:
        norms.check_l2_eps(eps, name)


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
    if _is_concrete(x) and x.size:
        lo, hi = float(jnp.min(x)), float(jnp.max(x))
        if not (0.0 <= lo and hi <= 1.0):  # also refuses NaN
            hint = " (pixels on a 0..255 scale? divide by 255)" if hi > 1.5 else ""
            raise ValueError(f"x must lie in [0, 1], got values in [{lo:g}, {hi:g}]{hint}")
    if _is_concrete(y) and y.size and int(jnp.min(y)) < 0:
        raise ValueError(f"y must hold labels >= 0, got a minimum of {int(jnp.min(y))}")
    return x, y


def check_key(key) -> None:
    """Raise TypeError unless `key` is a PRNG key array (typed, or legacy uint32)."""
    typed = isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    legacy = (
        isinstance(key, jax.Array)
        and key.dtype == jnp.uint32
        and key.ndim >= 1
        and key.shape[-1] == 2
    )
    if not (typed or legacy):
        raise TypeError(f"key must be a PRNG key from jax.random.key(seed), got {key!r}")


def check_labels(logits_fn: LogitsFn, x: Array, y: Array) -> None:
    """Raise ValueError for concrete labels outside the classes of `logits_fn`'s output
    (found by abstract evaluation: no model computation)."""
    shape = jax.eval_shape(logits_fn, jax.ShapeDtypeStruct(x.shape, x.dtype)).shape
    if len(shape) != 2 or shape[0] != x.shape[0]:
        raise ValueError(f"logits_fn must map x to (batch, classes) logits, got shape {shape}")
    if _is_concrete(y) and y.size and int(jnp.max(y)) >= shape[1]:
        raise ValueError(
            f"y must lie in [0, {shape[1]}) (the logits' classes), got a maximum of {int(jnp.max(y))}"
        )


def check_finite_logits(logits_fn: LogitsFn, x: Array) -> None:
    """Raise ValueError when `logits_fn` gives NaN or infinite logits on concrete inputs
    (one forward pass; skipped under the caller's `jit`)."""
    if _is_concrete(x) and x.size:
        logits = logits_fn(x)
        if not bool(jnp.all(jnp.isfinite(logits))):
            raise ValueError("logits_fn returned NaN or infinite logits on the clean inputs x")
