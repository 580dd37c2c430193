"""Properties of `square(norm="l2")` (`square_l2`): the score-based black-box Square attack in L2,
and its place as AutoAttack's fourth member for norm="l2".

The attack tests use the fixed random linear classifier of conftest on 8x8x3 images,
through one jitted wrapper (eps, x, y and key traced) so most tests share one compile.
"""

import math
from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_linear_batch, make_linear_logits_fn

import advjax
from advjax.attacks import SquareResult
from advjax.attacks._losses import per_example_margin
from advjax.attacks._square import p_schedule, square_linf
from advjax.attacks._square_l2 import eta, square_l2, square_sides_l2
from advjax.evaluation import AttackSpec, autoattack
from advjax.evaluation.engine import resolve_members

EPS = 1.0
TOL = 1e-5
KEY = jax.random.key(0)
QUERIES = 100
LOGITS_FN = make_linear_logits_fn()
attack = jax.jit(partial(square_l2, LOGITS_FN), static_argnames=("queries", "p_init"))


def _linear_setup(n: int = 16, seed: int = 0):
    """(x as numpy float32, y = clean prediction of LOGITS_FN, so all start correct)."""
    x, _ = make_linear_batch(seed=seed, n=n)
    return x, np.asarray(jnp.argmax(LOGITS_FN(jnp.asarray(x)), -1), np.int32)


def _l2(delta) -> np.ndarray:
    delta = np.asarray(delta, np.float64)
    return np.sqrt(np.sum(delta.reshape(len(delta), -1) ** 2, axis=1))


def _assert_in_ball(x_adv, x, eps):
    x_adv, x = np.asarray(x_adv), np.asarray(x)
    assert x_adv.shape == x.shape and x_adv.dtype == x.dtype
    assert _l2(x_adv - x).max() <= eps + TOL
    assert x_adv.min() >= 0.0 and x_adv.max() <= 1.0


def _pred_wrong(logits_fn, x, y) -> np.ndarray:
    return np.asarray(jnp.argmax(logits_fn(jnp.asarray(x)), -1) != jnp.asarray(y))


# ---------------------------------------------------------------------------
# The L2 ball, eps = 0, success and query bookkeeping.


@pytest.mark.parametrize("eps", [0.1, EPS, 3.0])
def test_output_stays_in_the_l2_ball_and_the_unit_box_and_loss_is_margin_at_x_adv(eps):
    x, y = _linear_setup()
    result = attack(x, y, eps, key=KEY, queries=QUERIES)
    _assert_in_ball(result.x_adv, x, eps)
    expected = -per_example_margin(LOGITS_FN(result.x_adv), jnp.asarray(y))
    np.testing.assert_allclose(result.loss, expected, atol=1e-5)


def test_eps_zero_leaves_the_inputs_unchanged_and_never_succeeds():
    x, y = _linear_setup()
    result = attack(x, y, 0.0, key=KEY, queries=QUERIES)
    np.testing.assert_array_equal(np.asarray(result.x_adv), x)
    assert not np.asarray(result.success).any()
    np.testing.assert_array_equal(result.queries_used, QUERIES)


def test_queries_stay_within_the_budget_and_success_is_misclassification():
    """queries_used in [1, budget], unbroken cases spend the whole budget, broken cases
    are misclassified at x_adv, and a case wrong on its clean input costs one query."""
    x, y = _linear_setup()
    y = y.copy()
    y[:2] = (y[:2] + 1) % 10  # two cases misclassified before the attack
    result = attack(x, y, EPS, key=KEY, queries=QUERIES)
    used, success = np.asarray(result.queries_used), np.asarray(result.success)
    assert isinstance(result, SquareResult) and result.queries_used.dtype == jnp.int32
    assert used.min() >= 1 and used.max() <= QUERIES
    np.testing.assert_array_equal(success, _pred_wrong(LOGITS_FN, result.x_adv, y))
    np.testing.assert_array_equal(result.budget_exhausted, ~success & (used == QUERIES))
    np.testing.assert_array_equal(used[~success], QUERIES)
    np.testing.assert_array_equal(used[:2], 1)
    np.testing.assert_array_equal(np.asarray(result.x_adv)[:2], x[:2])
    assert 2 < success.sum() < len(y), "some cases broke, some did not"


