"""Attack sanity checks: each passes on a healthy evaluation and fails on a crafted broken or
gradient-masked one, and its evidence states the numbers."""

import numpy as np
import pytest
from conftest import case_record

from advjax.evaluation import Check, aggregate_records, run_checks
from advjax.evaluation.checks import (
    check_eps_zero,
    check_finite_loss,
    check_large_eps,
    check_monotone_curve,
    check_monotone_eps,
    check_perturbations,
    check_pgd_not_weaker_than_fgsm,
    check_transfer_not_stronger,
    check_zero_gradients,
    zero_gradient_fraction,
)

N = 20


def cases(model, attack, eps, *, robust, clean=16, loss=1.0, linf=None, invalid=0, tracked=True):
    """N records: N - clean clean-wrong, `invalid` invalid, `robust` failed, the rest success."""
    out = []
    for i in range(N):
        if i >= clean:
            status = "skipped_clean_wrong"
        elif i < invalid:
            status = "invalid"
        elif i < invalid + robust:
            status = "failed"
        else:
            status = "success"
        step = (i % 3) if status == "success" and tracked else None
        out.append(
            case_record(
                i,
                status=status,
                true_class=i % 2,
                eps=eps,
                final_loss=loss,
                linf=eps if linf is None else linf,
                first_break_step=step,
                first_break_restart=None if step is None else i % 2,
                queries=5,
                model=model,
                attack=attack,
            )
        )
    return out


def healthy_run():
    """Robust 16 -> 8 -> 2 -> 0 under PGD as eps grows; FGSM leaves more; eps 0 = clean."""
    records = []
    for eps, pgd, fgsm in ((0.0, 16, 16), (2 / 255, 8, 10), (8 / 255, 2, 5), (64 / 255, 0, 1)):
        records += cases("m", "pgd", eps, robust=pgd) + cases(
            "m", "fgsm", eps, robust=fgsm, tracked=False
        )
    return aggregate_records(records)


def group(groups, attack, eps):
    return next(g for g in groups if g["attack"] == attack and abs(g["eps"] - eps) < 1e-12)


def test_every_check_passes_on_a_healthy_run_and_states_numbers():
    """run_checks on a healthy run: every check passes; names are unique; evidence has '%'
    or counts."""
    checks = run_checks(
        healthy_run(), zero_gradient_fractions={"m": 0.0}, transfer_robust={"m": (0.3, 0.1)}
    )
    assert all(isinstance(c, Check) for c in checks)
    assert [c.name for c in checks if not c.passed] == []
    assert len({c.name for c in checks}) == len(checks)
    assert {c.name.split("[")[0] for c in checks} >= {
        "perturbations_within_threat_model",
        "finite_loss",
        "eps0_equals_clean",
        "monotone_in_eps",
        "monotone_in_steps",
        "monotone_in_restarts",
        "pgd_not_weaker_than_fgsm",
        "large_eps_breaks_model",
        "zero_input_gradients",
        "transfer_not_stronger_than_whitebox",
    }
    assert all(any(ch.isdigit() for ch in c.evidence) for c in checks)


def test_eps_zero_check_fails_when_eps0_attack_breaks_cases():
    """At eps 0 a random start that changes predictions (robust 14 < clean 16) fails."""
    good = check_eps_zero(group(healthy_run(), "pgd", 0.0))
    bad = check_eps_zero(aggregate_records(cases("m", "pgd", 0.0, robust=14))[0])
    assert good.passed and not bad.passed
    assert "14/20" in bad.evidence and "16/20" in bad.evidence
    with pytest.raises(ValueError, match="eps"):
        check_eps_zero(group(healthy_run(), "pgd", 8 / 255))


def test_monotone_eps_fails_when_robust_accuracy_rises_with_eps():
    """A masked attack whose robust accuracy goes up at a larger eps fails, naming where."""
    pgd = [g for g in healthy_run() if g["attack"] == "pgd"]
    assert check_monotone_eps(pgd).passed
    masked = aggregate_records(
        cases("m", "pgd", 2 / 255, robust=4) + cases("m", "pgd", 8 / 255, robust=9)
    )
    check = check_monotone_eps(masked)
    assert not check.passed and "increases at 2/255 -> 8/255" in check.evidence
    other_cases = aggregate_records(cases("m", "pgd", 2 / 255, robust=4))
    other_cases[0]["case_set"] = "different"
    assert not check_monotone_eps([other_cases[0], pgd[-1]]).passed


def test_monotone_eps_allows_a_declared_rise_for_one_attack_only():
    """A transfer attack may rise by the declared slack between eps values, no more;
    the white-box attacks in the same run keep the strict check."""

    def monotone(run, **kwargs):
        return {c.name: c.passed for c in run_checks(run, large_eps=None, **kwargs)}

    rise = lambda k: aggregate_records(  # noqa: E731
        cases("m", "transfer_pgd", 2 / 255, robust=10)
        + cases("m", "transfer_pgd", 4 / 255, robust=10 + k)
    )
    name = "monotone_in_eps[m/transfer_pgd]"
    assert not monotone(rise(1))[name]
    assert monotone(rise(1), eps_rise_allowed={"transfer_pgd": 0.06})[name]
    assert not monotone(rise(2), eps_rise_allowed={"transfer_pgd": 0.06})[name]
    masked = aggregate_records(
        cases("m", "pgd", 2 / 255, robust=10) + cases("m", "pgd", 4 / 255, robust=11)
    )
    assert not monotone(masked, eps_rise_allowed={"transfer_pgd": 0.06})["monotone_in_eps[m/pgd]"]


