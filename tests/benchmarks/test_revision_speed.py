"""benchmarks.revision_speed: medians per phase over alternated runs, and the config check."""

import json

import pytest

from benchmarks import revision_speed
from benchmarks.end_to_end import WALL_FILE


def _run(folder, timings, wall, config):
    folder.mkdir(parents=True)
    results = {"timings_seconds": timings, "config": config, "models": {"m": {}}}
    (folder / "results.json").write_text(json.dumps(results))
    record = {
        "revision": "a" * 40,
        "command": "python -m experiments.cifar_robustness",
        "wall_seconds": wall,
        "load_average_start": [0.1, 0.2, 0.3],
        "load_average_end": [2.0, 2.0, 2.0],
    }
    (folder / WALL_FILE).write_text(json.dumps(record))


def test_report_gives_each_phase_median_and_ratio_and_lists_differing_config(tmp_path):
    work = tmp_path / "work"
    config = {"seed": 0, "models": [{"name": "m", "epochs": 2}]}
    _run(work / "before_0", {"train_m": 10.0, "attack_m": 4.0}, 20.0, config)
    _run(work / "before_1", {"train_m": 12.0, "attack_m": 6.0}, 22.0, config)
    _run(work / "after_0", {"train_m": 5.0, "attack_m": 4.0}, 12.0, config | {"new": 1})
    _run(work / "after_1", {"train_m": 6.0, "attack_m": 4.0}, 14.0, config | {"new": 1})
    report = revision_speed.main(["--report-only", "--work", str(work), "--out", str(tmp_path)])
    text = (tmp_path / "revision_speed.md").read_text()
    assert "| train_m | 11.0 (10.0, 12.0) | 5.5 (5.0, 6.0) | 2.00x |" in text
    assert "| attack_m | 5.0 (4.0, 6.0) | 4.0 (4.0, 4.0) | 1.25x |" in text
    assert "| wall | 21.0 (20.0, 22.0) | 13.0 (12.0, 14.0) | 1.62x |" in text
    assert report["config_differences"] == ["`new`: absent before, 1 after"]


def test_identical_configs_report_the_same_work():
    config = {"seed": 0, "models": [{"name": "m", "epochs": 2}], "eps": [0, 2]}
    assert revision_speed.config_differences(config, config) == []
    changed = {**config, "models": [{"name": "m", "epochs": 3}]}
    assert revision_speed.config_differences(config, changed) == [
        "`models[m].epochs`: 2 before, 3 after"
    ]


def test_a_missing_run_is_named(tmp_path):
    (tmp_path / "before_0").mkdir()
    with pytest.raises(SystemExit, match="e2e_wall.json is missing"):
        revision_speed.main(["--report-only", "--work", str(tmp_path), "--out", str(tmp_path)])
