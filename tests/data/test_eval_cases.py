"""An evaluation's cases from CIFAR-10, a .npz file or any TFDS image classification dataset,
read back exactly as written, and bad data refused in one line before any work."""

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from advjax.data import DataError, load_cifar10, load_eval_cases
from advjax.data._splits import study_eval_indices
from advjax.evaluate import main
from advjax.records import read_records, record_file

MODEL = "tests.evaluation.cli_models:small_linear_logits_fn"
needs_data = pytest.mark.skipif(
    not os.environ.get("ADVJAX_DATA_DIR"), reason="needs ADVJAX_DATA_DIR"
)
IMAGES = np.random.default_rng(0).integers(0, 256, (12, 8, 8, 3), dtype=np.uint8)
LABELS = np.arange(12) % 4


class TinyImages(tfds.core.GeneratorBasedBuilder):
    """12 random 8x8 RGB images in 4 classes; train holds 5, test 12."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "picture": tfds.features.Image(shape=(8, 8, 3)),
                    "kind": tfds.features.ClassLabel(num_classes=4),
                }
            ),  # fmt: skip
            supervised_keys=("picture", "kind"),
            disable_shuffling=True,  # stored in the order written, so the test knows case i
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(5), "test": self._generate_examples(12)}

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"picture": Image.fromarray(IMAGES[i]), "kind": int(LABELS[i])}


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tfds")
    TinyImages(data_dir=str(folder), file_format="array_record").download_and_prepare()
    return folder


def test_a_tfds_dataset_reads_back_the_pixels_labels_and_classes_it_was_written_with(tfds_dir):
    cases = load_eval_cases("tfds:tiny_images", data_dir=tfds_dir, n=10)
    np.testing.assert_array_equal(cases.x, IMAGES[:10].astype(np.float32) / 255)
    np.testing.assert_array_equal(cases.y, LABELS[:10])
    np.testing.assert_array_equal(cases.case_ids, np.arange(10))
    assert cases.classes == 4 and cases.x.dtype == np.float32
    train = load_eval_cases("tfds:tiny_images", data_dir=tfds_dir, split="train")
    np.testing.assert_array_equal(train.y, LABELS[:5])


def test_the_command_evaluates_a_tfds_dataset_case_by_case(tfds_dir, tmp_path, capsys):
    argv = ["--model", MODEL, "--data", "tfds:tiny_images", "--data-dir", str(tfds_dir),
            "--n", "6", "--members", "apgd-ce", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr()
    final = [r for r in read_records(record_file(tmp_path / "run")) if r.attack == "autoattack"]
    assert sorted(r.case_id for r in final) == list(range(6))
    assert all(r.true_class == LABELS[r.case_id] for r in final)


@pytest.mark.parametrize(
    "data, kwargs, message",
    [
        ("tfds:no_such_dataset", {}, "--data 'tfds:no_such_dataset' split 'test': could not open"),
        ("tfds:tiny_images", {"split": "validation"}, "split 'validation': could not open"),
        ("tfds:tiny_images", {"n": 13}, "n=13 must be in \\[1, 12\\]"),
        ("imagenet", {}, "--data 'imagenet': expected cifar10, a .npz file"),
    ],
)
def test_a_dataset_that_cannot_be_read_is_one_clear_error(tfds_dir, data, kwargs, message):
    with pytest.raises(DataError, match=message) as error:
        load_eval_cases(data, data_dir=tfds_dir, name="--data", **kwargs)
    assert "\n" not in str(error.value)


def test_labels_outside_the_models_classes_are_refused_before_any_work(tmp_path, capsys):
    """tiny_images has 4 classes; a 3-class model cannot be scored on label 3."""
    path = tmp_path / "set.npz"
    np.savez(path, x=IMAGES, y=LABELS)
    argv = ["--model", "tests.evaluation.cli_models:three_class_logits_fn", "--data", str(path),
            "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "labels must lie in [0, 3)" in err
    assert not (tmp_path / "run" / "records.jsonl.gz").exists()


@needs_data
def test_cifar10_cases_are_the_studys_stratified_draw_or_every_test_image():
    data = load_cifar10(splits=("test",))
    cases = load_eval_cases("cifar10", n=30)
    index = study_eval_indices(data.test_labels, eval_size=30)
    np.testing.assert_array_equal(cases.case_ids, index)
    np.testing.assert_array_equal(cases.x, data.test_images[index].astype(np.float32) / 255)
    assert cases.classes == 10
    assert len(load_eval_cases("cifar10", n=10000).y) == 10000
