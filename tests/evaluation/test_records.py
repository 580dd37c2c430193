"""Per-case records: schema validation, status rules, and the append-only log that survives
a killed run (partial line dropped, resume without duplicates, complete lines only)."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import case_record

from advjax.evaluation import ThreatModel
from advjax.evaluation._scoring import records_from_arrays
from advjax.records import (
    STATUSES,
    CaseRecord,
    RecordError,
    RecordLog,
    RecordRepair,
    classify_status,
    read_records,
    repair_records,
)

ROOT = Path(__file__).resolve().parents[2]


def make_record(case_id: int = 0, **overrides) -> CaseRecord:
    """A success record (true class 3, adv_pred 5, first break at step 4 of restart 0) whose
    predictions stay fixed, so that an override of `status` alone can contradict them."""
    return case_record(
        case_id,
        **{
            "clean_pred": 3,
            "adv_pred": 5,
            "final_loss": 2.5,
            "linf": 8 / 255,
            "l2": 0.5,
            "first_break_step": 4,
            "first_break_restart": 0,
            "queries": 21,
            "model": "standard",
            "model_hash": "m" * 16,
            "attack_config_hash": "a" * 16,
            "threat_model_hash": "t" * 16,
            "key_path": (42, "attack", 7, 1, 3, case_id),
            **overrides,
        },
    )


def test_record_json_round_trip_keeps_non_finite_floats_as_strict_json():
    """to_json is strict JSON (NaN/inf as strings) and from_dict restores the same record."""
    record = make_record(final_loss=math.nan, l2=math.inf, break_steps_by_restart=(4, None))

    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    d = json.loads(record.to_json(), parse_constant=no_constants)
    assert (d["final_loss"], d["l2"], d["key_path"][-1]) == ("NaN", "Infinity", 0)
    back = CaseRecord.from_dict(d)
    assert math.isnan(back.final_loss) and back.l2 == math.inf
    assert back.to_json() == record.to_json()


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(status="broken"), "status='broken'"),
        (dict(status="failed"), "contradicts"),  # adv_pred != true_class
        (dict(clean_pred=1, status="success"), "skipped_clean_wrong"),
        (dict(status="skipped_clean_wrong"), "skipped_clean_wrong"),
        (dict(first_break_restart=None), "both"),
        (dict(case_id=-1), "case_id=-1"),
        (dict(queries=1.5), "queries=1.5"),
        (dict(model=""), "model=''"),
        (dict(key_path="42/attack"), "key_path"),
        (dict(break_steps_by_restart=(None, 2)), "implies"),
        (dict(eps=math.inf), "eps=inf"),
    ],
)
def test_inconsistent_records_are_rejected(overrides, fragment):
    """Bad types, unknown statuses and statuses that contradict the predictions raise."""
    with pytest.raises(ValueError) as info:
        make_record(**overrides)
    assert fragment in str(info.value)


BALL = dict(linf=8 / 255, eps=8 / 255, x_min=0.0, x_max=1.0)


@pytest.mark.parametrize(
    "clean_ok, adv_ok, kwargs, expected",
    [
        (False, False, dict(BALL, linf=1.0), "skipped_clean_wrong"),
        (True, False, BALL, "success"),
        (True, True, BALL, "failed"),
        (True, True, dict(BALL, budget_capped=True), "budget_exhausted"),
        (True, False, dict(BALL, linf=8 / 255 + 1e-6), "success"),  # within tolerance
        (True, False, dict(BALL, linf=8 / 255 + 2e-6), "invalid"),  # outside the ball
        (True, False, dict(BALL, x_max=1.0 + 2e-6), "invalid"),  # outside [0, 1]
        (True, False, dict(BALL, x_min=-1e-3), "invalid"),
        (True, True, dict(BALL, linf=math.nan), "invalid"),
        (True, False, dict(BALL, linf=1.0, l2=0.4, eps=0.5, norm="l2"), "success"),
        (True, False, dict(BALL, l2=0.6, eps=0.5, norm="l2"), "invalid"),
    ],
)
def test_classify_status_rules_invalid_takes_precedence_over_success(
    clean_ok, adv_ok, kwargs, expected
):
    """Status rules in order: clean wrong, invalid (ball + tol, range), success, capped, failed."""
    assert classify_status(clean_ok, adv_ok, **kwargs) == expected
    assert expected in STATUSES


def test_classify_status_rejects_bad_norm():
    with pytest.raises(ValueError, match="norm='l1'"):
        classify_status(True, True, **BALL, norm="l1")
    with pytest.raises(ValueError, match="l2"):
        classify_status(True, True, **BALL, norm="l2")


def test_append_writes_complete_lines_with_one_write_per_batch(tmp_path, monkeypatch):
    """A batch becomes one os.write of whole newline-terminated lines; each line is a record."""
    log = RecordLog(tmp_path / "records.jsonl")
    writes = []
    real_write = os.write
    monkeypatch.setattr(
        os, "write", lambda fd, data: writes.append(bytes(data)) or real_write(fd, data)
    )
    assert log.append([make_record(i) for i in range(5)]) == 5
    assert len(writes) == 1 and writes[0].endswith(b"\n") and writes[0].count(b"\n") == 5
    data = (tmp_path / "records.jsonl").read_bytes()
    assert data == writes[0]
    assert [r.case_id for r in read_records(tmp_path / "records.jsonl")] == list(range(5))


def test_killed_run_partial_line_is_dropped_and_resume_does_not_duplicate(tmp_path):
    """A trailing line cut short by a kill is truncated on reopen; the resumed run skips the
    cases already present and writes the rest once."""
    path = tmp_path / "records.jsonl"
    RecordLog(path).append([make_record(i) for i in range(3)])
    with open(path, "ab") as f:  # the kill hit during the write of case 3
        f.write(make_record(3).to_json().encode()[:40])
    assert len(read_records(path)) == 3  # readers ignore the partial tail
    with pytest.warns(UserWarning, match="dropped a partial last line \\(40 bytes\\)"):
        log = RecordLog(path)
    assert log.dropped_bytes == 40
    assert path.read_bytes().endswith(b"\n")
    assert log.keys == {("standard", "pgd", 8 / 255, i) for i in range(3)}
    todo = [i for i in range(6) if ("standard", "pgd", 8 / 255, i) not in log]
    assert todo == [3, 4, 5]
    log.append([make_record(i) for i in todo])
    assert [r.case_id for r in read_records(path, strict=True)] == list(range(6))


def test_duplicates_raise_and_write_nothing_unless_skip_existing(tmp_path):
    """Appending a key already in the file (or twice in a batch) raises before writing;
    skip_existing drops existing keys and writes only new ones."""
    path = tmp_path / "r.jsonl"
    log = RecordLog(path)
    log.append([make_record(0), make_record(1)])
    before = path.read_bytes()
    with pytest.raises(ValueError, match="already in"):
        log.append([make_record(2), make_record(1)])
    with pytest.raises(ValueError, match="twice"):
        log.append([make_record(5), make_record(5)])
    assert path.read_bytes() == before
    assert log.append([make_record(1), make_record(2)], skip_existing=True) == 1
    assert len(RecordLog(path)) == 3
    with pytest.raises(TypeError, match="CaseRecord"):
        log.append([make_record(9).to_dict()])


def test_bad_line_error_names_file_and_line(tmp_path):
    """A malformed complete line is an error naming path:line, for readers and for the log;
    strict reading also rejects an unterminated last line."""
    path = tmp_path / "r.jsonl"
    lines = [
        make_record(0).to_json(),
        make_record(1).to_json(),
        '{"case_id": 2}',
        make_record(3).to_json(),
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=f"{path}:3: "):
        read_records(path)
    with pytest.raises(RecordError, match=f"{path}:3: "):
        RecordLog(path)
    path.write_text(lines[0] + "\nnot json\n")
    with pytest.raises(RecordError, match=f"{path}:2: "):
        read_records(path)
    path.write_text(lines[0] + "\n" + lines[1][:10])
    with pytest.raises(RecordError, match=f"{path}:2: incomplete"):
        read_records(path, strict=True)


def test_opening_a_log_with_duplicates_names_file_line_and_the_flag(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [make_record(i).to_json() for i in (0, 1, 1)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=f"{path}:3: duplicate .*first at line 2") as error:
        RecordLog(path)
    assert "--repair-records" in str(error.value) and "r.duplicates.jsonl" in str(error.value)


def test_repair_keeps_the_first_copy_counts_the_dropped_and_saves_them(tmp_path):
    """Later copies of a key leave the file for records.duplicates.jsonl (appended, in file
    order); those that differ from the kept copy are counted; the log then opens."""
    path = tmp_path / "records.jsonl"
    first = [make_record(i).to_json() for i in range(3)]
    same, differing = make_record(1).to_json(), make_record(0, final_loss=9.0).to_json()
    path.write_text("\n".join([first[0], first[1], same, differing, first[2]]) + "\n")
    (tmp_path / "records.duplicates.jsonl").write_text("earlier\n")
    repair = repair_records(path)
    assert repair == RecordRepair(path, 3, 2, 1, tmp_path / "records.duplicates.jsonl")
    assert path.read_text().splitlines() == first
    saved = (tmp_path / "records.duplicates.jsonl").read_text().splitlines()
    assert saved == ["earlier", same, differing]
    assert [r.case_id for r in RecordLog(path).read()] == [0, 1, 2]
    assert "dropped 2 duplicates (1 differing" in repair.describe()
    assert not list(tmp_path.glob(".*.tmp")), "the rewrite renamed its temporary"


def test_repair_of_a_plain_log_changes_nothing(tmp_path):
    """No duplicates: the file keeps its bytes (a partial last line included, left for
    RecordLog to drop) and no duplicates file appears."""
    path = tmp_path / "records.jsonl"
    data = "".join(make_record(i).to_json() + "\n" for i in range(3)) + '{"case_'
    path.write_text(data)
    repair = repair_records(path)
    assert (repair.kept, repair.dropped, repair.dropped_differing) == (3, 0, 0)
    assert path.read_text() == data
    assert not repair.duplicates_path.exists()
    assert "no duplicates" in repair.describe()


def test_repair_keeps_a_partial_last_line_after_the_kept_records(tmp_path):
    path = tmp_path / "records.jsonl"
    line = make_record(0).to_json()
    path.write_text(f"{line}\n{line}\n{line[:20]}")
    assert repair_records(path).dropped == 1
    assert path.read_text() == f"{line}\n{line[:20]}"


def test_repair_refuses_a_malformed_line_and_leaves_the_file(tmp_path):
    path = tmp_path / "records.jsonl"
    data = make_record(0).to_json() + "\nnot json\n" + make_record(0).to_json() + "\n"
    path.write_text(data)
    with pytest.raises(RecordError, match=f"{path}:2: "):
        repair_records(path)
    assert path.read_text() == data and not (tmp_path / "records.duplicates.jsonl").exists()


WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    from tests.evaluation.test_records import make_record
    from advjax.records._record_log import RecordLog
    log = RecordLog({path!r})
    for start in range(0, 100000, 50):
        log.append([make_record(i) for i in range(start, start + 50)], skip_existing=True)
    """
)


