"""`advjax.evaluation.autoattack(version="fast")`: the standard version's verdicts for fewer model
passes, and escalation to the standard members where gradients may be masked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tanh_mlp

from advjax.evaluation import autoattack
from advjax.evaluation._autoattack import undetected_probability

EPS = 0.02


@pytest.fixture(scope="module")
def model():
    logits_fn = tanh_mlp()
    x = jax.random.uniform(jax.random.key(1), (160, 4, 4, 3))
    return logits_fn, np.asarray(x), np.asarray(jnp.argmax(logits_fn(x), -1))


def _total(result) -> int:
    return sum(p["forward"] + p["backward"] for p in result.passes)


@pytest.mark.slow
def test_fast_gives_the_standard_verdicts_for_fewer_passes_on_a_plain_model(model):
    logits_fn, x, y = model
    standard = autoattack(logits_fn, x, y, EPS, key=jax.random.key(0))
    fast = autoattack(logits_fn, x, y, EPS, key=jax.random.key(0), version="fast")
    assert 0 < standard.robust.sum() < len(y), "the budget must leave some cases either way"
    np.testing.assert_array_equal(fast.robust, standard.robust)
    assert fast.schedule.startswith("fast:"), fast.schedule
    assert {c.name: c.passed for c in fast.checks}["masking_probe"]
    assert _total(fast) < _total(standard) / 2, (_total(fast), _total(standard))
    labels = [p["member"] for p in fast.passes]
    assert labels == ["apgd-ce", "malt", "fab-t (probe)", "square (probe)"]


@pytest.mark.slow
def test_a_gradient_masked_model_escalates_to_the_standard_members_and_their_verdicts(model):
    """Logits of a quantised input: the input gradient is zero everywhere, so APGD-CE and
    MALT break nothing; the probe (Square) and the zero-gradient check see it, and the
    evaluation escalates to APGD-T, FAB-T and Square on every case left robust, ending
    with the standard version's verdicts."""
    logits_fn, x, y = model
    masked = lambda z: logits_fn(jnp.round(z * 8) / 8)  # noqa: E731
    y = np.asarray(jnp.argmax(masked(jnp.asarray(x)), -1))
    standard = autoattack(masked, x, y, 4 * EPS, key=jax.random.key(0))
    fast = autoattack(masked, x, y, 4 * EPS, key=jax.random.key(0), version="fast")
    assert standard.robust.sum() < len(y), "Square must break something on the masked model"
    assert fast.schedule.startswith("fast, escalated"), fast.schedule
    np.testing.assert_array_equal(fast.robust, standard.robust)
    checks = {c.name: c.passed for c in fast.checks}
    assert checks["zero_input_gradients"] is False
    assert [m.name for m in fast.members] == ["apgd-ce", "malt", "apgd-t", "fab-t", "square"]


def test_the_probe_misses_a_masking_rate_with_at_most_the_stated_probability():
    """(1 - r)^m bounds the share of random samples of m robust cases (drawn without
    replacement), among which a share r is breakable, that hold none of the breakable
    ones: checked against a simulation."""
    rng = np.random.default_rng(0)
    robust, breakable, m = 1000, 30, 100
    misses = np.mean([not (rng.permutation(robust)[:m] < breakable).any() for _ in range(4000)])
    bound = undetected_probability(breakable / robust, m)
    assert misses <= bound + 0.01 and bound - misses < 0.015, (misses, bound)
    assert undetected_probability(0.1, 32) < 0.035


def test_the_fast_version_has_no_single_member_list():
    from advjax.evaluation.engine import resolve_members

    with pytest.raises(ValueError, match="version='fast' has no single member list"):
        resolve_members("fast", None, "linf")
