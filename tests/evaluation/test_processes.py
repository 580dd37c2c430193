"""An evaluation spread over processes with jax.distributed: two processes on this machine
(CPU collectives by gloo), two devices each, give every case the records one process gives,
merged once without duplicates; a process killed mid-run resumes from its own records."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from advjax.data import EvalCases, share_positions
from advjax.evaluate import main
from advjax.evaluation import AttackSpec, Model, ThreatModel, run_attack
from advjax.records import (
    ProcessRecordLog,
    RecordLog,
    merge_record_files,
    read_records,
    record_file,
)
from tests.evaluation.cli_models import small_linear_logits_fn

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


def _argv(data: str, out: Path, version: list[str]) -> list[str]:
    return ["--model", MODEL, "--data", data, *version,
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
@pytest.mark.parametrize(
    "version",
    [["--members", "apgd-ce,apgd-t,square"], ["--version", "fast"]],
    ids=["members", "fast"],
)
def test_two_processes_of_two_devices_give_the_records_of_one_process(tmp_path, capsys, version):
    """The fast version too: its processes exchange the cases left robust, so the probe's
    sample, its findings and the escalation are those of one process."""
    data = _dataset(tmp_path / "set.npz")
    assert main(_argv(data, tmp_path / "one", version)) == 0, capsys.readouterr()
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}  # fmt: skip
    port = _free_port()
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "advjax.evaluate",
                *_argv(data, tmp_path / "two", version),
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
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["extra"]["processes"] == 2
    if version[0] == "--version":
        alone = json.loads((tmp_path / "one" / "summary.json").read_text())["extra"]
        assert summary["extra"]["schedule"] == alone["schedule"]
        assert {r.attack for r in read_records(record_file(tmp_path / "two"))} >= {
            "apgd-ce", "malt", "fab-t (probe)", "square (probe)"
        }  # fmt: skip


def test_a_campaign_shared_over_processes_merges_to_the_records_of_one_run(tmp_path):
    """The study's campaigns spread as AutoAttack does: `run_attack` on each share into its
    own process log, the files merged, equal the records of one run on all the cases (a
    case's keys are named by its case id)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (20, 8, 8, 3)).astype(np.float32)
    y = np.arange(20) % 4
    logits_fn = small_linear_logits_fn()
    spec = AttackSpec(name="pgd", method="pgd", eps=(2 / 255, 8 / 255), steps=5, restarts=2,
                      batch_size=8)  # fmt: skip
    tm = ThreatModel(eps=spec.eps, steps=5, restarts=2)

    def attack(log, share):
        at = share_positions(len(y), share)
        run_attack(log, Model("m", logits_fn, "h"), EvalCases(x[at], y[at], at), spec,
                   threat_model=tm, key=jax.random.key(4), show_progress=False,
                   log_line=lambda _: None)  # fmt: skip

    attack(RecordLog(tmp_path / "one.jsonl.gz"), None)
    merged = tmp_path / "two" / "records.jsonl.gz"
    for i in range(2):
        own = tmp_path / "two" / "processes" / f"{i}-of-2" / "records.jsonl.gz"
        own.parent.mkdir(parents=True)
        attack(ProcessRecordLog(own, merged=merged), (i, 2))
    assert merge_record_files(merged, sorted((tmp_path / "two").glob("processes/*/*.gz"))) == 40

    def by_key(path):
        return {r.key: r.to_dict() for r in read_records(path)}

    one = by_key(tmp_path / "one.jsonl.gz")
    assert len(one) == 40 and by_key(merged) == one


def test_a_process_log_resumes_past_merged_records_and_merging_twice_adds_nothing(tmp_path):
    """A process's log counts the run's merged records as written, appends only to its own
    file, and a second merge (after a kill during the first) duplicates nothing."""
    data = _dataset(tmp_path / "set.npz")
    assert main(_argv(data, tmp_path / "run", ["--members", "apgd-ce"])) == 0
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
