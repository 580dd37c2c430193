"""`advjax.evaluation.run_autoattack`: AutoAttack into an append-only record log."""

import jax
import numpy as np
import pytest

from advjax.evaluation import AUTOATTACK, autoattack, run_autoattack
from advjax.io import RecordLog
from tests.evaluation.test_autoattack import EPS, STANDARD, _cases, _members, _mlp


@pytest.fixture(scope="module")
def case():
    logits_fn = _mlp()
    x, y = _cases(logits_fn)
    return logits_fn, x, y, _members(*STANDARD)


def _run(log, case, **kwargs):
    logits_fn, x, y, members = case
    return run_autoattack(
        log, logits_fn, x, y, EPS, seed=3, model="mlp", model_hash="h", members=members,
        batch_size=8, **kwargs,
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


def test_records_of_another_model_or_budget_are_refused_not_mixed(tmp_path, case):
    """A changed checkpoint (another model hash) or other member budgets in the same log
    are refused before any work, naming the file."""
    logits_fn, x, y, members = case
    log = RecordLog(tmp_path / "r.jsonl")
    _run(log, case)
    with pytest.raises(ValueError, match="other .* hashes"):
        run_autoattack(log, logits_fn, x, y, EPS, seed=3, model="mlp", model_hash="changed",
                       members=members, batch_size=8)  # fmt: skip
