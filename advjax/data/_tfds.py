"""Any image classification dataset that `tfds.data_source` opens, as arrays."""

from pathlib import Path

import numpy as np

from advjax.data._cifar10 import DataError
from advjax.data._splits import check_case_count, share_positions


def _keys(info, where: str) -> tuple[str, str]:
    keys = getattr(info, "supervised_keys", None)
    if keys and len(keys) == 2 and all(isinstance(k, str) for k in keys):
        return keys
    if {"image", "label"} <= set(info.features.keys()):
        return "image", "label"
    raise DataError(f"{where}: no (image, label) features: it declares no supervised keys and "
                    f"has features {sorted(info.features.keys())}")  # fmt: skip


def load_tfds(
    dataset: str,
    *,
    split: str = "test",
    data_dir: str | Path | None = None,
    n: int | None = None,
    name: str = "dataset",
    share: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """(x, y, classes, positions): the first `n` examples (default all) of `split` of a TFDS
    image classification dataset, read with `tfds.data_source` (ArrayRecord, no TensorFlow):
    float32 NHWC pixels in [0, 1] (uint8 images scaled by 1/255), int32 labels, the label
    feature's class count and the examples' positions in the split. `share` (index, count):
    only that share of the n (`share_positions`), and only those examples are read.
    `data_dir` is TFDS's (default: $TFDS_DATA_DIR, else ~/tensorflow_datasets).

    Raises:
      DataError (a ValueError) naming `name`, the dataset and what is wrong: TFDS missing, a
      dataset or split it cannot open, no image and class-label features, images of different
      shapes or not 2-D with channels, pixels outside [0, 1], `n` outside [1, examples].
    """
    where = f"{name} 'tfds:{dataset}' split {split!r}"
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError(f"{where}: tensorflow_datasets is not installed") from None
    try:
        source = tfds.data_source(
            dataset, split=split, data_dir=None if data_dir is None else str(data_dir)
        )
        info = source.dataset_info
    except Exception as error:  # noqa: BLE001 - unknown name, not prepared, bad files.
        message = " ".join(str(error).split())[:300]
        raise DataError(f"{where}: could not open ({type(error).__name__}: {message})") from None
    image_key, label_key = _keys(info, where)
    label = info.features[label_key]
    classes = getattr(label, "num_classes", None)
    if not classes:
        raise DataError(f"{where}: {label_key!r} is not a class label ({type(label).__name__})")
    total = len(source)
    n = total if n is None else n
    check_case_count(n, total, where)
    positions = share_positions(n, share)
    examples = [source[int(i)] for i in positions]
    shapes = {np.shape(e[image_key]) for e in examples}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3:
        raise DataError(f"{where}: needs images of one shape (H, W, C), got shapes "
                        f"{sorted(shapes)[:3]}; resize them into a .npz file")  # fmt: skip
    x = np.stack([np.asarray(e[image_key]) for e in examples])
    y = np.asarray([int(np.asarray(e[label_key])) for e in examples], np.int32)
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / 255
    elif not np.issubdtype(x.dtype, np.floating) or not (x.min() >= 0 and x.max() <= 1):
        raise DataError(f"{where}: images must be uint8 or float pixels in [0, 1], got {x.dtype}")
    return x.astype(np.float32), y, int(classes), positions
