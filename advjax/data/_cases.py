"""The cases of an evaluation, from any of the datasets advjax reads, named by one string."""

from pathlib import Path
from typing import NamedTuple

import numpy as np

from advjax.data._cifar10 import DataError, load_cifar10
from advjax.data._npz import load_npz
from advjax.data._splits import check_case_count, share_positions, study_eval_indices
from advjax.data._tfds import load_tfds

CIFAR10 = "cifar10"
TFDS_PREFIX = "tfds:"
CIFAR10_CASES = 1000
"""The CIFAR study's evaluation subset: `cifar10`'s cases unless told otherwise."""


class EvalCases(NamedTuple):
    """Pixels (N, H, W, C) float32 in [0, 1], int32 labels, stable case ids, the class count
    where the dataset declares one (None: read it from the model), and each case's position
    among all the evaluation's cases (0 .. N-1 unless a process's share was asked for).
    `EvalCases(x, y)` gives ids and positions 0 .. N-1 where they are read."""

    x: np.ndarray
    y: np.ndarray
    case_ids: np.ndarray | None = None
    classes: int | None = None
    positions: np.ndarray | None = None


def load_eval_cases(
    data: str,
    *,
    n: int | None = None,
    data_dir: str | Path | None = None,
    split: str = "test",
    name: str = "data",
    share: tuple[int, int] | None = None,
) -> EvalCases:
    """The evaluation cases `data` names:

    - `cifar10`: the first `n` (default 1,000) of the CIFAR study's stratified draw of the
      test split (seed 42), so n=1000 gives the study's images and n=10000 every test image;
      `data_dir` is the binary folder (else $ADVJAX_DATA_DIR);
    - a `.npz` file holding `x` (N, H, W, C; uint8, or float in [0, 1]) and `y` (N,): its
      first `n` (default all);
    - `tfds:DATASET` (e.g. `tfds:mnist`): the first `n` (default all) of `split` of any image
      classification dataset `tfds.data_source` opens; `data_dir` is TFDS's.

    Case ids are the positions in the dataset's split (cifar10: in the test split). `share`
    (index, count): only process `index` of `count`'s cases, every count-th from index
    (`share_positions`), with their positions among all n; TFDS reads
    only those examples.

    Raises:
      DataError (a ValueError) naming `name`: an unknown form, or bad data (`load_npz`,
      `load_tfds`, `load_cifar10`), or `n` outside [1, the cases there are].
    """
    if data.startswith(TFDS_PREFIX) and data[len(TFDS_PREFIX) :]:
        x, y, classes, pos = load_tfds(
            data[len(TFDS_PREFIX) :], split=split, data_dir=data_dir, n=n, name=name, share=share
        )
        return EvalCases(x, y, pos, classes, pos)
    if data == CIFAR10:
        labels = load_cifar10(data_dir, splits=("test",))
        total, n = len(labels.test_labels), CIFAR10_CASES if n is None else n
        check_case_count(n, total, name)
        if n == total:
            index = np.arange(total)
        else:
            index = study_eval_indices(labels.test_labels, eval_size=10 * -(-n // 10))[:n]
        pos = share_positions(n, share)
        x = labels.test_images[index[pos]].astype(np.float32) / 255
        return EvalCases(
            x, labels.test_labels[index[pos]], index[pos], len(labels.class_names), pos
        )
    if Path(data).suffix == ".npz":
        x, y = load_npz(data, name=name)
        n = len(y) if n is None else n
        check_case_count(n, len(y), name)
        pos = share_positions(n, share)
        return EvalCases(x[pos], y[pos], pos, None, pos)
    raise DataError(f"{name} {data!r}: expected {CIFAR10}, a .npz file with x and y, or "
                    f"{TFDS_PREFIX}DATASET (any TFDS image classification dataset)")  # fmt: skip
