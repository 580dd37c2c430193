"""Every command: one writer per output folder, `--repair-records`, and one-line errors."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import case_record

from advjax.io import LockedError
from advjax.io._lock import LOCK_NAME
from advjax.records import RecordError, RecordLog
from experiments.cli import exit_status

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tests.evaluation.cli_models:linear_logits_fn"

# Each command with arguments that would start work: were the lock not taken first, the
# missing data or study folder would fail it with another error.
COMMANDS = {
    "experiments.cifar_robustness": (
        "experiments.cifar_robustness.main",
        ["--profile", "quick", "--data-dir", "{missing}", "--no-progress"],
    ),
    "experiments.cifar_robustness.strong_evaluation": (
        "experiments.cifar_robustness.strong_evaluation",
        ["--study", "{missing}", "--data-dir", "{missing}", "--no-progress"],
    ),
    "experiments.cifar_robustness.attack_variants": (
        "experiments.cifar_robustness.attack_variants",
        ["--study", "{missing}", "--data-dir", "{missing}", "--no-progress"],
    ),
    "experiments.text_robustness": (
        "experiments.text_robustness.main",
        ["--profile", "quick", "--text-dir", "{missing}", "--no-progress"],
    ),
    "experiments.seq2seq_robustness": (
        "experiments.seq2seq_robustness.main",
        ["--profile", "quick", "--text-dir", "{missing}"],
    ),
    "advjax.evaluate": ("advjax.evaluate", ["--model", MODEL, "--data-dir", "{missing}"]),
}
REPAIRING = {  # the commands with record logs, and where they keep them under --out
    "experiments.cifar_robustness": ["records.jsonl"],
    "experiments.cifar_robustness.strong_evaluation": ["records.jsonl"],
    "experiments.cifar_robustness.attack_variants": ["linf/records.jsonl", "l2/records.jsonl"],
    "advjax.evaluate": ["records.jsonl"],
}


def run(prog: str, argv: list[str]) -> int:
    """The command's exit status, run in this process as `python -m prog` runs it."""
    main = importlib.import_module(COMMANDS[prog][0]).main
    if prog == "advjax.evaluate":
        return main(argv)  # its own exit status, without experiments.cli
    return exit_status(lambda: main(argv), prog)


def argv_for(prog: str, out: Path, missing: Path) -> list[str]:
    return [a.format(missing=missing) for a in COMMANDS[prog][1]] + ["--out", str(out)]


