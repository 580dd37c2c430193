"""advjax.backend.fast_path: the same function (forward bit for bit, derivatives to float
tolerance, against JAX's own autodiff of the untouched function), and inside a loop every
convolution of its input gradient compiles to XLA's fast layout with no scatter."""

import re

import chex
import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import lax

import advjax
import advjax_train
from advjax.backend import fast_path
from advjax.backend._fast_path import FAST_PATH_VARIABLE

FAST_LAYOUT = "b01f_01io->b01f"


def _conv(x, kernel, dims=("NHWC", "HWIO", "NHWC"), **kwargs):
    kwargs.setdefault("padding", "SAME")
    kwargs.setdefault("window_strides", (1,) * (x.ndim - 2))
    return lax.conv_general_dilated(x, kernel, dimension_numbers=dims, **kwargs)


def _normal(seed, shape, scale=0.3):
    return jax.random.normal(jax.random.key(seed), shape) * scale


class LinenNet(nn.Module):
    """Strided, depthwise and dilated convolutions, overlapping padded max pooling, average
    pooling: the forms common CNNs and ResNets use."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(16, (3, 3), strides=2)(x))
        x = nn.relu(nn.Conv(16, (3, 3), feature_group_count=16)(x))
        x = nn.relu(nn.Conv(16, (3, 3), kernel_dilation=2, use_bias=False)(x))
        x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
        x = nn.avg_pool(x, (2, 2), (1, 1))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


class EquinoxNet(eqx.Module):
    """Equinox's layers: NCHW/OIHW convolutions on one example, vmapped over the batch."""

    conv1: eqx.nn.Conv2d
    conv2: eqx.nn.Conv2d
    pool: eqx.nn.MaxPool2d
    head: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(3, 8, 3, padding=1, key=k1)
        self.conv2 = eqx.nn.Conv2d(8, 8, 3, stride=2, padding=1, key=k2)
        self.pool = eqx.nn.MaxPool2d(2, 2)
        self.head = eqx.nn.Linear(8 * 4 * 4, 10, key=k3)  # 16x16 inputs

    def __call__(self, x):
        x = self.pool(jax.nn.relu(self.conv1(x)))
        return self.head(jax.nn.relu(self.conv2(x)).reshape(-1))


