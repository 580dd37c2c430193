"""Tests for advjax.data: CIFAR-10 binary and TFDS loading, fingerprints and study splits.

Real-data tests run only when ADVJAX_DATA_DIR points at a folder (they skip otherwise).
The TFDS path is tested offline with ``tfds.testing.mock_data``.
"""

import gzip
import os
from pathlib import Path

import jax
import numpy as np
import pytest

from advjax.data import (
    DATA_DIR_ENV,
    Cifar10,
    DataError,
    fingerprint,
    load_cifar10,
    stratified_indices,
    study_splits,
)
from advjax.data._cifar10 import (
    CLASS_NAMES,
    CUSTOM_DATA_ENV,
    RECORD_BYTES,
    read_binary_batch,
    verify_official,
    write_binary_batch,
)
from advjax.data._splits import StudySplits, study_eval_indices

REAL_TRAIN_FINGERPRINT = "72c15e60c081b70e34054cb162580e0d24094d4efdce45b6c8c1fe5acc39221e"
REAL_TEST_FINGERPRINT = "8353b1fbf11acba6dc8b5e9d2fb108294de95b6e979d31428bf914289e4189c5"
BATCH_NAMES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
RECORDS = 20


def _random_batch(seed: int, n: int = RECORDS) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    return images, rng.integers(0, 10, size=n).astype(np.int32)


