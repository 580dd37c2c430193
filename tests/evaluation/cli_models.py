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


KILL_AFTER_ENV = "ADVJAX_TEST_KILL_AFTER"
"""Model evaluations after which `self_killing_logits_fn`'s process SIGKILLs itself."""


def self_killing_logits_fn():
    """The linear classifier, counting its evaluations on the host; with $ADVJAX_TEST_KILL_AFTER
    set, the process SIGKILLs itself at that evaluation (a crash at a known point of a run),
    else it only counts (the same program, so an uninterrupted run is comparable)."""
    import os
    import signal

    f = linear_logits_fn()
    limit = int(os.environ.get(KILL_AFTER_ENV, "0"))
    calls = [0]

    def count():
        calls[0] += 1
        if limit and calls[0] >= limit:
            os.kill(os.getpid(), signal.SIGKILL)

    def logits_fn(x):
        jax.debug.callback(count)
        return f(x)

    return logits_fn


def small_linear_logits_fn():
    """A fixed random linear classifier of 8x8 RGB images into 4 classes."""
    w = jax.random.normal(jax.random.key(1), (8 * 8 * 3, 4)) * 0.2
    return lambda x: x.reshape(x.shape[0], -1) @ w


def three_class_logits_fn():
    """A fixed random linear classifier of 8x8 RGB images into 3 classes."""
    w = jax.random.normal(jax.random.key(2), (8 * 8 * 3, 3)) * 0.2
    return lambda x: x.reshape(x.shape[0], -1) @ w