class NNXNet(nnx.Module):
    def __init__(self, rngs):
        self.conv = nnx.Conv(3, 8, (3, 3), rngs=rngs)
        self.head = nnx.Linear(8 * 8 * 8, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.max_pool(nnx.relu(self.conv(x)), (2, 2), (2, 2))
        return self.head(x.reshape(x.shape[0], -1))


def _scan_and_remat(x):
    kernel = _normal(3, (3, 3, 3, 3))

    def body(carry, _):
        return jax.nn.relu(_conv(carry, kernel)), None

    x, _ = lax.scan(body, x, None, length=2)
    x = jax.checkpoint(lambda z: _conv(z, kernel))(x)
    return x.mean(axis=(1, 2))


def _nchw_plain(x):
    """A PyTorch port: NCHW input, OIHW kernel, `lax.conv`'s default layout."""
    x = jnp.transpose(x, (0, 3, 1, 2))
    x = jax.nn.relu(lax.conv(x, _normal(4, (8, 3, 3, 3)), (1, 1), "SAME"))
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    return x.reshape(x.shape[0], -1) @ _normal(5, (8 * 8 * 8, 10), 0.05)


def _conv1d(x):
    signal = x.reshape(x.shape[0], -1, 3)
    y = _conv(signal, _normal(6, (5, 3, 4)), dims=("NWC", "WIO", "NWC"), window_strides=(2,))
    return y.mean(axis=1)


def _models():
    x = jnp.zeros((2, 16, 16, 3))
    linen = LinenNet()
    linen_params = linen.init(jax.random.key(0), x)
    equinox = EquinoxNet(jax.random.key(1))
    nnx_model = NNXNet(nnx.Rngs(2))
    return {
        "linen": lambda z: linen.apply(linen_params, z),
        "linen_jitted": jax.jit(lambda z: linen.apply(linen_params, z)),
        "equinox": lambda z: jax.vmap(equinox)(jnp.transpose(z, (0, 3, 1, 2))),
        "nnx": lambda z: nnx_model(z),
        "scan_and_remat": _scan_and_remat,
        "nchw_plain": _nchw_plain,
        "conv1d": _conv1d,
    }


MODELS = _models()


def _inputs(seed=0, batch=4):
    return jax.random.uniform(jax.random.key(seed), (batch, 16, 16, 3))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_same_function_value_gradient_and_tangent(name):
    """Forward bit-identical; reverse- and forward-mode derivatives equal JAX's own of the
    untouched model to float tolerance; the same under vmap."""
    model = MODELS[name]
    fast = fast_path(model)
    x = _inputs()
    chex.assert_trees_all_equal(fast(x), model(x))
    weights = _normal(7, model(x).shape)
    loss = lambda f: lambda z: jnp.sum(f(z) * weights)  # noqa: E731
    chex.assert_trees_all_close(
        jax.grad(loss(fast))(x), jax.grad(loss(model))(x), rtol=1e-5, atol=1e-6
    )
    tangent = _normal(8, x.shape)
    chex.assert_trees_all_close(
        jax.jvp(fast, (x,), (tangent,))[1],
        jax.jvp(model, (x,), (tangent,))[1],
        rtol=1e-5,
        atol=1e-6,
    )
    per_example = jax.vmap(lambda z: fast(z[None])[0])(x)
    chex.assert_trees_all_close(per_example, model(x), rtol=1e-6, atol=1e-6)


def _loop_hlo(fn, x) -> str:
    """Optimised HLO of two input-gradient steps inside a fori_loop, as in an attack."""

    def step(i, z):
        return z + 1e-3 * jax.grad(lambda u: jnp.sum(fn(u) ** 2))(z)

    return jax.jit(lambda z: lax.fori_loop(0, 2, step, z)).lower(x).compile().as_text()


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the rewrite acts on the CPU only")
@pytest.mark.parametrize("name", ["linen", "equinox", "nchw_plain", "scan_and_remat"])
def test_input_gradients_in_a_loop_compile_to_the_fast_layout(name):
    """Every convolution of the rewritten model's input gradient inside a loop is NHWC/HWIO
    and none is input-dilated (a strided convolution's gradient comes as stride-1 ones), and
    no max pooling gradient is a scatter; the untouched model (control) has other layouts,
    an input-dilated convolution or a scatter, so the check can tell them apart."""
    model = MODELS[name]
    x = _inputs()
    fast = _loop_hlo(fast_path(model), x)
    assert set(re.findall(r"dim_labels=([^,\s]+)", fast)) == {FAST_LAYOUT}
    assert " scatter(" not in fast and "lhs_dilate" not in fast
    if name in ("linen", "equinox"):  # their strided convolutions
        assert "lhs_dilate" in _loop_hlo(model, x)
    slow = _loop_hlo(model, x)
    assert set(re.findall(r"dim_labels=([^,\s]+)", slow)) != {FAST_LAYOUT} or " scatter(" in slow


def test_max_pool_gradient_goes_to_the_first_maximum_as_xla_does():
    """On windows full of ties (overlapping, padded) the gradient equals JAX's own
    select-and-scatter exactly: the first maximum of each window, row-major."""
    x = jnp.round(jax.random.uniform(jax.random.key(9), (2, 9, 9, 2)) * 2)

    def pool(z):
        return lax.reduce_window(z, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

    g = _normal(10, pool(x).shape)
    expected = jax.grad(lambda z: jnp.sum(pool(z) * g))(x)
    got = jax.grad(lambda z: jnp.sum(fast_path(pool)(z) * g))(x)
    chex.assert_trees_all_close(got, expected, rtol=1e-6, atol=1e-6)
    assert int(jnp.sum(got != 0)) < x.size  # ties really occur: some inputs get nothing


def test_parameter_gradients_under_jit_match():
    """Parameters passed through jit and differentiated (the kernel's tangent path) give
    JAX's own gradient."""
    linen = LinenNet()
    x = _inputs()
    params = linen.init(jax.random.key(0), x)

    def loss(p, fn):
        return jnp.sum(fn(lambda z: linen.apply(p, z))(x) ** 2)

    got = jax.jit(jax.grad(lambda p: loss(p, fast_path)))(params)
    expected = jax.jit(jax.grad(lambda p: loss(p, lambda f: f)))(params)
    chex.assert_trees_all_close(got, expected, rtol=1e-4, atol=1e-6)


def test_random_models_and_static_arguments_pass_through():
    """A `logits_fn(x, key)` keeps its key argument; a non-array argument stays a Python value."""

    def model(x, key, *, scale):
        assert isinstance(scale, float)
        return MODELS["linen"](x + scale * jax.random.normal(key, x.shape))

    x, key = _inputs(), jax.random.key(11)
    chex.assert_trees_all_equal(fast_path(model)(x, key, scale=0.1), model(x, key, scale=0.1))


def test_idempotent_and_opt_out(monkeypatch):
    model = MODELS["linen"]
    fast = fast_path(model)
    assert fast is not model
    assert fast_path(fast) is fast
    monkeypatch.setenv(FAST_PATH_VARIABLE, "0")
    assert fast_path(model) is model


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the rewrite acts on the CPU only")
def test_attacks_apply_it_to_the_users_model(monkeypatch):
    """advjax.attacks.pgd on a plain NCHW model compiles with fast-layout convolutions only; with the
    rewrite turned off it does not (the same program, the user's layouts)."""
    x = _inputs(batch=2)
    y = jnp.argmax(_nchw_plain(x), -1)

    def layouts():
        program = jax.jit(
            lambda a, b, k: advjax.attacks.pgd(_nchw_plain, a, b, 8 / 255, key=k, steps=2).x_adv
        )
        text = program.lower(x, y, jax.random.key(0)).compile().as_text()
        return set(re.findall(r"dim_labels=([^,\s]+)", text))

    assert layouts() == {FAST_LAYOUT}
    monkeypatch.setenv(FAST_PATH_VARIABLE, "0")
    assert layouts() != {FAST_LAYOUT}


def test_attack_results_unchanged_on_a_model_already_in_the_fast_layout():
    """On advjax's own CNN (custom VJPs, NHWC) PGD gives the same points with and without the
    rewrite."""
    model = advjax_train.CompactCNN()
    x = _inputs(batch=3)
    x32 = jnp.asarray(np.asarray(jax.image.resize(x, (3, 32, 32, 3), "nearest")))
    variables = model.init(jax.random.key(0), x32, train=False)
    logits_fn = advjax_train.eval_logits_fn(model, variables)
    y = jnp.argmax(logits_fn(x32), -1)

    def run():
        return advjax.attacks.pgd(logits_fn, x32, y, 8 / 255, key=jax.random.key(1), steps=3).x_adv

    fast = run()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FAST_PATH_VARIABLE, "0")
        plain = run()
    chex.assert_trees_all_equal(fast, plain)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the rewrite acts on the CPU only")
def test_a_narrow_layers_input_gradient_runs_on_eight_features():
    """A convolution with 3 input features (an RGB layer; here 3 -> 3, so no other convolution
    has 8) has its input gradient computed on the features zero-padded to 8, where XLA's CPU
    kernels run faster; the untouched model's gradient has 3. The values equal JAX's own
    gradient (`test_same_function_value_gradient_and_tangent`)."""

    def features(hlo):
        return {int(s.split(",")[-1]) for s in re.findall(r"= f32\[([\d,]+)\]\{[^}]*\} convolution\(", hlo)}  # fmt: skip

    x = _inputs()
    assert 8 in features(_loop_hlo(fast_path(MODELS["scan_and_remat"]), x))
    assert features(_loop_hlo(MODELS["scan_and_remat"], x)) == {3}
