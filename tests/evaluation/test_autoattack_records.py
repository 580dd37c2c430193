"""`advjax.evaluation.run_autoattack`: AutoAttack into an append-only record log."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax.data import EvalCases
from advjax.evaluation import AUTOATTACK, AutoAttackConfig, Model, autoattack, run_autoattack
from advjax.evaluation._autoattack_records import member_hash, member_passes
from advjax.records import RecordLog
from tests.evaluation.test_autoattack import EPS, STANDARD, _cases, _members, _mlp


@pytest.fixture(scope="module")
def case():
    logits_fn = _mlp()
    x, y = _cases(logits_fn)
    return logits_fn, x, y, _members(*STANDARD)


def _run(log, case, **kwargs):
    logits_fn, x, y, members = case
    config = AutoAttackConfig(eps=EPS, members=kwargs.pop("members", members), batch_size=8)
    return run_autoattack(
        log, Model("mlp", logits_fn, kwargs.pop("model_hash", "h")),
        EvalCases(x, y, kwargs.pop("case_ids", None)), config, key=jax.random.key(3), **kwargs,
    )  # fmt: skip


def test_records_agree_with_the_pure_function(tmp_path, case):
    logits_fn, x, y, members = case
    derived = _run(RecordLog(tmp_path / "r.jsonl"), case)
    pure = autoattack(
        logits_fn, x, y, EPS, key=jax.random.key(3), members=members, batch_size=8, checks=False
    )
    assert [r.case_id for r in derived] == list(range(len(y)))
    assert {r.attack for r in derived} == {AUTOATTACK}
    robust = np.array([r.status in ("failed", "budget_exhausted") for r in derived])
    np.testing.assert_array_equal(robust, pure.robust)
    np.testing.assert_array_equal([r.queries for r in derived], pure.queries)
    broken = np.array([r.status == "success" for r in derived])
    assert (np.array([r.adv_pred for r in derived])[broken] != y[broken]).all()


class Killed(Exception):
    pass


@pytest.mark.slow
def test_a_kill_at_any_moment_resumes_without_duplicates_or_lost_cases(tmp_path, case):
    """Killed after 1, 2 or 4 appends, the rerun gives the uninterrupted run's records."""
    whole = _run(RecordLog(tmp_path / "whole.jsonl"), case)
    for after in (1, 2, 4):
        path = tmp_path / f"killed{after}.jsonl"
        log = RecordLog(path)
        appended, real = [0], log.append

        def dying(records, **kwargs):
            if appended[0] == after:
                raise Killed
            appended[0] += 1
            return real(records, **kwargs)

        log.append = dying
        with pytest.raises(Killed):
            _run(log, case)
        resumed_log = RecordLog(path)
        resumed = _run(resumed_log, case)
        assert resumed == whole
        keys = [(r.model, r.attack, r.eps, r.case_id) for r in resumed_log.read()]
        assert len(keys) == len(set(keys))
        again = RecordLog(path)
        assert _run(again, case) == whole
        assert len(again.read()) == len(resumed_log.read()), "a finished run appends nothing"


def test_records_of_another_model_version_are_refused_naming_both_hashes_and_nothing_is_appended(
    tmp_path, case
):
    """A changed checkpoint (another model hash) or other member budgets (another attack
    config hash) in the same log are refused before any work: the message names the file,
    the hash that differs, the records' value and the given one, and nothing is appended."""
    logits_fn, x, y, members = case
    path = tmp_path / "r.jsonl"
    log = RecordLog(path)
    _run(log, case)
    before = path.read_bytes()
    longer = [dataclasses.replace(m, steps=2 * m.steps) for m in members]
    theirs, given = member_hash(members[0], "linf"), member_hash(longer[0], "linf")
    for kwargs, expected in [
        (dict(model_hash="changed", members=members), "with model_hash h; the given model_hash is changed"),
        (dict(model_hash="h", members=longer), f"with attack_config_hash {theirs}; the given attack_config_hash is {given}"),
    ]:  # fmt: skip
        with pytest.raises(ValueError) as info:
            _run(log, case, **kwargs)
        assert str(path) in str(info.value) and expected in str(info.value), str(info.value)
        assert path.read_bytes() == before


