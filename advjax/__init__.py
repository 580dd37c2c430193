"""advjax: a functional JAX library for adversarial robustness evaluation."""

from advjax import backend

backend.configure()

from advjax import (
    aggregate,
    apgd,
    attack_spec,
    attacks,
    augment,
    campaign,
    checkpoint,
    data,
    early_stop,
    ensemble,
    evaluate,
    fit,
    gate,
    keys,
    layers,
    losses,
    metrics,
    model,
    norms,
    records,
    sanity,
    scoring,
    sentinel,
    sharding,
    square,
    summary,
    threat_model,
    train,
    train_steps,
)
from advjax.attacks import PGDResult, fgsm, pgd, pgd_search
from advjax.checkpoint import load_checkpoint, save_checkpoint
from advjax.data import Cifar10, DataError, load_cifar10, study_splits
from advjax.metrics import wilson_interval
from advjax.model import CompactCNN, eval_logits_fn
from advjax.records import CaseRecord, RecordLog
from advjax.square import square_linf
from advjax.threat_model import ThreatModel
from advjax.train import TrainConfig, TrainState, create_train_state, make_train_step

__version__ = "0.1.0"

__all__ = [
    "CaseRecord",
    "Cifar10",
    "CompactCNN",
    "DataError",
    "PGDResult",
    "RecordLog",
    "ThreatModel",
    "TrainConfig",
    "TrainState",
    "aggregate",
    "apgd",
    "attack_spec",
    "attacks",
    "augment",
    "campaign",
    "checkpoint",
    "create_train_state",
    "data",
    "early_stop",
    "ensemble",
    "eval_logits_fn",
    "evaluate",
    "fgsm",
    "fit",
    "gate",
    "keys",
    "layers",
    "load_checkpoint",
    "load_cifar10",
    "losses",
    "make_train_step",
    "metrics",
    "model",
    "norms",
    "pgd",
    "pgd_search",
    "records",
    "sanity",
    "sentinel",
    "save_checkpoint",
    "scoring",
    "sharding",
    "square",
    "square_linf",
    "study_splits",
    "summary",
    "threat_model",
    "train",
    "train_steps",
    "wilson_interval",
]
