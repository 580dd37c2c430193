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


def _checkout(tmp_path) -> Path:
    """A stand-in CIFAR-10 folder (tmp_path/cifar10) and an empty checkout (tmp_path/repo)."""
    source = tmp_path / "cifar10"
    source.mkdir()
    for name in FILES:
        (source / name).write_bytes(name.encode())
    repo = tmp_path / "repo"
    (repo / ".git" / "info").mkdir(parents=True)
    return repo


def _stage(repo: Path) -> None:
    done = _run(["--stage"], repo, ADVJAX_DATA_DIR=str(repo.parent / "cifar10"))
    assert done.returncode == 0, done.stderr


@pytest.fixture
def staged(tmp_path):
    repo = _checkout(tmp_path)
    _stage(repo)
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


def test_a_training_begun_elsewhere_goes_on_from_its_staged_progress(tmp_path):
    """--stage takes RESUME_FROM's progress files into their own part; after `--receive r`,
    --train puts a group's file in its output folder before its training process starts."""
    repo = _checkout(tmp_path)
    progress = repo / "results" / "cifar10" / "robust_cnn" / "levers" / "training_progress"
    progress.mkdir(parents=True)
    (progress / "pgd_silu_scratch_flip_ema.msgpack").write_bytes(b"epoch 17")
    _stage(repo)
    assert [f.name for f in (repo / ".devtrain_r").iterdir()] == [
        "pgd_silu_scratch_flip_ema.msgpack"
    ]
    assert "/.devtrain_r/" in (repo / ".git" / "info" / "exclude").read_text().split()

    data, out, bin_dir = tmp_path / "device_data", tmp_path / "out", tmp_path / "bin"
    for part in "abcr":
        assert _run(["--receive", part], repo, DATA=str(data)).returncode == 0
    bin_dir.mkdir()
    seen = tmp_path / "seen.txt"
    fake = bin_dir / "python3"  # records what the training process would start from
    fake.write_text(
        f'#!/bin/bash\nfind "{out}" -name "*.msgpack" >> "{seen}"\necho "$@" >> "{seen}"\n'
    )
    fake.chmod(0o755)
    done = _run(["--train", "pgd_silu_scratch_flip_ema,pgd_silu_scratch_flip", "pgd_silu_scratch_batch64_ema"],
                repo, DATA=str(data), OUT=str(out), PATH=f"{bin_dir}:{os.environ['PATH']}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    copied = (
        out
        / "pgd_silu_scratch_flip_ema"
        / "training_progress"
        / "pgd_silu_scratch_flip_ema.msgpack"
    )
    assert copied.read_bytes() == b"epoch 17"
    assert str(copied) in seen.read_text()
    assert not (out / "pgd_silu_scratch_batch64_ema" / "training_progress").exists()
    assert (
        "pgd_silu_scratch_flip_ema: goes on from the staged progress"
        in (out / "log.txt").read_text()
    )
