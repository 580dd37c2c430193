"""Train state, config and pure jitted steps: standard and FGSM adversarial training."""

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from advjax.attacks import check_eps, fgsm, per_example_cross_entropy
from advjax.augment import augment, to_float
from advjax.checkpoint import load_checkpoint, save_checkpoint
from advjax.model import CompactCNN
from advjax.types import Array

TRAINING_MODES = ("standard", "fgsm")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every hyper-parameter of a training run (defaults: the reference study's)."""

    mode: str = "standard"
    epochs: int = 12
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 5e-4
    dropout_rate: float = 0.5
    adv_eps: float = 8 / 255
    augment: bool = True
    seed: int = 42

    def __post_init__(self):
        if self.mode not in TRAINING_MODES:
            raise ValueError(f"mode={self.mode!r} must be one of {TRAINING_MODES}")
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if not self.learning_rate > 0 or not self.weight_decay >= 0:
            raise ValueError(
                f"learning_rate={self.learning_rate} must be > 0 and "
                f"weight_decay={self.weight_decay} >= 0"
            )
        check_eps(self.adv_eps)


class TrainState(train_state.TrainState):
    """Flax train state plus BatchNorm running statistics."""

    batch_stats: Any


class Batch(NamedTuple):
    """A training or evaluation batch: uint8 NHWC images and int32 labels."""

    images: Array
    labels: Array


def make_optimizer(config: TrainConfig, total_steps: int) -> optax.GradientTransformation:
    """AdamW with a cosine decay of the learning rate to zero over `total_steps`."""
    schedule = optax.cosine_decay_schedule(config.learning_rate, decay_steps=total_steps)
    return optax.adamw(schedule, weight_decay=config.weight_decay)


def create_train_state(key: jax.Array, config: TrainConfig, total_steps: int) -> TrainState:
    """Initialise the CompactCNN and its optimiser from `key`."""
    model = CompactCNN(dropout_rate=config.dropout_rate)
    variables = model.init({"params": key}, jnp.zeros((1, 32, 32, 3), jnp.float32), train=False)
    return TrainState.create(
        apply_fn=model.apply,
        params=variables["params"],
        batch_stats=variables["batch_stats"],
        tx=make_optimizer(config, total_steps),
    )


def _train_logits_fn(state: TrainState, params, key: jax.Array) -> Callable[[Array], Array]:
    """Train-mode logits (batch statistics, dropout) without the running-stat update."""

    def logits_fn(x: Array) -> Array:
        logits, _ = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            x,
            train=True,
            rngs={"dropout": key},
            mutable=["batch_stats"],
        )
        return logits

    return logits_fn


def _apply_gradients(state: TrainState, x: Array, y: Array, key: jax.Array):
    def loss_fn(params):
        logits, updates = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            x,
            train=True,
            rngs={"dropout": key},
            mutable=["batch_stats"],
        )
        return per_example_cross_entropy(logits, y).mean(), (logits, updates)

    (loss, (logits, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads, batch_stats=updates["batch_stats"])
    return state, loss, logits


def _prepare(batch: Batch, key: jax.Array, use_augment: bool) -> Array:
    x = to_float(batch.images)
    return augment(key, x) if use_augment else x


def standard_train_step(
    state: TrainState, batch: Batch, key: jax.Array, *, use_augment: bool = True
) -> tuple[TrainState, dict[str, Array]]:
    """One AdamW step on the cross-entropy of the (augmented) clean batch."""
    aug_key, dropout_key = jax.random.split(key)
    x = _prepare(batch, aug_key, use_augment)
    state, loss, logits = _apply_gradients(state, x, batch.labels, dropout_key)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch.labels)
    return state, {"loss": loss, "accuracy": accuracy}


def fgsm_train_step(
    state: TrainState,
    batch: Batch,
    key: jax.Array,
    *,
    eps: float = 8 / 255,
    use_augment: bool = True,
) -> tuple[TrainState, dict[str, Array]]:
    """One AdamW step on the clean batch and its FGSM version together.

    FGSM at `eps` is generated from the current parameters in train mode (batch statistics,
    dropout), as in the reference study; the loss is the mean cross-entropy over the
    concatenation of the clean and attacked batches.
    """
    aug_key, attack_key, dropout_key = jax.random.split(key, 3)
    x = _prepare(batch, aug_key, use_augment)
    x_adv = fgsm(_train_logits_fn(state, state.params, attack_key), x, batch.labels, eps)
    x_adv = jax.lax.stop_gradient(x_adv)
    both = jnp.concatenate([x, x_adv])
    labels = jnp.concatenate([batch.labels, batch.labels])
    state, loss, logits = _apply_gradients(state, both, labels, dropout_key)
    correct = jnp.argmax(logits, -1) == labels
    n = batch.labels.shape[0]
    return state, {
        "loss": loss,
        "accuracy": jnp.mean(correct[:n]),
        "adv_accuracy": jnp.mean(correct[n:]),
    }


def make_train_step(config: TrainConfig):
    """The jitted `train_step(state, batch, key) -> (state, metrics)` for `config.mode`.

    The input state's buffers are donated (updated in place), so the state passed in must
    not be used again; keep the returned one.
    """
    if config.mode == "fgsm":
        step = functools.partial(fgsm_train_step, eps=config.adv_eps, use_augment=config.augment)
    else:
        step = functools.partial(standard_train_step, use_augment=config.augment)
    return jax.jit(step, donate_argnums=0)


@jax.jit
def eval_step(state: TrainState, batch: Batch) -> dict[str, Array]:
    """Summed loss and number correct of the eval-mode model on a uint8 batch."""
    logits = state.apply_fn(
        {"params": state.params, "batch_stats": state.batch_stats},
        to_float(batch.images),
        train=False,
    )
    return {
        "loss_sum": per_example_cross_entropy(logits, batch.labels).sum(),
        "correct": jnp.sum(jnp.argmax(logits, -1) == batch.labels),
    }


__all__ = [
    "Batch",
    "TrainConfig",
    "TrainState",
    "create_train_state",
    "eval_step",
    "fgsm_train_step",
    "load_checkpoint",
    "make_optimizer",
    "make_train_step",
    "save_checkpoint",
    "standard_train_step",
]
