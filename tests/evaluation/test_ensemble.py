"""The AutoAttack-style ensemble: members in sequence on the still-robust cases."""

import jax
import numpy as np
import pytest
from conftest import make_linear_batch, make_linear_logits_fn

from advjax.evaluation import (
    ENSEMBLE,
    ROBUST_STATUSES,
    AttackSpec,
    ThreatModel,
    aggregate_records,
    ensemble_records,
    find_group,
    run_ensemble,
)
from advjax.io import RecordLog, read_records

EPS = 4 / 255
TM = ThreatModel(eps=(EPS,), steps=20, restarts=1, queries=200)
MEMBERS = [
    AttackSpec(name="fgsm", method="fgsm", eps=(EPS,), batch_size=16),
    AttackSpec(name="apgd_ce", method="apgd-ce", eps=(EPS,), steps=10, batch_size=16),
    AttackSpec(name="square", method="square", eps=(EPS,), steps=200, batch_size=16),
]


def _run(path, members=MEMBERS):
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=40)
    y = np.where(np.arange(40) < 34, np.asarray(jax.numpy.argmax(logits_fn(x), -1)), y)
    log = RecordLog(path)
    derived = run_ensemble(
        log,
        members,
        eps=EPS,
        x=x,
        y=y.astype(np.int32),
        case_ids=np.arange(40),
        threat_model=TM,
        model="m",
        model_hash="h",
        logits_fn=logits_fn,
        root_path=[0, "e"],
        show_progress=False,
        log_line=lambda _: None,
    )
    log.append(derived, skip_existing=True)
    return read_records(path)


def test_each_member_attacks_only_the_cases_every_earlier_member_left_robust(tmp_path):
    records = _run(tmp_path / "r.jsonl")
    by = {m.name: {r.case_id: r for r in records if r.attack == m.name} for m in MEMBERS}
    assert len(by["fgsm"]) == 40
    for earlier, later in zip(MEMBERS, MEMBERS[1:]):
        robust = {c for c, r in by[earlier.name].items() if r.status in ROBUST_STATUSES}
        assert set(by[later.name]) == robust
    assert len(by["square"]) <= len(by["apgd_ce"]) < 40  # FGSM is near-optimal on a linear model


def test_ensemble_is_never_weaker_than_any_member_and_sums_queries(tmp_path):
    records = _run(tmp_path / "r.jsonl")
    groups = aggregate_records(records)
    ens = find_group(groups, model="m", attack=ENSEMBLE, eps=EPS)
    assert ens["cases"] == 40
    for m in MEMBERS:
        member = find_group(groups, model="m", attack=m.name, eps=EPS)
        assert ens["robust_accuracy"]["count"] <= member["robust_accuracy"]["count"]
    robust_last = find_group(groups, model="m", attack="square", eps=EPS)
    assert ens["robust_accuracy"]["count"] == robust_last["robust_accuracy"]["count"]
    derived = {r.case_id: r for r in records if r.attack == ENSEMBLE}
    for case, r in derived.items():
        ran = [x for x in records if x.case_id == case and x.attack != ENSEMBLE]
        assert r.queries == sum(x.queries for x in ran)


def test_rerun_resumes_without_duplicates_or_new_records(tmp_path):
    first = _run(tmp_path / "r.jsonl")
    again = _run(tmp_path / "r.jsonl")
    assert [r.to_dict() for r in again] == [r.to_dict() for r in first]


def test_inconsistent_member_records_are_refused(tmp_path):
    records = _run(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="first member"):
        ensemble_records(records, MEMBERS[1:], model="m", eps=EPS, case_ids=range(40))
