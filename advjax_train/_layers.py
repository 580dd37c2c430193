"""Convolution and pooling primitives whose gradients run well on XLA's CPU backend.

XLA's CPU backward-input convolution falls off its fast path inside `lax.fori_loop`
(a PGD loop ran ~5x slower than the same computation unrolled). The input gradient of a
stride-1 'SAME' convolution is itself a forward convolution with the spatially flipped,
in/out-transposed kernel, so a custom VJP expresses it that way. Max pooling is written as
reshape + max, and its VJP as an elementwise first-maximum mask (no select-and-scatter, no
tie-counting reduction).

The weight gradient of a convolution reads its input transposed to [C, H, W, N]. XLA's CPU
backend fuses the input's elementwise producer (batch norm + ReLU) into that transpose and
runs the fusion untiled, several times slower than a plain transpose; `_as_buffer` stops it.
That backend also runs one convolution's weight gradient over the whole batch as one
contraction that parallelises poorly; the VJP sums it over pieces of the batch
(`KERNEL_GRADIENT_ROWS`), which run side by side.
"""

import jax
import jax.numpy as jnp
from jax import lax

from advjax.types import Array

_DIMENSIONS = ("NHWC", "HWIO", "NHWC")

KERNEL_GRADIENT_ROWS = 8192
"""Output positions (images x height x width) per piece of a weight gradient. Measured on
the study's training steps (2 cores, batch 128): 8192 ran them 4-7 % faster than the whole
batch at once, 16384 no faster, 4096 slower."""


def _conv_same(x: Array, kernel: Array) -> Array:
    return lax.conv_general_dilated(
        x, kernel, window_strides=(1, 1), padding="SAME", dimension_numbers=_DIMENSIONS
    )


@jax.custom_vjp
def conv2d_same(x: Array, kernel: Array) -> Array:
    """Stride-1 'SAME' convolution, NHWC input and HWIO kernel with odd spatial size.

    Numerically the same function as `lax.conv_general_dilated`; only its VJP differs.
    """
    return _conv_same(x, kernel)


def _conv2d_same_fwd(x: Array, kernel: Array) -> tuple[Array, tuple[Array, Array]]:
    return _conv_same(x, kernel), (x, kernel)


def _as_buffer(x: Array) -> Array:
    """x itself, passed through a conditional so that XLA keeps it in a buffer of its own.

    Both branches return x (written differently: XLA replaces a conditional whose branches
    are the same computation) and the predicate is read from x, so XLA can neither fold the
    conditional nor fuse x's producer into x's consumers across it (an optimisation barrier
    would do, but XLA's CPU pipeline drops those before fusion). Under vmap the conditional
    becomes a select between two copies of x: the same value, unfused.
    """
    first = x.reshape(-1)[0]
    return lax.cond(first == first, lambda t: t, lambda t: t * 1.0, x)


def _kernel_gradient(x: Array, kernel: Array, g: Array) -> Array:
    """The kernel's cotangent, summed over pieces of the batch of `KERNEL_GRADIENT_ROWS`."""
    n, h, w = x.shape[:3]
    size = max(1, KERNEL_GRADIENT_ROWS // (h * w))
    total = None
    for start in range(0, n, size):
        piece = _as_buffer(x[start : start + size])
        _, kernel_vjp = jax.vjp(lambda k: _conv_same(piece, k), kernel)
        (part,) = kernel_vjp(g[start : start + size])
        total = part if total is None else total + part
    return total


def _conv2d_same_bwd(residuals: tuple[Array, Array], g: Array) -> tuple[Array, Array]:
    x, kernel = residuals
    flipped = jnp.flip(kernel, axis=(0, 1)).swapaxes(2, 3)
    return _conv_same(g, flipped), _kernel_gradient(x, kernel, g)


conv2d_same.defvjp(_conv2d_same_fwd, _conv2d_same_bwd)


def _pool_windows(x: Array) -> Array:
    n, h, w, c = x.shape
    if h % 2 or w % 2:
        raise ValueError(f"max_pool_2x2 needs even spatial dims, got {x.shape=}")
    return x.reshape(n, h // 2, 2, w // 2, 2, c)


@jax.custom_vjp
def max_pool_2x2(x: Array) -> Array:
    """2x2 max pooling with stride 2 on an NHWC batch with even height and width.

    Its gradient goes to the first maximum of each window in row-major order, as in
    PyTorch's `max_pool2d`; autodiff of `max` would split it among tied maxima and pay a
    reduction to count them.
    """
    return _pool_windows(x).max(axis=(2, 4))


def _max_pool_fwd(x: Array) -> tuple[Array, tuple[Array, Array]]:
    out = max_pool_2x2(x)
    return out, (x, out)


def _max_pool_bwd(residuals: tuple[Array, Array], g: Array) -> tuple[Array]:
    x, out = residuals
    windows = _pool_windows(x)
    top = out[:, :, None, :, None, :]
    grad = g[:, :, None, :, None, :]
    taken = jnp.zeros_like(top, dtype=bool)
    parts = []
    for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)):
        hit = windows[:, :, i : i + 1, :, j : j + 1, :] == top
        parts.append(jnp.where(hit & ~taken, grad, jnp.zeros_like(grad)))
        taken = taken | hit
    rows = [jnp.concatenate(parts[0:2], axis=4), jnp.concatenate(parts[2:4], axis=4)]
    return (jnp.concatenate(rows, axis=2).reshape(x.shape),)


max_pool_2x2.defvjp(_max_pool_fwd, _max_pool_bwd)
