"""advjax: a functional JAX library for adversarial robustness evaluation."""

from advjax import attacks, augment, checkpoint, data, fit, layers, model, train
from advjax.attacks import PGDResult, fgsm, pgd, pgd_search
from advjax.checkpoint import load_checkpoint, save_checkpoint
from advjax.data import Cifar10, DataError, load_cifar10, study_splits
from advjax.model import CompactCNN, eval_logits_fn
from advjax.train import TrainConfig, TrainState, create_train_state, make_train_step

__version__ = "0.1.0"

__all__ = [
    "Cifar10",
    "CompactCNN",
    "DataError",
    "PGDResult",
    "TrainConfig",
    "TrainState",
    "attacks",
    "augment",
    "checkpoint",
    "create_train_state",
    "data",
    "eval_logits_fn",
    "fgsm",
    "fit",
    "layers",
    "load_checkpoint",
    "load_cifar10",
    "make_train_step",
    "model",
    "pgd",
    "pgd_search",
    "save_checkpoint",
    "study_splits",
    "train",
]