def test_the_last_run_of_a_member_writes_its_robust_cases_batch_by_batch(tmp_path, case):
    """A member's final 'failed' verdicts arrive after each batch of its last run, not once at
    its end, so a kill during a long single-run member (Square) keeps the finished batches;
    the rerun attacks only the cases still undecided and ends with the uninterrupted records."""
    logits_fn, x, y, members = case
    last = members[-1].name
    log = RecordLog(tmp_path / "r.jsonl")
    appends, real = [], log.append

    def spy(records, **kwargs):
        appends.append([r for r in records if r.attack == last and r.status == "failed"])
        return real(records, **kwargs)

    log.append = spy
    whole = _run(log, case)
    failed = [batch for batch in appends if batch]
    assert len(failed) >= 2, "the last member's robust cases must be written per batch"
    assert all(len(batch) <= 8 for batch in failed)
    robust = sum(map(len, failed))

    path = tmp_path / "killed.jsonl"
    killed = RecordLog(path)
    real_killed = killed.append

    def dying(records, **kwargs):
        real_killed(records, **kwargs)
        if any(r.attack == last and r.status == "failed" for r in records):
            raise Killed

    killed.append = dying
    with pytest.raises(Killed):
        _run(killed, case)
    kept = [r for r in RecordLog(path).read() if r.attack == last and r.status == "failed"]
    assert kept == failed[0], "the finished batch of the last run survives the kill"
    left = []
    resumed = _run(
        RecordLog(path), case, on_run=lambda member, t, r, n: left.append((member.name, n))
    )
    assert resumed == whole
    assert [n for name, n in left if name == last] == [robust - len(kept)]


def test_member_records_hold_their_own_loss_and_the_result_the_worst_over_members(tmp_path, case):
    """Each member's record of a robust case holds the cross-entropy at that member's own best
    point; `autoattack`'s x_adv for the case is the highest of them (the worst case found)."""
    logits_fn, x, y, members = case
    log = RecordLog(tmp_path / "r.jsonl")
    _run(log, case)
    pure = autoattack(
        logits_fn, x, y, EPS, key=jax.random.key(3), members=members, batch_size=8, checks=False
    )
    robust = np.flatnonzero(pure.robust)
    assert len(robust)
    own = {(r.attack, r.case_id): r.final_loss for r in log.read() if r.status == "failed"}
    ce = -jax.nn.log_softmax(logits_fn(pure.x_adv))[np.arange(len(y)), y]
    per_member = np.array([[own[(m.name, int(i))] for m in members] for i in robust])
    np.testing.assert_allclose(np.asarray(ce)[robust], per_member.max(axis=1), rtol=1e-5)
    assert (per_member.max(axis=1) > per_member.min(axis=1)).any(), "members differ somewhere"


def test_progress_counts_each_run_s_cases_batch_by_batch_up_to_its_total(tmp_path, case):
    """`on_batch` rises within a run to the cases the run attacks; `on_run` then reports the
    cases still robust, never more than the run attacked."""
    calls, runs = [], []
    _run(
        RecordLog(tmp_path / "r.jsonl"), case,
        on_batch=lambda m, t, r, done, total: calls.append((m.name, t, r, done, total)),
        on_run=lambda m, t, r, left: runs.append((m.name, t, r, left)),
    )  # fmt: skip
    by_run: dict = {}
    for name, t, r, done, total in calls:
        by_run.setdefault((name, t, r), []).append((done, total))
    assert list(by_run) == [run[:3] for run in runs]
    for (name, t, r, left), counts in zip(runs, by_run.values(), strict=True):
        done = [d for d, _ in counts]
        total = {n for _, n in counts}
        assert len(total) == 1 and done == sorted(done) and done[-1] == total.pop() >= left
    assert any(len(counts) > 1 for counts in by_run.values()), "several batches per run"


def _masked(logits_fn):
    """Logits of the input quantised to 1/8: zero input gradient everywhere, so the fast
    version's probe and checks must escalate."""
    return lambda z: logits_fn(jnp.round(z * 8) / 8)