def test_a_broken_case_stops_querying_its_calls_equal_queries_used():
    """Attacking one case alone, queries_used equals the logits_fn calls counted on the
    host, so a case broken early stops spending queries at once."""
    calls = []

    def counting_logits_fn(z):
        jax.debug.callback(lambda: calls.append(1))
        return LOGITS_FN(z)

    run = jax.jit(lambda x, y: square_l2(counting_logits_fn, x, y, EPS, key=KEY, queries=60))
    x, y = _linear_setup(n=8)
    used = []
    for i in range(len(y)):
        calls.clear()
        result = jax.block_until_ready(run(x[i : i + 1], y[i : i + 1]))
        jax.effects_barrier()
        used.append(int(result.queries_used[0]))
        assert len(calls) == used[-1], (i, len(calls), used[-1])
    assert min(used) < 60 and max(used) == 60, used  # some broke early, some did not


def test_never_calls_the_gradient_of_logits_fn():
    @jax.custom_vjp
    def no_grad_logits_fn(z):
        return LOGITS_FN(z)

    def backward(_, g):
        raise RuntimeError("the gradient of logits_fn was requested")

    no_grad_logits_fn.defvjp(lambda z: (LOGITS_FN(z), None), backward)
    x, y = _linear_setup(n=8)
    result = square_l2(no_grad_logits_fn, x, y, EPS, key=KEY, queries=20)
    _assert_in_ball(result.x_adv, x, EPS)


# ---------------------------------------------------------------------------
# Keys, batches and jit.


def test_same_key_same_result_other_key_other_result():
    x, y = _linear_setup()
    a = attack(x, y, EPS, key=jax.random.key(1), queries=QUERIES)
    b = attack(x, y, EPS, key=jax.random.key(1), queries=QUERIES)
    c = attack(x, y, EPS, key=jax.random.key(2), queries=QUERIES)
    chex.assert_trees_all_equal(a, b)
    assert np.mean(np.asarray(a.x_adv) != np.asarray(c.x_adv)) > 0.25


def test_a_case_gives_the_same_result_alone_and_within_a_batch():
    """With one key per case, a case's x_adv, queries, success and loss are the same when
    it is attacked alone as beside other cases, in any position."""
    x, y = _linear_setup(n=8)
    keys = jax.random.split(jax.random.key(5), 8)
    order = np.array([7, 2, 5, 0, 3, 6, 1, 4])
    batch = attack(x[order], y[order], EPS, key=keys[order], queries=QUERIES)
    for case in (0, 3, 6):
        alone = attack(x[case : case + 1], y[case : case + 1], EPS, key=keys[case : case + 1],
                       queries=QUERIES)  # fmt: skip
        at = int(np.flatnonzero(order == case)[0])
        beside = jax.tree.map(lambda v, at=at: v[at : at + 1], batch)
        chex.assert_trees_all_close(alone, beside, atol=1e-6)


class JitOfTheCallerTest(chex.TestCase):
    @chex.variants(without_jit=True)
    def test_the_eager_call_equals_the_jitted_program(self):
        """square_l2 called eagerly equals its jitted program, and stays in the ball."""
        x, y = _linear_setup()
        run = self.variant(lambda x, y, eps: square_l2(LOGITS_FN, x, y, eps, key=KEY, queries=40))
        result = run(x, y, jnp.float32(EPS))
        _assert_in_ball(result.x_adv, x, EPS)
        expected = attack(x, y, EPS, key=KEY, queries=40)
        chex.assert_trees_all_close(result, expected, atol=1e-5)


# ---------------------------------------------------------------------------
# Strength, schedule and blocks.


def test_breaks_a_non_robust_linear_model_far_more_often_than_at_tiny_eps():
    x, y = _linear_setup(n=32)
    strong = attack(x, y, 1.5, key=KEY, queries=200)
    tiny = attack(x, y, 0.01, key=KEY, queries=200)
    assert np.mean(strong.success) >= 0.8
    assert np.mean(tiny.success) <= 0.1


def test_window_sides_are_odd_at_least_3_within_the_image_and_follow_p_schedule():
    sides = square_sides_l2(0.8, 5000, 32, 32)
    assert sides[0] == 29 and sides.min() == 3 and (sides % 2 == 1).all()
    assert (np.diff(sides) <= 0).all(), "windows never grow"
    p = p_schedule(0.8, np.arange(len(sides)), 5000)
    raw = np.maximum(np.round(np.sqrt(p * 32 * 32)), 3)
    np.testing.assert_array_equal(sides, raw + (raw % 2 == 0))
    assert square_sides_l2(1.0, 10, 8, 8).max() == 8  # at most the image's side


