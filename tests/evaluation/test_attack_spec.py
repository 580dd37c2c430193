"""`AttackSpec`, the one type of an attack and its budget: a campaign's attack and an
AutoAttack member, one set of defaults, and the hashes the committed records carry."""

import jax
import pytest
from conftest import make_linear_batch, make_linear_logits_fn

from advjax.data import EvalCases
from advjax.evaluation import AttackSpec, AutoAttackConfig, Model, ThreatModel, run_attack
from advjax.evaluation._autoattack import VERSIONS
from advjax.evaluation._autoattack_records import autoattack_hash, member_hash
from advjax.records import RecordLog
from experiments.cifar_robustness.config import profile
from experiments.cifar_robustness.evaluation import attack_specs


def test_one_set_of_defaults():
    """Steps default to the attack's fixed count (FGSM 1), else AutoAttack's 100 iterations of
    a gradient attack and 5,000 queries of a score-based one; the name is the method's."""
    assert AttackSpec("fgsm").steps == 1
    assert AttackSpec("apgd-ce").steps == AttackSpec("pgd").steps == 100
    assert AttackSpec("square").steps == 5000
    assert AttackSpec("apgd-ce").name == "apgd-ce"
    assert AttackSpec("apgd-ce", eot=4).name == "apgd-ce-eot"
    assert AttackSpec("pgd", name="pgd_budget").name == "pgd_budget"
    assert AttackSpec("square").p_init == 0.8
    assert AttackSpec("square").queries_per_run == 5000
    assert AttackSpec("apgd-ce", eot=3).queries_per_run == 3 * 101


def test_the_committed_records_hashes_are_kept():
    """The hashes in results/cifar10/default: the standard AutoAttack's APGD-CE member and its
    derived records at L-inf, the study's FGSM and PGD-20 campaigns, the threat model."""
    standard = VERSIONS["standard"]
    assert member_hash(standard[0], "linf") == "4c860355a8d9fd70"
    assert autoattack_hash(standard, "linf") == "e4433dd11fefd2b3"
    assert AutoAttackConfig(eps=8 / 255).threat_model.digest() == "fdd3ee08a1d90ad1"
    hashes = {s.name: s.config_hash() for s in attack_specs(profile("default"))}
    assert hashes["fgsm"] == "0f19006c7ef06a65"
    assert hashes["pgd"] == "4df16777467070f0"
    assert hashes["pgd_budget"] == "3aa8ec91a7385679"


@pytest.mark.parametrize(
    "spec, match",
    [
        (AttackSpec("pgd", steps=2), "at least one eps"),
        (AttackSpec("pgd", eps=(0.1,), steps=2, eot=2), "eot=2"),
        (AttackSpec("fgsm", eps=(0.1,), restarts=2), "no random restarts"),
    ],
)
def test_a_campaign_refuses_what_only_a_member_may_be(spec, match, tmp_path):
    logits_fn, (x, y) = make_linear_logits_fn(), make_linear_batch()
    log = RecordLog(tmp_path / "records.jsonl")
    with pytest.raises(ValueError, match=match):
        run_attack(log, Model("m", logits_fn, "h"), EvalCases(x, y), spec,
                   threat_model=ThreatModel(eps=(0.1,), steps=2, restarts=2), key=jax.random.key(0),
                   show_progress=False, log_line=lambda _: None)  # fmt: skip
    assert not log.read()


def test_a_member_takes_the_evaluations_eps():
    with pytest.raises(ValueError, match="leave eps"):
        AutoAttackConfig(eps=8 / 255, members=(AttackSpec("apgd-ce", eps=(0.1,)),))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="cw"), "unknown attack method"),
        (dict(method="pgd", steps=0), "steps=0"),
        (dict(method="fgsm", steps=3), "takes 1 step"),
        (dict(method="square", eot=2), "eot=2 is for gradient"),
        (dict(method="square", p_init=0.0), "p_init"),
        (dict(method="apgd-ce", loss="margin"), "fixed loss"),
    ],
)
def test_bad_specs_are_refused_when_made(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AttackSpec(**kwargs)
