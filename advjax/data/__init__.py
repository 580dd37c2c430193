"""CIFAR-10 (the binary-layout reader and writer, the tfds fallback, the study's splits), any
image dataset as arrays in a .npz file or through `tfds.data_source`, and an evaluation's
cases from any of them, named by one string (`load_eval_cases`)."""

from advjax.data._cases import (
    EvalCases,
    load_eval_cases,
)
from advjax.data._cifar10 import (
    CLASS_NAMES,
    CUSTOM_DATA_ENV,
    DATA_DIR_ENV,
    OFFICIAL,
    RECORD_BYTES,
    SPLITS,
    Cifar10,
    DataError,
    fingerprint,
    load_cifar10,
    read_binary_batch,
    verify_official,
    write_binary_batch,
)
from advjax.data._npz import (
    load_npz,
)
from advjax.data._splits import (
    StudySplits,
    share_positions,
    stratified_indices,
    study_eval_indices,
    study_splits,
)
from advjax.data._tfds import (
    load_tfds,
)

__all__ = [
    "Cifar10",
    "CLASS_NAMES",
    "CUSTOM_DATA_ENV",
    "DATA_DIR_ENV",
    "DataError",
    "EvalCases",
    "fingerprint",
    "load_cifar10",
    "load_eval_cases",
    "load_npz",
    "load_tfds",
    "OFFICIAL",
    "read_binary_batch",
    "RECORD_BYTES",
    "share_positions",
    "SPLITS",
    "stratified_indices",
    "study_eval_indices",
    "study_splits",
    "StudySplits",
    "verify_official",
    "write_binary_batch",
]
