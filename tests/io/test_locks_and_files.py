"""One writer per output folder, and files that every reader of the folder can read."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from advjax.io import LockedError, OutputLock
from advjax.io._lock import LOCK_NAME
from advjax.records import is_temporary


def dead_pid() -> int:
    """The pid of a process that has already exited."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def leftover_temporary(folder, target: str) -> str:
    """A temporary file named as `atomic_write_bytes` names them, as a killed write leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(dir=folder, prefix=f".{target}.", suffix=".tmp")
    os.close(fd)
    return os.path.basename(path)


def test_a_second_writer_is_refused_with_the_first_ones_pid(tmp_path):
    with OutputLock(tmp_path):
        with pytest.raises(LockedError, match=f"in use by process {os.getpid()}"):
            OutputLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_NAME).exists(), "released on exit"
    with OutputLock(tmp_path):
        pass


@pytest.mark.parametrize("content", ["dead pid", "", '{"pid": '], ids=["dead", "empty", "cut"])
def test_a_stale_lock_is_taken_over(tmp_path, content):
    """A lock of a process that is gone, or one cut short before its pid was written."""
    if content == "dead pid":
        content = json.dumps({"pid": dead_pid(), "command": "gone"})
    (tmp_path / LOCK_NAME).write_text(content)
    with OutputLock(tmp_path):
        owner = json.loads((tmp_path / LOCK_NAME).read_text())
        assert owner["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()


def test_temporaries_are_cleared_but_not_another_live_runs(tmp_path):
    """Taking a lock removes killed atomic writes' temporaries in the folder tree (and in
    subfolders of dead runs), keeps those of a subfolder that a live process holds, and
    keeps every other file."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live, stale, plain = tmp_path / "live", tmp_path / "stale", tmp_path / "a" / "b"
        gone = [leftover_temporary(tmp_path, "results.json"), leftover_temporary(plain, "x.npz")]
        gone.append(leftover_temporary(stale, "summary.json"))
        kept = leftover_temporary(live, "records.jsonl")
        (live / LOCK_NAME).write_text(json.dumps({"pid": sleeper.pid, "command": "other"}))
        (stale / LOCK_NAME).write_text(json.dumps({"pid": dead_pid(), "command": "gone"}))
        for name in ("notes.tmp", ".tmp", "results.json"):
            (tmp_path / name).write_text("x")
        with OutputLock(tmp_path) as lock:
            assert sorted(p.name for p in lock.cleared) == sorted(gone)
        assert (live / kept).exists() and (live / LOCK_NAME).exists()
        left = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
        assert left == sorted([".tmp", LOCK_NAME, LOCK_NAME, kept, "notes.tmp", "results.json"])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_temporary_names_are_recognised_exactly():
    """Only `.<name>.<8 characters>.tmp`, the atomic writes' names, count as temporaries."""
    assert is_temporary(".records.jsonl.ab_9cd2e.tmp")
    for name in ("records.jsonl", ".records.jsonl.tmp", "x.ab_9cd2e.tmp", ".a.toolongname.tmp"):
        assert not is_temporary(name), name


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
        sleeper.wait()


def test_atomic_writes_are_readable_by_the_group_like_any_new_file(tmp_path):
    from advjax.records import atomic_write_text

    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_written_lines_round_trip_as_gzip_or_plain_and_a_legacy_plain_file_reads(tmp_path):
    """`atomic_write_lines` writes gzip for a `.gz` name (one member, the same bytes for the
    same lines, readable as a record log) and plain text otherwise; `read_lines` gives the
    lines back from either, a legacy plain file without a last newline included."""
    import gzip

    from conftest import case_record

    from advjax.records import atomic_write_lines, read_lines, read_records

    lines = [json.dumps({"src": "ça\u2028va", "i": i}, ensure_ascii=False) for i in range(3)]
    packed = atomic_write_lines(tmp_path / "records.jsonl.gz", lines)
    assert packed.read_bytes()[:2] == b"\x1f\x8b" and read_lines(packed) == lines
    first = packed.read_bytes()
    assert atomic_write_lines(packed, lines).read_bytes() == first  # mtime 0
    assert gzip.decompress(first) == "".join(x + "\n" for x in lines).encode()
    plain = atomic_write_lines(tmp_path / "records.jsonl", lines)
    assert plain.read_text(encoding="utf-8") == "".join(x + "\n" for x in lines)
    assert read_lines(plain) == lines
    plain.write_text("\n".join(lines), encoding="utf-8")  # written by hand: no last newline
    assert read_lines(plain) == lines
    assert read_lines(atomic_write_lines(tmp_path / "empty.jsonl.gz", [])) == []
    records = [case_record(i) for i in range(2)]
    log_file = atomic_write_lines(tmp_path / "log.jsonl.gz", (r.to_json() for r in records))
    assert read_records(log_file, strict=True) == records
