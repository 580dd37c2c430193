"""benchmarks.end_to_end: the before/after report pairs the study's own phase timings."""

import json

import pytest

from benchmarks import end_to_end


def _side(folder, revision, timings, models, wall):
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(
        json.dumps({"timings_seconds": timings, "models": {m: {} for m in models}})
    )
    record = {
        "revision": revision,
        "command": "python -m experiments.cifar_robustness",
        "wall_seconds": wall,
        "load_average_start": [0.0, 0.0, 0.0],
        "load_average_end": [2.0, 2.0, 2.0],
    }
    (folder / end_to_end.WALL_FILE).write_text(json.dumps(record))


def test_report_pairs_phases_and_states_the_training_speed_up(tmp_path):
    """Shared phases side by side with before/after ratios; a phase only one side ran says
    'not run'; the training total compares the same models."""
    work = tmp_path / "work"
    _side(work / "before", "a" * 40, {"train_m": 600.0, "attack_m": 90.0}, ["m"], 700.0)
    _side(
        work / "after", "b" * 40, {"train_m": 200.0, "attack_m": 45.0, "extra": 5.0}, ["m"], 300.0
    )
    per_attack = {"m": {"fgsm": 10.0, "pgd": 20.0, "pgd_budget": 15.0}}
    (work / "after" / "attack_seconds.json").write_text(json.dumps(per_attack))
    report = end_to_end.main(["--report-only", "--work", str(work), "--out", str(tmp_path)])
    text = (tmp_path / "end_to_end.md").read_text()
    assert "| train_m | 600 | 200 | 3.00x |" in text
    assert "| attack_m | 90 | 45 | 2.00x |" in text
    assert "| extra | not run | 5 |  |" in text
    assert "600 s before, 200 s after (3.00x)" in text
    assert "| everything else | 10 | 50 | 0.20x |" in text  # wall minus the timed phases
    assert "| **wall** | **700** | **300** | **2.33x** |" in text
    assert "One side's machine speed was not measured" in text
    assert report["before"]["wall_seconds"] == 700.0
    assert "| m: fgsm + pgd | 90 | 30 | 3.00x |" in text
    assert json.loads((tmp_path / "end_to_end.json").read_text())["after"]["revision"] == "b" * 40


def test_report_names_a_side_that_has_not_run(tmp_path):
    with pytest.raises(SystemExit, match="e2e_wall.json is missing"):
        end_to_end.main(["--report-only", "--work", str(tmp_path), "--out", str(tmp_path)])


def test_only_after_pairs_a_new_after_side_with_the_kept_before_side(tmp_path):
    """`--only-after` (here with --report-only: no study is run) keeps the before side of
    the report in --out, as it was measured, and reads only the after side's folder."""
    work = tmp_path / "work"
    _side(work / "before", "a" * 40, {"train_m": 600.0}, ["m"], 700.0)
    _side(work / "after", "b" * 40, {"train_m": 200.0}, ["m"], 300.0)
    end_to_end.main(["--report-only", "--work", str(work), "--out", str(tmp_path)])
    (work / "before" / "results.json").unlink()  # the kept side is not read again
    _side(work / "after2", "c" * 40, {"train_m": 100.0}, ["m"], 150.0)
    (work / "after").rename(work / "after_old")
    (work / "after2").rename(work / "after")
    report = end_to_end.main(
        ["--report-only", "--only-after", "--work", str(work), "--out", str(tmp_path)]
    )
    assert report["before"]["revision"] == "a" * 40 and report["after"]["revision"] == "c" * 40
    assert "| train_m | 600 | 100 | 6.00x |" in (tmp_path / "end_to_end.md").read_text()


def test_each_sides_machine_speed_is_shown_beside_its_wall_time(tmp_path):
    """The matmul speed measured after a side's run is shown; with both measured, no caveat."""
    work = tmp_path / "work"
    for side, speed in (("before", 480.0), ("after", 203.0)):
        _side(work / side, side[0] * 40, {"train_m": 100.0}, ["m"], 150.0)
        record = json.loads((work / side / end_to_end.WALL_FILE).read_text())
        record["matmul_gflops"] = speed
        (work / side / end_to_end.WALL_FILE).write_text(json.dumps(record))
    end_to_end.main(["--report-only", "--work", str(work), "--out", str(tmp_path)])
    text = (tmp_path / "end_to_end.md").read_text()
    assert "| 480 |" in text and "| 203 |" in text
    assert "machine speed was not measured" not in text
