"""Attack campaigns into record logs: resume, replay, equivalence with the batched attack."""

import dataclasses
import json

import jax
import numpy as np
import pytest
from conftest import make_linear_batch, make_linear_logits_fn

from advjax.attacks import pgd
from advjax.data import EvalCases
from advjax.evaluation import (
    AttackSpec,
    Model,
    ThreatModel,
    aggregate_records,
    find_group,
    format_eps,
    replay_record,
    run_attack,
)
from advjax.evaluation._early_stop import chunk_bounds
from advjax.evaluation.engine import case_keys, key_from_path
from advjax.records import RecordLog, read_records
from advjax_train import eval_logits_fn

EPS = (0.0, 2 / 255, 8 / 255)
TM = ThreatModel(eps=EPS, steps=10, restarts=3)
PGD = AttackSpec(name="pgd", method="pgd", eps=EPS, steps=10, restarts=3, batch_size=64)
FGSM = AttackSpec(name="fgsm", method="fgsm", eps=EPS, batch_size=64)
ROOT = [7, "attack"]


def _run(log, spec, logits_fn, x, y, ids=None, **kw):
    if "source_fn" in kw:
        kw["source"] = Model("surrogate", kw.pop("source_fn"), kw.pop("source_hash", None))
    return run_attack(
        log,
        Model("m", logits_fn, kw.pop("model_hash", "h0")),
        EvalCases(x, y, np.arange(len(y)) if ids is None else ids),
        spec,
        threat_model=kw.pop("threat_model", TM),
        key=jax.random.key(ROOT[0]),
        stream=ROOT[1],
        show_progress=False,
        log_line=lambda _: None,
        **kw,
    )


@pytest.fixture(scope="module")
def cnn(trained_model):
    model, variables, x, y = trained_model
    return eval_logits_fn(model, variables), np.asarray(x[:100]), np.asarray(y[:100])


@pytest.fixture(scope="module")
def cnn_records(cnn, tmp_path_factory):
    """Records of FGSM and PGD (3 restarts, compacting the unbroken cases every 3 steps)."""
    logits_fn, x, y = cnn
    path = tmp_path_factory.mktemp("campaign") / "records.jsonl"
    log = RecordLog(path)
    _run(log, FGSM, logits_fn, x, y)
    _run(log, dataclasses.replace(PGD, chunk_steps=3), logits_fn, x, y)
    return path


def test_one_record_per_case_attack_and_eps_with_every_field(cnn, cnn_records):
    records = read_records(cnn_records)
    _, x, y = cnn
    assert len(records) == 2 * len(EPS) * len(y)
    assert len({r.key for r in records}) == len(records)
    for r in records:
        assert r.key_path[:2] == tuple(ROOT) and r.key_path[-1] == r.case_id
        assert r.linf <= r.eps + 1e-6 and r.threat_model_hash == TM.digest()
        assert 0 <= r.queries <= (PGD.max_queries() if r.attack == "pgd" else 1)
        if r.attack == "pgd" and r.first_break_restart is not None:
            assert r.queries == PGD.steps * r.first_break_restart + r.first_break_step


@pytest.mark.parametrize("eps", [0.0, 2 / 255])
def test_early_stopped_restarts_equal_every_step_of_every_restart_at_once(cnn, cnn_records, eps):
    """Stopping broken cases between chunks of steps and running restarts one by one over
    the unbroken cases decides every case as the vmapped full search does: same prediction,
    same first breaking restart and step, and an unbroken case is charged every query (at
    eps 0, where one evaluation decides, too)."""
    logits_fn, x, y = cnn
    keys = case_keys(key_from_path([*ROOT, "m", "pgd", format_eps(eps)]), np.arange(len(y)))
    result = pgd(logits_fn, x, y, eps, key=keys, steps=PGD.steps, restarts=PGD.restarts)
    pred = np.asarray(jax.numpy.argmax(logits_fn(result.x_adv), -1))
    broken = np.asarray(result.broken_step)
    records = {
        r.case_id: r for r in read_records(cnn_records) if r.attack == "pgd" and r.eps == eps
    }
    assert [records[i].adv_pred for i in range(len(y))] == pred.tolist()
    for i in range(len(y)):
        hit = np.flatnonzero(broken[:, i] >= 0)
        expected = (int(broken[hit[0], i]), int(hit[0])) if len(hit) else (None, None)
        assert (records[i].first_break_step, records[i].first_break_restart) == expected
        if not len(hit):
            assert records[i].queries == PGD.max_queries()
    successes = sum(r.status == "success" for r in records.values())
    assert successes == 0 if eps == 0 else 0 < successes < len(y)


