"""CIFAR-10 (the binary-layout reader and writer, the tfds fallback, the study's splits), any
image dataset as arrays in a .npz file or through `tfds.data_source`, and an evaluation's
cases from any of them, named by one string (`load_eval_cases`)."""

from advjax.data._cases import (
    EvalCases,
    load_eval_cases,
)
from advjax.data._cifar10 import (
    DATA_DIR_ENV,
    Cifar10,
    DataError,
    fingerprint,
    load_cifar10,
)
from advjax.data._npz import (
    load_npz,
)
from advjax.data._splits import (
    share_positions,
    stratified_indices,
    study_splits,
)
from advjax.data._tfds import (
    load_tfds,
)

__all__ = [
    "Cifar10",
    "DATA_DIR_ENV",
    "DataError",
    "EvalCases",
    "fingerprint",
    "load_cifar10",
    "load_eval_cases",
    "load_npz",
    "load_tfds",
    "share_positions",
    "stratified_indices",
    "study_splits",
]
