"""`gpu_train.sh` splits the training split into parts that each fit one device call, and
refuses to train until every part has arrived on the machine."""

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "experiments" / "cifar_robustness" / "gpu_train.sh"
FILES = [f"data_batch_{i}.bin.gz" for i in range(1, 6)] + ["test_batch.bin.gz", "batches.meta.txt"]


def _run(args, cwd, **env):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env})  # fmt: skip


@pytest.fixture
def staged(tmp_path):
    source = tmp_path / "cifar10"
    source.mkdir()
    for name in FILES:
        (source / name).write_bytes(name.encode())
    repo = tmp_path / "repo"
    (repo / ".git" / "info").mkdir(parents=True)
    done = _run(["--stage"], repo, ADVJAX_DATA_DIR=str(source))
    assert done.returncode == 0, done.stderr
    return repo


def test_stage_puts_every_file_in_exactly_one_part_and_ignores_the_parts(staged):
    parts = {p: sorted(f.name for f in (staged / f".devtrain_{p}").iterdir()) for p in "abc"}
    assert parts == {
        "a": ["batches.meta.txt", "data_batch_1.bin.gz", "data_batch_2.bin.gz"],
        "b": ["data_batch_3.bin.gz", "data_batch_4.bin.gz"],
        "c": ["data_batch_5.bin.gz", "test_batch.bin.gz"],
    }
    exclude = (staged / ".git" / "info" / "exclude").read_text().split()
    assert exclude == ["/.devtrain_a/", "/.devtrain_b/", "/.devtrain_c/"]
    assert _run(["--stage"], staged, ADVJAX_DATA_DIR=str(staged.parent / "cifar10")).returncode == 0
    assert (staged / ".git" / "info" / "exclude").read_text().split() == exclude


def test_train_refuses_to_start_before_every_part_has_arrived(staged, tmp_path):
    data = tmp_path / "device_data"
    received = _run(["--receive", "a"], staged, DATA=str(data))
    assert received.returncode == 0, received.stderr
    for p in "bc":
        (staged / f".devtrain_{p}").rename(staged / f"elsewhere_{p}")
    refused = _run(["--train", "pgd_silu_scratch_flip_ema"], staged, DATA=str(data),
                   OUT=str(tmp_path / "out"))  # fmt: skip
    assert refused.returncode == 2
    assert "data_batch_3.bin.gz" in refused.stderr and "--receive b" in refused.stderr
    assert not (tmp_path / "out").exists()


def test_an_unknown_mode_prints_the_usage():
    done = _run(["--bogus"], SCRIPT.parent)
    assert done.returncode == 2 and "usage" in done.stderr
