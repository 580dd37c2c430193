"""benchmarks.end_to_end: the from-scratch report's phase table, training throughput against
the step benchmark, and accuracies against the committed intervals, from a finished run."""

import json

import pytest

from benchmarks import end_to_end


def _rate(value, low, high):
    return {"value": value, "count": 0, "total": 1000, "ci95": [low, high]}


def _model(mode, train_size, epoch_seconds, clean, pgd8):
    return {
        "spec": {"mode": mode},
        "training": {
            "history": [{"seconds": s} for s in epoch_seconds],
            "train_size": train_size,
            "seconds": sum(epoch_seconds) + 1.0,
        },
        "clean_accuracy": _rate(clean, clean - 0.03, clean + 0.03),
        "attacks": {
            "pgd": {
                "0": {"robust_accuracy": _rate(clean, clean - 0.03, clean + 0.03)},
                "8": {"robust_accuracy": _rate(pgd8, pgd8 - 0.02, pgd8 + 0.02)},
            }
        },
    }


def _work(tmp_path, wall=1500.0):
    """A finished run: standard 2 epochs of 1,024 images in 2 s each (512 img/s), fgsm one
    epoch of 512 in 4 s (128 img/s); step benchmark 1,000 and 200 img/s (means)."""
    run = tmp_path / "work" / "run"
    run.mkdir(parents=True)
    models = {
        "standard": _model("standard", 1030, [2.0, 2.0], 0.70, 0.0),
        "fgsm_matched": _model("fgsm", 520, [4.0], 0.50, 0.30),
    }
    results = {
        "config": {"batch_size": 128, "eval_size": 1000, "eps_list": [0, 2 / 255, 8 / 255]},
        "environment": {"git_revision": "c" * 40, "xla_flags_set_by_advjax": ["--flag"]},
        "timings_seconds": {"load_data": 5.0, "train_standard": 5.0, "train_fgsm_matched": 5.0},
        "models": models,
        "gate": {"verdict": "HOLD"},
        "checks": [{"passed": True}, {"passed": False}],
    }
    (run / "results.json").write_text(json.dumps(results))
    (run / "attack_seconds.json").write_text(
        json.dumps({"standard": {"pgd": 100.0}, "fgsm_matched": {"pgd": 200.0, "fgsm": 10.0}})
    )
    record = {
        "command": "python -m experiments.cifar_robustness --no-progress --out RUN",
        "wall_seconds": wall,
        "load_average_start": [0.1, 0.1, 0.1],
        "load_average_end": [2.0, 2.0, 2.0],
        "matmul_gflops_before": 300.0,
        "matmul_gflops_after": 310.0,
        "step_benchmark_before": {"train": 900.0, "fgsm_at": 190.0},
        "step_benchmark_after": {"train": 1100.0, "fgsm_at": 210.0},
    }
    (run / end_to_end.WALL_FILE).write_text(json.dumps(record))
    committed = {
        "models": {
            "standard": _model("standard", 1030, [1.0], 0.69, 0.0),
            "fgsm_matched": _model("fgsm", 520, [1.0], 0.60, 0.30),
        }
    }
    (tmp_path / "work" / end_to_end.COMPARED_FILE).write_text(json.dumps(committed))
    return tmp_path / "work"


def _report(tmp_path, work):
    argv = ["--report-only", "--no-peer", "--work", str(work), "--out", str(tmp_path / "out")]
    return end_to_end.main(argv), (tmp_path / "out" / "end_to_end.md").read_text()


def test_training_throughput_is_the_epochs_images_over_their_seconds_against_the_step_row(
    tmp_path,
):
    report, text = _report(tmp_path, _work(tmp_path))
    rows = {r["model"]: r for r in report["training"]}
    assert rows["standard"]["images"] == 2 * 1024 and rows["fgsm_matched"]["images"] == 512
    assert rows["standard"]["study_images_per_second"] == pytest.approx(512.0)
    assert rows["standard"]["share"] == pytest.approx(512 / 1000)  # mean of 900 and 1,100
    assert rows["fgsm_matched"]["share"] == pytest.approx(128 / 200)
    assert "| standard | standard | 2 | 2,048 | 4 | 512 | 1,000 (train) | 51 % |" in text


def test_phases_add_up_to_the_wall_time_and_the_goal_is_stated(tmp_path):
    report, text = _report(tmp_path, _work(tmp_path, wall=1500.0))
    phases = dict(report["phases"])
    assert phases["attack fgsm_matched: pgd"] == 200.0 and phases["train standard"] == 5.0
    assert sum(phases.values()) == pytest.approx(1500.0)
    assert phases["everything else"] == pytest.approx(1500.0 - 15.0 - 310.0)
    assert "**25.0 min** (1,500 s), over the 20-minute goal" in text
    _, text = _report(tmp_path, _work(tmp_path / "fast", wall=1080.0))
    assert "**18.0 min** (1,080 s), within the 20-minute goal" in text
    assert "Checks 1 of 2 passed; gate HOLD" in text


def test_accuracies_outside_the_committed_interval_are_flagged(tmp_path):
    report, text = _report(tmp_path, _work(tmp_path))
    inside = {(r["model"], r["what"]): r["inside"] for r in report["accuracy"]}
    assert inside == {
        ("standard", "clean"): True,
        ("standard", "PGD-20 8/255"): True,
        ("fgsm_matched", "clean"): False,  # 50 % against 57-63 %
        ("fgsm_matched", "PGD-20 8/255"): True,
    }
    assert "3 of 4 inside its 95 % interval" in text
    assert "| fgsm_matched | clean | 50.0 % | 60.0 % | 57.0-63.0 % | **no** |" in text


def test_a_run_folder_that_is_not_empty_is_refused_and_a_missing_run_is_named(tmp_path):
    work = _work(tmp_path)
    with pytest.raises(SystemExit, match="not empty"):
        end_to_end.run_study(work / "run", [])
    with pytest.raises(SystemExit, match="e2e_wall.json is missing"):
        end_to_end.main(["--report-only", "--work", str(tmp_path / "none"), "--out", str(tmp_path)])


def test_the_reference_study_is_its_rates_times_the_runs_work_beside_the_wall_time(tmp_path):
    """Trainings: each model's images over its mode's rate; FGSM and PGD-20 on every case at
    every eps of the run, per model; the table puts the sum beside advjax's wall time."""
    work = _work(tmp_path, wall=1500.0)
    results = json.loads((work / "run" / "results.json").read_text())
    rates = {"train": 1024.0, "fgsm_at_mix": 128.0, "fgsm": 500.0, "pgd": 50.0}
    seconds = end_to_end.study_seconds(results, rates)
    assert seconds["train_seconds"] == {"standard": 2.0, "fgsm_matched": 4.0}
    assert seconds["attack_seconds"] == pytest.approx(2 * 3 * 1000 * (1 / 500 + 1 / 50))
    assert seconds["seconds"] == pytest.approx(6.0 + 132.0)
    peer = {"torch": "2.13.0", "reps": 3, "layouts": {"nchw": {"rates": rates, **seconds}}}
    (work / end_to_end.PEER_FILE).write_text(json.dumps(peer))
    report, text = _report(tmp_path, work)
    assert report["advjax_seed_phases"] == {"train_seconds": 10.0, "attack_seconds": 310.0}
    assert "| advjax, the whole default profile (measured) | **25.0** | 10 | 310 | |" in text
    assert "| PyTorch reference, nchw (its rates x the work) | 2.3 | 6 | 132 | 0.09x |" in text