@pytest.fixture
def live_pid():
    """A live process that is not this one, to own a lock."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield sleeper.pid
    sleeper.kill()
    sleeper.wait()


def lock_folder(folder: Path, pid: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_NAME).write_text(json.dumps({"pid": pid, "command": "the other run"}))


@pytest.mark.parametrize("prog", COMMANDS)
def test_every_command_refuses_a_locked_folder_with_exit_2_and_writes_nothing(
    prog, tmp_path, live_pid, capsys
):
    out = tmp_path / "out"
    lock_folder(out, live_pid)
    assert run(prog, argv_for(prog, out, tmp_path / "missing")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
    assert f"in use by process {live_pid} (the other run)" in err
    assert [p.name for p in out.iterdir()] == [LOCK_NAME]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "module",
    [
        "experiments.cifar_robustness",
        "experiments.cifar_robustness.main",
        "experiments.cifar_robustness.strong_evaluation",
        "experiments.cifar_robustness.attack_variants",
        "experiments.text_robustness",
        "experiments.seq2seq_robustness",
    ],
)
def test_python_dash_m_gives_the_one_line_error_and_exit_2(module, tmp_path, live_pid):
    """`python -m` of each command (and of the study's main) ends through run_command."""
    prog = module.removesuffix(".main")
    out = tmp_path / "out"
    lock_folder(out, live_pid)
    done = subprocess.run(
        [sys.executable, "-m", module, *argv_for(prog, out, tmp_path / "missing")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "ADVJAX_DEBUG": ""},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and f"in use by process {live_pid}" in done.stderr
    assert "ADVJAX_DEBUG=1 shows the traceback" in done.stderr


@pytest.mark.parametrize("prog", REPAIRING)
def test_repair_records_keeps_the_first_copy_reports_the_counts_and_saves_the_dropped_lines(
    prog, tmp_path, capsys
):
    out = tmp_path / "out"
    first = [case_record(i).to_json() for i in range(3)]
    copies = [case_record(1).to_json(), case_record(2, final_loss=5.0).to_json()]
    record_file = out / REPAIRING[prog][0]
    record_file.parent.mkdir(parents=True)
    record_file.write_text("\n".join([first[0], first[1], copies[0], first[2], copies[1]]) + "\n")
    argv = ["--out", str(out), "--repair-records"]
    assert run(prog, argv) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1, printed
    assert f"{record_file}: kept the first copy of 3 records, dropped 2 duplicates" in printed[0]
    assert "(1 differing from the kept copy)" in printed[0]
    assert record_file.read_text().splitlines() == first
    saved = record_file.with_name("records.duplicates.jsonl").read_text().splitlines()
    assert saved == copies
    assert len(RecordLog(record_file)) == 3
    assert not list(out.rglob(LOCK_NAME)), "the lock is released"
    assert run(prog, argv) == 0
    assert "no duplicates" in capsys.readouterr().out


@pytest.mark.parametrize("prog", REPAIRING)
def test_repair_records_waits_for_nothing_and_touches_nothing_in_a_locked_folder(
    prog, tmp_path, live_pid, capsys
):
    out = tmp_path / "out"
    lock_folder(out, live_pid)
    record_file = out / REPAIRING[prog][0]
    record_file.parent.mkdir(parents=True, exist_ok=True)
    data = (case_record(0).to_json() + "\n") * 2
    record_file.write_text(data)
    assert run(prog, ["--out", str(out), "--repair-records"]) == 2
    assert f"in use by process {live_pid}" in capsys.readouterr().err
    assert record_file.read_text() == data
    assert not record_file.with_name("records.duplicates.jsonl").exists()


def test_repair_records_of_a_folder_without_records_says_so(tmp_path, capsys):
    prog = "experiments.cifar_robustness.attack_variants"
    assert run(prog, ["--out", str(tmp_path), "--repair-records"]) == 0
    assert "no record file to repair" in capsys.readouterr().out


@pytest.mark.parametrize(
    "error",
    [
        LockedError("results is in use by process 1 (x)"),
        RecordError("r.jsonl:2: duplicate record\nfor a key"),
        ValueError("eps=2 must be in [0, 1]"),
    ],
)
def test_user_errors_are_one_line_with_exit_2_and_the_traceback_on_request(
    error, capsys, monkeypatch
):
    def main():
        raise error

    monkeypatch.delenv("ADVJAX_DEBUG", raising=False)
    assert exit_status(main, "prog") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prog: error: ")
    assert " ".join(str(error).split()) in err
    monkeypatch.setenv("ADVJAX_DEBUG", "1")
    with pytest.raises(type(error)):
        exit_status(main, "prog")


def test_ctrl_c_exits_130_giving_the_command_that_resumes(capsys, monkeypatch):
    def main():
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", ["prog", "--out", "my runs/a"])
    assert exit_status(main, "prog") == 130
    err = capsys.readouterr().err
    assert "the same command resumes from there: python -m prog --out 'my runs/a'" in err


@pytest.mark.skipif(not os.environ.get("ADVJAX_DATA_DIR"), reason="needs ADVJAX_DATA_DIR")
def test_a_duplicated_record_stops_evaluate_with_one_line_naming_file_line_and_the_flag(
    tmp_path, capsys
):
    out = tmp_path / "out"
    out.mkdir()
    data = (case_record(0).to_json() + "\n") * 2
    (out / "records.jsonl").write_text(data)
    assert run("advjax.evaluate", ["--model", MODEL, "--n", "10", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out / 'records.jsonl'}:2: duplicate record" in err
    assert "--repair-records" in err
    assert (out / "records.jsonl").read_text() == data
