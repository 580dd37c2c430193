"""`python -m advjax.evaluate`: AutoAttack of any importable model from the command line."""

import json
import os

import pytest

from advjax.evaluate import main
from advjax.io import read_records, record_file

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
        (["--model", MODEL, "--eps", "8"], "--eps 8 must be in \\[0, 1\\] for --norm linf"),
        (["--model", "no_colon"], "expected module:function"),
        (["--model", MODEL, "--n", "0"], "--n 0 must be in"),
    ],
)
@needs_data
def test_bad_arguments_are_one_line_errors_with_exit_code_2(tmp_path, capsys, argv, message):
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("advjax.evaluate: error:")
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