def _write_fixture(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Writes 6 batch files of 20 records (odd ones gzipped) and batches.meta.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    batches = {}
    for i, name in enumerate(BATCH_NAMES):
        batches[name] = _random_batch(seed=i)
        suffix = ".bin.gz" if i % 2 == 0 else ".bin"
        write_binary_batch(folder / f"{name}{suffix}", *batches[name])
    (folder / "batches.meta.txt").write_text("\n".join(CLASS_NAMES) + "\n\n")
    return batches


@pytest.fixture
def fixture_dir(tmp_path: Path) -> tuple[Path, dict[str, tuple[np.ndarray, np.ndarray]]]:
    folder = tmp_path / "cifar10"
    return folder, _write_fixture(folder)


@pytest.fixture(autouse=True)
def _fixtures_are_custom_data(monkeypatch):
    """The small fixtures here are not the official release."""
    monkeypatch.setenv(CUSTOM_DATA_ENV, "1")


@pytest.fixture(scope="module")
def real_data() -> Cifar10:
    """The real CIFAR-10 from ADVJAX_DATA_DIR, loaded once per module; skips when unset."""
    data_dir = os.environ.get(DATA_DIR_ENV)
    if not data_dir or not Path(data_dir).is_dir():
        pytest.skip(f"{DATA_DIR_ENV} is not set to a folder")
    return load_cifar10(data_dir)


# ---------------------------------------------------------------------------
# Binary format and fixtures.


@pytest.mark.parametrize("suffix", [".bin", ".bin.gz"])
def test_write_then_read_binary_batch_is_identity(tmp_path, suffix):
    """read_binary_batch(write_binary_batch(x)) == x, uint8 NHWC images and int32 labels."""
    images, labels = _random_batch(seed=7, n=3)
    path = tmp_path / f"batch{suffix}"
    write_binary_batch(path, images, labels.astype(np.int64))
    got_images, got_labels = read_binary_batch(path)
    assert got_images.dtype == np.uint8 and got_images.shape == (3, 32, 32, 3)
    assert got_labels.dtype == np.int32
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # No temp file left behind.


def test_written_records_follow_official_layout(tmp_path):
    """Each record is a label byte then the R, G and B planes, each 32x32 row-major."""
    images, labels = _random_batch(seed=8, n=2)
    write_binary_batch(tmp_path / "b.bin.gz", images, labels)
    raw = np.frombuffer(gzip.decompress((tmp_path / "b.bin.gz").read_bytes()), np.uint8)
    assert raw.size == 2 * RECORD_BYTES == 2 * 3073
    record = raw[RECORD_BYTES:]
    assert record[0] == labels[1]
    np.testing.assert_array_equal(record[1:1025], images[1, :, :, 0].ravel())  # Red plane.
    np.testing.assert_array_equal(record[2049:], images[1, :, :, 2].ravel())  # Blue plane.


def test_write_binary_batch_is_reproducible_and_overwrites(tmp_path):
    """Gzipped output is byte-identical across writes (mtime=0), and rewriting replaces the file."""
    path = tmp_path / "b.bin.gz"
    write_binary_batch(path, *_random_batch(seed=1, n=2))
    first = path.read_bytes()
    write_binary_batch(path, *_random_batch(seed=1, n=2))
    assert path.read_bytes() == first
    write_binary_batch(path, *_random_batch(seed=2, n=2))
    np.testing.assert_array_equal(read_binary_batch(path)[0], _random_batch(seed=2, n=2)[0])


@pytest.mark.parametrize(
    "images, labels",
    [
        (np.zeros((2, 32, 32, 3), np.float32), np.zeros(2, np.int32)),  # Wrong dtype.
        (np.zeros((2, 3, 32, 32), np.uint8), np.zeros(2, np.int32)),  # NCHW.
        (np.zeros((2, 32, 32, 3), np.uint8), np.zeros(3, np.int32)),  # Length mismatch.
        (np.zeros((2, 32, 32, 3), np.uint8), np.array([0, 10])),  # Label out of range.
        (np.zeros((0, 32, 32, 3), np.uint8), np.zeros(0, np.int32)),  # Empty.
    ],
)
def test_write_binary_batch_rejects_bad_input(tmp_path, images, labels):
    """write_binary_batch raises ValueError and writes nothing for malformed input."""
    with pytest.raises(ValueError):
        write_binary_batch(tmp_path / "b.bin", images, labels)
    assert not list(tmp_path.iterdir())


def test_fixture_round_trips_exactly_through_load_cifar10(fixture_dir):
    """A folder of mixed .bin/.bin.gz fixtures loads to the concatenated batches, in order."""
    folder, batches = fixture_dir
    data = load_cifar10(folder)
    train = [batches[name] for name in BATCH_NAMES[:5]]
    np.testing.assert_array_equal(data.train_images, np.concatenate([b[0] for b in train]))
    np.testing.assert_array_equal(data.train_labels, np.concatenate([b[1] for b in train]))
    np.testing.assert_array_equal(data.test_images, batches["test_batch"][0])
    np.testing.assert_array_equal(data.test_labels, batches["test_batch"][1])
    assert data.train_images.shape == (100, 32, 32, 3) and data.train_images.dtype == np.uint8
    assert data.train_labels.dtype == np.int32 and data.test_labels.dtype == np.int32
    assert data.class_names == CLASS_NAMES  # Blank lines in batches.meta.txt are ignored.
    assert data.source == f"binary:{folder.resolve()}"


def test_the_test_split_alone_loads_without_any_training_file(fixture_dir):
    """splits=("test",) reads test_batch and the class names only: with every training file
    gone it gives the same test arrays and empty training arrays; the training split alone
    needs no test file."""
    folder, batches = fixture_dir
    full = load_cifar10(folder)
    for path in folder.glob("data_batch_*"):
        path.unlink()
    with pytest.raises(DataError, match="data_batch_1"):
        load_cifar10(folder)
    test_only = load_cifar10(folder, splits=("test",))
    np.testing.assert_array_equal(test_only.test_images, full.test_images)
    np.testing.assert_array_equal(test_only.test_labels, full.test_labels)
    assert test_only.train_images.shape == (0, 32, 32, 3) and test_only.train_labels.shape == (0,)
    assert test_only.train_images.dtype == np.uint8 and test_only.train_labels.dtype == np.int32
    _write_fixture(folder)
    next(folder.glob("test_batch*")).unlink()
    assert len(load_cifar10(folder, splits=["train"]).train_labels) == 5 * RECORDS
    for bad in ((), ("val",), ("test", "eval")):
        with pytest.raises(ValueError, match="splits="):
            load_cifar10(folder, splits=bad)


def test_env_var_selects_the_binary_folder(fixture_dir, monkeypatch):
    """With data_dir=None, load_cifar10 reads the folder named by ADVJAX_DATA_DIR."""
    folder, _ = fixture_dir
    monkeypatch.setenv(DATA_DIR_ENV, str(folder))
    assert load_cifar10().source == f"binary:{folder.resolve()}"


def _corrupt(folder: Path, kind: str) -> str:
    """Damages the fixture in one way; returns the file name the error must mention."""
    plain, gzipped = folder / "data_batch_2.bin", folder / "data_batch_3.bin.gz"
    if kind == "missing file":
        plain.unlink()
    elif kind == "wrong size":
        plain.write_bytes(plain.read_bytes() + b"\x00" * 5)
    elif kind == "label 10":
        raw = bytearray(plain.read_bytes())
        raw[5 * RECORD_BYTES] = 10
        plain.write_bytes(bytes(raw))
    elif kind == "empty file":
        plain.write_bytes(b"")
    elif kind == "truncated gzip":
        gzipped.write_bytes(gzipped.read_bytes()[:-100])
        return gzipped.name
    elif kind == "not gzip":
        gzipped.write_bytes(b"this is not gzip data")
        return gzipped.name
    elif kind == "both .bin and .bin.gz":
        write_binary_batch(folder / "data_batch_2.bin.gz", *_random_batch(seed=9))
    elif kind == "missing meta":
        (folder / "batches.meta.txt").unlink()
        return "batches.meta.txt"
    elif kind == "nine class names":
        (folder / "batches.meta.txt").write_text("\n".join(CLASS_NAMES[:9]))
        return "batches.meta.txt"
    return plain.name


CORRUPTIONS = [
    "missing file",
    "wrong size",
    "label 10",
    "empty file",
    "truncated gzip",
    "not gzip",
    "both .bin and .bin.gz",
    "missing meta",
    "nine class names",
]


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_corrupt_folder_raises_data_error_naming_the_file(fixture_dir, kind):
    """Every kind of bad data raises DataError (a ValueError) whose message names the file."""
    folder, _ = fixture_dir
    name = _corrupt(folder, kind)
    with pytest.raises(DataError, match=name.replace(".", r"\.")):
        load_cifar10(folder)


@pytest.mark.parametrize("kind", ["wrong size", "label 10", "truncated gzip", "empty file"])
def test_read_binary_batch_never_loads_partially(fixture_dir, kind):
    """read_binary_batch raises instead of returning the readable prefix of a bad file."""
    folder, _ = fixture_dir
    name = _corrupt(folder, kind)
    with pytest.raises(DataError, match="record|gzip|empty|multiple"):
        read_binary_batch(folder / name)


def test_not_a_directory_raises_data_error(tmp_path):
    """A data_dir that does not exist raises DataError naming it."""
    with pytest.raises(DataError, match="nowhere"):
        load_cifar10(tmp_path / "nowhere")


def test_data_error_is_a_value_error():
    """DataError subclasses ValueError so generic handlers catch it."""
    assert issubclass(DataError, ValueError)


# ---------------------------------------------------------------------------
# TFDS path, offline via tfds.testing.mock_data.


def _tfds_examples(images, labels, split, order):
    """TFDS-style example dicts (bytes ids, int64 labels) stored in a shuffled order."""
    return [
        {"id": f"{split}_{i:05d}".encode(), "image": images[i], "label": np.int64(labels[i])}
        for i in order
    ]


def test_tfds_and_binary_sources_give_identical_arrays(fixture_dir, monkeypatch):
    """TFDS examples stored in hashed order load to the binary path's arrays and fingerprints.

    TFDS writes records sorted by a hash of their key and keeps the official position in
    the id "train_NNNNN"/"test_NNNNN"; the mock stores examples in a scrambled order.
    """
    tfds = pytest.importorskip("tensorflow_datasets")
    folder, _ = fixture_dir
    binary = load_cifar10(folder)
    rng = np.random.default_rng(0)
    splits = {
        "train": _tfds_examples(
            binary.train_images, binary.train_labels, "train", rng.permutation(100)
        ),
        "test": _tfds_examples(binary.test_images, binary.test_labels, "test", rng.permutation(20)),
    }

    def as_data_source(self, split, **kwargs):
        del self, kwargs
        return splits[split]

    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with tfds.testing.mock_data(as_data_source_fn=as_data_source):
        from_tfds = load_cifar10()
    assert from_tfds.source == "tfds"
    for field in ("train_images", "train_labels", "test_images", "test_labels"):
        got, want = getattr(from_tfds, field), getattr(binary, field)
        assert got.dtype == want.dtype and got.shape == want.shape, field
        np.testing.assert_array_equal(got, want, err_msg=field)
    assert from_tfds.class_names == binary.class_names
    assert fingerprint(from_tfds.test_images, from_tfds.test_labels) == fingerprint(
        binary.test_images, binary.test_labels
    )


def test_tfds_mock_data_source_conventions(monkeypatch):
    """Under plain mock_data, tfds.data_source serves uint8 (32, 32, 3) images but random ids.

    load_cifar10 then refuses the data (DataError) rather than return it in an unknown order.
    """
    tfds = pytest.importorskip("tensorflow_datasets")
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
        source = tfds.data_source(
            "cifar10", split="train", builder_kwargs={"file_format": "array_record"}
        )
        example = source[0]
        assert example["image"].dtype == np.uint8 and example["image"].shape == (32, 32, 3)
        assert 0 <= int(example["label"]) < 10
        with pytest.raises(DataError, match="order"):
            load_cifar10()


def test_tfds_failure_raises_data_error_with_hint(monkeypatch):
    """When tfds.data_source fails (e.g. offline), DataError tells the user to set the data dir."""
    tfds = pytest.importorskip("tensorflow_datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setattr(tfds, "data_source", offline)
    with pytest.raises(DataError, match=f"{DATA_DIR_ENV}.*--data-dir"):
        load_cifar10()


def test_tfds_ids_with_gaps_raise_data_error(monkeypatch):
    """Examples whose ids are not a permutation of split_0..split_{n-1} are rejected."""
    tfds = pytest.importorskip("tensorflow_datasets")
    images, labels = _random_batch(seed=3, n=4)
    examples = _tfds_examples(images, labels, "train", [0, 1, 2, 3])
    examples[3]["id"] = b"train_00007"
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with tfds.testing.mock_data(as_data_source_fn=lambda self, split, **kw: examples):
        with pytest.raises(DataError, match="ids"):
            load_cifar10()


# ---------------------------------------------------------------------------
# Fingerprints.


def test_fingerprint_depends_on_content_not_label_dtype():
    """fingerprint is stable, ignores the label integer dtype, and changes with one pixel."""
    images, labels = _random_batch(seed=4, n=5)
    base = fingerprint(images, labels)
    assert len(base) == 64 and base == fingerprint(images.copy(), labels.astype(np.int64))
    changed = images.copy()
    changed[2, 3, 4, 1] ^= 1
    assert fingerprint(changed, labels) != base
    assert fingerprint(images, (labels + 1) % 10) != base
    with pytest.raises(ValueError):
        fingerprint(images.astype(np.float32), labels)


# ---------------------------------------------------------------------------
# Real data (skipped unless ADVJAX_DATA_DIR is set).


def test_real_data_shapes_counts_and_class_names(real_data):
    """Real CIFAR-10: 50,000/10,000 uint8 images, 5,000/1,000 per class, names airplane..truck."""
    assert real_data.train_images.shape == (50000, 32, 32, 3)
    assert real_data.test_images.shape == (10000, 32, 32, 3)
    assert real_data.train_images.dtype == np.uint8 and real_data.train_labels.dtype == np.int32
    np.testing.assert_array_equal(np.bincount(real_data.train_labels), [5000] * 10)
    np.testing.assert_array_equal(np.bincount(real_data.test_labels), [1000] * 10)
    assert real_data.class_names == CLASS_NAMES
    assert real_data.class_names[0] == "airplane" and real_data.class_names[-1] == "truck"


def test_real_data_matches_published_spot_checks(real_data):
    """First labels and pixel values match the official files (see the data README)."""
    np.testing.assert_array_equal(real_data.test_labels[:5], [3, 8, 8, 0, 6])
    np.testing.assert_array_equal(real_data.train_labels[:5], [6, 9, 9, 4, 1])
    test_r = real_data.test_images[0, :, :, 0].ravel()
    np.testing.assert_array_equal(test_r[:9], [158, 159, 165, 166, 160, 156, 162, 159, 158])
    train = real_data.train_images
    np.testing.assert_array_equal(train[0, :, :, 0].ravel()[:3], [59, 43, 50])
    np.testing.assert_array_equal(train[0, :, :, 2].ravel()[-3:], [140, 84, 72])
    np.testing.assert_array_equal(train[9999, :, :, 2].ravel()[-3:], [130, 130, 131])
    np.testing.assert_array_equal(train[10000, :, :, 0].ravel()[:3], [35, 27, 25])  # Batch 2.
    np.testing.assert_array_equal(train[40000, :, :, 0].ravel()[:3], [255, 252, 253])  # Batch 5.


def test_real_test_split_matches_readme_numpy_recipe(real_data):
    """An independent read of test_batch.bin.gz (the data README's recipe) gives the same arrays."""
    path = Path(os.environ[DATA_DIR_ENV]) / "test_batch.bin.gz"
    raw = np.frombuffer(gzip.open(path).read(), np.uint8).reshape(-1, 3073)
    images = raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(real_data.test_images, images)
    np.testing.assert_array_equal(real_data.test_labels, raw[:, 0])


def test_real_data_fingerprints_are_pinned(real_data):
    """The source-independent checksums cited in results stay fixed."""
    assert fingerprint(real_data.train_images, real_data.train_labels) == REAL_TRAIN_FINGERPRINT
    assert fingerprint(real_data.test_images, real_data.test_labels) == REAL_TEST_FINGERPRINT


def test_real_channel_means_match_published_values(real_data):
    """Train channel means in [0, 1] units equal the widely published CIFAR-10 values."""
    means = real_data.train_images.reshape(-1, 3).mean(axis=0, dtype=np.float64) / 255.0
    np.testing.assert_allclose(means, [0.49139968, 0.48215841, 0.44653091], atol=1e-7)


# ---------------------------------------------------------------------------
# Stratified indices and study splits.


def _synthetic_labels(per_class: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(10), per_class))


def _check_splits(splits: StudySplits, train_labels, test_labels, sizes=(1500, 300, 100)):
    """Sorted int64, disjoint train/val, exact per-class counts, eval inside the test split."""
    for part, per_class, labels in zip(
        splits, sizes, (train_labels, train_labels, test_labels), strict=True
    ):
        assert part.dtype == np.int64 and np.all(np.diff(part) > 0)
        np.testing.assert_array_equal(np.bincount(labels[part], minlength=10), [per_class] * 10)
    assert not np.intersect1d(splits.train, splits.val).size
    assert splits.eval.min() >= 0 and splits.eval.max() < len(test_labels)


def test_study_splits_default_sizes_on_synthetic_labels():
    """Defaults give 15,000/3,000/1,000 indices: 1,500/300/100 per class, train and val disjoint."""
    train_labels, test_labels = _synthetic_labels(5000, 0), _synthetic_labels(1000, 1)
    splits = study_splits(train_labels, test_labels)
    assert tuple(map(len, splits)) == (15000, 3000, 1000)
    _check_splits(splits, train_labels, test_labels)


def test_study_splits_on_real_labels(real_data):
    """On real CIFAR-10 labels the default splits have exact per-class counts and are disjoint."""
    splits = study_splits(real_data.train_labels, real_data.test_labels)
    _check_splits(splits, real_data.train_labels, real_data.test_labels)


def test_study_splits_are_deterministic_in_the_seed():
    """The same seed gives the same indices; a different seed gives different ones."""
    train_labels, test_labels = _synthetic_labels(200, 2), _synthetic_labels(50, 3)
    sizes = dict(train_size=500, val_size=200, eval_size=100)
    a = study_splits(train_labels, test_labels, **sizes, seed=0)
    b = study_splits(train_labels, test_labels, **sizes, seed=0)
    c = study_splits(train_labels, test_labels, **sizes, seed=1)
    for x, y, z in zip(a, b, c, strict=True):
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x, z)
    _check_splits(a, train_labels, test_labels, sizes=(50, 20, 10))


