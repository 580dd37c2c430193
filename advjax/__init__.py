"""advjax: a functional JAX library for adversarial robustness evaluation.

The subpackages hold the library by concept: `advjax.attacks` (pure attacks),
`advjax.model`, `advjax.train`, `advjax.evaluation` (threat model, records, aggregates,
checks, gate), `advjax.io`, `advjax.data` and `advjax.text`. The names below are the ones
most programs need. Importing advjax changes nothing in the process: entry points that want
advjax's fast XLA CPU settings call `advjax.backend.configure()` before any JAX work.
"""

from advjax.attacks import (
    ATTACKS,
    FABResult,
    FMNResult,
    SearchResult,
    SquareResult,
    apgd,
    apgd_targeted,
    fab,
    fgsm,
    fmn,
    pgd,
    pgd_search,
    square,
    square_l2,
    square_linf,
)
from advjax.data import Cifar10, DataError, load_cifar10, study_splits
from advjax.evaluation import AutoAttackResult, ThreatModel, autoattack
from advjax.evaluation.stats import wilson_interval
from advjax.io import load_checkpoint, save_checkpoint
from advjax.model import CompactCNN, eval_logits_fn
from advjax.records import CaseRecord, RecordLog
from advjax.train import TrainConfig, TrainState, create_train_state, make_train_step

__version__ = "0.1.0"

__all__ = [
    "ATTACKS",
    "AutoAttackResult",
    "CaseRecord",
    "Cifar10",
    "CompactCNN",
    "DataError",
    "FABResult",
    "FMNResult",
    "SearchResult",
    "RecordLog",
    "SquareResult",
    "ThreatModel",
    "TrainConfig",
    "TrainState",
    "apgd",
    "apgd_targeted",
    "autoattack",
    "create_train_state",
    "eval_logits_fn",
    "fab",
    "fgsm",
    "fmn",
    "load_checkpoint",
    "load_cifar10",
    "make_train_step",
    "pgd",
    "pgd_search",
    "save_checkpoint",
    "square",
    "square_l2",
    "square_linf",
    "study_splits",
    "wilson_interval",
]
