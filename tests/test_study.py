"""End-to-end: the quick profile of the CIFAR-10 study on real data, and its invariants."""

import json
import os

import pytest

from experiments import cifar_robustness
from experiments.study_config import profile

needs_data = pytest.mark.skipif(
    not os.environ.get("ADVJAX_DATA_DIR"), reason="ADVJAX_DATA_DIR not set"
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick")
    results = cifar_robustness.main(["--profile", "quick", "--out", str(out), "--no-progress"])
    return out, results


@needs_data
def test_quick_profile_writes_results_tables_figures_and_checkpoints(quick_run):
    out, results = quick_run
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["models"].keys() == {"standard", "fgsm_reference", "fgsm_matched"}
    assert on_disk["config"]["profile"] == "quick"
    for key in ("command", "environment", "data", "timings_seconds", "threat_model", "reference"):
        assert key in on_disk
    assert on_disk["environment"]["versions"]["jax"]
    assert len(list((out / "figures").glob("*.png"))) >= 10
    assert "| model |" in (out / "tables.md").read_text()
    for name in on_disk["models"]:
        assert (out / "checkpoints" / f"{name}.msgpack").is_file()
        assert (out / "attacks" / f"{name}.npz").is_file()


@needs_data
def test_quick_profile_invariants_eps0_equals_clean_robust_below_clean_counts_add_up(quick_run):
    _, results = quick_run
    n = results["data"]["sizes"]["eval"]
    for m in results["models"].values():
        clean = m["clean_accuracy"]
        assert clean["total"] == n
        for attack, per_eps in m["attacks"].items():
            assert per_eps["0"]["robust_accuracy"]["count"] == clean["count"], attack
            previous = clean["count"]
            for eps in sorted(per_eps, key=float):
                s = per_eps[eps]
                robust, success = s["robust_accuracy"], s["attack_success_rate"]
                assert robust["count"] <= clean["count"] and robust["total"] == n
                assert success["total"] == clean["count"]
                assert robust["count"] + success["count"] == clean["count"]
                if attack == "pgd":
                    assert robust["count"] <= previous
                    previous = robust["count"]
        for eps, curve in m["pgd_steps_curve"].items():
            assert curve == sorted(curve, reverse=True)
            assert curve[-1] == m["attacks"]["pgd"][eps]["robust_accuracy"]["count"]
        for eps in m["attacks"]["pgd"]:
            assert m["attacks"]["pgd"][eps]["robust_accuracy"]["count"] <= clean["count"]


@needs_data
def test_rerun_resumes_finished_phases_with_identical_numbers(quick_run, capsys):
    out, first = quick_run
    again = cifar_robustness.main(["--profile", "quick", "--out", str(out), "--no-progress"])
    assert "reusing" in capsys.readouterr().out
    assert again["models"] == first["models"]


def test_unknown_profile_and_bad_eps_are_rejected():
    with pytest.raises(ValueError, match="unknown profile"):
        profile("huge")
    with pytest.raises(ValueError, match="eps"):
        cifar_robustness.config_from_args(cifar_robustness.parse_args(["--eps", "0", "300"]))
