"""Properties of advjax_train (CompactCNN, eval_logits_fn) and advjax_train."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from advjax_train import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    CompactCNN,
    conv2d_same,
    eval_logits_fn,
    max_pool_2x2,
)
from advjax_train._layers import KERNEL_GRADIENT_ROWS

NUM_PARAMS = 403_306


@pytest.fixture(scope="module")
def model_and_variables():
    """A randomly initialised CompactCNN with non-trivial BatchNorm running statistics."""
    model = CompactCNN()
    init = jax.jit(model.init, static_argnames="train")  # jitted: faster than eager on CPU
    variables = init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)
    keys = iter(jax.random.split(jax.random.key(1), 100))
    stats = jax.tree.map(
        lambda a: a + 0.1 * jnp.abs(jax.random.normal(next(keys), a.shape)),
        variables["batch_stats"],
    )
    return model, {"params": variables["params"], "batch_stats": stats}


def _images(n: int, seed: int = 0) -> jax.Array:
    return jax.random.uniform(jax.random.key(seed), (n, 32, 32, 3))


# ---------------------------------------------------------------------------
# CompactCNN.


def test_parameter_count_is_403306(model_and_variables):
    """CompactCNN has exactly 403,306 trainable parameters (BatchNorm statistics excluded)."""
    _, variables = model_and_variables
    assert sum(leaf.size for leaf in jax.tree.leaves(variables["params"])) == NUM_PARAMS
    assert set(variables) == {"params", "batch_stats"}


def test_silu_variant_has_the_same_parameters_and_different_outputs(model_and_variables):
    """With SiLU the CNN has the same parameter paths and shapes (403,306 parameters), so
    ReLU weights load into it, yet the same weights give other logits."""
    model, variables = model_and_variables
    silu = CompactCNN(activation="silu")
    fresh = silu.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)
    chex.assert_trees_all_equal_shapes_and_dtypes(fresh, variables)
    x = _images(2)
    relu_logits = model.apply(variables, x, train=False)
    silu_logits = silu.apply(variables, x, train=False)
    assert np.all(np.isfinite(silu_logits))
    assert not np.allclose(relu_logits, silu_logits, atol=1e-3)


def test_unknown_activation_raises_value_error():
    """An activation outside ACTIVATIONS is rejected when the model is built, naming it."""
    with pytest.raises(ValueError, match="tanh"):
        CompactCNN(activation="tanh")


@pytest.mark.parametrize("batch", [1, 3])
def test_output_is_batch_by_10_float32(model_and_variables, batch):
    """Logits have shape (B, 10) and dtype float32, in eval and in train mode."""
    model, variables = model_and_variables
    x = _images(batch)
    logits = model.apply(variables, x, train=False)
    chex.assert_shape(logits, (batch, 10))
    chex.assert_type(logits, jnp.float32)
    train_logits, _ = model.apply(
        variables, x, train=True, rngs={"dropout": jax.random.key(0)}, mutable=["batch_stats"]
    )
    chex.assert_shape(train_logits, (batch, 10))
    chex.assert_type(train_logits, jnp.float32)


def _first_conv_output(model, variables, x):
    _, state = model.apply(
        variables, x, train=False, capture_intermediates=True, mutable=["intermediates"]
    )
    return state["intermediates"]["ConvBNReLU_0"]["Conv3x3_0"]["__call__"][0]


def test_normalisation_happens_inside_the_model(model_and_variables):
    """The first conv sees (x - mean) / std: its output equals conv2d_same of the normalised
    pixels, and a constant image equal to the CIFAR-10 mean gives exactly zero (the conv has
    no bias), while a black image does not."""
    model, variables = model_and_variables
    kernel = variables["params"]["ConvBNReLU_0"]["Conv3x3_0"]["kernel"]
    mean, std = jnp.asarray(CIFAR10_MEAN), jnp.asarray(CIFAR10_STD)
    x = _images(2)
    expected = conv2d_same((x - mean[None, None, None]) / std[None, None, None], kernel)
    chex.assert_trees_all_close(_first_conv_output(model, variables, x), expected, atol=1e-5)

    mean_image = jnp.broadcast_to(mean, (1, 32, 32, 3))
    np.testing.assert_array_equal(_first_conv_output(model, variables, mean_image), 0.0)
    black = jnp.zeros((1, 32, 32, 3))
    assert np.abs(np.asarray(_first_conv_output(model, variables, black))).max() > 0.1


def test_compactcnn_runs_under_strict_rank_promotion(model_and_variables):
    """CompactCNN runs with jax_numpy_rank_promotion='raise' (no implicit broadcasting)."""
    model, variables = model_and_variables
    with jax.numpy_rank_promotion("raise"):
        chex.assert_shape(model.apply(variables, _images(1), train=False), (1, 10))


# ---------------------------------------------------------------------------
# eval_logits_fn.


def test_eval_logits_fn_is_pure_and_deterministic(model_and_variables):
    """eval_logits_fn: same input -> identical logits, equal to apply(train=False), with the
    variables unchanged; each example's logits do not depend on the rest of the batch
    (running statistics, no dropout); and train mode does differ."""
    model, variables = model_and_variables
    before = jax.tree.map(np.array, variables)
    logits_fn = eval_logits_fn(model, variables)
    x = _images(4)
    first, second = logits_fn(x), logits_fn(x)
    chex.assert_trees_all_equal(first, second)
    chex.assert_trees_all_equal(first, model.apply(variables, x, train=False))
    chex.assert_trees_all_equal(jax.tree.map(np.asarray, variables), before)
    alone = jnp.concatenate([logits_fn(x[i : i + 1]) for i in range(4)])
    chex.assert_trees_all_close(alone, first, atol=1e-5, rtol=1e-5)
    train_logits, _ = model.apply(
        variables, x, train=True, rngs={"dropout": jax.random.key(0)}, mutable=["batch_stats"]
    )
    assert not np.allclose(train_logits, first, atol=1e-3)


def test_eval_logits_fn_works_under_jit_and_traces_once(model_and_variables):
    """jax.jit(eval_logits_fn(...)) matches eager and does not retrace for new data."""
    model, variables = model_and_variables
    logits_fn = eval_logits_fn(model, variables)
    jitted = jax.jit(chex.assert_max_traces(lambda x: logits_fn(x), n=1))
    x1, x2 = _images(2, seed=1), _images(2, seed=2)
    chex.assert_trees_all_close(jax.jit(logits_fn)(x1), logits_fn(x1), atol=1e-5, rtol=1e-5)
    chex.assert_trees_all_close(jitted(x1), logits_fn(x1), atol=1e-5, rtol=1e-5)
    chex.assert_trees_all_close(jitted(x2), logits_fn(x2), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------
# conv2d_same: same function as lax.conv_general_dilated, custom VJP.

CONV_CASES = [
    ((2, 8, 8, 3), (3, 3, 3, 4)),
    ((1, 7, 5, 2), (1, 1, 2, 3)),
    ((2, 6, 6, 4), (5, 5, 4, 2)),
]
GRAD_TOL = dict(atol=1e-5, rtol=1e-5)


def _reference_conv(x, kernel):
    return lax.conv_general_dilated(
        x, kernel, window_strides=(1, 1), padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # fmt: skip


def _conv_inputs(x_shape, k_shape, seed=0):
    kx, kk, kg = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, x_shape)
    kernel = jax.random.normal(kk, k_shape)
    cotangent = jax.random.normal(kg, (*x_shape[:3], k_shape[3]))
    return x, kernel, cotangent


class Conv2dSameTest(chex.TestCase):
    """conv2d_same equals lax.conv_general_dilated (SAME) in value and gradients."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_value_and_grads_match_lax(self):
        """Value, and jax.grad w.r.t. input and kernel, match the lax convolution."""
        x, kernel, cotangent = _conv_inputs(*CONV_CASES[0])

        def value_and_grads(conv):
            def loss(x, kernel):
                return jnp.sum(jnp.sin(conv(x, kernel)) * cotangent)

            return conv(x, kernel), jax.grad(loss, argnums=(0, 1))(x, kernel)

        value, grads = self.variant(lambda: value_and_grads(conv2d_same))()
        ref_value, ref_grads = value_and_grads(_reference_conv)
        chex.assert_trees_all_close(value, ref_value, **GRAD_TOL)
        chex.assert_trees_all_close(grads, ref_grads, **GRAD_TOL)


