"""Properties of advjax.attacks: the score-based black-box Square attack (L-inf).

Fast property tests use the fixed random linear classifier of conftest on 8x8x3 images,
through one jitted wrapper (eps, x, y and key traced) so most tests share one compile; the
last test attacks a CompactCNN briefly trained on real CIFAR-10 (skipped without
ADVJAX_DATA_DIR).
"""

import math
from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_linear_batch, make_linear_logits_fn

from advjax.attacks import SquareResult
from advjax.attacks._losses import per_example_margin
from advjax.attacks._square import p_schedule, square_linf, square_sides
from advjax_train import eval_logits_fn

EPS = 8 / 255
TOL = 1e-6
KEY = jax.random.key(0)
QUERIES = 100
LOGITS_FN = make_linear_logits_fn()
attack = jax.jit(partial(square_linf, LOGITS_FN), static_argnames=("queries", "p_init"))


def _linear_setup(n: int = 16, seed: int = 0):
    """(x as numpy float32, y = clean prediction of LOGITS_FN, so all start correct)."""
    x, _ = make_linear_batch(seed=seed, n=n)
    return x, np.asarray(jnp.argmax(LOGITS_FN(jnp.asarray(x)), -1), np.int32)


def _assert_in_ball(x_adv, x, eps):
    x_adv, x = np.asarray(x_adv), np.asarray(x)
    assert x_adv.shape == x.shape and x_adv.dtype == x.dtype
    assert np.max(np.abs(x_adv - x)) <= eps + TOL
    assert x_adv.min() >= 0.0 and x_adv.max() <= 1.0


def _pred_wrong(logits_fn, x, y) -> np.ndarray:
    return np.asarray(jnp.argmax(logits_fn(jnp.asarray(x)), -1) != jnp.asarray(y))


def _assert_bookkeeping(result: SquareResult, queries: int):
    """queries_used in [1, budget]; budget_exhausted = not success and budget reached."""
    used, success = np.asarray(result.queries_used), np.asarray(result.success)
    assert result.queries_used.dtype == jnp.int32 and result.success.dtype == jnp.bool_
    assert used.min() >= 1 and used.max() <= queries
    np.testing.assert_array_equal(result.budget_exhausted, ~success & (used == queries))
    np.testing.assert_array_equal(used[~success], queries)  # unbroken examples spend all


# ---------------------------------------------------------------------------
# Budget, eps = 0, success and query bookkeeping.


@pytest.mark.parametrize("eps", [1 / 255, EPS, 0.3, 1.0])
def test_output_in_eps_ball_and_unit_box_and_loss_is_margin_at_x_adv(eps):
    """|x_adv - x| <= eps, x_adv in [0, 1], and `loss` is the margin loss at x_adv."""
    x, y = _linear_setup()
    result = attack(x, y, eps, key=KEY, queries=QUERIES)
    _assert_in_ball(result.x_adv, x, eps)
    expected = -per_example_margin(LOGITS_FN(result.x_adv), jnp.asarray(y))
    chex.assert_trees_all_close(result.loss, expected, atol=1e-5)
    _assert_bookkeeping(result, QUERIES)


def test_eps_zero_is_identity_and_never_succeeds():
    """eps = 0 returns x bit-for-bit, breaks no correctly classified example, and spends
    the whole budget on every one."""
    x, y = _linear_setup()
    result = attack(x, y, 0.0, key=KEY, queries=QUERIES)
    np.testing.assert_array_equal(np.asarray(result.x_adv), x)
    assert not np.asarray(result.success).any()
    assert np.asarray(result.budget_exhausted).all()
    np.testing.assert_array_equal(np.asarray(result.queries_used), QUERIES)


def test_success_exactly_where_x_adv_is_misclassified():
    """For initially correct examples success == (x_adv misclassified), up to exact ties;
    initially misclassified ones succeed with one query at x_adv = x. eps is chosen so
    some but not all examples break."""
    x, y = _linear_setup()
    y = y.copy()
    y[::3] = (y[::3] + 1) % 10  # a third start misclassified
    correct = ~_pred_wrong(LOGITS_FN, x, y)
    result = attack(x, y, 0.02, key=KEY, queries=QUERIES)
    success, wrong = np.asarray(result.success), _pred_wrong(LOGITS_FN, result.x_adv, y)
    near_tie = np.abs(np.asarray(result.loss)) < 1e-5
    assert np.all((success == wrong) | near_tie)
    assert 0 < success[correct].sum() < correct.sum()
    assert success[~correct].all()
    np.testing.assert_array_equal(np.asarray(result.queries_used)[~correct], 1)
    np.testing.assert_array_equal(np.asarray(result.x_adv)[~correct], x[~correct])
    assert np.asarray(result.queries_used)[correct].min() >= 2
    _assert_bookkeeping(result, QUERIES)


