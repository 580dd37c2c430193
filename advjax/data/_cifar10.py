"""CIFAR-10 loading and binary-format test fixtures (the I/O module).

Two sources give identical arrays: a folder in the official binary layout
(``data_batch_1..5.bin``, ``test_batch.bin``, each optionally ``.bin.gz``, and
``batches.meta.txt``), or TensorFlow Datasets ``cifar10`` through
``tfds.data_source`` (ArrayRecord; ``tfds.load`` would need TensorFlow). TFDS
stores records in hashed-key order, not file order, but each record's ``id`` is
``"{split}_{index:05d}"``, ``index`` counting records through ``data_batch_1..5``
or ``test_batch`` (``tensorflow_datasets/image_classification/cifar.py``); the
TFDS path sorts by it to restore the official order.

Reference: A. Krizhevsky, "Learning Multiple Layers of Features from Tiny
Images", Technical Report, 2009.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from jax.typing import ArrayLike

from advjax.records import atomic_write_bytes

DATA_DIR_ENV = "ADVJAX_DATA_DIR"
NUM_CLASSES = 10
IMAGE_SHAPE = (32, 32, 3)
RECORD_BYTES = 1 + 32 * 32 * 3  # 3,073: one label byte, then R, G, B planes.
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
META_FILE = "batches.meta.txt"
CLASS_NAMES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip

# Distinct fold_in constants: one random stream per study subset.
_HINT = f"set {DATA_DIR_ENV} or pass --data-dir to a folder with the official binary CIFAR-10 files"


class DataError(ValueError):
    """Raised for missing, malformed or inconsistent data; names the file."""


class Cifar10(NamedTuple):
    """CIFAR-10 in the official order.

    Attributes:
        train_images: (50000, 32, 32, 3) uint8 NHWC (fewer rows for fixtures).
        train_labels: (50000,) int32 in [0, 9].
        test_images: (10000, 32, 32, 3) uint8 NHWC.
        test_labels: (10000,) int32 in [0, 9].
        class_names: the ten class names in label order.
        source: ``"tfds"`` or ``"binary:/abs/path"``.
    """

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    class_names: tuple[str, ...]
    source: str


def _check_batch(images: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Validates an (images, labels) pair and returns them as numpy arrays."""
    images, labels = np.asarray(images), np.asarray(labels)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f"images must be uint8 (N, 32, 32, 3); got {images.dtype} {images.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.shape != images.shape[:1]:
        raise ValueError(f"labels must be int ({len(images)},); got {labels.dtype} {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise ValueError(f"labels must be in [0, 9]; got {labels.min()}..{labels.max()}")
    return images, labels


def read_binary_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Reads one batch file in the official CIFAR-10 binary record format.

    Each record is 3,073 bytes: a label byte (0-9), then 1,024 red, 1,024 green
    and 1,024 blue bytes, each plane 32x32 row-major. A path ending in ``.gz`` is
    decompressed first. The whole file is validated; nothing is loaded partially.

    Args:
        path: the ``.bin`` or ``.bin.gz`` file.

    Returns:
        ``(images, labels)``: (N, 32, 32, 3) uint8 NHWC and (N,) int32.

    Raises:
        DataError: the file is missing, empty, a corrupt or truncated gzip, not a
            multiple of 3,073 bytes, or holds a label outside 0-9.

    Example:
        >>> images, labels = read_binary_batch("cifar10/test_batch.bin.gz")
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError.
            raise DataError(f"{path}: corrupt or truncated gzip ({err})") from err
    if not data:
        raise DataError(f"{path}: file is empty (no records)")
    if len(data) % RECORD_BYTES:
        raise DataError(
            f"{path}: size {len(data):,} bytes is not a multiple of "
            f"the {RECORD_BYTES:,}-byte record"
        )
    raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    bad = np.flatnonzero(raw[:, 0] >= NUM_CLASSES)
    if bad.size:
        raise DataError(
            f"{path}: record {bad[0]} has label {raw[bad[0], 0]} outside 0-{NUM_CLASSES - 1} "
            f"({bad.size} bad records)"
        )
    images = raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), raw[:, 0].astype(np.int32)


