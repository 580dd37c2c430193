"""benchmarks.engine_speed: each phase's medians over alternated runs, and whether both sides
did the same work case by case."""

import json

from benchmarks import engine_speed


def _side(folder, pgd: float, aa: float, *, records=None, broken_by=(0, -1)):
    folder.mkdir(parents=True)
    side = {
        "advjax_file": "/tree/advjax/__init__.py",
        "attack_seconds": {"standard": {"fgsm": 1.0, "pgd": pgd}},
        "autoattack": {"model": "standard", "cases": 2, "seconds": aa, "robust": 1,
                       "clean_correct": 2, "broken_by": list(broken_by), "queries": [3, 9]},
        "records": records or {"standard|pgd|0.0|0": ["success", 1, 2, 3, 1, [0, "attack"]]},
    }  # fmt: skip
    (folder / "side.json").write_text(json.dumps(side))
    wall = {"revision": "b" * 40, "command": "python side.py", "wall_seconds": pgd + aa,
            "load_average_start": [0.1, 0.2, 0.3], "load_average_end": [2.0, 2.0, 2.0],
            "matmul_gflops": 150.0}  # fmt: skip
    (folder / engine_speed.WALL_FILE).write_text(json.dumps(wall))


def _report(tmp_path, work):
    engine_speed.main(["--report-only", "--work", str(work), "--out", str(tmp_path)])
    return (tmp_path / "engine_speed.md").read_text()


def test_each_phase_gets_its_medians_and_ratio_and_the_same_work_is_confirmed(tmp_path):
    work = tmp_path / "work"
    _side(work / "before_0", 10.0, 40.0)
    _side(work / "before_1", 12.0, 44.0)
    _side(work / "after_0", 5.0, 20.0)
    _side(work / "after_1", 7.0, 24.0)
    text = _report(tmp_path, work)
    assert "| standard: pgd | 11.0 (10.0, 12.0) | 6.0 (5.0, 7.0) | 1.83x |" in text
    assert "| study attacks, all | 12.0 (11.0, 13.0) | 7.0 (6.0, 8.0) | 1.71x |" in text
    assert "| autoattack standard, standard, 2 cases | 42.0 (40.0, 44.0) | 22.0" in text
    assert "every one the same on both sides" in text
    assert "every case's breaking member and queries the same" in text


def test_a_case_that_came_out_otherwise_is_reported(tmp_path):
    work = tmp_path / "work"
    _side(work / "before_0", 10.0, 40.0)
    other = {"standard|pgd|0.0|0": ["robust", 1, 1, 20, None, [0, "attack"]]}
    _side(work / "after_0", 5.0, 20.0, records=other, broken_by=(1, -1))
    text = _report(tmp_path, work)
    assert "**1 differ** (first: standard|pgd|0.0|0)" in text
    assert "**cases differ**" in text