@pytest.mark.parametrize("steps, chunk", [(1, 10), (20, 10), (100, 10), (10, 3), (7, 1)])
def test_chunk_bounds_cover_every_step_once_growing_to_the_chunk_size(steps, chunk):
    bounds = chunk_bounds(steps, chunk)
    assert [lo for lo, _ in bounds] == [0] + [hi for _, hi in bounds[:-1]]
    assert bounds[-1][1] == steps
    sizes = [hi - lo for lo, hi in bounds]
    assert sizes[0] == 1 and max(sizes) <= chunk
    assert all(b == min(2 * a, chunk) for a, b in zip(sizes, sizes[1:-1]))


def test_any_record_replays_bit_exactly_alone(cnn, cnn_records):
    logits_fn, x, y = cnn
    records = read_records(cnn_records)
    chosen = []
    for status in ("success", "failed", "skipped_clean_wrong"):
        for attack in ("pgd", "fgsm"):
            chosen += [r for r in records if r.status == status and r.attack == attack][:1]
    chosen += [r for r in records if r.first_break_restart and r.first_break_restart > 0][:1]
    assert len(chosen) >= 6
    for r in chosen:
        spec = dataclasses.replace(PGD, chunk_steps=3) if r.attack == "pgd" else FGSM
        again = replay_record(
            r, threat_model=TM, spec=spec, logits_fn=logits_fn, x=x[r.case_id], y=int(y[r.case_id])
        )
        assert again.to_dict() == r.to_dict()


def test_aggregates_from_records_match_direct_counts(cnn, cnn_records):
    logits_fn, x, y = cnn
    groups = aggregate_records(read_records(cnn_records), num_classes=10)
    clean = np.asarray(jax.numpy.argmax(logits_fn(x), -1)) == y
    for attack in ("fgsm", "pgd"):
        for eps in EPS:
            g = find_group(groups, model="m", attack=attack, eps=eps)
            assert g["clean_accuracy"]["count"] == clean.sum()
            assert g["robust_accuracy"]["total"] == len(y)
        zero = find_group(groups, model="m", attack=attack, eps=0.0)
        assert zero["robust_accuracy"]["count"] == clean.sum()


def test_killed_run_resumes_without_duplicates_and_equals_uninterrupted(tmp_path):
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=40)
    spec = dataclasses.replace(PGD, batch_size=16)
    whole = RecordLog(tmp_path / "whole.jsonl")
    _run(whole, spec, logits_fn, x, y)
    part_path = tmp_path / "part.jsonl"
    part = RecordLog(part_path)
    _run(part, spec, logits_fn, x[:13], y[:13])
    with open(part_path, "ab") as f:  # a write cut short by a kill
        f.write(b'{"case_id": 13, "true_cl')
    with pytest.warns(UserWarning, match="partial last line"):
        resumed = RecordLog(part_path)
    assert resumed.dropped_bytes > 0
    written = _run(resumed, spec, logits_fn, x, y)
    assert written == (len(y) - 13) * len(EPS)
    assert _run(resumed, spec, logits_fn, x, y) == 0
    by_key = {r.key: r.to_dict() for r in read_records(tmp_path / "whole.jsonl", strict=True)}
    again = {r.key: r.to_dict() for r in read_records(part_path, strict=True)}
    assert again == by_key


def test_attack_outside_the_threat_model_or_without_one_is_refused(tmp_path):
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=4)
    log = RecordLog(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="refuses to start"):
        _run(log, FGSM, logits_fn, x, y, threat_model=None)
    for spec, match in [
        (dataclasses.replace(PGD, eps=(4 / 255,)), "eps 4/255 not declared"),
        (dataclasses.replace(PGD, steps=11), "steps 11 > declared 10"),
        (dataclasses.replace(PGD, restarts=4), "restarts 4 > declared 3"),
    ]:
        with pytest.raises(ValueError, match=match):
            _run(log, spec, logits_fn, x, y)
    assert len(log) == 0


