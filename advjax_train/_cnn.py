"""The compact CIFAR-10 CNN of the robustness study (403,306 trainable parameters)."""

import dataclasses
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import Partial

from advjax.io import load_checkpoint, model_hash
from advjax.types import Array, LogitsFn
from advjax_train._layers import conv2d_same, max_pool_2x2

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
NUM_CLASSES = 10


def torch_default_init():
    """PyTorch's default Conv/Linear initialisation: uniform in +-1/sqrt(fan_in).

    (kaiming_uniform with a=sqrt(5) for weights, the same bound for biases.) The reproduced
    study was trained in PyTorch; with Adam and batch norm the initial weight scale sets the
    effective step size, and Flax's lecun_normal (sqrt(3) larger) trains measurably slower
    here (about 5 points lower validation accuracy after 12 epochs).
    Fan-in is the product of all kernel axes but the last (HWIO conv, (in, out) dense).
    """

    def init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
        bound = 1.0 / np.sqrt(max(1, int(np.prod(shape[:-1]))))
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _torch_bias_init(fan_in: int):
    """PyTorch's default bias initialisation: uniform in +-1/sqrt(fan_in)."""
    bound = 1.0 / np.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(
        key, shape, dtype, -bound, bound
    )


def _dense(x: Array, features: int) -> Array:
    return nn.Dense(
        features, kernel_init=torch_default_init(), bias_init=_torch_bias_init(x.shape[-1])
    )(x)


class Conv3x3(nn.Module):
    """3x3 'SAME' convolution without bias, using the CPU-friendly `conv2d_same`."""

    features: int

    @nn.compact
    def __call__(self, x: Array) -> Array:
        kernel = self.param("kernel", torch_default_init(), (3, 3, x.shape[-1], self.features))
        return conv2d_same(x, kernel.astype(x.dtype))


ACTIVATIONS = {"relu": nn.relu, "silu": nn.silu}
"""The CNN's activation functions by name. ReLU is the study's; SiLU (x * sigmoid(x)) is the
smooth activation of smooth adversarial training (Xie et al. 2020), with the same parameters."""


def check_activation(name: str) -> None:
    """Raises ValueError, naming the choices, when `name` is not in ACTIVATIONS."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation={name!r} must be one of {tuple(ACTIVATIONS)}")


def check_width(width) -> None:
    """Raises ValueError unless `width` is an integer >= 1."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width={width!r} must be an integer >= 1")


class ConvBNReLU(nn.Module):
    """Conv3x3 -> BatchNorm -> activation (ReLU unless told otherwise).

    The class keeps its name whatever the activation: Flax derives the parameter paths
    (`ConvBNReLU_0`, ...) from it, and saved checkpoints rely on them.
    """

    features: int
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        x = Conv3x3(self.features)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
        return ACTIVATIONS[self.activation](x)


class CompactCNN(nn.Module):
    """conv32-conv32-pool, conv64-conv64-pool, conv128-pool, dense128-dropout, dense10.

    Takes NHWC pixels in [0, 1]; the CIFAR-10 mean/std normalisation happens inside, so an
    attack's eps is always in pixel units. `activation` (ReLU by default) follows every conv
    block and the dense128 layer. `width` multiplies every layer's channels and the dense
    layer's units (2: about 4x the parameters), a capacity diagnostic; the study's model is 1.
    """

    num_classes: int = NUM_CLASSES
    dropout_rate: float = 0.5
    activation: str = "relu"
    width: int = 1

    def __post_init__(self):
        check_activation(self.activation)
        check_width(self.width)
        super().__post_init__()

    def checkpoint_fields(self) -> dict:
        """What a checkpoint stores to rebuild it (`width` only when not the study's 1)."""
        fields = dict(num_classes=self.num_classes, dropout_rate=self.dropout_rate,
                      activation=self.activation)  # fmt: skip
        return fields | ({} if self.width == 1 else {"width": self.width})

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        channel_shape = (1,) * (x.ndim - 1) + (-1,)
        mean = jnp.asarray(CIFAR10_MEAN, x.dtype).reshape(channel_shape)
        std = jnp.asarray(CIFAR10_STD, x.dtype).reshape(channel_shape)
        x = (x - mean) / std
        for features, convs in ((32, 2), (64, 2), (128, 1)):
            for _ in range(convs):
                x = ConvBNReLU(features * self.width, self.activation)(x, train)
            x = max_pool_2x2(x)
        x = x.reshape(x.shape[0], -1)
        x = ACTIVATIONS[self.activation](_dense(x, 128 * self.width))
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        return _dense(x, self.num_classes)


@dataclasses.dataclass(frozen=True)
class _EvalApply:
    """`model.apply` in eval mode; equal for equal module definitions, so jitted programs
    that take the logits function as an argument are shared between models."""

    model: nn.Module

    def __call__(self, variables: Mapping[str, Any], x: Array) -> Array:
        return self.model.apply(variables, x, train=False)


def load_logits_fn(path) -> tuple[LogitsFn, str]:
    """(logits_fn, model_hash) of a CompactCNN checkpoint: the model in eval mode, ready to
    attack.

    Raises:
      advjax.io.CheckpointError: as `advjax.io.load_checkpoint`.

    Example:
      >>> logits_fn, digest = load_logits_fn("results/cifar10/default/checkpoints/standard.msgpack")
    """
    model, variables = load_checkpoint(path, CompactCNN)
    return eval_logits_fn(model, variables), model_hash(path)


def eval_logits_fn(model: nn.Module, variables: Mapping[str, Any]) -> LogitsFn:
    """A pure eval-mode `logits_fn(x) -> logits` (running batch statistics, no dropout).

    It is a `jax.tree_util.Partial` whose leaves are the variables: advjax's jitted
    evaluation programs take it as an argument, so every model of one architecture
    runs on one compiled program instead of each baking its weights into its own.
    """
    return Partial(_EvalApply(model), variables)