@pytest.mark.parametrize("side", [1, 2, 3, 7, 29])
def test_eta_blocks_have_unit_norm_a_positive_top_and_a_negative_bottom(side):
    block = eta(side)
    assert block.shape == (side, side)
    np.testing.assert_allclose(np.sum(block**2), 1.0)
    assert (block[: side // 2] > 0).all() and (block[side // 2 :] < 0).all()
    if side % 2:
        np.testing.assert_allclose(block[:, ::-1], block)  # odd blocks: symmetric left-right


_X, _Y = make_linear_batch(n=4)
_BAD_ARGUMENTS = {
    "negative eps": (dict(eps=-0.1), ValueError, "eps"),
    "NaN eps": (dict(eps=math.nan), ValueError, "eps"),
    "infinite eps": (dict(eps=math.inf), ValueError, "eps"),
    "queries 0": (dict(queries=0), ValueError, "queries"),
    "p_init 0": (dict(p_init=0.0), ValueError, "p_init"),
    "p_init above 1": (dict(p_init=1.5), ValueError, "p_init"),
    "int x": (dict(x=(_X * 255).astype(np.uint8)), TypeError, "dtype"),
    "x not NHWC": (dict(x=_X.reshape(4, -1)), ValueError, "NHWC"),
    "key of wrong batch size": (dict(key=jax.random.split(KEY, 3)), ValueError, "key"),
}


@pytest.mark.parametrize("case", list(_BAD_ARGUMENTS))
def test_bad_arguments_raise_naming_the_argument_before_any_work(case):
    overrides, error, fragment = _BAD_ARGUMENTS[case]
    calls = []
    args = {"x": _X, "y": _Y, "eps": EPS, "key": KEY, **overrides}
    x, y, eps = args.pop("x"), args.pop("y"), args.pop("eps")
    with pytest.raises(error, match=fragment):
        square_l2(lambda z: calls.append(1) or LOGITS_FN(z), x, y, eps, **args)
    assert not calls


# ---------------------------------------------------------------------------
# AutoAttack with norm="l2".


def test_autoattack_l2_versions_include_square():
    for version in ("standard", "plus"):
        methods = [m.method for m in resolve_members(version, None, "l2")]
        assert methods == [m.method for m in resolve_members(version, None, "linf")]
        assert "square" in methods


@pytest.mark.slow
def test_autoattack_l2_standard_lists_square_and_runs_end_to_end():
    """The standard L2 version (full budgets) on a few cases of the linear model: Square
    is its fourth member, every case stays in the L2 ball and the named checks pass."""
    x, y = _linear_setup(n=6, seed=3)
    eps = 0.2
    r = autoattack(LOGITS_FN, x, y, eps, key=KEY, norm="l2", version="standard", batch_size=8)
    assert [m.method for m in r.members] == ["apgd-ce", "apgd-t", "fab-t", "square"]
    assert [row["member"] for row in r.robust_accuracy][-1] == "square"
    _assert_in_ball(r.x_adv, x, eps)
    assert all(check.passed for check in r.checks), r.checks


def test_autoattack_l2_runs_square_on_the_cases_left_robust():
    """Square alone in an L2 AutoAttack breaks cases of the non-robust model, within the
    L2 ball, and spends its queries on the cases it attacks only."""
    x, y = _linear_setup(n=8, seed=4)
    r = autoattack(LOGITS_FN, x, y, EPS, key=KEY, norm="l2", members=[AttackSpec("square", steps=80)],
                   batch_size=8)  # fmt: skip
    assert (r.broken_by == 0).sum() >= 4
    _assert_in_ball(r.x_adv, x, EPS)
    assert r.queries.max() <= 80 and (r.queries[r.broken_by == 0] < 80).all()


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_square_with_a_norm_is_the_search_of_that_norm(norm):
    """`advjax.attacks.square(norm=)` runs `square_linf` or `square_l2` with that function's own
    default p_init, draw for draw."""
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=6)
    eps, key = (8 / 255 if norm == "linf" else 0.5), jax.random.key(4)
    search = square_linf if norm == "linf" else square_l2
    got = advjax.attacks.square(logits_fn, x, y, eps, key=key, norm=norm, queries=30)
    want = search(logits_fn, x, y, eps, key=key, queries=30)
    np.testing.assert_array_equal(got.x_adv, want.x_adv)
    np.testing.assert_array_equal(got.queries_used, want.queries_used)
    with pytest.raises(ValueError, match="norm"):
        advjax.attacks.square(logits_fn, x, y, eps, key=key, norm="l1")