def test_sigkill_during_appends_leaves_a_valid_resumable_file(tmp_path):
    """A writer killed with SIGKILL mid-run leaves only valid complete lines (after reopen);
    resuming fills in the missing cases exactly once."""
    path = tmp_path / "r.jsonl"
    code = WRITER.format(root=str(ROOT), tests=str(ROOT / "tests"), path=str(path))
    child = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    deadline = time.monotonic() + 60
    while (not path.exists() or path.stat().st_size < 20_000) and time.monotonic() < deadline:
        assert child.poll() is None, "the writer exited before it was killed"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    log = RecordLog(path)
    done = len(log)
    assert done > 0 and path.read_bytes().endswith(b"\n")
    total = done + 120
    log.append([make_record(i) for i in range(total)], skip_existing=True)
    ids = [r.case_id for r in read_records(path, strict=True)]
    assert sorted(ids) == list(range(total)) and len(ids) == len(set(ids))


def test_records_from_arrays_scores_each_case():
    """Sizes, validity, statuses, first-break step/restart and key paths come from the arrays."""
    tm = ThreatModel(eps=(8 / 255,), steps=10, restarts=2)
    eps = 8 / 255
    x = np.full((4, 2, 2, 1), 0.5)
    x_adv = x + eps * np.array([1, 1, -1, 2]).reshape(4, 1, 1, 1)  # case 3 leaves the ball
    broken = np.array([[-1, 3, -1, -1], [-1, 1, -1, 0]])
    records = records_from_arrays(
        threat_model=tm,
        eps=eps,
        model="m",
        model_hash="h",
        attack="pgd",
        attack_config_hash="c",
        case_ids=[10, 11, 12, 13],
        labels=[0, 1, 2, 3],
        clean_pred=[0, 1, 1, 3],
        adv_pred=[0, 2, 1, 0],
        loss=[0.1, 3.0, 0.2, np.nan],
        x=x,
        x_adv=x_adv,
        queries=22,
        broken_step=broken,
        key_path_prefix=[42, "attack"],
    )
    assert [r.status for r in records] == ["failed", "success", "skipped_clean_wrong", "invalid"]
    assert records[0].linf == pytest.approx(eps) and records[0].l2 == pytest.approx(2 * eps)
    assert (records[1].first_break_step, records[1].first_break_restart) == (1, 0)
    assert records[1].break_steps_by_restart == (3, 1)
    assert records[0].first_break_step is None and records[3].key_path == (42, "attack", 13)
    assert all(r.threat_model_hash == tm.digest() and r.queries == 22 for r in records)
    with pytest.raises(ValueError, match="broken_step"):
        records_from_arrays(
            threat_model=tm,
            eps=eps,
            model="m",
            model_hash="h",
            attack="pgd",
            attack_config_hash="c",
            case_ids=[0],
            labels=[0],
            clean_pred=[0],
            adv_pred=[0],
            loss=[0.0],
            x=x[:1],
            x_adv=x[:1],
            queries=1,
            broken_step=np.zeros((2, 3)),
        )