def test_monotone_curve_fails_on_a_rising_curve():
    assert check_monotone_curve([0.8, 0.5, 0.5, 0.2], what="steps").passed
    bad = check_monotone_curve([0.8, 0.5, 0.6], what="restarts", where="m/pgd")
    assert (
        not bad.passed
        and "restarts [3]" in bad.evidence
        and bad.name == "monotone_in_restarts[m/pgd]"
    )


def test_pgd_weaker_than_fgsm_fails():
    """PGD leaving 12/20 robust where FGSM leaves 5/20 (broken PGD) fails at that eps."""
    runs = healthy_run()
    fgsm = [g for g in runs if g["attack"] == "fgsm"]
    assert check_pgd_not_weaker_than_fgsm([g for g in runs if g["attack"] == "pgd"], fgsm).passed
    weak_pgd = aggregate_records(cases("m", "pgd", 8 / 255, robust=12))
    check = check_pgd_not_weaker_than_fgsm(weak_pgd, fgsm)
    assert (
        not check.passed and "60.0 %" in check.evidence and "weaker at eps 8/255" in check.evidence
    )
    assert not check_pgd_not_weaker_than_fgsm(
        aggregate_records(cases("m", "pgd", 0.5, robust=0)), fgsm
    ).passed


@pytest.mark.parametrize("broken", [dict(linf=8 / 255 + 1e-4), dict(linf=np.nan), dict(invalid=2)])
def test_perturbation_check_fails_outside_ball_non_finite_or_invalid(broken):
    """A perturbation past eps + 1e-6, a NaN size, or invalid (out-of-range) cases fail."""
    assert check_perturbations(healthy_run()).passed
    bad = check_perturbations(aggregate_records(cases("m", "pgd", 8 / 255, robust=2, **broken)))
    assert not bad.passed and "8/255" in bad.evidence


def test_finite_loss_check_fails_on_nan_loss():
    assert check_finite_loss(healthy_run()).passed
    bad = check_finite_loss(aggregate_records(cases("m", "pgd", 8 / 255, robust=2, loss=np.nan)))
    assert not bad.passed and "20 of 20" in bad.evidence


def test_zero_gradient_fraction_and_check_flag_masked_gradients():
    """All-zero per-example gradients (e.g. saturated softmax) are counted and fail the check."""
    grad = np.ones((10, 4, 4, 3))
    assert zero_gradient_fraction(grad) == 0.0 and check_zero_gradients(0.0).passed
    grad[:7] = 0.0
    fraction = zero_gradient_fraction(grad)
    check = check_zero_gradients(fraction)
    assert fraction == pytest.approx(0.7) and not check.passed and "70.0 %" in check.evidence
    with pytest.raises(ValueError, match="fraction"):
        check_zero_gradients(1.5)


def test_transfer_stronger_than_whitebox_fails():
    """A surrogate's transfer attack leaving less robust accuracy than white-box PGD fails."""
    assert check_transfer_not_stronger(0.30, 0.10).passed
    bad = check_transfer_not_stronger(0.05, 0.40, where="m")
    assert not bad.passed and "40.0 %" in bad.evidence and "5.0 %" in bad.evidence


def test_large_eps_check_fails_when_model_survives_huge_budget():
    """At 64/255 a model still 40 % robust signals a masked attack: fail; also fail when
    the run has no large eps at all."""
    assert check_large_eps(group(healthy_run(), "pgd", 64 / 255)).passed
    masked = aggregate_records(cases("m", "pgd", 64 / 255, robust=8))[0]
    bad = check_large_eps(masked)
    assert not bad.passed and "64/255" in bad.evidence and "8/20" in bad.evidence
    small = aggregate_records(cases("m", "pgd", 8 / 255, robust=2))
    (missing,) = [c for c in run_checks(small) if c.name.startswith("large_eps")]
    assert not missing.passed and "not evaluated" in missing.evidence


def test_run_checks_on_a_masked_attack_run_fails_the_right_checks():
    """A run whose PGD gets stronger-looking robustness with eps and survives 64/255 fails
    the eps-monotonicity, PGD-vs-FGSM and large-eps checks."""
    records = []
    for eps, pgd, fgsm in ((0.0, 16, 16), (8 / 255, 10, 4), (64 / 255, 12, 0)):
        records += cases("m", "pgd", eps, robust=pgd) + cases(
            "m", "fgsm", eps, robust=fgsm, tracked=False
        )
    failed = {c.name for c in run_checks(aggregate_records(records)) if not c.passed}
    assert failed == {
        "monotone_in_eps[m/pgd]",
        "pgd_not_weaker_than_fgsm[m/pgd]",
        "large_eps_breaks_model[m/pgd]",
    }