@pytest.mark.parametrize("x_shape,k_shape", CONV_CASES)
def test_conv2d_same_vjp_matches_lax(x_shape, k_shape):
    """jax.vjp of conv2d_same gives the same primal output and input/kernel cotangents."""
    x, kernel, cotangent = _conv_inputs(x_shape, k_shape, seed=1)
    out, vjp = jax.vjp(conv2d_same, x, kernel)
    ref_out, ref_vjp = jax.vjp(_reference_conv, x, kernel)
    chex.assert_trees_all_equal(out, ref_out)
    chex.assert_trees_all_close(vjp(cotangent), ref_vjp(cotangent), **GRAD_TOL)


def test_conv2d_same_kernel_gradient_in_pieces_matches_lax():
    """A batch of two whole pieces of KERNEL_GRADIENT_ROWS and a remainder: the kernel
    cotangent summed over the pieces equals the lax convolution's over the whole batch."""
    per_piece = KERNEL_GRADIENT_ROWS // (8 * 8)
    x, kernel, cotangent = _conv_inputs((2 * per_piece + 3, 8, 8, 2), (3, 3, 2, 3), seed=4)
    _, vjp = jax.vjp(conv2d_same, x, kernel)
    _, ref_vjp = jax.vjp(_reference_conv, x, kernel)
    chex.assert_trees_all_close(vjp(cotangent), ref_vjp(cotangent), atol=1e-3, rtol=1e-5)