def test_read_returns_what_the_file_holds_without_reparsing_it(tmp_path, monkeypatch):
    """`RecordLog.read()` equals a fresh parse of the file after appends, and does not read
    the file again (the study calls it once per model and ensemble member)."""
    from advjax.records import _record_log as records_module

    path = tmp_path / "r.jsonl"
    log = RecordLog(path)
    first = [make_record(case_id=i) for i in range(3)]
    log.append(first)
    calls = []
    monkeypatch.setattr(records_module, "read_records", lambda p: calls.append(p) or [])
    log.append([make_record(case_id=7)])
    in_memory = log.read()
    assert not calls
    monkeypatch.undo()
    assert [r.to_dict() for r in in_memory] == [r.to_dict() for r in read_records(path)]
    assert [r.to_dict() for r in RecordLog(path).read()] == [r.to_dict() for r in in_memory]


def test_a_gzip_log_resumes_like_a_plain_one_and_drops_a_member_cut_short(tmp_path):
    """`records.jsonl.gz` holds one gzip member per append; a kill inside an append leaves a
    cut-short member, which reopening drops (its cases are computed again), as it drops a
    plain file's partial line."""
    import gzip

    from advjax.records import RecordLog, read_records, record_file

    path = record_file(tmp_path)
    assert path.name == "records.jsonl.gz"
    log = RecordLog(path)
    log.append([case_record(i) for i in range(3)])
    log.append([case_record(i) for i in range(3, 5)])
    whole = path.read_bytes()
    assert gzip.decompress(whole).count(b"\n") == 5
    again = gzip.compress(b"".join(case_record(i).to_json().encode() + b"\n" for i in (5, 6)))
    path.write_bytes(whole + again[: len(again) // 2])  # killed half-way through an append
    assert [r.case_id for r in read_records(path)] == list(range(5))
    with pytest.warns(UserWarning, match="partial last line"):
        reopened = RecordLog(path)
    assert len(reopened) == 5 and path.read_bytes() == whole
    reopened.append([case_record(5)])
    assert [r.case_id for r in read_records(path)] == list(range(6))


def test_a_damaged_gzip_log_is_an_error_naming_the_file_not_a_silent_truncation(tmp_path):
    from advjax.records import RecordError, RecordLog

    path = tmp_path / "records.jsonl.gz"
    RecordLog(path).append([case_record(0)])
    path.write_bytes(path.read_bytes() + b"not gzip at all, damage")
    with pytest.raises(RecordError, match="records.jsonl.gz"):
        RecordLog(path)


def test_repair_of_a_gzip_log_keeps_first_copies_and_saves_the_rest_compressed(tmp_path):
    import gzip

    from advjax.records import read_records, repair_records

    path = tmp_path / "records.jsonl.gz"
    lines = [case_record(i).to_json() + "\n" for i in (0, 1, 0)]
    path.write_bytes(gzip.compress("".join(lines).encode()))
    repair = repair_records(path)
    assert (repair.kept, repair.dropped) == (2, 1)
    assert repair.duplicates_path.name == "records.duplicates.jsonl.gz"
    assert [r.case_id for r in read_records(path)] == [0, 1]
    assert gzip.decompress(repair.duplicates_path.read_bytes()).decode() == lines[2]
