"""One writer per output folder, and files that every reader of the folder can read."""

import json
import os
import subprocess
import sys

import pytest

from advjax.io import LockedError, OutputLock
from advjax.io._lock import LOCK_NAME


def test_a_second_writer_is_refused_with_the_first_ones_pid(tmp_path):
    with OutputLock(tmp_path):
        with pytest.raises(LockedError, match=f"in use by process {os.getpid()}"):
            OutputLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_NAME).exists(), "released on exit"
    with OutputLock(tmp_path):
        pass


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": int(dead.stdout), "command": "gone"}))
    with OutputLock(tmp_path):
        owner = json.loads((tmp_path / LOCK_NAME).read_text())
        assert owner["pid"] == os.getpid()


def test_a_locked_folder_makes_the_evaluate_command_exit_2_and_write_nothing(tmp_path, capsys):
    from advjax.evaluate import main

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": sleeper.pid, "command": "other run"}))
        code = main(
            ["--model", "tests.evaluation.cli_models:linear_logits_fn", "--out", str(tmp_path)]
        )
        assert code == 2
        err = capsys.readouterr().err
        assert f"in use by process {sleeper.pid}" in err and err.count("\n") == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME]
    finally:
        sleeper.kill()


def test_atomic_writes_are_readable_by_the_group_like_any_new_file(tmp_path):
    from advjax.io import atomic_write_text

    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
