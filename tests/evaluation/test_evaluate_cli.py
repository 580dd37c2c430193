"""`python -m advjax.evaluate`: AutoAttack of any importable model from the command line."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from advjax.evaluate import main
from advjax.records import read_records, record_file

needs_data = pytest.mark.skipif(
    not os.environ.get("ADVJAX_DATA_DIR"), reason="needs ADVJAX_DATA_DIR"
)
MODEL = "tests.evaluation.cli_models:linear_logits_fn"


@pytest.mark.slow
@needs_data
def test_a_model_factory_is_evaluated_into_records_summary_report_and_gate(tmp_path, capsys):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"models": ["linear"], "require_sanity": True}))
    argv = ["--model", MODEL, "--n", "30", "--eps", "8/255", "--out", str(tmp_path / "run"),
            "--name", "linear", "--policy", str(policy)]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    out = captured.out
    assert out.startswith("Threat model"), "the threat model is printed first"
    assert "apgd-ce target 0 restart 0" in out
    assert "  apgd-ce target 0 restart 0: " in captured.err, "per-batch progress on stderr"
    assert code == 0, out
    records = read_records(record_file(tmp_path / "run"))
    derived = [r for r in records if r.attack == "autoattack"]
    assert sorted(r.case_id for r in derived) == sorted({r.case_id for r in records})
    assert len(derived) == 30
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    final = next(g for g in summary["aggregates"] if g["attack"] == "autoattack")
    assert final["robust_accuracy"]["count"] == sum(r.status == "failed" for r in derived)
    page = (tmp_path / "run" / "report.html").read_text()
    assert "robust under AutoAttack" in page and "ALLOW" in page
    assert (tmp_path / "run" / "report.html").stat().st_size < 2_000_000
    before = len(records)
    assert main(argv) == 0
    assert len(read_records(record_file(tmp_path / "run"))) == before, "a rerun adds nothing"
    first, rerun = summary["extra"], json.loads((tmp_path / "run" / "summary.json").read_text())
    rerun = rerun["extra"]
    times = json.loads((tmp_path / "run" / "attack_seconds.json").read_text())
    assert rerun["attack_runs"] == 2 and [r["finished"] for r in times["runs"]] == [True, True]
    assert first["seconds_all_runs"] == pytest.approx(first["seconds"], abs=0.1)
    assert rerun["seconds_all_runs"] == pytest.approx(first["seconds"] + rerun["seconds"], abs=0.2)


@pytest.mark.slow
@needs_data
def test_a_model_returning_probabilities_is_held_by_the_gate(tmp_path, capsys):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"require_sanity": True}))
    code = main(["--model", "tests.evaluation.cli_models:softmax_logits_fn", "--n", "10",
                 "--out", str(tmp_path / "run"), "--policy", str(policy)])  # fmt: skip
    assert code == 1
    assert "outputs_are_logits" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", MODEL, "--eps", "8"], "--eps=8.0 must be in \\[0, 1\\] \\(pixel units"),
        (["--model", "no_colon"], "expected module:function"),
        (["--model", MODEL, "--n", "0"], "--data: n=0 must be in \\[1, 10000\\]"),
        (["--model", MODEL, "--members", "apgd-ce,cw"], "--members 'apgd-ce,cw': expected .*fmn"),
    ],
)
@needs_data
def test_bad_arguments_are_one_line_errors_with_exit_code_2(tmp_path, capsys, argv, message):
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("advjax.evaluate: error:")
    assert __import__("re").search(message, err), err


def _npz(path: Path, x, y) -> str:
    np.savez(path, x=x, y=y)
    return str(path)


def test_any_dataset_as_an_npz_file_is_evaluated_case_by_case(tmp_path, capsys):
    """`--data FILE.npz` (uint8 pixels here) takes the place of CIFAR-10: one final record
    per case, the class count read from the model, ids 0 .. n-1 for the first --n cases."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (12, 8, 8, 3), dtype=np.uint8), rng.integers(0, 4, 12)
    data = _npz(tmp_path / "set.npz", x, y)
    argv = ["--model", "tests.evaluation.cli_models:small_linear_logits_fn", "--data", data,
            "--n", "10", "--members", "apgd-ce", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr()
    final = [r for r in read_records(record_file(tmp_path / "run")) if r.attack == "autoattack"]
    assert sorted(r.case_id for r in final) == list(range(10))
    assert all(r.true_class == y[r.case_id] for r in final)


@pytest.mark.parametrize(
    "arrays, message",
    [
        (dict(x=np.zeros((4, 8, 8, 3), np.float32)), "no array 'y'"),
        (
            dict(x=np.full((4, 8, 8, 3), 2.0, np.float32), y=np.zeros(4, int)),
            "must lie in \\[0, 1\\]",
        ),
        (dict(x=np.zeros((4, 8, 8), np.float32), y=np.zeros(4, int)), "need x \\(N, H, W, C\\)"),
        (dict(x=np.zeros((4, 8, 8, 3), np.float32), y=np.zeros(4)), "integer labels"),
    ],
)
def test_a_malformed_npz_dataset_is_a_one_line_error(tmp_path, capsys, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)
    argv = ["--model", "tests.evaluation.cli_models:small_linear_logits_fn", "--data",
            str(tmp_path / "bad.npz"), "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--data" in err
    assert __import__("re").search(message, err), err


@pytest.mark.slow
@needs_data
def test_a_second_run_with_the_compile_cache_compiles_nothing_new_and_gives_the_same_numbers(
    tmp_path,
):
    """`--compile-cache DIR`: the first run fills the persistent cache; a second run into a
    fresh folder (every attack runs again) finds every program there, adding no entry,
    and decides every case the same way. Each run is its own process, as a user's is."""
    import subprocess
    import sys

    cache = tmp_path / "cache"

    def run(folder):
        argv = [sys.executable, "-m", "advjax.evaluate", "--model", MODEL, "--n", "20",
                "--out", str(tmp_path / folder), "--compile-cache", str(cache)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, env=os.environ | {})
        assert done.returncode == 0, done.stderr
        summary = json.loads((tmp_path / folder / "summary.json").read_text())
        return [g["robust_accuracy"] for g in summary["aggregates"]]

    first = run("first")
    entries = sorted(p.name for p in cache.iterdir())
    assert len(entries) >= 4, "one program per member at least"
    assert run("second") == first
    assert sorted(p.name for p in cache.iterdir()) == entries


@needs_data
def test_a_custom_member_list_from_the_registry_writes_each_members_records(tmp_path, capsys):
    """`--members apgd-ce,fmn` runs those members in that order (FMN: an attack added through
    the registry alone), writes records under their names and says so in the summary."""
    out = tmp_path / "run"
    assert main(["--model", MODEL, "--n", "60", "--eps", "1/1000", "--members", "apgd-ce,fmn", "--out", str(out),
                 "--no-progress"]) == 0  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())["extra"]
    assert summary["members"] == ["apgd-ce", "fmn"] and summary["version"] == "custom"
    records = read_records(record_file(out))
    by_member = {a: {r.case_id for r in records if r.attack == a} for a in ("apgd-ce", "fmn")}
    robust_after_apgd = {
        r.case_id for r in records if r.attack == "apgd-ce" and r.status == "failed"
    }
    assert by_member["fmn"] == robust_after_apgd, "FMN attacks exactly the cases APGD-CE left"
    attacked = sum(r.attack == "apgd-ce" and r.status != "skipped_clean_wrong" for r in records)
    passes = {p["member"]: (p["forward"], p["backward"]) for p in summary["model_passes"]}
    assert attacked > 0 and robust_after_apgd, (attacked, robust_after_apgd)
    assert passes["apgd-ce"] == (attacked * 101, attacked * 101), "100 steps: 101 of each"
    # FMN: 100 steps of one of each, then its point's margin confirmation (one of each, two
    # forward passes of pushed points and four of the push's bisection), then ten forward
    # passes drawing the point toward x
    assert passes["fmn"] == (len(robust_after_apgd) * 117, len(robust_after_apgd) * 101)
    assert "members: apgd-ce, fmn" in capsys.readouterr().out


@pytest.mark.slow
@needs_data
def test_the_fast_version_writes_its_phases_records_and_says_which_path_it_took(
    tmp_path, capsys, small_fast
):
    """`--version fast`: APGD-CE and MALT records on every case, the probe's records under
    their own names on a sample of the cases both left robust, the schedule and the
    `masking_probe` check in the summary, every stage's passes; a rerun appends nothing."""
    out = tmp_path / "run"
    argv = ["--model", MODEL, "--n", "60", "--eps", "1/1000", "--version", "fast", "--out",
            str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    extra = summary["extra"]
    assert extra["version"] == "fast" and extra["schedule"].startswith("fast"), extra["schedule"]
    checks = {c["name"]: c["passed"] for c in summary["checks"]}
    assert "masking_probe" in checks and "eps_zero_equals_clean" in checks
    escalated = extra["schedule"].startswith("fast, escalated")
    stages = [p["member"] for p in extra["model_passes"]]
    assert stages[:4] == ["apgd-ce", "malt", "fab-t (probe)", "square (probe)"]
    assert stages[4:] == (["apgd-t", "fab-t", "square"] if escalated else [])
    records = read_records(record_file(out))
    left = {r.case_id for r in records if r.attack == "malt" and r.status == "failed"}
    probed = {r.case_id for r in records if r.attack == "fab-t (probe)"}
    assert left and probed and probed <= left and len(probed) == min(len(left), 32)
    derived = [r for r in records if r.attack == "autoattack"]
    assert len(derived) == 60
    assert "members: apgd-ce, malt on every case" in capsys.readouterr().out
    before = len(records)
    assert main(argv) == 0
    assert len(read_records(record_file(out))) == before, "a rerun adds nothing"


@needs_data
def test_an_interrupted_run_keeps_its_attack_time_for_the_whole_evaluations_total(
    tmp_path, capsys, monkeypatch
):
    """Ctrl-C during the attacks exits 130 and still adds the run's time to
    attack_seconds.json, marked unfinished, so a resumed run's summary can give the total."""
    import advjax.evaluation._run_evaluation as runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_autoattack", interrupted)
    argv = ["--model", MODEL, "--n", "10", "--out", str(tmp_path / "run")]
    assert main(argv) == 130 and main(argv) == 130
    assert "running the same command again resumes" in capsys.readouterr().err
    runs = json.loads((tmp_path / "run" / "attack_seconds.json").read_text())["runs"]
    assert [(r["finished"], r["untimed_records_before"]) for r in runs] == [(False, False)] * 2
    assert all(r["seconds"] >= 0 and r["model"] == "linear_logits_fn" for r in runs)


@pytest.mark.slow
@needs_data
def test_a_run_killed_mid_member_and_resumed_ends_with_the_records_of_an_uninterrupted_run(
    tmp_path,
):
    """SIGKILL at a known model evaluation inside the first member (the model factory kills
    its own process), then the same command again: the record file ends equal, record for
    record, to the one of a run that was never interrupted."""
    import subprocess
    import sys

    from tests.evaluation.cli_models import KILL_AFTER_ENV

    def argv(out):
        return ["--model", "tests.evaluation.cli_models:self_killing_logits_fn", "--n", "200",
                "--eps", "1/255", "--batch-size", "10", "--no-progress", "--out", str(out)]  # fmt: skip

    def lines(out):
        return sorted(r.to_json() for r in read_records(record_file(out)))

    assert main(argv(tmp_path / "whole")) == 0
    env = {**os.environ, KILL_AFTER_ENV: "150"}
    killed = subprocess.run(
        [sys.executable, "-m", "advjax.evaluate", *argv(tmp_path / "resumed")],
        env=env,
        capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    partial = read_records(record_file(tmp_path / "resumed"))
    assert {r.attack for r in partial} == {"apgd-ce"} and 0 < len(partial) < 200, "mid-member"
    assert main(argv(tmp_path / "resumed")) == 0
    assert lines(tmp_path / "resumed") == lines(tmp_path / "whole")
    assert len(lines(tmp_path / "whole")) > 200  # every member's records and the derived ones
