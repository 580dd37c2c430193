"""The geometry of an L-inf or L2 threat model: balls, projections, steepest-ascent steps
and uniform random starts, per example, for pixels in [0, 1]."""

import math

import jax
import jax.numpy as jnp

from advjax.types import Array

NORMS = ("linf", "l2")
TINY = 1e-12


def check_norm(norm: str) -> None:
    if norm not in NORMS:
        raise ValueError(f"norm={norm!r} must be one of {NORMS}")


def check_l2_eps(eps, name: str = "eps") -> None:
    """Raise ValueError for a concrete L2 budget that is negative, infinite or NaN."""
    if not isinstance(eps, jax.core.Tracer) and jnp.ndim(eps) == 0:
        if not math.isfinite(float(eps)) or float(eps) < 0:
            raise ValueError(f"{name}={eps!r} must be finite and >= 0 for norm='l2'")


def per_example(values: Array, like: Array) -> Array:
    """Reshape per-example values (B,) to broadcast against a batch like `like`."""
    return values.reshape((-1,) + (1,) * (like.ndim - 1))


def l2_norm(v: Array) -> Array:
    """Per-example L2 norm over every axis but the first."""
    return jnp.sqrt(jnp.sum(jnp.square(v), axis=tuple(range(1, v.ndim))))


def perturbation_norm(delta: Array, norm: str) -> Array:
    """Per-example size of a perturbation in the threat model's norm."""
    if norm == "linf":
        return jnp.max(jnp.abs(delta).reshape(delta.shape[0], -1), axis=-1)
    return l2_norm(delta)


def project(v: Array, x: Array, eps, norm: str = "linf") -> Array:
    """Project onto the eps-ball around x, then clip to [0, 1] (clipping stays in the ball:
    it only moves coordinates towards x's, which lie in [0, 1])."""
    if norm == "linf":
        return jnp.clip(jnp.clip(v, x - eps, x + eps), 0.0, 1.0)
    delta = v - x
    scale = jnp.minimum(1.0, eps / (l2_norm(delta) + TINY))
    return jnp.clip(x + delta * per_example(scale, x), 0.0, 1.0)


def ascent_direction(grad: Array, norm: str) -> Array:
    """Steepest ascent direction of unit norm: sign for L-inf, grad / ||grad||_2 for L2."""
    if norm == "linf":
        return jnp.sign(grad)
    return grad / per_example(l2_norm(grad) + TINY, grad)


def random_start(key: jax.Array, x: Array, eps, norm: str = "linf") -> Array:
    """Uniform noise in the eps-ball: one draw for the batch (scalar key) or one per example
    (keys of shape (batch,): each example's noise depends on its own key alone)."""

    def draw(k: jax.Array, shape: tuple[int, ...]) -> Array:
        if norm == "linf":
            return jax.random.uniform(k, shape, x.dtype, minval=-eps, maxval=eps)
        k_dir, k_rad = jax.random.split(k)
        direction = jax.random.normal(k_dir, shape, x.dtype)
        dim = math.prod(shape[1:])
        radius = eps * jax.random.uniform(k_rad, shape[:1], x.dtype) ** (1.0 / dim)
        return direction * per_example(radius / (l2_norm(direction) + TINY), direction)

    if key.ndim == 0:
        return draw(key, x.shape)
    return jax.vmap(lambda k: draw(k, (1,) + x.shape[1:])[0])(key)