def test_study_splits_are_pinned_for_this_jax_version():
    """Default splits of fixed labels equal recorded values, so a JAX RNG change is caught.

    If this fails after a JAX upgrade, the study subsets changed: results are no longer
    comparable to earlier runs.
    """
    splits = study_splits(np.tile(np.arange(10), 5000), np.tile(np.arange(10), 1000))
    assert splits.train[:6].tolist() == [0, 2, 6, 10, 11, 12]
    assert splits.val[:6].tolist() == [9, 16, 33, 53, 58, 60]
    assert splits.eval[:6].tolist() == [33, 43, 44, 48, 52, 62]


def test_study_eval_indices_is_the_study_eval_split():
    """The evaluation subset drawn from the test labels alone is the study's `eval`."""
    train_labels, test_labels = _synthetic_labels(100, 4), _synthetic_labels(50, 3)
    for seed, size in ((42, 100), (7, 30)):
        splits = study_splits(
            train_labels, test_labels, train_size=100, val_size=100, eval_size=size, seed=seed
        )
        np.testing.assert_array_equal(
            study_eval_indices(test_labels, eval_size=size, seed=seed), splits.eval
        )
    with pytest.raises(ValueError, match="seed"):
        study_eval_indices(test_labels, seed=1.5)


def test_eval_split_uses_only_test_labels():
    """Changing the train labels leaves the eval subset (drawn from the test split) unchanged."""
    test_labels = _synthetic_labels(50, 3)
    sizes = dict(train_size=100, val_size=100, eval_size=100)
    a = study_splits(_synthetic_labels(100, 4), test_labels, **sizes)
    b = study_splits(_synthetic_labels(100, 5), test_labels, **sizes)
    np.testing.assert_array_equal(a.eval, b.eval)


