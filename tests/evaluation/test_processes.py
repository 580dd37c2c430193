"""An evaluation spread over processes with jax.distributed: two processes on this machine
(CPU collectives by gloo), two devices each, give every case the records one process gives,
merged once without duplicates; a process killed mid-run resumes from its own records."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from advjax.data import share_positions
from advjax.evaluate import main
from advjax.io import ProcessRecordLog, merge_record_files, read_records, record_file

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tests.evaluation.cli_models:small_linear_logits_fn"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _dataset(path: Path) -> str:
    rng = np.random.default_rng(5)
    np.savez(path, x=rng.uniform(0, 1, (30, 8, 8, 3)).astype(np.float32), y=np.arange(30) % 4)
    return str(path)


def _argv(data: str, out: Path, members: str = "apgd-ce,apgd-t,square") -> list[str]:
    return ["--model", MODEL, "--data", data, "--members", members,
            "--eps", "2/255", "--batch-size", "8", "--no-progress", "--out", str(out)]  # fmt: skip


def _outcomes(out: Path) -> dict:
    return {r.key: (r.status, r.adv_pred, r.queries, r.key_path, r.first_break_step)
            for r in read_records(record_file(out))}  # fmt: skip


def test_the_share_of_each_process_covers_every_case_once():
    shares = [share_positions(30, (i, 4)) for i in range(4)]
    assert sorted(np.concatenate(shares).tolist()) == list(range(30))
    assert [len(s) for s in shares] == [8, 8, 7, 7]
    with pytest.raises(ValueError, match="index must be in"):
        share_positions(30, (4, 4))


@pytest.mark.slow
def test_two_processes_of_two_devices_give_the_records_of_one_process(tmp_path, capsys):
    data = _dataset(tmp_path / "set.npz")
    assert main(_argv(data, tmp_path / "one")) == 0, capsys.readouterr()
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}  # fmt: skip
    port = _free_port()
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "advjax.evaluate",
                *_argv(data, tmp_path / "two"),
                "--coordinator",
                f"localhost:{port}",
                "--processes",
                "2",
                "--process-id",
                str(i),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    logs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], logs
    assert "merged" in logs[0] and "process 1 of 2" in logs[1]
    one, two = _outcomes(tmp_path / "one"), _outcomes(tmp_path / "two")
    assert len(one) > 30 and two == one
    for i in range(2):
        own = read_records(tmp_path / "two" / "processes" / f"{i}-of-2" / "records.jsonl.gz")
        assert {r.case_id % 2 for r in own} == {i}
    summary = (tmp_path / "two" / "summary.json").read_text()
    assert '"processes": 2' in summary


def test_a_process_log_resumes_past_merged_records_and_merging_twice_adds_nothing(tmp_path):
    """A process's log counts the run's merged records as written, appends only to its own
    file, and a second merge (after a kill during the first) duplicates nothing."""
    data = _dataset(tmp_path / "set.npz")
    assert main(_argv(data, tmp_path / "run", members="apgd-ce")) == 0
    merged = record_file(tmp_path / "run")
    records = read_records(merged)
    own_path = tmp_path / "run" / "processes" / "0-of-2" / "records.jsonl.gz"
    log = ProcessRecordLog(own_path, merged=merged)
    assert all(r.key in log for r in records) and len(log.read()) == len(records)
    assert log.append(records[:5], skip_existing=True) == 0 and read_records(own_path) == []
    target = tmp_path / "merged.jsonl.gz"
    assert merge_record_files(target, [merged]) == len(records)
    assert merge_record_files(target, [merged]) == 0
    assert len(read_records(target)) == len(records)
