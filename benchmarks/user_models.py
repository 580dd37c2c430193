"""Models advjax never saw, written as users of each JAX library write them, with one set of
weights shared by every framework (and by the PyTorch peer, `benchmarks/torch_user_models.py`).

Two architectures on CIFAR-shaped inputs (32x32x3, pixels in [0, 1]):

- `cnn`: conv32-conv32-pool-conv64-conv64-pool-fc128-fc10 (3x3 'SAME' convolutions, ReLU,
  2x2 max pooling), 591,274 parameters;
- `resnet`: a small ResNet: a 3x3 stem of 16 channels, three basic blocks of 16, 32 and 64
  channels (the last two with stride-2 convolutions and 1x1 stride-2 projections), global
  average pooling and a linear head.

`cnn` is built four ways (plain `jax.numpy`/`lax`, Flax Linen, Flax NNX, Equinox) and
`resnet` with Flax Linen. Every builder returns `logits_fn(x)` for NHWC images; Equinox's
layers are NCHW, so its `logits_fn` transposes, as a user of Equinox does. Weights are stored
once, in NHWC/HWIO terms (`cnn_weights`, `resnet_weights`), and laid out per framework here.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

CNN_CHANNELS = (32, 32, 64, 64)
RESNET_CHANNELS = (16, 32, 64)


def _he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def cnn_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """HWIO kernels `conv{i}`, biases `conv{i}_b`; dense `fc{i}` as (in, out) with fc0's rows
    in NHWC-flatten order."""
    rng = np.random.default_rng(seed)
    weights, c_in = {}, 3
    for i, c_out in enumerate(CNN_CHANNELS):
        weights[f"conv{i}"] = _he(rng, (3, 3, c_in, c_out), 9 * c_in)
        weights[f"conv{i}_b"] = np.zeros(c_out, np.float32)
        c_in = c_out
    weights["fc0"] = _he(rng, (8 * 8 * 64, 128), 8 * 8 * 64)
    weights["fc0_b"] = np.zeros(128, np.float32)
    weights["fc1"] = _he(rng, (128, 10), 128)
    weights["fc1_b"] = np.zeros(10, np.float32)
    return weights


def resnet_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """`stem`, per block b: `b{b}_conv0`, `b{b}_conv1`, `b{b}_proj` (1x1, where the shape
    changes), biases with `_b`; `head` as (in, out)."""
    rng = np.random.default_rng(seed)
    weights = {"stem": _he(rng, (3, 3, 3, 16), 27), "stem_b": np.zeros(16, np.float32)}
    c_in = 16
    for b, c_out in enumerate(RESNET_CHANNELS):
        weights[f"b{b}_conv0"] = _he(rng, (3, 3, c_in, c_out), 9 * c_in)
        weights[f"b{b}_conv1"] = _he(rng, (3, 3, c_out, c_out), 9 * c_out) * 0.5
        weights[f"b{b}_conv0_b"] = np.zeros(c_out, np.float32)
        weights[f"b{b}_conv1_b"] = np.zeros(c_out, np.float32)
        if b > 0:
            weights[f"b{b}_proj"] = _he(rng, (1, 1, c_in, c_out), c_in)
            weights[f"b{b}_proj_b"] = np.zeros(c_out, np.float32)
        c_in = c_out
    weights["head"] = _he(rng, (64, 10), 64)
    weights["head_b"] = np.zeros(10, np.float32)
    return weights


def _channels(v):
    """A per-channel vector shaped to broadcast over NHWC (or (batch, features)) explicitly."""
    return lambda y: y + jnp.reshape(v, (1,) * (y.ndim - 1) + (-1,))


def nchw_flatten_rows(fc: np.ndarray, height: int, width: int, channels: int) -> np.ndarray:
    """fc's rows reordered from NHWC-flatten (h, w, c) to NCHW-flatten (c, h, w) order."""
    rows = fc.reshape(height, width, channels, -1)
    return np.ascontiguousarray(rows.transpose(2, 0, 1, 3).reshape(height * width * channels, -1))


# cnn, four ways.


