"""Aggregates from records alone: counting rules (invalid excluded, never a model failure),
per-class slices with the worst class, budget curves from first-break tracking, and
agreement with `advjax.evaluation` on a real PGD run of a tiny linear model."""

import jax
import numpy as np
import pytest
from conftest import case_record, make_linear_batch, make_linear_logits_fn

from advjax.attacks import pgd
from advjax.evaluation import ThreatModel, aggregate_records, find_group, group_records
from advjax.evaluation import _metrics as metrics
from advjax.evaluation._scoring import records_from_arrays
from advjax.evaluation.stats import budget_curves, per_class
from advjax.records import CaseRecord

EPS = 8 / 255


def rec(
    case_id, status, *, true_class=0, break_step=None, break_restart=None, linf=EPS, **overrides
) -> CaseRecord:
    """`case_record` with true class 0, a first break only where `break_step` is given (at
    restart 0 unless `break_restart` says otherwise), and linf = l2 = `linf` whatever eps."""
    if break_step is not None and break_restart is None:
        break_restart = 0
    return case_record(
        case_id,
        status=status,
        true_class=true_class,
        linf=linf,
        l2=linf,
        first_break_step=break_step,
        first_break_restart=break_restart,
        **overrides,
    )


def mixed_records():
    """10 cases: 2 clean-wrong, 3 success (steps 0, 2, 5), 3 failed, 1 budget_exhausted,
    1 invalid."""
    return [
        rec(0, "skipped_clean_wrong"),
        rec(1, "skipped_clean_wrong", true_class=1),
        rec(2, "success", break_step=0),
        rec(3, "success", break_step=2, break_restart=1),
        rec(4, "success", true_class=1, break_step=5),
        rec(5, "failed"),
        rec(6, "failed", true_class=1),
        rec(7, "failed", true_class=1),
        rec(8, "budget_exhausted"),
        rec(9, "invalid", linf=0.5),
    ]


def test_counts_invalid_out_of_robust_and_success_denominators():
    """clean = 8/10; robust = (failed + budget_exhausted)/(n - invalid) = 4/9; success =
    3/(3+4) = 3/7; valid share 9/10; status counts add up to n."""
    (group,) = aggregate_records(mixed_records())
    assert group["status_counts"] == {
        "skipped_clean_wrong": 2,
        "success": 3,
        "failed": 3,
        "budget_exhausted": 1,
        "invalid": 1,
    }
    assert sum(group["status_counts"].values()) == group["cases"] == 10
    assert (group["clean_accuracy"]["count"], group["clean_accuracy"]["total"]) == (8, 10)
    assert (group["robust_accuracy"]["count"], group["robust_accuracy"]["total"]) == (4, 9)
    assert (group["attack_success_rate"]["count"], group["attack_success_rate"]["total"]) == (3, 7)
    assert (group["valid_share"]["count"], group["invalid"]) == (9, 1)
    assert group["robust_accuracy"]["ci95"] == list(metrics.wilson_interval(4, 9))
    assert group["perturbation"]["max_linf"] == 0.5 and group["loss"]["non_finite"] == 0


def test_without_invalid_cases_robust_accuracy_matches_metrics_attack_summary():
    """With no invalid case the counts are exactly advjax.evaluation.stats.attack_summary's."""
    records = [r for r in mixed_records() if r.status != "invalid"]
    (group,) = aggregate_records(records)
    summary = metrics.attack_summary(
        [r.true_class for r in records],
        [r.clean_pred for r in records],
        [r.adv_pred for r in records],
    )
    for key in ("clean_accuracy", "robust_accuracy", "attack_success_rate"):
        assert group[key] == summary[key], key


def test_per_class_slices_name_the_worst_class():
    """Per class: class 0 robust 2/4 (one invalid left out), class 1 robust 2/4; with
    num_classes=3 the empty class 2 is listed with total 0; worst = lowest value, ties by id."""
    rows = per_class(mixed_records(), num_classes=3)
    assert [(r["robust_accuracy"]["count"], r["robust_accuracy"]["total"]) for r in rows] == [
        (2, 5),
        (2, 4),
        (0, 0),
    ]
    assert rows[0]["invalid"] == 1 and rows[2]["cases"] == 0
    (group,) = aggregate_records(mixed_records(), num_classes=3)
    assert group["worst_class"]["class"] == 0  # 2/5 < 2/4
    records = [
        rec(0, "failed"),
        rec(1, "success", true_class=1, break_step=1),
        rec(2, "success", true_class=2, break_step=1),
    ]
    assert aggregate_records(records)[0]["worst_class"]["class"] == 1  # tie at 0 %: lowest id