def write_binary_batch(path: str | os.PathLike, images: ArrayLike, labels: ArrayLike) -> None:
    """Writes a batch in the official binary record format, atomically.

    The bytes go to a temporary file in the same folder, then ``os.replace``
    moves it into place. A path ending in ``.gz`` is gzipped (``mtime=0``, so the
    output is reproducible).

    Args:
        path: destination ``.bin`` or ``.bin.gz`` file.
        images: (N, 32, 32, 3) uint8 NHWC, N >= 1.
        labels: (N,) integers in [0, 9].

    Raises:
        ValueError: bad shapes, dtypes or label values, or N == 0.

    Example:
        >>> write_binary_batch("/tmp/data_batch_1.bin.gz", images, labels)
    """
    path = Path(path)
    images, labels = _check_batch(images, labels)
    if not images.shape[0]:
        raise ValueError(f"cannot write an empty batch to {path}: got {images.shape=}")
    records = np.empty((images.shape[0], RECORD_BYTES), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = images.transpose(0, 3, 1, 2).reshape(images.shape[0], -1)
    payload = records.tobytes()
    if path.suffix == ".gz":
        payload = gzip.compress(payload, mtime=0)
    atomic_write_bytes(path, payload)


def fingerprint(images: ArrayLike, labels: ArrayLike) -> str:
    """Source-independent sha256 of a dataset split.

    Args:
        images: uint8 array; hashed as its C-order bytes.
        labels: integer array; hashed after the images, as int32 little-endian.

    Returns:
        The sha256 hex digest.

    Raises:
        ValueError: images are not uint8 or labels are not integers.

    Example:
        >>> fingerprint(data.test_images, data.test_labels)
    """
    images, labels = np.asarray(images), np.asarray(labels)
    if images.dtype != np.uint8 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"need uint8 images and integer labels; got {images.dtype}, {labels.dtype}"
        )
    digest = hashlib.sha256(np.ascontiguousarray(images).tobytes())
    digest.update(np.ascontiguousarray(labels, dtype="<i4").tobytes())
    return digest.hexdigest()


def _batch_file(folder: Path, name: str) -> Path:
    """Returns ``folder/name`` or ``folder/name.gz``, whichever exists alone."""
    plain, gzipped = folder / name, folder / f"{name}.gz"
    if plain.exists() and gzipped.exists():
        raise DataError(f"{plain}: both {name} and {name}.gz exist; keep one")
    if not plain.exists() and not gzipped.exists():
        raise DataError(f"{plain}: file not found (nor {gzipped.name})")
    return plain if plain.exists() else gzipped


