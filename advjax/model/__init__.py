"""The study's compact CIFAR-10 CNN and the conv / pool primitives that keep it fast on CPU."""

from advjax.model._cnn import (
    ACTIVATIONS,
    CIFAR10_MEAN,
    CIFAR10_STD,
    CompactCNN,
    check_activation,
    check_width,
    eval_logits_fn,
    load_logits_fn,
)
from advjax.model._layers import (
    conv2d_same,
    max_pool_2x2,
)

__all__ = [
    "ACTIVATIONS",
    "check_activation",
    "check_width",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CompactCNN",
    "conv2d_same",
    "eval_logits_fn",
    "load_logits_fn",
    "max_pool_2x2",
]
