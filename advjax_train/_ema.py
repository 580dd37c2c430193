"""An exponential moving average of the weights, evaluated with its own batch statistics.

Averaging the weights over the last steps of adversarial training gives a model more robust
than the last iterate (Gowal et al., "Uncovering the limits of adversarial training against
norm-bounded adversarial examples", 2020). The running batch-norm statistics of the live
model do not belong to the averaged weights, so they are recomputed: the training step runs
on the averaged weights for a few batches and only its updated statistics are kept.
"""

from typing import Callable, Iterable

import jax
import jax.numpy as jnp

from advjax_train._steps import Batch, TrainState

BN_RECOMPUTE_BATCHES = 30
"""Training batches run on the averaged weights to recompute their batch statistics (with
the CNN's momentum 0.9, the starting statistics keep a weight of 0.9**30 = 4 %)."""


def ema_decay_at(step: int, decay: float) -> float:
    """The decay at update `step` (0-based): `min(decay, (1 + step) / (10 + step))`, so the
    first updates follow the weights closely (TensorFlow's ExponentialMovingAverage warm-up)."""
    return min(decay, (1.0 + step) / (10.0 + step))


@jax.jit
def ema_update(average, params, decay):
    """`decay * average + (1 - decay) * params`, leaf by leaf."""
    return jax.tree.map(lambda a, p: decay * a + (1.0 - decay) * p, average, params)


def recompute_batch_stats(
    step_fn: Callable, state: TrainState, params, batches: Iterable[tuple[Batch, jax.Array]]
):
    """The batch statistics of `params`: `state`'s running statistics updated by the training
    step `step_fn(state, batch, key)` (not donating) run on `params`, whose own parameter and
    optimiser updates are discarded. The inputs are the step's own (augmented, attacked
    against `params`), so the statistics are those the averaged model sees in training."""
    probe = state.replace(params=params, batch_stats=jax.tree.map(jnp.copy, state.batch_stats))
    for batch, key in batches:
        updated, _ = step_fn(probe, batch, key)
        probe = probe.replace(batch_stats=updated.batch_stats)
    return probe.batch_stats
