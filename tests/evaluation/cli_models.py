"""Model factories for the `python -m advjax.evaluate --model module:function` tests."""

import jax
import jax.numpy as jnp


def linear_logits_fn():
    """A fixed random linear classifier of CIFAR-10 images (not an advjax model)."""
    w = jax.random.normal(jax.random.key(0), (32 * 32 * 3, 10)) * 0.02
    return lambda x: x.reshape(x.shape[0], -1) @ w


def softmax_logits_fn():
    """The same classifier returning probabilities: the checks must flag it."""
    f = linear_logits_fn()
    return lambda x: jax.nn.softmax(f(x))


def no_args():
    return jnp.zeros(3)
