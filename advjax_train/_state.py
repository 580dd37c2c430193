"""The training config, train state and the jitted step for a mode (the steps themselves:
`advjax_train`, re-exported here)."""

import dataclasses
import functools
import math
import numbers
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from advjax.attacks import check_budget
from advjax.io import load_checkpoint, save_checkpoint
from advjax_train import CompactCNN, check_activation, check_width
from advjax_train._steps import (
    Batch,
    TrainState,
    eval_step,
    fgsm_rs_train_step,
    fgsm_train_step,
    pgd_train_step,
    random_start_pgd,
    standard_train_step,
    trades_examples,
    trades_train_step,
)

TRAINING_MODES = ("standard", "fgsm", "fgsm_rs", "pgd", "trades")

ADV_DEFAULTS = {
    "fgsm": {"adv_mix": True},
    "fgsm_rs": {"adv_step_fraction": 1.25, "adv_mix": False},
    "pgd": {"adv_steps": 7, "adv_step_fraction": 0.25, "adv_mix": False},
    "trades": {"adv_steps": 10, "adv_step_fraction": 0.25, "trades_beta": 6.0},
}
"""Each mode's adversarial settings when the config leaves them at None (and which it takes)."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Every hyper-parameter of a training run (defaults: the reference study's).

    The adversarial settings below default to None, meaning the mode's default from
    `ADV_DEFAULTS` (see `adv_settings`); setting one that the mode does not use raises.

    Attributes:
      adv_steps: attack steps per training step (pgd: 7, trades: 10).
      adv_step_fraction: attack step size as a fraction of `adv_eps` (fgsm_rs: 1.25,
        Wong et al. 2020; pgd: 0.25, Madry et al. 2018; trades: 0.25).
      adv_mix: True trains on the clean and adversarial batches together (fgsm's default,
        the reference study's), False on the adversarial batch alone (fgsm_rs's and pgd's,
        as in their papers).
      trades_beta: weight of the TRADES KL term (6.0, Zhang et al. 2019).
      activation: the CNN's activation, a name in `advjax_train.ACTIVATIONS`.
      width: the CNN's channel multiplier (`advjax_train.CompactCNN.width`; 1 is the study's).
      ema_decay: if set, `fit` also keeps an exponential moving average of the weights with
        this decay (e.g. 0.999) and validates, selects and returns the averaged weights, with
        their batch-norm statistics recomputed (Gowal et al. 2020).
      augment_pad: zero padding of the random crop (4, the CIFAR standard; 0 makes the
        crop the identity, leaving the random flip alone).
    """

    mode: str = "standard"
    epochs: int = 12
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 5e-4
    dropout_rate: float = 0.5
    activation: str = "relu"
    width: int = 1
    ema_decay: float | None = None
    adv_eps: float = 8 / 255
    augment: bool = True
    augment_pad: int = 4
    seed: int = 42
    adv_steps: int | None = None
    adv_step_fraction: float | None = None
    adv_mix: bool | None = None
    trades_beta: float | None = None

    def __post_init__(self):
        if self.mode not in TRAINING_MODES:
            raise ValueError(f"mode={self.mode!r} must be one of {TRAINING_MODES}")
        pad = self.augment_pad
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise ValueError(f"augment_pad={pad!r} must be an integer >= 0")
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if not self.learning_rate > 0 or not self.weight_decay >= 0:
            raise ValueError(
                f"learning_rate={self.learning_rate} must be > 0 and "
                f"weight_decay={self.weight_decay} >= 0"
            )
        check_activation(self.activation)
        check_width(self.width)
        if self.ema_decay is not None and not (
            isinstance(self.ema_decay, float) and 0 < self.ema_decay < 1
        ):
            raise ValueError(f"ema_decay={self.ema_decay!r} must be None or a float in (0, 1)")
        check_budget(self.adv_eps)
        self._check_adv_settings()

    def _check_adv_settings(self) -> None:
        used = ADV_DEFAULTS.get(self.mode, {})
        for name in ("adv_steps", "adv_step_fraction", "adv_mix", "trades_beta"):
            value = getattr(self, name)
            if value is not None and name not in used:
                raise ValueError(f"{name}={value!r} is not used by mode={self.mode!r}")
        steps, fraction, beta = self.adv_steps, self.adv_step_fraction, self.trades_beta
        if steps is not None and (
            isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1
        ):
            raise ValueError(f"adv_steps={steps!r} must be an integer >= 1")
        if fraction is not None and not (math.isfinite(fraction) and 0 < fraction <= 4):
            raise ValueError(f"adv_step_fraction={fraction!r} must be in (0, 4]")
        if self.adv_mix is not None and not isinstance(self.adv_mix, bool):
            raise ValueError(f"adv_mix={self.adv_mix!r} must be a bool")
        if beta is not None and not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"trades_beta={beta!r} must be finite and >= 0")

    def adv_settings(self) -> dict[str, Any]:
        """The mode's adversarial settings with its defaults filled in ({} for standard)."""
        defaults = ADV_DEFAULTS.get(self.mode, {})
        settings = {name: getattr(self, name) for name in defaults}
        return {k: defaults[k] if v is None else v for k, v in settings.items()}