def test_queries_used_counts_model_calls_of_a_lone_example():
    """Attacking one example alone, queries_used equals the number of logits_fn calls made
    (counted on the host), so a broken example stops spending queries at once."""
    calls = []

    def counting_logits_fn(z):
        jax.debug.callback(lambda: calls.append(1))
        return LOGITS_FN(z)

    run = jax.jit(lambda x, y: square_linf(counting_logits_fn, x, y, 0.05, key=KEY, queries=60))
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
    """The attack is black-box: a logits_fn whose custom VJP raises still works (the same
    wrapper does raise under jax.grad)."""

    @jax.custom_vjp
    def no_grad_logits_fn(z):
        return LOGITS_FN(z)

    def forward(z):
        return LOGITS_FN(z), None

    def backward(_, g):
        raise RuntimeError("the gradient of logits_fn was requested")

    no_grad_logits_fn.defvjp(forward, backward)
    x, y = _linear_setup(n=8)
    with pytest.raises(RuntimeError, match="gradient"):
        jax.grad(lambda z: no_grad_logits_fn(z).sum())(jnp.asarray(x))
    result = jax.jit(lambda x, y: square_linf(no_grad_logits_fn, x, y, 0.05, key=KEY, queries=20))(
        x, y
    )
    _assert_in_ball(result.x_adv, x, 0.05)


# ---------------------------------------------------------------------------
# Keys, jit, vmap.


def test_same_key_same_result_other_key_other_result():
    """The attack is a function of its key: same key -> identical result, another key ->
    another search (a different x_adv)."""
    x, y = _linear_setup()
    a = attack(x, y, EPS, key=jax.random.key(1), queries=QUERIES)
    b = attack(x, y, EPS, key=jax.random.key(1), queries=QUERIES)
    c = attack(x, y, EPS, key=jax.random.key(2), queries=QUERIES)
    chex.assert_trees_all_equal(a, b)
    assert np.mean(np.asarray(a.x_adv) != np.asarray(c.x_adv)) > 0.25


def test_per_example_keys_make_results_independent_of_batch_neighbours():
    """With one key per example, an example's result depends only on its own key: the same
    examples with the same keys, in another order and beside other examples, give the
    same x_adv, queries, success and loss."""
    x, y = _linear_setup(n=32)
    keys = jax.random.split(jax.random.key(5), 32)
    first = np.arange(16)
    other = np.concatenate([first[:8], np.arange(16, 24)])[::-1]  # 8 shared, 8 new, reversed
    a = attack(x[first], y[first], EPS, key=keys[first], queries=QUERIES)
    b = attack(x[other], y[other], EPS, key=keys[other], queries=QUERIES)
    for shared in range(8):
        j = int(np.flatnonzero(other == shared)[0])
        alone, beside = (jax.tree.map(lambda v, k=k: v[k], r) for r, k in ((a, shared), (b, j)))
        chex.assert_trees_all_equal(alone, beside)
    assert 0 < np.asarray(a.success).sum() < 16  # the attack did something, not everything


def test_jit_with_traced_eps_matches_eager():
    """square_linf under jax.jit (eps, x, y and key traced) equals eager square_linf."""
    x, y = _linear_setup()
    eager = square_linf(LOGITS_FN, x, y, 0.05, key=KEY, queries=QUERIES)
    chex.assert_trees_all_close(attack(x, y, 0.05, key=KEY, queries=QUERIES), eager, atol=TOL)


@pytest.mark.slow
def test_vmap_over_eps_and_batches_matches_separate_calls():
    """jax.vmap over a stack of (eps, batch) pairs equals one call per pair, and the eps = 0
    member stays exact."""
    eps_values = jnp.array([0.0, EPS, 0.05])
    xs, ys = (np.stack(a) for a in zip(*(_linear_setup(seed=g) for g in range(3))))
    run = lambda e, xb, yb: square_linf(LOGITS_FN, xb, yb, e, key=KEY, queries=QUERIES)  # noqa: E731
    stacked = jax.jit(jax.vmap(run))(eps_values, xs, ys)
    for g in range(3):
        expected = attack(xs[g], ys[g], eps_values[g], key=KEY, queries=QUERIES)
        chex.assert_trees_all_close(jax.tree.map(lambda v: v[g], stacked), expected, atol=TOL)
    np.testing.assert_array_equal(np.asarray(stacked.x_adv[0]), xs[0])


def test_schedule_matches_reference_piecewise_rule():
    """p follows the reference p_selection (breakpoints 10, 50, ..., 8000 of a 10,000 budget,
    rescaled to the budget); square sides are round(sqrt(p h w)) within [1, min(h, w)]."""

    def reference_p(p_init, it, n_iters):  # the published if/elif chain, restated
        it = int(it / n_iters * 10000)
        bounds = [10, 50, 200, 500, 1000, 2000, 4000, 6000, 8000, 10000]
        for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            if lo < it <= hi:
                return p_init / 2 ** (k + 1)
        return p_init

    for queries in (7, 500, 1000, 10_000):
        steps = np.arange(queries)
        expected = [reference_p(0.05, int(i), queries) for i in steps]
        np.testing.assert_array_equal(p_schedule(0.05, steps, queries), expected)
    sides = square_sides(0.05, 10_000, 32, 32)
    assert sides[0] == 7 and sides.min() == 1 and np.all(np.diff(sides) <= 0)
    assert square_sides(1.0, 10, 6, 9).max() == 6