def test_conv2d_same_inside_fori_loop_matches_lax():
    """Inside lax.fori_loop (a PGD-like input-gradient loop, then a kernel gradient through
    the whole loop) conv2d_same and the lax convolution agree."""
    x, kernel, cotangent = _conv_inputs((2, 8, 8, 3), (3, 3, 3, 4), seed=2)

    def run(conv, kernel):
        def loss(z):
            return jnp.sum(jnp.tanh(conv(z, kernel)) * cotangent)

        def body(_, z):
            return z + 0.05 * jnp.sign(jax.grad(loss)(z)) + 0.01 * jax.grad(loss)(z)

        z = lax.fori_loop(0, 3, body, x)
        return loss(z), z

    (value, z), (ref_value, ref_z) = run(conv2d_same, kernel), run(_reference_conv, kernel)
    chex.assert_trees_all_close(z, ref_z, **GRAD_TOL)
    chex.assert_trees_all_close(value, ref_value, **GRAD_TOL)
    dk = jax.jit(jax.grad(lambda k: run(conv2d_same, k)[0]))(kernel)
    ref_dk = jax.jit(jax.grad(lambda k: run(_reference_conv, k)[0]))(kernel)
    chex.assert_trees_all_close(dk, ref_dk, atol=1e-4, rtol=1e-4)


def test_conv2d_same_second_order_grad_matches_lax():
    """Reverse-over-reverse (grad of an input-gradient norm, as when differentiating through
    an attack) matches the lax convolution."""
    x, kernel, cotangent = _conv_inputs((1, 6, 6, 2), (3, 3, 2, 3), seed=3)

    def outer(conv, kernel):
        inner = jax.grad(lambda z: jnp.sum(jnp.tanh(conv(z, kernel)) * cotangent))(x)
        return jnp.sum(inner**2)

    chex.assert_trees_all_close(
        jax.grad(lambda k: outer(conv2d_same, k))(kernel),
        jax.grad(lambda k: outer(_reference_conv, k))(kernel),
        **GRAD_TOL,
    )


# ---------------------------------------------------------------------------
# max_pool_2x2.


@pytest.mark.parametrize(
    "shape", [(2, 8, 6, 3), (1, 2, 2, 1), pytest.param((3, 32, 32, 4), marks=pytest.mark.slow)]
)
def test_max_pool_2x2_equals_flax_max_pool(shape):
    """max_pool_2x2 equals nn.max_pool(x, (2, 2), strides=(2, 2)) in value and (for inputs
    without ties) gradient."""
    x = jax.random.normal(jax.random.key(0), shape)
    reference = lambda z: nn.max_pool(z, (2, 2), strides=(2, 2))  # noqa: E731
    chex.assert_trees_all_equal(max_pool_2x2(x), reference(x))
    g = jax.random.normal(jax.random.key(1), reference(x).shape)
    chex.assert_trees_all_equal(
        jax.grad(lambda z: jnp.sum(max_pool_2x2(z) * g))(x),
        jax.grad(lambda z: jnp.sum(reference(z) * g))(x),
    )


def test_max_pool_2x2_gradient_goes_to_the_first_tied_maximum():
    """With ties in a window the whole gradient goes to the first maximum in row-major
    order (PyTorch's max_pool2d rule), never split and never to a non-maximum."""
    windows = np.array(
        [
            [[1.0, 1.0], [0.0, 1.0]],  # tie among (0,0), (0,1), (1,1): first is (0,0)
            [[0.0, 2.0], [2.0, 0.0]],  # tie among (0,1), (1,0): first is (0,1)
            [[0.0, 0.0], [0.0, 0.0]],  # all tied (a ReLU-zeroed window): (0,0)
            [[0.0, 0.0], [3.0, 3.0]],  # tie in the bottom row: (1,0)
        ],
        np.float32,
    )
    x = np.zeros((1, 2, 8, 1), np.float32)
    for k, window in enumerate(windows):
        x[0, :, 2 * k : 2 * k + 2, 0] = window
    g = np.array([1.0, 2.0, 3.0, 4.0], np.float32).reshape(1, 1, 4, 1)
    grad = jax.grad(lambda z: jnp.sum(max_pool_2x2(z) * g))(jnp.asarray(x))
    expected = np.zeros_like(x)
    for k, (i, j) in enumerate([(0, 0), (0, 1), (0, 0), (1, 0)]):
        expected[0, i, 2 * k + j, 0] = g[0, 0, k, 0]
    np.testing.assert_array_equal(np.asarray(grad), expected)


@pytest.mark.parametrize("shape", [(1, 7, 8, 3), (1, 8, 5, 3), (2, 3, 3, 1)])
def test_max_pool_2x2_rejects_odd_spatial_sizes(shape):
    """Odd height or width raises ValueError naming the shape."""
    with pytest.raises(ValueError, match="even"):
        max_pool_2x2(jnp.zeros(shape))