@pytest.mark.parametrize(
    "sizes, match",
    [
        (dict(train_size=15001), "divisible"),
        (dict(train_size=45000, val_size=10000), "available"),  # 5,500 per class > 5,000.
        (dict(eval_size=10010), "available"),
        (dict(val_size=-10), "non-negative"),
        (dict(seed=1.5), "seed"),
    ],
)
def test_study_splits_rejects_impossible_sizes(sizes, match):
    """Sizes that cannot be met (or a non-int seed) raise ValueError naming the problem."""
    with pytest.raises(ValueError, match=match):
        study_splits(_synthetic_labels(5000, 0), _synthetic_labels(1000, 1), **sizes)


def test_stratified_indices_respects_exclude_and_balance():
    """stratified_indices never returns excluded indices and draws n/num_classes per class."""
    labels = _synthetic_labels(30, 6)
    exclude = np.arange(0, 300, 2)
    idx = stratified_indices(labels, 100, jax.random.key(0), exclude=exclude)
    assert len(idx) == 100 and len(np.unique(idx)) == 100
    assert not np.intersect1d(idx, exclude).size
    np.testing.assert_array_equal(np.bincount(labels[idx]), [10] * 10)


def test_stratified_indices_is_a_function_of_the_key():
    """Same key, same indices; typed and legacy keys are both accepted."""
    labels = _synthetic_labels(30, 7)
    a = stratified_indices(labels, 50, jax.random.key(3))
    np.testing.assert_array_equal(a, stratified_indices(labels, 50, jax.random.key(3)))
    np.testing.assert_array_equal(a, stratified_indices(labels, 50, jax.random.PRNGKey(3)))
    assert not np.array_equal(a, stratified_indices(labels, 50, jax.random.key(4)))


