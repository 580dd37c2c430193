"""Tests for advjax_train: pad-and-crop plus horizontal flip, in pure JAX."""

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax_train import augment, crop_and_flip, to_float

PAD = 4


def _images(n: int, seed: int = 0) -> np.ndarray:
    """Float32 NHWC batch with distinct, strictly positive pixels (so zeros mark padding)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.05, 1.0, size=(n, 32, 32, 3)).astype(np.float32)


def _reference(image: np.ndarray, dy: int, dx: int, flip: bool) -> np.ndarray:
    """NumPy pad-crop-flip of one HWC image: output (i, j) = input (i + dy, j + dx)."""
    h, w, _ = image.shape
    padded = np.pad(image, ((PAD, PAD), (PAD, PAD), (0, 0)))
    crop = padded[PAD + dy : PAD + dy + h, PAD + dx : PAD + dx + w]
    return crop[:, ::-1] if flip else crop


def _recover_params(image: np.ndarray, out: np.ndarray) -> list[tuple[int, int, bool]]:
    """All (dy, dx, flip) whose reference transform of ``image`` equals ``out`` exactly."""
    shifts = range(-PAD, PAD + 1)
    return [
        (dy, dx, flip)
        for dy, dx, flip in itertools.product(shifts, shifts, (False, True))
        if np.array_equal(_reference(image, dy, dx, flip), out)
    ]


def test_to_float_maps_uint8_to_float32_unit_interval():
    """to_float gives float32 with 0 -> 0.0, 255 -> 1.0 and k -> k / 255."""
    x = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    y = to_float(x)
    assert y.dtype == jnp.float32
    chex.assert_shape(y, x.shape)
    np.testing.assert_allclose(np.asarray(y).ravel(), np.arange(256) / 255.0, rtol=1e-6)
    assert float(y.min()) == 0.0 and float(y.max()) == 1.0


def test_to_float_rejects_non_uint8():
    """to_float refuses float input (a second scaling would silently shrink the images)."""
    with pytest.raises(AssertionError):
        to_float(np.zeros((1, 32, 32, 3), np.float32))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_augment_preserves_shape_and_dtype(dtype):
    """augment returns the input's shape and floating dtype."""
    x = jnp.asarray(_images(8), dtype=dtype)
    y = augment(jax.random.key(0), x)
    chex.assert_shape(y, x.shape)
    assert y.dtype == dtype


def test_augment_output_is_a_padded_crop_with_optional_flip():
    """Every output image equals the reference pad-crop-flip of its input for some (dy, dx, flip).

    This implies each output value is either a pixel of the same image or zero padding.
    """
    x = _images(16)
    y = np.asarray(augment(jax.random.key(1), x))
    for image, out in zip(x, y, strict=True):
        assert set(np.unique(out)) <= set(np.unique(image)) | {0.0}
        assert len(_recover_params(image, out)) == 1


def test_augment_actually_crops_and_flips():
    """Over a batch, some images are flipped, some not, and some are shifted."""
    x = _images(64, seed=2)
    y = np.asarray(augment(jax.random.key(2), x))
    params = [_recover_params(image, out)[0] for image, out in zip(x, y, strict=True)]
    flips = {flip for _, _, flip in params}
    assert flips == {False, True}
    assert any((dy, dx) != (0, 0) for dy, dx, _ in params)
    assert len({(dy, dx) for dy, dx, _ in params}) > 10
    assert not np.array_equal(x, y)


def test_augment_same_key_same_output_different_key_different_output():
    """augment is a deterministic function of the key."""
    x = _images(16)
    a = augment(jax.random.key(3), x)
    b = augment(jax.random.key(3), x)
    c = augment(jax.random.key(4), x)
    chex.assert_trees_all_equal(a, b)
    assert not np.array_equal(np.asarray(a), np.asarray(c))


def test_augment_accepts_legacy_uint32_keys():
    """A raw jax.random.PRNGKey gives what the typed key of the same data gives: a reference
    pad-crop-flip of each input."""
    x = _images(4)
    legacy = np.asarray(augment(jax.random.PRNGKey(0), x))
    typed = np.asarray(augment(jax.random.wrap_key_data(jax.random.PRNGKey(0)), x))
    np.testing.assert_array_equal(legacy, typed)
    assert all(_recover_params(image, out) for image, out in zip(x, legacy, strict=True))


def test_augment_jit_matches_eager_and_traces_once():
    """Jitted and eager results agree, and a jit wrapper does not retrace for new keys."""
    x = _images(8)
    key = jax.random.key(5)
    with jax.disable_jit():
        eager = augment(key, x)
    chex.assert_trees_all_equal(augment(key, x), eager)

    step = jax.jit(chex.assert_max_traces(lambda k, images: augment(k, images), n=1))
    for i in range(3):
        key_i = jax.random.fold_in(key, i)
        with jax.disable_jit():
            np.testing.assert_array_equal(np.asarray(step(key_i, x)), augment(key_i, x))


def test_augment_under_vmap_matches_per_group_calls():
    """vmapping augment over (keys, batches) equals calling it per group."""
    x = _images(6).reshape(2, 3, 32, 32, 3)
    keys = jax.random.split(jax.random.key(6), 2)
    batched = jax.vmap(augment)(keys, x)
    for g in range(2):
        chex.assert_trees_all_equal(batched[g], augment(keys[g], x[g]))


def test_zero_shift_without_flip_is_identity():
    """crop_and_flip with zero shifts and no flips returns the input exactly."""
    x = _images(5)
    y = crop_and_flip(x, jnp.zeros((5, 2), jnp.int32), jnp.zeros((5,), bool))
    chex.assert_trees_all_equal(y, jnp.asarray(x))


def test_crop_and_flip_matches_reference_for_given_parameters():
    """crop_and_flip(shift (dy, dx), flip) equals the NumPy reference, including zero fill."""
    x = _images(4)
    shifts = np.array([[4, 0], [-4, 3], [0, -2], [1, 1]], np.int32)
    flips = np.array([False, True, True, False])
    y = np.asarray(crop_and_flip(x, shifts, flips))
    for b in range(4):
        np.testing.assert_array_equal(y[b], _reference(x[b], *shifts[b], flips[b]))
    np.testing.assert_array_equal(y[0, :28], x[0, 4:])  # Shift down by 4: rows move up.
    assert not y[0, 28:].any()  # Bottom four rows are zero padding.


def test_flip_only_reverses_width():
    """A flip with zero shift reverses the width axis and nothing else."""
    x = _images(2)
    y = crop_and_flip(x, jnp.zeros((2, 2), jnp.int32), jnp.ones((2,), bool))
    chex.assert_trees_all_equal(y, jnp.asarray(x[:, :, ::-1, :]))


def test_augment_rejects_bad_inputs():
    """Bad pad raises ValueError; wrong rank or integer images fail chex checks."""
    x = _images(2)
    with pytest.raises(ValueError, match="pad"):
        augment(jax.random.key(0), x, pad=-1)
    with pytest.raises(AssertionError):
        augment(jax.random.key(0), x[0])
    with pytest.raises(AssertionError):
        augment(jax.random.key(0), (x * 255).astype(np.uint8))
