"""CIFAR-style data augmentation in pure JAX: pad-and-crop plus horizontal flip.

The standard CIFAR-10 training augmentation (He et al., "Deep Residual Learning
for Image Recognition", 2016): zero-pad each image by 4 pixels, take a random
32x32 crop, and flip it left-right with probability 1/2, independently per
example. Everything here is jittable and does no I/O.
"""

import functools

import chex
import jax
import jax.numpy as jnp
from jax import lax

from advjax.types import Array, ArrayLike


def to_float(images: ArrayLike) -> Array:
    """Converts uint8 images to float32 in [0, 1].

    Args:
        images: uint8 array of any shape (typically NHWC).

    Returns:
        float32 array of the same shape, ``images / 255``.

    Raises:
        AssertionError: ``images`` is not uint8 (chex check).

    Example:
        >>> x = to_float(data.train_images[:128])
    """
    images = jnp.asarray(images)
    chex.assert_type(images, jnp.uint8)
    return images.astype(jnp.float32) / 255.0


def _check_pad(pad: int) -> None:
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise ValueError(f"pad must be a non-negative int; got {pad=!r}")


@functools.partial(jax.jit, static_argnames="pad")
def crop_and_flip(images: ArrayLike, shifts: ArrayLike, flips: ArrayLike, *, pad: int = 4) -> Array:
    """Deterministic pad-crop-flip: the transform that ``augment`` samples.

    Output pixel ``(i, j)`` of example ``b`` is input pixel ``(i + dy, j + dx)``
    (zero outside the image), with ``(dy, dx) = shifts[b]``; the crop is then
    flipped left-right where ``flips[b]``. Zero shifts and no flips is the identity.

    Args:
        images: (N, H, W, C) floating batch.
        shifts: (N, 2) integer ``(dy, dx)`` in ``[-pad, pad]`` (clipped to it).
        flips: (N,) bool, flip left-right where True.
        pad: zero padding in pixels (static).

    Returns:
        (N, H, W, C) array of the same dtype.

    Raises:
        ValueError: ``pad`` is not a non-negative int.
        AssertionError: wrong ranks, shapes or dtypes (chex checks).

    Example:
        >>> crop_and_flip(x, jnp.zeros((len(x), 2), int), jnp.zeros(len(x), bool))  # == x
    """
    _check_pad(pad)
    images, shifts, flips = jnp.asarray(images), jnp.asarray(shifts), jnp.asarray(flips)
    chex.assert_rank(images, 4)
    chex.assert_type(images, float)
    chex.assert_shape(shifts, (images.shape[0], 2))
    chex.assert_type(shifts, int)
    chex.assert_shape(flips, (images.shape[0],))
    chex.assert_type(flips, bool)
    _, height, width, channels = images.shape
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    starts = jnp.clip(shifts, -pad, pad) + pad

    def crop_one(image: Array, start: Array) -> Array:
        return lax.dynamic_slice(image, (start[0], start[1], 0), (height, width, channels))

    crops = jax.vmap(crop_one)(padded, starts)
    return jnp.where(flips[:, None, None, None], crops[:, :, ::-1, :], crops)


@functools.partial(jax.jit, static_argnames="pad")
def augment(key: Array, images: ArrayLike, *, pad: int = 4) -> Array:
    """Random crop with zero padding and random horizontal flip, per example.

    Each example gets an independent shift ``(dy, dx)`` uniform in
    ``[-pad, pad]^2`` and a flip with probability 1/2 (see ``crop_and_flip``).
    Jitted; ``pad`` is static.

    Args:
        key: a ``jax.random`` key; the same key gives the same output.
        images: (N, H, W, C) floating batch, e.g. from ``to_float``.
        pad: zero padding in pixels (4 for CIFAR-10).

    Returns:
        (N, H, W, C) augmented batch of the same dtype.

    Raises:
        ValueError: ``pad`` is not a non-negative int.
        AssertionError: ``images`` is not a rank-4 floating array (chex checks).

    Example:
        >>> key, step_key = jax.random.split(key)
        >>> x_aug = augment(step_key, to_float(batch_images))

    Reference: He et al., "Deep Residual Learning for Image Recognition", 2016.
    """
    _check_pad(pad)
    images = jnp.asarray(images)
    chex.assert_rank(images, 4)
    chex.assert_type(images, float)
    n = images.shape[0]
    shift_key, flip_key = jax.random.split(key)
    shifts = jax.random.randint(shift_key, (n, 2), -pad, pad + 1)
    flips = jax.random.bernoulli(flip_key, 0.5, (n,))
    return crop_and_flip(images, shifts, flips, pad=pad)
