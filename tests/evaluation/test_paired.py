"""Paired comparison of two models on the same cases: the discordant counts are those of the
records, the exact McNemar p-value is the two-sided binomial test on them, and records of
different cases are refused."""

import pytest
from conftest import case_record
from scipy import stats

from advjax.evaluation.stats import mcnemar_exact, paired_robustness


@pytest.mark.parametrize(
    "only_a, only_b", [(0, 1), (0, 5), (6, 4), (65, 46), (37, 28), (549, 400), (3000, 3100)]
)
def test_mcnemar_p_is_the_two_sided_binomial_test_on_the_discordant_cases(only_a, only_b):
    expected = stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert mcnemar_exact(only_a, only_b) == pytest.approx(expected, rel=1e-9)
    assert mcnemar_exact(only_b, only_a) == mcnemar_exact(only_a, only_b)


def test_mcnemar_without_disagreement_is_one_and_negative_counts_are_refused():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(7, 7) == 1.0
    with pytest.raises(ValueError, match="only_a"):
        mcnemar_exact(-1, 3)


def _group(statuses, model, true_classes=None):
    return [
        case_record(i, status=s, model=model, true_class=(true_classes or {}).get(i, 3))
        for i, s in enumerate(statuses)
    ]


def test_counts_are_the_cases_each_model_holds_case_by_case():
    a = _group(["failed", "failed", "success", "skipped_clean_wrong", "budget_exhausted"], "a")
    b = _group(["failed", "success", "failed", "failed", "skipped_clean_wrong"], "b")
    result = paired_robustness(a, b)
    assert (result["both"], result["only_a"], result["only_b"], result["neither"]) == (1, 2, 2, 0)
    assert result["cases"] == 5
    assert (result["a"]["count"], result["b"]["count"]) == (3, 3)
    assert result["difference"] == 0.0 and result["p_value"] == 1.0


def test_a_model_compared_with_itself_differs_nowhere():
    a = _group(["failed", "success", "failed", "skipped_clean_wrong"] * 25, "a")
    result = paired_robustness(a, list(reversed(a)))
    assert result["only_a"] == result["only_b"] == 0 and result["p_value"] == 1.0
    assert result["a"] == result["b"] and result["a"]["count"] == 50


def test_one_sided_disagreement_gives_the_binomial_tail():
    a = _group(["failed"] * 10, "a")
    b = _group(["success"] * 10, "b")
    result = paired_robustness(a, b)
    assert result["only_a"] == 10 and result["difference"] == 1.0
    assert result["p_value"] == pytest.approx(2 / 2**10)


def test_records_of_other_cases_or_labels_are_refused():
    a = _group(["failed"] * 3, "a")
    with pytest.raises(ValueError, match="same cases"):
        paired_robustness(a, _group(["failed"] * 4, "b"))
    with pytest.raises(ValueError, match="true labels"):
        paired_robustness(a, _group(["failed"] * 3, "b", true_classes={1: 5}))
    with pytest.raises(ValueError, match="records_b is empty"):
        paired_robustness(a, [])
    with pytest.raises(ValueError, match="records_a mixes 2"):
        paired_robustness(a + [case_record(9, model="c")], a)
    with pytest.raises(ValueError, match="records_a holds 4 records for 3 case ids"):
        paired_robustness(a + [a[0]], a)