def _read_class_names(path: Path) -> tuple[str, ...]:
    """Reads ``batches.meta.txt``: one class name a line, blank lines ignored."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        names = tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({err})") from err
    names = tuple(name for name in names if name)
    if len(names) != NUM_CLASSES or len(set(names)) != NUM_CLASSES:
        raise DataError(f"{path}: expected {NUM_CLASSES} distinct class names; got {names}")
    return names


SPLITS = ("train", "test")


def _empty_split() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, 32, 32, 3), np.uint8), np.zeros((0,), np.int32)


def _load_binary(folder: Path, splits: tuple[str, ...]) -> Cifar10:
    """Loads the official binary layout from ``folder``; only the files of `splits` are read."""
    if not folder.is_dir():
        raise DataError(f"{folder}: not a directory ({_HINT})")
    class_names = _read_class_names(folder / META_FILE)
    train_images, train_labels = _empty_split()
    if "train" in splits:
        train = [read_binary_batch(_batch_file(folder, name)) for name in TRAIN_FILES]
        train_images = np.concatenate([images for images, _ in train])
        train_labels = np.concatenate([labels for _, labels in train])
    test_images, test_labels = _empty_split()
    if "test" in splits:
        test_images, test_labels = read_binary_batch(_batch_file(folder, TEST_FILE))
    return Cifar10(
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        class_names=class_names,
        source=f"binary:{folder.resolve()}",
    )


def _examples_to_arrays(examples: Sequence[Any], split: str) -> tuple[np.ndarray, np.ndarray]:
    """Converts TFDS examples to arrays in the official order (sorted by id)."""
    where = f"tfds cifar10 split {split!r}"
    if not examples:
        raise DataError(f"{where}: no examples")
    index = np.empty(len(examples), dtype=np.int64)
    for i, example in enumerate(examples):
        example_id = example["id"]
        if isinstance(example_id, bytes):
            example_id = example_id.decode("utf-8", "replace")
        match = re.fullmatch(rf"{split}_(\d+)", str(example_id))
        if match is None:
            raise DataError(
                f"{where}: example {i} has id {example_id!r}, not '{split}_NNNNN'; "
                "cannot restore the official record order"
            )
        index[i] = int(match.group(1))
    order = np.argsort(index, kind="stable")
    if not np.array_equal(index[order], np.arange(len(examples))):
        raise DataError(f"{where}: example ids are not {split}_0..{split}_{len(examples) - 1}")
    try:
        images = np.stack([np.asarray(examples[i]["image"]) for i in order])
        labels = np.asarray([np.asarray(examples[i]["label"]).item() for i in order])
        return _check_batch(images, labels)[0], labels.astype(np.int32)
    except ValueError as err:
        raise DataError(f"{where}: bad examples ({err})") from err


def _load_tfds(splits: tuple[str, ...]) -> Cifar10:
    """Loads the `splits` of ``cifar10`` through ``tfds.data_source`` (ArrayRecord)."""
    try:
        import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    except ImportError as err:
        raise DataError(f"tfds cifar10: tensorflow_datasets is not installed; {_HINT}") from err
    arrays, class_names = {split: _empty_split() for split in SPLITS}, CLASS_NAMES
    for split in splits:
        try:
            source = tfds.data_source(
                "cifar10", split=split, builder_kwargs={"file_format": "array_record"}
            )
            examples = [source[i] for i in range(len(source))]
        except Exception as err:  # noqa: BLE001 - offline, no data, no TF, bad files.
            raise DataError(
                f"tfds cifar10 split {split!r}: could not load "
                f"({type(err).__name__}: {err}); {_HINT}"
            ) from err
        arrays[split] = _examples_to_arrays(examples, split)
        info = getattr(source, "dataset_info", None)
        names = tuple(info.features["label"].names) if info is not None else ()
        # Code-only metadata (e.g. under tfds.testing.mock_data) names labels "0".."9".
        if names and names != tuple(str(i) for i in range(NUM_CLASSES)) and names != CLASS_NAMES:
            raise DataError(f"tfds cifar10: unexpected class names {names}")
    return Cifar10(*arrays["train"], *arrays["test"], class_names=class_names, source="tfds")


OFFICIAL = {
    "train": (50000, "72c15e60c081b70e34054cb162580e0d24094d4efdce45b6c8c1fe5acc39221e"),
    "test": (10000, "8353b1fbf11acba6dc8b5e9d2fb108294de95b6e979d31428bf914289e4189c5"),
}
"""Size and `fingerprint` of each official split (the arrays of the official release)."""
CUSTOM_DATA_ENV = "ADVJAX_CUSTOM_DATA"


def verify_official(data: "Cifar10", splits: Sequence[str] = SPLITS) -> None:
    """Raise DataError unless `data` holds the official `splits`: 50,000 / 10,000 images,
    5,000 / 1,000 per class, and the official fingerprints."""
    for split in splits:
        size, digest = OFFICIAL[split]
        images, labels = getattr(data, f"{split}_images"), getattr(data, f"{split}_labels")
        per_class = np.bincount(np.asarray(labels), minlength=10)
        if len(labels) != size or not (per_class == size // 10).all():
            raise DataError(
                f"{data.source}: the {split} split has {len(labels):,} images "
                f"({per_class.tolist()} per class), the official one {size:,} "
                f"({size // 10:,} per class); pass custom=True (or set {CUSTOM_DATA_ENV}=1) "
                "for other data"
            )
        found = fingerprint(images, labels)
        if found != digest:
            raise DataError(
                f"{data.source}: the {split} split parses but is not the official one "
                f"(fingerprint {found[:16]}, official {digest[:16]}); pass custom=True (or set "
                f"{CUSTOM_DATA_ENV}=1) for other data"
            )


def load_cifar10(
    data_dir: str | os.PathLike | None = None,
    *,
    custom: bool | None = None,
    splits: Sequence[str] = SPLITS,
) -> Cifar10:
    """Loads CIFAR-10 in the official order from a folder or from TFDS.

    Args:
        data_dir: folder in the official binary layout. ``None`` means the value of
            the ``ADVJAX_DATA_DIR`` environment variable if set and non-empty, else
            TensorFlow Datasets ``cifar10`` (``tfds.data_source``, ArrayRecord).
        custom: accept data that is not the official release (other sizes or images);
            ``None`` means ``$ADVJAX_CUSTOM_DATA == "1"``. Official data is checked
            against `OFFICIAL` (sizes, class counts, fingerprints).
        splits: which of "train" and "test" to read; a split left out is empty (zero
            rows) and its files need not exist, e.g. ``("test",)`` to evaluate a model
            from ``test_batch.bin`` and ``batches.meta.txt`` alone.

    Returns:
        A ``Cifar10`` with uint8 NHWC images and int32 labels; both sources give
        identical arrays (same ``fingerprint``).

    Raises:
        DataError: a file is missing or malformed, TFDS cannot provide the data (e.g.
            offline), or the data is not the official release (unless custom); the
            message names the file or dataset.

    Example:
        >>> data = load_cifar10("/data/cifar10")
        >>> data.train_images.shape
        (50000, 32, 32, 3)
    """
    splits = tuple(splits) if not isinstance(splits, str) else (splits,)
    if not splits or any(split not in SPLITS for split in splits):
        raise ValueError(f"splits={splits!r} must name one or both of {SPLITS}")
    splits = tuple(split for split in SPLITS if split in splits)
    if data_dir is None:
        data_dir = os.environ.get(DATA_DIR_ENV) or None
    if data_dir is None:
        data = _load_tfds(splits)
    else:
        data = _load_binary(Path(data_dir).expanduser(), splits)
    if custom is None:
        custom = os.environ.get(CUSTOM_DATA_ENV) == "1"
    if not custom:
        verify_official(data, splits)
    return data