def test_budget_curves_steps_of_the_first_restart_and_restarts_end_at_final_robust_accuracy():
    """Robust count after k steps = robust + successes the first restart had not broken
    within k steps; after r restarts = robust + successes with first-break restart >= r.
    The steps curve ends at one restart's robust count, the restarts curve at the final."""
    curves = budget_curves(mixed_records(), steps=6, restarts=3)
    assert [r["count"] for r in curves["steps"]] == [6, 6, 6, 6, 6, 5, 5]
    assert [r["count"] for r in curves["restarts"]] == [5, 4, 4]
    assert all(r["total"] == 9 for r in curves["steps"] + curves["restarts"])
    (group,) = aggregate_records(mixed_records(), steps={"pgd": 6})
    assert group["budget_curves"]["restarts"][-1] == group["robust_accuracy"]
    assert group["budget_curves"]["steps"][-1] == group["budget_curves"]["restarts"][0]
    assert len(group["budget_curves"]["restarts"]) == 2  # inferred: 1 + largest first-break restart


def test_untracked_attack_has_no_curves():
    """Success records without first-break tracking (e.g. FGSM) give no budget curves."""
    records = [rec(0, "success", attack="fgsm"), rec(1, "failed", attack="fgsm")]
    assert aggregate_records(records)[0]["budget_curves"] == {"steps": None, "restarts": None}


def test_groups_by_model_attack_eps_and_rejects_duplicates_and_mixed_runs():
    """One summary per (model, attack, eps), sorted; duplicate keys and mixed hashes raise."""
    records = mixed_records() + [rec(0, "failed", eps=0.0), rec(0, "failed", attack="fgsm")]
    groups = aggregate_records(records)
    assert [(g["attack"], g["eps"]) for g in groups] == [("fgsm", EPS), ("pgd", 0.0), ("pgd", EPS)]
    assert find_group(groups, model="m", attack="pgd", eps=0.0)["cases"] == 1
    assert find_group(groups, model="m", attack="pgd", eps=1.0) is None
    with pytest.raises(ValueError, match="duplicate"):
        group_records(mixed_records() + [rec(2, "failed")])
    with pytest.raises(ValueError, match="mixes model_hash"):
        group_records([rec(0, "failed"), rec(1, "failed", model_hash="other")])
    with pytest.raises(ValueError, match="budget"):
        aggregate_records(mixed_records(), steps={"pgd": -1})


def test_records_of_a_real_pgd_run_reproduce_metrics_counts_and_curves():
    """PGD on a tiny linear model -> records -> aggregates: robust count, steps curve and
    restarts curve equal advjax.evaluation computed from the raw arrays."""
    logits_fn = make_linear_logits_fn(0)
    x, y = make_linear_batch(0, n=64)
    clean = np.asarray(logits_fn(x).argmax(-1))
    y = np.where(np.arange(64) % 4 == 0, y, clean).astype(np.int32)  # mostly clean-correct
    steps, restarts, eps = 5, 3, 2 / 255
    result = pgd(logits_fn, x, y, eps, key=jax.random.key(0), steps=steps, restarts=restarts)
    adv = np.asarray(logits_fn(result.x_adv).argmax(-1))
    tm = ThreatModel(eps=(eps,), steps=steps, restarts=restarts)
    records = records_from_arrays(
        threat_model=tm,
        eps=eps,
        model="linear",
        model_hash="h",
        attack="pgd",
        attack_config_hash="c",
        case_ids=np.arange(64),
        labels=y,
        clean_pred=clean,
        adv_pred=adv,
        loss=np.asarray(result.loss),
        x=x,
        x_adv=np.asarray(result.x_adv),
        queries=steps * restarts,
        broken_step=np.asarray(result.broken_step),
    )
    (group,) = aggregate_records(records, steps=steps, restarts=restarts)
    assert group["invalid"] == 0
    assert group["robust_accuracy"] == metrics.attack_summary(y, clean, adv)["robust_accuracy"]
    broken = np.asarray(result.broken_step)
    clean_ok = clean == y
    first = np.where(broken[0] < 0, steps + 1, broken[0])
    assert [r["count"] for r in group["budget_curves"]["steps"]] == [
        int((clean_ok & (first > k)).sum()) for k in range(steps + 1)
    ]
    assert [r["count"] for r in group["budget_curves"]["restarts"]] == [
        int((clean_ok & ~(broken[:r] >= 0).any(axis=0)).sum()) for r in range(1, restarts + 1)
    ]
    assert group["status_counts"]["success"] > 0 and group["status_counts"]["failed"] > 0
