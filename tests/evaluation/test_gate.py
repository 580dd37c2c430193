"""Release gate: ALLOW when every declared threshold holds, HOLD with every reason otherwise;
exit codes 0 / 1 / 2 through `python -m advjax.gate`; bad or missing files are clear errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import case_record

from advjax import evaluation, gate
from advjax.evaluation import Check, ThreatModel, aggregate_records, run_checks, run_summary
from advjax.evaluation._gate import Reason
from advjax.evaluation.summary import SCHEMA, SummaryError, read_run_summary
from advjax.records import atomic_write_json

ROOT = Path(__file__).resolve().parents[2]
TM = ThreatModel(eps=(0.0, 8 / 255, 64 / 255), steps=10, restarts=1)
N = 200


def records(model, *, clean, robust_8, robust_64=0, invalid=0, worst_zero=False):
    """N cases per eps in 2 classes; `robust_8` of them robust at 8/255."""
    out = []
    for eps, robust in ((0.0, clean), (8 / 255, robust_8), (64 / 255, robust_64)):
        for i in range(N):
            y = i % 2
            if i >= clean:
                status = "skipped_clean_wrong"
            elif i < invalid and eps > 0:
                status = "invalid"
            elif i < invalid + robust and not (worst_zero and y == 1 and eps > 0):
                status = "failed"
            else:
                status = "success"
            out.append(
                case_record(
                    i,
                    status=status,
                    true_class=y,
                    eps=eps,
                    model=model,
                    threat_model_hash=TM.digest(),
                )
            )
    return out


def summary(path, *, checks=None, model="robust", **kwargs) -> Path:
    groups = aggregate_records(records(model, **kwargs), num_classes=2)
    found = run_checks(groups) if checks is None else checks
    atomic_write_json(path, run_summary(groups, found, TM, extra={"command": "test"}))
    return path


POLICY = {
    "robust_accuracy_lower_bound": {"pgd": {"8/255": 0.25}},
    "max_clean_regression": 0.02,
    "require_sanity": True,
    "min_valid_share": 0.99,
    "worst_class_floor": 0.05,
}


@pytest.fixture
def files(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    run = summary(tmp_path / "run.json", clean=160, robust_8=80)  # robust 40 %, CI low ~33.5 %
    baseline = summary(tmp_path / "base.json", clean=162, robust_8=70)
    return policy, run, baseline


def cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "advjax.gate", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def test_summary_round_trips_and_records_threat_model_and_checks(files):
    """write/read: schema tag, threat model with a matching hash, per-model clean accuracy."""
    _, run, _ = files
    loaded = read_run_summary(run)
    assert loaded["schema"] == SCHEMA and loaded["threat_model_hash"] == TM.digest()
    assert ThreatModel.from_dict(loaded["threat_model"]) == TM
    assert loaded["models"]["robust"]["clean_accuracy"]["count"] == 160
    assert loaded["sanity_passed"] and loaded["extra"] == {"command": "test"}


def test_cli_allows_and_exits_0_when_every_threshold_holds(files):
    policy, run, baseline = files
    result = cli("--policy", policy, "--run", run, "--baseline", baseline)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ALLOW")
    for fragment in (
        "robust_accuracy_lower_bound",
        "max_clean_regression",
        "require_sanity",
        "min_valid_share",
        "worst_class_floor",
        "95 % CI lower bound",
    ):
        assert fragment in result.stdout, fragment
    assert "FAIL" not in result.stdout


def test_cli_holds_with_every_failed_reason_and_exits_1(tmp_path, files):
    """Low robust accuracy, a clean regression, invalid cases and a zero worst class: HOLD,
    each failure printed with its numbers."""
    policy, _, baseline = files
    run = summary(tmp_path / "bad.json", clean=150, robust_8=45, invalid=10, worst_zero=True)
    result = cli("--policy", policy, "--run", run, "--baseline", baseline)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith("HOLD")
    failed = [line for line in result.stdout.splitlines() if line.strip().startswith("FAIL")]
    rules = {line.split()[1].rstrip(":") for line in failed}
    assert rules == {
        "robust_accuracy_lower_bound",
        "max_clean_regression",
        "min_valid_share",
        "worst_class_floor",
        "require_sanity",
    }
    assert any("regression 6.0 points vs allowed <= 2.0" in line for line in failed)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such policy file"),
        ("{not json", "not valid JSON"),
        (json.dumps({"robust_acc": 0.3}), "unknown policy keys"),
        (json.dumps({"min_valid_share": 1.5}), "min_valid_share=1.5"),
        (json.dumps({"robust_accuracy_lower_bound": {"pgd": {"eight": 0.3}}}), "'eight'"),
        (json.dumps({"models": []}), "declares no rule"),
    ],
)
def test_bad_policy_exits_2_with_a_clear_message(tmp_path, files, capsys, content, message):
    _, run, _ = files
    policy = tmp_path / "p.json"
    if content is not None:
        policy.write_text(content)
    assert gate.main(["--policy", str(policy), "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("advjax.gate: error:")
        and err.count("\n") == 1
        and message in err
        and str(policy) in err
    )


def test_cli_missing_run_file_exits_2(tmp_path, files):
    policy, _, _ = files
    result = cli("--policy", policy, "--run", tmp_path / "missing.json")
    assert result.returncode == 2 and "no such run summary file" in result.stderr
    assert result.stdout == ""


def test_malformed_or_tampered_run_summaries_exit_2(tmp_path, files, capsys):
    """Not JSON, wrong schema, a threat model edited after the run (hash mismatch), or a
    malformed aggregate are all errors naming the file."""
    policy, run, _ = files
    good = json.loads(run.read_text())
    variants = {
        "notjson": "{",
        "schema": json.dumps({**good, "schema": "other/1"}),
        "tampered": json.dumps({**good, "threat_model": {**good["threat_model"], "steps": 99}}),
        "aggregate": json.dumps({**good, "aggregates": [{"model": "robust"}]}),
    }
    for name, text in variants.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        assert gate.main(["--policy", str(policy), "--run", str(path)]) == 2, name
        assert str(path) in capsys.readouterr().err
    with pytest.raises(SummaryError, match="does not match"):
        read_run_summary(tmp_path / "tampered.json")


def test_clean_regression_without_baseline_holds(files):
    """A policy that bounds clean regression cannot allow without a baseline to compare to."""
    _, run, _ = files
    decision = evaluation.decide(
        evaluation.gate.parse_policy({"max_clean_regression": 0.02}), read_run_summary(run)
    )
    assert not decision.allow
    assert decision.reasons == [
        Reason("max_clean_regression", False, "robust: no --baseline given")
    ]


def test_missing_model_eps_or_checks_hold(files):
    """A gated model or declared eps absent from the run, or a run with no sanity checks,
    holds rather than silently passing."""
    _, run, _ = files
    loaded = read_run_summary(run)
    decision = evaluation.decide(
        evaluation.gate.parse_policy(
            {"models": ["robust", "other"], "robust_accuracy_lower_bound": {"pgd": {"4/255": 0.1}}}
        ),
        loaded,
    )
    assert not decision.allow
    assert {r.detail for r in decision.reasons if not r.passed} == {
        "other: not in the run",
        "robust pgd eps 4/255: not evaluated",
    }
    no_checks = run_summary(loaded["aggregates"], [], TM)
    decision = evaluation.decide(evaluation.gate.parse_policy({"require_sanity": True}), no_checks)
    assert not decision.allow and "no sanity check" in decision.reasons[0].detail


def test_failing_sanity_check_holds_and_is_quoted(tmp_path, files):
    policy, _, baseline = files
    bad = Check("pgd_not_weaker_than_fgsm[robust/pgd]", False, "8/255: pgd 40.0 % vs fgsm 30.0 %")
    run = summary(tmp_path / "r.json", clean=160, robust_8=80, checks=[bad])
    assert not read_run_summary(run)["sanity_passed"]
    assert gate.main(["--policy", str(policy), "--run", str(run), "--baseline", str(baseline)]) == 1


def test_parse_eps_accepts_fractions_and_decimals():
    assert (
        evaluation.parse_eps("8/255") == 8 / 255
        and evaluation.parse_eps("0.5") == 0.5
        and evaluation.parse_eps(0) == 0.0
    )
    with pytest.raises(ValueError, match="'-1'"):
        evaluation.parse_eps("-1")
    with pytest.raises(ValueError, match="'8/0'"):
        evaluation.parse_eps("8/0")


ROLLBACK = {"models": ["robust"], "rollback_below": {"baseline_model": "deployed",
            "robust": {"pgd": ["8/255"]}}}  # fmt: skip


@pytest.mark.parametrize(
    ("base_robust", "verdict", "code"),
    [(150, "ROLLBACK", 3), (84, "ALLOW", 0)],
    ids=["worse-beyond-both-intervals", "within-the-intervals"],
)
def test_a_candidate_worse_than_its_baseline_beyond_both_intervals_rolls_back(
    tmp_path, base_robust, verdict, code
):
    """Robust 40 % (CI up to ~47 %) against a deployed 75 % (CI from ~68 %): rollback; against
    42 %, whose interval overlaps, nothing to roll back."""
    policy = tmp_path / "rollback.json"
    policy.write_text(json.dumps(ROLLBACK))
    run = summary(tmp_path / "run.json", clean=160, robust_8=80)
    base = summary(tmp_path / "deployed.json", model="deployed", clean=165, robust_8=base_robust)
    result = cli("--policy", policy, "--run", run, "--baseline", base)
    assert result.returncode == code, result.stdout + result.stderr
    assert result.stdout.startswith(verdict)
    if verdict == "ROLLBACK":
        assert "worse beyond both intervals" in result.stdout


def test_rollback_without_the_baseline_model_rolls_back_and_a_malformed_rule_is_refused(
    tmp_path,
):
    """A rollback rule whose baseline model is not in the run decides ROLLBACK (the release
    cannot be shown no worse than what it replaces), naming the missing model."""
    run = evaluation.summary.read_run_summary(
        summary(tmp_path / "run.json", clean=160, robust_8=80)
    )
    decision = evaluation.decide(evaluation.gate.parse_policy(ROLLBACK), run)
    assert decision.verdict == "ROLLBACK" and "not in the run" in decision.reasons[0].detail
    with pytest.raises(evaluation.gate.PolicyError, match="baseline_model"):
        evaluation.gate.parse_policy({"rollback_below": {"robust": {"pgd": ["8/255"]}}})
    with pytest.raises(evaluation.gate.PolicyError, match="compares nothing"):
        evaluation.gate.parse_policy({"rollback_below": {"baseline_model": "b", "clean": False}})