# ---------------------------------------------------------------------------
# Argument checking, before anything is traced.

_X, _Y = make_linear_batch(n=4)
_BAD_ARGUMENTS = {
    "negative eps": (dict(eps=-0.1), ValueError, "eps"),
    "NaN eps": (dict(eps=math.nan), ValueError, "eps"),
    "eps above 1 as 0-d array": (dict(eps=jnp.asarray(2.0)), ValueError, "eps"),
    "queries 0": (dict(queries=0), ValueError, "queries"),
    "float queries": (dict(queries=10.0), ValueError, "queries"),
    "bool queries": (dict(queries=True), ValueError, "queries"),
    "p_init 0": (dict(p_init=0.0), ValueError, "p_init"),
    "p_init above 1": (dict(p_init=1.5), ValueError, "p_init"),
    "NaN p_init": (dict(p_init=math.nan), ValueError, "p_init"),
    "string p_init": (dict(p_init="0.05"), ValueError, "p_init"),
    "int x": (dict(x=(_X * 255).astype(np.uint8)), TypeError, "dtype"),
    "float y": (dict(y=_Y.astype(np.float32)), TypeError, "dtype"),
    "x not NHWC": (dict(x=_X.reshape(4, -1)), ValueError, "NHWC"),
    "mismatched batch sizes": (dict(y=_Y[:3]), ValueError, "shape"),
    "key of wrong batch size": (dict(key=jax.random.split(KEY, 3)), ValueError, "key"),
}


@pytest.mark.parametrize("case", list(_BAD_ARGUMENTS))
def test_bad_arguments_raise_clear_error_before_tracing(case):
    """Bad eps, queries, p_init, dtypes, ranks, shapes or keys raise ValueError/TypeError
    naming the problem, and logits_fn is never called."""
    overrides, error, fragment = _BAD_ARGUMENTS[case]
    calls = []
    args = {"x": _X, "y": _Y, "eps": EPS, "key": KEY, **overrides}
    x, y, eps = args.pop("x"), args.pop("y"), args.pop("eps")
    with pytest.raises(error, match=fragment):
        square_linf(lambda z: calls.append(1) or LOGITS_FN(z), x, y, eps, **args)
    assert not calls


# ---------------------------------------------------------------------------
# A CompactCNN trained on real CIFAR-10.

CNN_EXAMPLES, CNN_QUERIES = 100, 500


def test_trained_model_square_lowers_robust_accuracy_well_below_clean(trained_model):
    """At 8/255 with 500 queries (p_init 0.05), Square on the correctly classified of 100
    eval images stays in the eps-ball, succeeds exactly where x_adv is misclassified (up to
    near ties), breaks most of its successes within half the budget, and leaves robust
    accuracy at most 3/4 of a clean accuracy well above chance. (Measured: clean 0.41, robust
    0.26, median 155 queries to success; with YNNPACK convolutions the fixture model gave
    0.38, 0.25 and under 100.)

    Misclassified images are left out so that the batch, which every query evaluates in
    full, holds only examples the attack works on.
    """
    model, variables, x, y = trained_model
    logits_fn = eval_logits_fn(model, variables)
    x, y = x[:CNN_EXAMPLES], y[:CNN_EXAMPLES]
    correct = ~_pred_wrong(logits_fn, x, y)
    keys = jax.random.split(jax.random.key(7), CNN_EXAMPLES)[correct]
    x, y = x[correct], y[correct]
    run = jax.jit(lambda x, y, key: square_linf(logits_fn, x, y, EPS, key=key, queries=CNN_QUERIES))
    result = run(x, y, keys)
    _assert_in_ball(result.x_adv, x, EPS)
    _assert_bookkeeping(result, CNN_QUERIES)

    success, wrong = np.asarray(result.success), _pred_wrong(logits_fn, result.x_adv, y)
    near_tie = np.abs(np.asarray(result.loss)) < 1e-4
    assert np.all((success == wrong) | near_tie)
    used = np.asarray(result.queries_used)
    clean, robust = correct.mean(), (~success).sum() / CNN_EXAMPLES
    report = f"{clean=:.2f} {robust=:.2f} mean queries {used.mean():.1f}, "
    report += f"median to success {np.median(used[success]):.0f}"
    print(report)
    assert clean >= 0.25, report
    assert robust <= 0.75 * clean, report
    assert np.median(used[success]) <= CNN_QUERIES // 2, report


class JitOfTheCallerTest(chex.TestCase):
    @chex.variants(with_jit=True)
    def test_under_the_callers_jit_equals_the_eager_call(self):
        """square_linf under the caller's jit equals the eager call, and stays in the ball."""
        x, y = _linear_setup(n=8)
        run = self.variant(lambda x, y, eps: square_linf(LOGITS_FN, x, y, eps, key=KEY, queries=40))
        result = run(x, y, jnp.float32(EPS))
        _assert_in_ball(result.x_adv, x, EPS)
        expected = square_linf(LOGITS_FN, x, y, EPS, key=KEY, queries=40)
        chex.assert_trees_all_close(result, expected, atol=1e-5)