def plain_cnn(weights: dict[str, np.ndarray]):
    """`jax.numpy` and `lax` only: `lax.conv_general_dilated` and `lax.reduce_window`."""
    w = {k: jnp.asarray(v) for k, v in weights.items()}

    def conv(x, i):
        y = lax.conv_general_dilated(
            x, w[f"conv{i}"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return jax.nn.relu(_channels(w[f"conv{i}_b"])(y))

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def logits_fn(x):
        x = pool(conv(conv(x, 0), 1))
        x = pool(conv(conv(x, 2), 3))
        x = jax.nn.relu(_channels(w["fc0_b"])(x.reshape(x.shape[0], -1) @ w["fc0"]))
        return _channels(w["fc1_b"])(x @ w["fc1"])

    return logits_fn


def linen_cnn(weights: dict[str, np.ndarray]):
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            for i, c in enumerate(CNN_CHANNELS):
                x = nn.relu(nn.Conv(c, (3, 3), name=f"conv{i}")(x))
                if i % 2:
                    x = nn.max_pool(x, (2, 2), strides=(2, 2))
            x = nn.relu(nn.Dense(128, name="fc0")(x.reshape(x.shape[0], -1)))
            return nn.Dense(10, name="fc1")(x)

    params = {
        name: {"kernel": jnp.asarray(weights[name]), "bias": jnp.asarray(weights[f"{name}_b"])}
        for name in ("conv0", "conv1", "conv2", "conv3", "fc0", "fc1")
    }
    model = CNN()
    return lambda x: model.apply({"params": params}, x)


def nnx_cnn(weights: dict[str, np.ndarray]):
    from flax import nnx

    class CNN(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            c_in, convs = 3, []
            for c in CNN_CHANNELS:
                convs.append(nnx.Conv(c_in, c, (3, 3), rngs=rngs))
                c_in = c
            self.convs = nnx.List(convs)
            self.fc0 = nnx.Linear(8 * 8 * 64, 128, rngs=rngs)
            self.fc1 = nnx.Linear(128, 10, rngs=rngs)

        def __call__(self, x):
            for i, conv in enumerate(self.convs):
                x = nnx.relu(conv(x))
                if i % 2:
                    x = nnx.max_pool(x, (2, 2), strides=(2, 2))
            x = nnx.relu(self.fc0(x.reshape(x.shape[0], -1)))
            return self.fc1(x)

    model = CNN(nnx.Rngs(0))
    for i, conv in enumerate(model.convs):
        conv.kernel[...] = jnp.asarray(weights[f"conv{i}"])
        conv.bias[...] = jnp.asarray(weights[f"conv{i}_b"])
    for name in ("fc0", "fc1"):
        getattr(model, name).kernel[...] = jnp.asarray(weights[name])
        getattr(model, name).bias[...] = jnp.asarray(weights[f"{name}_b"])
    return lambda x: model(x)


def equinox_cnn(weights: dict[str, np.ndarray]):
    """Equinox's NCHW layers on one example, vmapped; the logits_fn takes NHWC images."""
    import equinox as eqx

    class CNN(eqx.Module):
        convs: list
        pool: eqx.nn.MaxPool2d
        fc0: eqx.nn.Linear
        fc1: eqx.nn.Linear

        def __init__(self, key):
            keys = jax.random.split(key, 6)
            c_in, convs = 3, []
            for i, c in enumerate(CNN_CHANNELS):
                convs.append(eqx.nn.Conv2d(c_in, c, 3, padding=1, key=keys[i]))
                c_in = c
            self.convs = convs
            self.pool = eqx.nn.MaxPool2d(2, 2)
            self.fc0 = eqx.nn.Linear(8 * 8 * 64, 128, key=keys[4])
            self.fc1 = eqx.nn.Linear(128, 10, key=keys[5])

        def __call__(self, x):
            for i, conv in enumerate(self.convs):
                x = jax.nn.relu(conv(x))
                if i % 2:
                    x = self.pool(x)
            return self.fc1(jax.nn.relu(self.fc0(x.reshape(-1))))

    model = CNN(jax.random.key(0))
    for i in range(4):
        kernel = jnp.asarray(weights[f"conv{i}"].transpose(3, 2, 0, 1))
        bias = jnp.asarray(weights[f"conv{i}_b"])[:, None, None]
        model = eqx.tree_at(
            lambda m, i=i: (m.convs[i].weight, m.convs[i].bias), model, (kernel, bias)
        )
    fc0 = nchw_flatten_rows(weights["fc0"], 8, 8, 64)
    model = eqx.tree_at(
        lambda m: (m.fc0.weight, m.fc0.bias, m.fc1.weight, m.fc1.bias),
        model,
        (
            jnp.asarray(fc0.T),
            jnp.asarray(weights["fc0_b"]),
            jnp.asarray(weights["fc1"].T),
            jnp.asarray(weights["fc1_b"]),
        ),
    )
    return lambda x: jax.vmap(model)(jnp.transpose(x, (0, 3, 1, 2)))


# resnet, with Flax Linen.


def linen_resnet(weights: dict[str, np.ndarray]):
    import flax.linen as nn

    class Block(nn.Module):
        channels: int
        strides: int

        @nn.compact
        def __call__(self, x):
            s = (self.strides, self.strides)
            y = nn.relu(nn.Conv(self.channels, (3, 3), strides=s, name="conv0")(x))
            y = nn.Conv(self.channels, (3, 3), name="conv1")(y)
            if self.strides != 1 or x.shape[-1] != self.channels:
                x = nn.Conv(self.channels, (1, 1), strides=s, name="proj")(x)
            return nn.relu(x + y)

    class ResNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(16, (3, 3), name="stem")(x))
            for b, c in enumerate(RESNET_CHANNELS):
                x = Block(c, 1 if b == 0 else 2, name=f"b{b}")(x)
            return nn.Dense(10, name="head")(x.mean(axis=(1, 2)))

    def layer(name):
        return {"kernel": jnp.asarray(weights[name]), "bias": jnp.asarray(weights[f"{name}_b"])}

    params = {"stem": layer("stem"), "head": layer("head")}
    for b in range(len(RESNET_CHANNELS)):
        block = {n: layer(f"b{b}_{n}") for n in ("conv0", "conv1")}
        if b > 0:
            block["proj"] = layer(f"b{b}_proj")
        params[f"b{b}"] = block
    model = ResNet()
    return lambda x: model.apply({"params": params}, x)


MODELS = {
    "plain_cnn": ("cnn", plain_cnn),
    "linen_cnn": ("cnn", linen_cnn),
    "nnx_cnn": ("cnn", nnx_cnn),
    "equinox_cnn": ("cnn", equinox_cnn),
    "linen_resnet": ("resnet", linen_resnet),
}
WEIGHTS = {"cnn": cnn_weights, "resnet": resnet_weights}


def torch_layout(arch: str, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The weights in PyTorch's layout: OIHW kernels, (out, in) linear weights, fc0's
    columns in NCHW-flatten order."""
    out = {}
    for name, value in weights.items():
        if value.ndim == 4:
            out[name] = np.ascontiguousarray(value.transpose(3, 2, 0, 1))
        elif value.ndim == 2:
            if arch == "cnn" and name == "fc0":
                value = nchw_flatten_rows(value, 8, 8, 64)
            out[name] = np.ascontiguousarray(value.T)
        else:
            out[name] = value
    return out


def plain_compact_cnn(variables: dict, activation: str = "relu"):
    """A trained `advjax_train.CompactCNN` written again as a user's port would be: plain
    `lax.conv_general_dilated`, batch norm as arithmetic on the running statistics,
    `lax.reduce_window` max pooling; no advjax layer, no custom derivative."""
    from advjax_train import CIFAR10_MEAN, CIFAR10_STD

    params, stats = variables["params"], variables["batch_stats"]
    act = {"relu": jax.nn.relu, "silu": jax.nn.silu}[activation]
    blocks = sorted((k for k in params if k.startswith("ConvBNReLU_")), key=lambda k: int(k[11:]))
    layers = []
    for name in blocks:
        bn, st = params[name]["BatchNorm_0"], stats[name]["BatchNorm_0"]
        layers.append(
            (
                jnp.asarray(params[name]["Conv3x3_0"]["kernel"]),
                jnp.asarray(st["mean"]),
                jnp.asarray(bn["scale"]) * lax.rsqrt(jnp.asarray(st["var"]) + 1e-5),
                jnp.asarray(bn["bias"]),
            )
        )
    dense = [
        (jnp.asarray(params[d]["kernel"]), jnp.asarray(params[d]["bias"]))
        for d in ("Dense_0", "Dense_1")
    ]
    mean = jnp.asarray(CIFAR10_MEAN).reshape(1, 1, 1, 3)
    std = jnp.asarray(CIFAR10_STD).reshape(1, 1, 1, 3)

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def logits_fn(x):
        x = (x - mean) / std
        for i, (kernel, m, scale, bias) in enumerate(layers):
            x = lax.conv_general_dilated(
                x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
            x = act(_channels(bias)(_channels(-m)(x) * scale.reshape(1, 1, 1, -1)))
            if i in (1, 3, 4):
                x = pool(x)
        x = act(_channels(dense[0][1])(x.reshape(x.shape[0], -1) @ dense[0][0]))
        return _channels(dense[1][1])(x @ dense[1][0])

    return logits_fn
