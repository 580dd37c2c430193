"""Validity and denominators: an invalid case is never a model failure, statuses follow the
declared rule order, derived records at smaller caps match direct re-runs, the same seed
gives the same records, and records round-trip through JSON."""

import json

import pytest

from advjax_text import (
    TextCaseRecord,
    ValidityRule,
    check_validity,
    chrf_similarity,
    derive_record,
    make_record,
    status_of,
    summarise,
)
from advjax_text.classify import Edit, textfooler
from tests.text.test_clf_attack import ANTONYMS, NEIGHBORS, SENTENCES, lexicon_logits

RULE = ValidityRule(max_share=0.5, chrf_floor=0.2)


def judge(original, perturbed, edits, max_share):
    rule = ValidityRule(max_share=max_share, chrf_floor=RULE.chrf_floor)
    return check_validity(
        original,
        perturbed,
        edits,
        rule,
        antonyms=ANTONYMS,
        allowed=lambda o, n: n in NEIGHBORS.get(o, ()),
    )


def record_for(case_id, sentence, *, max_queries=60, max_share=0.5, seed=0):
    r = textfooler(
        lexicon_logits,
        sentence,
        1,
        neighbors=NEIGHBORS,
        antonyms=ANTONYMS,
        max_queries=max_queries,
        max_share=max_share,
    )
    v = judge(sentence, r.perturbed, r.edits, max_share)
    return make_record(
        r,
        v,
        case_id=case_id,
        label=1,
        seed=seed,
        key_path=(seed, case_id),
        model="lexicon",
        model_version="v0",
        attack="textfooler",
        attack_config={"max_queries": max_queries},
        max_share=max_share,
    )


def test_status_rule_order():
    assert status_of("clean_wrong", False, False) == "skipped_clean_wrong"
    assert status_of("flipped", True, False) == "invalid"  # invalid beats success
    assert status_of("flipped", True, True) == "success"
    assert status_of("query_cap", False, True) == "budget_exhausted"
    assert status_of("share_cap", False, True) == "failed"
    assert status_of("exhausted", False, True) == "failed"
    # only a flipped sentence can be invalid: an unbroken case stays a model success
    assert status_of("share_cap", False, False) == "failed"
    assert status_of("query_cap", False, False) == "budget_exhausted"


def test_validity_flags_antonyms_share_neighbours_and_chrf():
    ok = check_validity(
        "a good film", "a nice film", [Edit(1, "good", "nice", 4)], RULE, antonyms=ANTONYMS
    )
    assert ok.valid and ok.changed == 1 and 0.2 < ok.chrf < 1
    bad = check_validity(
        "a good film", "a bad film", [Edit(1, "good", "bad", 4)], RULE, antonyms=ANTONYMS
    )
    assert not bad.valid and "antonym:good->bad" in bad.reasons
    many = check_validity(
        "a good film",
        "the nice movie",
        [Edit(0, "a", "the", 2), Edit(1, "good", "nice", 3), Edit(2, "film", "movie", 4)],
        RULE,
        allowed=lambda o, n: n in NEIGHBORS.get(o, ()),
    )
    assert "share" in many.reasons and "not_allowed:a->the" in many.reasons
    low = check_validity(
        "a good film",
        "a nice film",
        [Edit(1, "good", "nice", 4)],
        ValidityRule(max_share=1.0, chrf_floor=0.99),
    )
    assert low.reasons == ("chrf",)
    lie = check_validity("a good film", "a fine film", [Edit(1, "good", "nice", 4)], RULE)
    assert "inconsistent" in lie.reasons
    assert chrf_similarity("a good film", "a good film") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="chrf_floor"):
        ValidityRule(max_share=0.2, chrf_floor=60)
    with pytest.raises(ValueError, match="max_share"):
        ValidityRule(max_share=0.0, chrf_floor=0.5)


def _record(status, clean_pred=1, adv_pred=1, case_id=0):
    return TextCaseRecord(
        case_id=case_id,
        seed=0,
        key_path=(0, case_id),
        model="m",
        model_version="v",
        attack="a",
        attack_config={},
        attack_config_hash="h",
        max_queries=10,
        max_share=0.2,
        true_class=1,
        clean_pred=clean_pred,
        adv_pred=adv_pred,
        status=status,
        stop="flipped",
        valid=status != "invalid",
        validity_reasons=(),
        chrf=0.9,
        changed_words=1,
        n_words=10,
        max_changes=2,
        queries=5,
        first_flip_query=None,
        edits=(),
        original="x",
        perturbed="x",
    )


def test_invalid_cases_never_count_as_model_failures():
    records = (
        [_record("skipped_clean_wrong", clean_pred=0, adv_pred=0, case_id=0)]
        + [_record("success", adv_pred=0, case_id=i) for i in range(1, 3)]
        + [_record("failed", case_id=i) for i in range(3, 6)]
        + [_record("budget_exhausted", case_id=6)]
        + [_record("invalid", adv_pred=0, case_id=i) for i in range(7, 11)]
    )
    s = summarise(records)
    assert s["clean_accuracy"]["count"] == 10 and s["clean_accuracy"]["total"] == 11
    assert (s["attack_success_rate"]["count"], s["attack_success_rate"]["total"]) == (2, 6)
    assert (s["robust_accuracy"]["count"], s["robust_accuracy"]["total"]) == (4, 7)
    assert s["invalid"] == 4 and s["budget_exhausted"] == 1
    # turning the invalid cases into anything valid moves the denominators, never silently
    lo, hi = s["robust_accuracy"]["ci95"]
    assert lo < 4 / 7 < hi


def test_records_reject_contradictions():
    with pytest.raises(ValueError, match="contradicts"):
        _record("success", adv_pred=1)
    with pytest.raises(ValueError, match="status"):
        _record("broken")


def test_same_seed_same_records_and_json_round_trip():
    first = [record_for(i, s) for i, s in enumerate(SENTENCES)]
    second = [record_for(i, s) for i, s in enumerate(SENTENCES)]
    assert [r.to_json() for r in first] == [r.to_json() for r in second]
    for r in first:
        assert TextCaseRecord.from_dict(json.loads(r.to_json())) == r
    with pytest.raises(ValueError, match="missing"):
        TextCaseRecord.from_dict({"case_id": 0})


@pytest.mark.parametrize("case_id", range(len(SENTENCES)))
def test_derived_records_equal_direct_records(case_id):
    full = record_for(case_id, SENTENCES[case_id], max_queries=60, max_share=1.0)
    for q, s in ((2, 1.0), (5, 0.5), (9, 0.3), (60, 0.2), (12, 0.34)):
        derived = derive_record(full, max_queries=q, max_share=s, judge=judge)
        direct = record_for(case_id, SENTENCES[case_id], max_queries=q, max_share=s)
        assert (derived.status, derived.queries, derived.edits) == (
            direct.status,
            direct.queries,
            direct.edits,
        ), (q, s)