def test_records_of_another_model_version_are_refused_naming_both_hashes_and_nothing_is_appended(
    tmp_path,
):
    """Once a log holds records of model "m" (hash h0), a run of "m" with another model hash
    (under the same or another attack), another attack config or another threat model is
    refused before any work: the message names the file, the hash that differs, the
    records' value and the given one, and the file is left byte for byte as it was."""
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=4)
    path = tmp_path / "r.jsonl"
    log = RecordLog(path)
    _run(log, FGSM, logits_fn, x, y)
    before, count = path.read_bytes(), len(log)
    fgsm_2 = dataclasses.replace(FGSM, eps=EPS[1:])
    tm_2 = ThreatModel(eps=EPS, steps=20, restarts=3)
    assert fgsm_2.config_hash() != FGSM.config_hash() and tm_2.digest() != TM.digest()
    cases = [
        (FGSM, {"model_hash": "h1"}, "model_hash", "h0", "h1"),
        (PGD, {"model_hash": "h1"}, "model_hash", "h0", "h1"),
        (fgsm_2, {}, "attack_config_hash", FGSM.config_hash(), fgsm_2.config_hash()),
        (FGSM, {"threat_model": tm_2}, "threat_model_hash", TM.digest(), tm_2.digest()),
    ]
    for spec, kw, field, theirs, given in cases:
        with pytest.raises(ValueError) as info:
            _run(log, spec, logits_fn, x, y, **kw)
        message = str(info.value)
        assert str(path) in message, message
        assert f"with {field} {theirs}; the given {field} is {given}" in message, message
        assert path.read_bytes() == before and len(log) == count
        assert len(RecordLog(path)) == count
    assert _run(log, PGD, logits_fn, x, y) == 4 * len(PGD.eps)


def test_transfer_attack_crafts_on_the_surrogate_and_scores_the_target(tmp_path):
    target, surrogate = make_linear_logits_fn(0), make_linear_logits_fn(1)
    x, y = make_linear_batch(n=32)
    spec = AttackSpec(
        name="transfer_pgd", method="pgd", eps=(8 / 255,), steps=10, batch_size=16, source="s"
    )
    log = RecordLog(tmp_path / "r.jsonl")
    _run(log, spec, target, x, y, source_fn=surrogate, source_hash="hs")
    records = read_records(tmp_path / "r.jsonl")
    assert len(records) == 32 and all(r.first_break_step is None for r in records)
    keys = case_keys(key_from_path([*ROOT, "m", "transfer_pgd", "8/255"]), np.arange(32))
    x_adv = pgd(surrogate, x, y, 8 / 255, key=keys, steps=10).x_adv
    pred = np.asarray(jax.numpy.argmax(target(x_adv), -1))
    assert [r.adv_pred for r in sorted(records, key=lambda r: r.case_id)] == pred.tolist()
    assert json.loads(records[0].to_json())["attack_config_hash"] == spec.config_hash("hs")


@pytest.mark.parametrize(
    "method,steps,restarts",
    [
        ("apgd-ce", 8, 2),
        ("apgd-dlr", 8, 1),
        ("apgd-t", 4, 1),
        ("square", 60, 1),
        ("fmn", 20, 1),
        ("fab-t", 5, 1),
    ],
)
def test_every_method_writes_valid_records_that_replay_bit_exactly(
    tmp_path, method, steps, restarts
):
    """APGD-CE/DLR/T, Square, FMN and FAB-T through the campaign: one valid record per case,
    queries within the worst case (square: its query budget), and each record replays alone."""
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=24)
    y = np.asarray(jax.numpy.argmax(logits_fn(x), -1)).astype(np.int32)  # all clean-correct
    y[:3] = (y[:3] + 1) % 10  # and three clean-wrong
    spec = AttackSpec(
        name=method,
        method=method,
        eps=(4 / 255,),
        steps=steps,
        restarts=restarts,
        batch_size=16,
        targets=3,
    )
    tm = ThreatModel(eps=(4 / 255,), steps=100, restarts=3, queries=1000)
    log = RecordLog(tmp_path / "r.jsonl")
    _run(log, spec, logits_fn, x, y, threat_model=tm)
    records = sorted(read_records(tmp_path / "r.jsonl"), key=lambda r: r.case_id)
    assert len(records) == 24
    assert [r.status for r in records[:3]] == ["skipped_clean_wrong"] * 3
    assert all(r.queries <= spec.max_queries() and r.linf <= 4 / 255 + 1e-6 for r in records)
    statuses = {r.status for r in records[3:]}
    assert "success" in statuses
    if method == "square":
        assert statuses <= {"success", "budget_exhausted"}
        assert all(r.queries == steps for r in records if r.status == "budget_exhausted")
    else:
        assert "budget_exhausted" not in statuses
    for r in records[::5]:
        again = replay_record(
            r, threat_model=tm, spec=spec, logits_fn=logits_fn, x=x[r.case_id], y=int(y[r.case_id])
        )
        assert again.to_dict() == r.to_dict()


