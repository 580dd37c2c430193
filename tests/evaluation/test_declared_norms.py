"""A member run under a norm its attack does not declare is refused before any work, by every
runner: `autoattack`, `run_autoattack`'s schedule, `run_evaluation`, campaigns and the command.
(Run anyway, an L-inf-only attack under L2 reports perturbations far outside the L2 ball.)"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_linear_batch, make_linear_logits_fn

from advjax.attacks import ATTACKS
from advjax.data import EvalCases
from advjax.evaluate import main
from advjax.evaluation import (
    AttackSpec,
    AutoAttackConfig,
    Model,
    ThreatModel,
    autoattack,
    run_attack,
    run_evaluation,
)
from advjax.records import RecordLog

REFUSAL = "attack 'linf-only' runs under norm linf only, got norm='l2'"


@pytest.fixture
def linf_only(monkeypatch):
    """MI-FGSM declared for L-inf alone, registered as 'linf-only'."""
    attack = dataclasses.replace(ATTACKS["mi-fgsm"], name="linf-only", norms=("linf",))
    monkeypatch.setitem(ATTACKS, "linf-only", attack)
    return attack


def test_the_attack_itself_refuses_an_undeclared_norm(linf_only):
    x, y = make_linear_batch(n=4)
    with pytest.raises(ValueError, match=REFUSAL):
        linf_only(make_linear_logits_fn(), x, y, 0.5, key=jax.random.key(0), norm="l2")


def test_autoattack_refuses_the_member_and_runs_it_under_its_own_norm(linf_only):
    logits_fn = make_linear_logits_fn()
    x, _ = make_linear_batch(n=8)
    y = np.asarray(jnp.argmax(logits_fn(x), -1))
    member = [AttackSpec("linf-only", steps=5)]
    with pytest.raises(ValueError, match=REFUSAL):
        autoattack(logits_fn, x, y, 0.5, key=jax.random.key(0), norm="l2", members=member)
    result = autoattack(logits_fn, x, y, 8 / 255, key=jax.random.key(0), members=member)
    assert np.abs(result.x_adv - x).max() <= 8 / 255 + 1e-6


def test_run_evaluation_refuses_before_writing_anything(linf_only, tmp_path):
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=8)
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=REFUSAL):
        AutoAttackConfig(eps=0.5, norm="l2", members=["linf-only"])
    config = AutoAttackConfig(eps=0.5, norm="linf", members=["linf-only"])
    with pytest.raises(ValueError, match=REFUSAL):  # a config changed after it was checked
        object.__setattr__(config, "norm", "l2")
        run_evaluation(out, Model("m", logits_fn, "h"), EvalCases(x, y), config,
                       key=jax.random.key(0), log_line=lambda _: None)  # fmt: skip
    assert not out.exists() or not any(out.iterdir())


def test_a_campaign_refuses_it_before_writing_anything(linf_only, tmp_path):
    logits_fn, (x, y) = make_linear_logits_fn(), make_linear_batch()
    spec = AttackSpec("linf-only", name="a", eps=(0.5,), norm="l2")
    log = RecordLog(tmp_path / "records.jsonl")
    with pytest.raises(ValueError, match=REFUSAL):
        run_attack(log, Model("m", logits_fn, "h"), EvalCases(x, y), spec,
                   threat_model=ThreatModel(eps=(0.5,), steps=1, norm="l2"), key=jax.random.key(0),
                   show_progress=False, log_line=lambda _: None)  # fmt: skip
    assert not log.read()


def test_the_command_refuses_it_in_one_line_with_exit_2(linf_only, tmp_path, capsys):
    argv = ["--model", "tests.evaluation.cli_models:linear_logits_fn", "--norm", "l2",
            "--eps", "0.5", "--members", "apgd-ce,linf-only", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--members: " + REFUSAL in err, err
    assert not (tmp_path / "run").exists()