def make_optimizer(config: TrainConfig, total_steps: int) -> optax.GradientTransformation:
    """AdamW with a cosine decay of the learning rate to zero over `total_steps`."""
    schedule = optax.cosine_decay_schedule(config.learning_rate, decay_steps=total_steps)
    return optax.adamw(schedule, weight_decay=config.weight_decay)


def make_model(config: TrainConfig) -> CompactCNN:
    """The CompactCNN that `config` trains (and that its checkpoint must record)."""
    return CompactCNN(
        dropout_rate=config.dropout_rate, activation=config.activation, width=config.width
    )


def create_train_state(key: jax.Array, config: TrainConfig, total_steps: int) -> TrainState:
    """Initialise the CompactCNN and its optimiser from `key`."""
    model = make_model(config)
    variables = model.init({"params": key}, jnp.zeros((1, 32, 32, 3), jnp.float32), train=False)
    return TrainState.create(
        apply_fn=model.apply,
        params=variables["params"],
        batch_stats=variables["batch_stats"],
        tx=make_optimizer(config, total_steps),
    )


def train_step_fn(config: TrainConfig) -> Callable:
    """The pure, unjitted `step(state, batch, key) -> (state, metrics)` for `config.mode`."""
    settings, eps = config.adv_settings(), config.adv_eps
    aug = {"use_augment": config.augment, "augment_pad": config.augment_pad}
    if config.mode == "fgsm":
        return functools.partial(fgsm_train_step, eps=eps, adv_mix=settings["adv_mix"], **aug)
    if config.mode in ("fgsm_rs", "pgd"):
        return functools.partial(
            pgd_train_step,
            eps=eps,
            steps=settings.get("adv_steps", 1),
            step_fraction=settings["adv_step_fraction"],
            adv_mix=settings["adv_mix"],
            **aug,
        )
    if config.mode == "trades":
        return functools.partial(
            trades_train_step,
            eps=eps,
            steps=settings["adv_steps"],
            step_fraction=settings["adv_step_fraction"],
            beta=settings["trades_beta"],
            **aug,
        )
    return functools.partial(standard_train_step, **aug)


def make_train_step(config: TrainConfig):
    """The jitted `train_step(state, batch, key) -> (state, metrics)` for `config.mode`.

    The input state's buffers are donated (updated in place), so the state passed in must
    not be used again; keep the returned one.
    """
    return jax.jit(train_step_fn(config), donate_argnums=0)


__all__ = [
    "ADV_DEFAULTS",
    "Batch",
    "TRAINING_MODES",
    "TrainConfig",
    "TrainState",
    "create_train_state",
    "eval_step",
    "fgsm_rs_train_step",
    "fgsm_train_step",
    "load_checkpoint",
    "make_optimizer",
    "make_train_step",
    "pgd_train_step",
    "random_start_pgd",
    "save_checkpoint",
    "standard_train_step",
    "trades_examples",
    "trades_train_step",
    "train_step_fn",
]