@pytest.mark.parametrize(
    "method,norm,loss,eps",
    [
        ("pgd", "l2", "ce", 0.5),
        ("fgsm", "l2", "ce", 0.5),
        ("pgd", "linf", "margin", 4 / 255),
        ("pgd-t", "linf", "ce", 4 / 255),
        ("pgd-t", "l2", "margin", 0.5),
        ("apgd-ce", "l2", "ce", 0.5),
        ("square", "l2", "ce", 0.5),
        ("fmn", "l2", "ce", 0.5),
    ],
)
def test_l2_margin_and_targeted_variants_write_records_that_replay_bit_exactly(
    tmp_path, method, norm, loss, eps
):
    """The L2, margin-loss and targeted variants run through the campaign inside a threat
    model of their norm: every perturbation inside the eps-ball of that norm, some cases
    broken, queries within the worst case, and each record replays alone."""
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=24)
    y = np.asarray(jax.numpy.argmax(logits_fn(x), -1)).astype(np.int32)
    steps = {"fgsm": 1, "square": 60}.get(method, 6)
    spec = AttackSpec(
        name=f"{method}_{norm}_{loss}",
        method=method,
        eps=(eps,),
        steps=steps,
        batch_size=16,
        targets=3,
        norm=norm,
        loss=loss,
        chunk_steps=4,
        p_init=0.8 if method == "square" else 0.05,
    )
    queries = 100 if method == "square" else None
    tm = ThreatModel(eps=(eps,), steps=100, restarts=3, norm=norm, queries=queries)
    log = RecordLog(tmp_path / "r.jsonl")
    _run(log, spec, logits_fn, x, y, threat_model=tm)
    records = sorted(read_records(tmp_path / "r.jsonl"), key=lambda r: r.case_id)
    assert len(records) == 24 and any(r.status == "success" for r in records)
    size = [r.l2 if norm == "l2" else r.linf for r in records]
    assert max(size) <= eps + 1e-5 and all(r.queries <= spec.max_queries() for r in records)
    exhausted = {"budget_exhausted"} if method == "square" else set()
    assert {r.status for r in records} <= {"success", "failed"} | exhausted
    for r in records[::4]:
        again = replay_record(
            r, threat_model=tm, spec=spec, logits_fn=logits_fn, x=x[r.case_id], y=int(y[r.case_id])
        )
        assert again.to_dict() == r.to_dict()


def test_attack_of_another_norm_than_the_threat_model_is_refused(tmp_path):
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=4)
    spec = AttackSpec(name="pgd_l2", method="pgd", eps=(0.5,), steps=4, norm="l2")
    with pytest.raises(ValueError, match="norm l2 but the threat model declares linf"):
        _run(
            RecordLog(tmp_path / "r.jsonl"),
            spec,
            logits_fn,
            x,
            y,
            threat_model=ThreatModel(eps=(0.5,), steps=10),
        )


def test_default_norm_and_loss_keep_older_attack_hashes():
    """Adding the norm and loss fields did not change the hash of an L-inf CE attack (the
    committed records stay valid)."""
    assert PGD.config_hash() == dataclasses.replace(PGD, norm="linf", loss="ce").config_hash()
    assert PGD.config_hash() != dataclasses.replace(PGD, loss="margin").config_hash()


def test_score_based_attack_needs_a_declared_query_budget(tmp_path):
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=4)
    spec = AttackSpec(name="square", method="square", eps=(8 / 255,), steps=10)
    with pytest.raises(ValueError, match="query budget"):
        _run(RecordLog(tmp_path / "r.jsonl"), spec, logits_fn, x, y)
