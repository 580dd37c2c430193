"""Models and training for robustness studies, on advjax's public API: the study's compact
CIFAR-10 CNN and the conv / pool primitives that keep it fast on CPU, training config and
state, pure steps (standard, FGSM, FGSM-RS, PGD, TRADES), augmentation, the
catastrophic-overfitting sentinel, the epoch loop and its resumable progress, weight
averaging and data parallelism.
"""

from advjax_train._augment import (
    augment,
    crop_and_flip,
    to_float,
)
from advjax_train._cnn import (
    ACTIVATIONS,
    CIFAR10_MEAN,
    CIFAR10_STD,
    CompactCNN,
    check_activation,
    check_width,
    eval_logits_fn,
    load_logits_fn,
)
from advjax_train._ema import (
    BN_RECOMPUTE_BATCHES,
    ema_decay_at,
    ema_update,
    recompute_batch_stats,
)
from advjax_train._layers import (
    conv2d_same,
    max_pool_2x2,
)
from advjax_train._loop import (
    FitResult,
    evaluate,
    fit,
)
from advjax_train._resume import (
    FIT_PROGRESS_FORMAT,
    FitProgress,
    Selection,
    load_fit_progress,
    read_fit_history,
    save_fit_progress,
)
from advjax_train._sentinel import (
    SELECTION_CRITERIA,
    SentinelConfig,
    collapse_flags,
    make_probe,
    pgd_accuracy,
    subset_indices,
)
from advjax_train._sharding import (
    DATA_AXIS,
    batch_sharding,
    check_batch,
    check_batch_size,
    data_mesh,
    num_shards,
    replicate,
    replicated,
    shard_batch,
    sharded_eval,
    sharded_train_step,
)
from advjax_train._state import (
    ADV_DEFAULTS,
    TRAINING_MODES,
    TrainConfig,
    create_train_state,
    make_model,
    make_optimizer,
    make_train_step,
    train_step_fn,
)
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

__all__ = [
    "ACTIVATIONS",
    "ADV_DEFAULTS",
    "augment",
    "Batch",
    "batch_sharding",
    "BN_RECOMPUTE_BATCHES",
    "check_activation",
    "check_batch",
    "check_batch_size",
    "check_width",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "collapse_flags",
    "CompactCNN",
    "conv2d_same",
    "create_train_state",
    "crop_and_flip",
    "DATA_AXIS",
    "data_mesh",
    "ema_decay_at",
    "ema_update",
    "eval_logits_fn",
    "eval_step",
    "evaluate",
    "fgsm_rs_train_step",
    "fgsm_train_step",
    "fit",
    "FIT_PROGRESS_FORMAT",
    "FitProgress",
    "FitResult",
    "load_fit_progress",
    "load_logits_fn",
    "make_model",
    "make_optimizer",
    "make_probe",
    "make_train_step",
    "max_pool_2x2",
    "num_shards",
    "pgd_accuracy",
    "pgd_train_step",
    "random_start_pgd",
    "read_fit_history",
    "recompute_batch_stats",
    "replicate",
    "replicated",
    "save_fit_progress",
    "Selection",
    "SELECTION_CRITERIA",
    "SentinelConfig",
    "shard_batch",
    "sharded_eval",
    "sharded_train_step",
    "standard_train_step",
    "subset_indices",
    "to_float",
    "trades_examples",
    "trades_train_step",
    "train_step_fn",
    "TrainConfig",
    "TRAINING_MODES",
    "TrainState",
]