@pytest.mark.parametrize(
    "labels, n, exclude, match",
    [
        (np.array([0, 1, 1]), 4, None, "available"),
        (np.array([0, 1, 2]), 4, None, "divisible"),
        (np.array([[0, 1]]), 2, None, "1-D"),
        (np.array([0.0, 1.0]), 2, None, "ints"),
        (np.array([0, 1]), 2, np.array([5]), "exclude"),
    ],
)
def test_stratified_indices_rejects_bad_input(labels, n, exclude, match):
    """Malformed labels, n or exclude raise ValueError naming the offending value."""
    with pytest.raises(ValueError, match=match):
        stratified_indices(labels, n, jax.random.key(0), exclude=exclude)


def test_data_that_parses_but_is_not_the_official_release_is_refused(real_data, tmp_path):
    """Fewer records, or other images in the official counts, are a DataError naming the
    split, unless the data is declared custom."""
    verify_official(real_data)
    fewer = real_data._replace(
        test_images=real_data.test_images[:-10], test_labels=real_data.test_labels[:-10]
    )
    with pytest.raises(DataError, match="test split has 9,990 images"):
        verify_official(fewer)
    other = real_data.test_images.copy()
    other[0, 0, 0, 0] ^= 1
    with pytest.raises(DataError, match="test split parses but is not the official one"):
        verify_official(real_data._replace(test_images=other))
    verify_official(real_data._replace(test_images=other), splits=("train",))


def test_the_tfds_path_has_every_dependency_it_imports(tmp_path):
    """In a fresh process, building the cifar10 builder (what `load_cifar10()` does before it
    can reach the network) imports everything it needs: the installed package declares it."""
    import subprocess
    import sys

    pytest.importorskip("tensorflow_datasets")
    code = (
        "import tensorflow_datasets as tfds; "
        f"b = tfds.builder('cifar10', data_dir={str(tmp_path)!r}); print(b.name)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "cifar10", done.stderr[-2000:]