def _fast_case(masked: bool):
    logits_fn = _mlp()
    if masked:
        logits_fn = _masked(logits_fn)
    x, y = _cases(logits_fn, n=40)
    return logits_fn, x, y, 8 * EPS if masked else EPS


def _run_fast(log, logits_fn, x, y, eps, **kwargs):
    config = AutoAttackConfig(eps=eps, version="fast", batch_size=8)
    return run_autoattack(log, Model("mlp", logits_fn, "h"), EvalCases(x, y), config,
                          key=jax.random.key(3), **kwargs)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_fast_records_give_the_pure_functions_verdicts_queries_and_passes(
    tmp_path, small_fast, masked
):
    """The record runner's fast path takes the path `autoattack(version="fast")` takes (no
    escalation on the plain model; on the gradient-masked one the probe or the checks
    escalate), with the same verdict, queries and model passes per member for every case;
    the probe's records carry their own names."""
    logits_fn, x, y, eps = _fast_case(masked)
    log = RecordLog(tmp_path / "r.jsonl")
    derived = _run_fast(log, logits_fn, x, y, eps)
    pure = autoattack(logits_fn, x, y, eps, key=jax.random.key(3), version="fast", batch_size=8)
    assert pure.schedule.startswith("fast, escalated" if masked else "fast:"), pure.schedule
    robust = np.array([r.status in ("failed", "budget_exhausted") for r in derived])
    assert 0 < robust.sum() < pure.clean_correct.sum(), "some cases robust, some broken"
    np.testing.assert_array_equal(robust, pure.robust)
    np.testing.assert_array_equal([r.queries for r in derived], pure.queries)
    records = log.read()
    attacks = {r.attack for r in records}
    assert {"fab-t (probe)", "square (probe)"} <= attacks
    assert ("apgd-t" in attacks) == masked, attacks
    stages = [p["member"] for p in pure.passes]
    by_name = {m.name: m for m in (*small_fast.always, *small_fast.escalation)}
    by_name |= {f"{m.name} (probe)": m for m in small_fast.probe}
    counted = member_passes(records, [by_name[s] for s in stages], model="mlp", eps=eps,
                            classes=10, names=stages)  # fmt: skip
    assert counted == [dict(p) for p in pure.passes]


class _Dying(RecordLog):
    """A record log that raises `Killed` at its `after`-th append (a kill at that moment)."""

    def __init__(self, path, after=None):
        super().__init__(path)
        self.after, self.appends, self.attacks = after, 0, []

    def append(self, records, **kwargs):
        if self.appends == self.after:
            raise Killed
        self.appends += 1
        self.attacks.append({r.attack for r in records})
        return super().append(records, **kwargs)


@pytest.mark.slow
def test_a_fast_run_killed_in_any_phase_resumes_to_the_uninterrupted_records(tmp_path, small_fast):
    """Killed in APGD-CE / MALT, in the probe or in the escalation, then rerun: the same
    derived records as an uninterrupted run, no record twice, and a finished run appends
    nothing (the sample and the decision to escalate are read back from the records)."""
    logits_fn, x, y, eps = _fast_case(masked=True)
    whole_log = _Dying(tmp_path / "whole.jsonl")
    whole = _run_fast(whole_log, logits_fn, x, y, eps)
    total = len(whole_log.read())
    stages = ["apgd-ce", "malt", "fab-t (probe)", "square (probe)", "apgd-t", "fab-t", "square"]
    first = [next(i for i, a in enumerate(whole_log.attacks) if s in a) for s in stages]
    assert first == sorted(first), "the phases append in order"
    for after in (*first, first[-1] + 1):
        path = tmp_path / f"killed{after}.jsonl"
        with pytest.raises(Killed):
            _run_fast(_Dying(path, after), logits_fn, x, y, eps)
        resumed_log = RecordLog(path)
        assert _run_fast(resumed_log, logits_fn, x, y, eps) == whole
        keys = [(r.model, r.attack, r.eps, r.case_id) for r in resumed_log.read()]
        assert len(keys) == len(set(keys)) == total
        assert _run_fast(RecordLog(path), logits_fn, x, y, eps) == whole
        assert len(RecordLog(path).read()) == total, "a finished run appends nothing"
