"""Properties of advjax.attacks: FGSM and PGD (with restarts and first-break tracking).

Fast property tests use a fixed random linear classifier on 8x8x3 inputs; the tests at the
end attack a CompactCNN briefly trained on real CIFAR-10 (skipped without ADVJAX_DATA_DIR).
"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_weights, make_linear_batch, make_linear_logits_fn, numpy_ce_and_grad

from advjax.attacks import SearchResult, fgsm, pgd
from advjax.attacks import _pgd as attacks
from advjax.attacks._iterative import restart_keys
from advjax.attacks._iterative import single_restart as single
from advjax.attacks._losses import per_example_cross_entropy
from advjax_train import eval_logits_fn

EPS = 8 / 255
TOL = 1e-6
KEY = jax.random.key(0)


def _linear_setup(n: int = 16, seed: int = 0):
    """(logits_fn, x as numpy float32, y = clean prediction, so all start correct)."""
    logits_fn = make_linear_logits_fn()
    x, _ = make_linear_batch(seed=seed, n=n)
    y = np.asarray(jnp.argmax(logits_fn(jnp.asarray(x)), -1), np.int32)
    return logits_fn, x, y


def _assert_in_ball(x_adv, x, eps):
    x_adv, x = np.asarray(x_adv), np.asarray(x)
    assert x_adv.shape == x.shape and x_adv.dtype == x.dtype
    assert np.max(np.abs(x_adv - x)) <= eps + TOL
    assert x_adv.min() >= 0.0 and x_adv.max() <= 1.0


def _pred_wrong(logits_fn, x, y) -> np.ndarray:
    return np.asarray(jnp.argmax(logits_fn(jnp.asarray(x)), -1) != jnp.asarray(y))


# ---------------------------------------------------------------------------
# Budget: eps-ball and [0, 1]; eps = 0 is the identity.


@pytest.mark.parametrize("eps", [1 / 255, EPS, 0.3, 1.0])
def test_fgsm_stays_in_eps_ball_and_unit_box(eps):
    """|fgsm(x).x_adv - x| <= eps and fgsm(x).x_adv in [0, 1], for small and large eps."""
    logits_fn, x, y = _linear_setup()
    x_adv = fgsm(logits_fn, x, y, eps).x_adv
    _assert_in_ball(x_adv, x, eps)
    # Away from the box edges FGSM moves every pixel by exactly eps (gradients are nonzero).
    interior = (x > eps) & (x < 1 - eps)
    if interior.any():
        np.testing.assert_allclose(np.abs(np.asarray(x_adv) - x)[interior], eps, atol=1e-6)


@pytest.mark.parametrize("eps,step_size,restarts", [(EPS, 3 * EPS, 2), (1.0, None, 1)])
def test_pgd_stays_in_eps_ball_and_unit_box(eps, step_size, restarts):
    """|pgd(x).x_adv - x| <= eps and pgd(x).x_adv in [0, 1], also with step_size > eps and restarts."""
    logits_fn, x, y = _linear_setup()
    result = pgd(logits_fn, x, y, eps, key=KEY, steps=3, step_size=step_size, restarts=restarts)
    _assert_in_ball(result.x_adv, x, eps)


def test_eps_zero_is_exact_identity():
    """eps = 0 returns x bit-for-bit, for FGSM and for PGD (even with a nonzero step size)."""
    logits_fn, x, y = _linear_setup()
    np.testing.assert_array_equal(np.asarray(fgsm(logits_fn, x, y, 0.0).x_adv), x)
    np.testing.assert_array_equal(np.asarray(pgd(logits_fn, x, y, 0.0, key=KEY, steps=3).x_adv), x)
    np.testing.assert_array_equal(
        np.asarray(pgd(logits_fn, x, y, 0, key=KEY, steps=2, step_size=0.1, restarts=2).x_adv), x
    )


# ---------------------------------------------------------------------------
# Keys, jit, vmap, grad, inputs left alone.


def test_pgd_same_key_same_result_different_key_different_start():
    """PGD is a function of its key: same key -> identical output, other key -> other start."""
    logits_fn, x, y = _linear_setup()
    a = pgd(logits_fn, x, y, EPS, key=jax.random.key(1), steps=1)
    b = pgd(logits_fn, x, y, EPS, key=jax.random.key(1), steps=1)
    c = pgd(logits_fn, x, y, EPS, key=jax.random.key(2), steps=1)
    chex.assert_trees_all_equal(a, b)
    # With one step of eps/4 the output is still dominated by the random start.
    assert not np.array_equal(np.asarray(a.x_adv), np.asarray(c.x_adv))
    assert np.mean(np.asarray(a.x_adv) != np.asarray(c.x_adv)) > 0.5


def test_fgsm_is_deterministic():
    """FGSM has no randomness: two calls give identical outputs."""
    logits_fn, x, y = _linear_setup()
    np.testing.assert_array_equal(
        np.asarray(fgsm(logits_fn, x, y, EPS).x_adv), np.asarray(fgsm(logits_fn, x, y, EPS).x_adv)
    )


def _numpy_pgd(w, b, x, y, eps, starts, steps):
    """L-inf PGD with step eps/4 from each restart's start (Madry et al. 2018), in NumPy: each
    iterate is evaluated then stepped; the first misclassified iterate of the earliest breaking
    restart is kept, else the highest-loss iterate over the restarts."""
    broken = np.full((len(starts), len(y)), -1)
    best, best_loss = np.array(starts, np.float64), np.full((len(starts), len(y)), -np.inf)
    for r, x_k in enumerate(np.asarray(starts, np.float64)):
        for i in range(steps + 1):
            loss, grad, wrong = numpy_ce_and_grad(w, b, x_k, y)
            unbroken = broken[r] < 0
            take = unbroken & (wrong | (loss > best_loss[r]))
            best[r][take], best_loss[r][take] = x_k[take], loss[take]
            broken[r][unbroken & wrong] = i
            x_k = np.clip(np.clip(x_k + eps / 4 * np.sign(grad), x - eps, x + eps), 0.0, 1.0)
    hit = broken >= 0
    choice = np.where(hit.any(0), hit.argmax(0), best_loss.argmax(0))
    cases = np.arange(len(y))
    return best[choice, cases], broken, best_loss[choice, cases]


class AttackVariantsTest(chex.TestCase):
    """FGSM and PGD, called eagerly and under the caller's jit, equal a NumPy transcription
    on a linear model (closed-form input gradient)."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_fgsm_matches_the_closed_form(self):
        """fgsm is x + eps * sign(grad of the cross-entropy), clipped to [0, 1]."""
        logits_fn, x, y = _linear_setup()
        w, b = linear_weights(logits_fn)
        _, grad, _ = numpy_ce_and_grad(w, b, x, y)
        expected = np.clip(x + EPS * np.sign(grad), 0.0, 1.0)
        actual = self.variant(lambda x, y, eps: fgsm(logits_fn, x, y, eps).x_adv)(x, y, EPS)
        np.testing.assert_allclose(np.asarray(actual), expected, atol=TOL, rtol=0)

    @chex.variants(with_jit=True, without_jit=True)
    def test_pgd_search_matches_a_numpy_transcription(self):
        """pgd's x_adv, broken steps and loss equal NumPy PGD from the same random
        starts (the PGD rule's start with each restart's key)."""
        logits_fn, x, y = _linear_setup()
        eps = 0.04
        starts = [
            np.asarray(attacks.PGD_RULE.start(jnp.asarray(x), eps, k).x_adv)
            for k in restart_keys(KEY, 2)
        ]
        w, b = linear_weights(logits_fn)
        x_adv, broken, loss = _numpy_pgd(w, b, x, y, eps, starts, steps=2)
        assert 0 < (broken >= 0).any(axis=0).sum() < len(y)  # some break, some do not
        actual = self.variant(
            lambda x, y, eps, key: pgd(logits_fn, x, y, eps, key=key, steps=2, restarts=2)
        )(x, y, eps, KEY)
        np.testing.assert_allclose(np.asarray(actual.x_adv), x_adv, atol=TOL, rtol=0)
        np.testing.assert_array_equal(np.asarray(actual.broken_step), broken)
        np.testing.assert_allclose(np.asarray(actual.loss), loss, atol=1e-5, rtol=1e-5)


def test_fgsm_under_vmap_over_eps_matches_separate_calls():
    """jax.vmap of fgsm over a stack of eps values equals one call per eps."""
    logits_fn, x, y = _linear_setup()
    eps_values = jnp.array([0.0, 1 / 255, EPS, 0.1])
    batched = jax.vmap(lambda e: fgsm(logits_fn, x, y, e).x_adv)(eps_values)
    chex.assert_shape(batched, (4, *x.shape))
    for i, e in enumerate(eps_values):
        chex.assert_trees_all_close(batched[i], fgsm(logits_fn, x, y, float(e)).x_adv, atol=TOL)
        _assert_in_ball(batched[i], x, float(e))


def test_pgd_under_vmap_over_eps_and_batches_matches_separate_calls():
    """jax.vmap of pgd over eps values, and over a stack of batches, equals separate calls
    (the vmapped callers are jitted to keep the test fast)."""
    logits_fn, x, y = _linear_setup()
    eps_values = jnp.array([0.0, EPS, 0.05])
    by_eps = jax.jit(jax.vmap(lambda e: pgd(logits_fn, x, y, e, key=KEY, steps=2).x_adv))(
        eps_values
    )
    for i, e in enumerate(eps_values):
        expected = pgd(logits_fn, x, y, float(e), key=KEY, steps=2).x_adv
        chex.assert_trees_all_close(by_eps[i], expected, atol=TOL)
    np.testing.assert_array_equal(np.asarray(by_eps[0]), x)  # eps 0 stays exact under vmap

    _, x2, y2 = _linear_setup(seed=1)
    xs, ys = np.stack([x, x2]), np.stack([y, y2])
    by_batch = jax.jit(
        jax.vmap(lambda xb, yb: pgd(logits_fn, xb, yb, EPS, key=KEY, steps=2).x_adv)
    )(xs, ys)
    for g in range(2):
        expected = pgd(logits_fn, xs[g], ys[g], EPS, key=KEY, steps=2).x_adv
        chex.assert_trees_all_close(by_batch[g], expected, atol=TOL)


def _parametric_linear(n: int = 16):
    """Linear-model parameters and a logits function of (params, x)."""
    key_w, key_b = jax.random.split(jax.random.key(3))
    params = {
        "w": jax.random.normal(key_w, (8 * 8 * 3, 10)) / 14.0,
        "b": 0.1 * jax.random.normal(key_b, (10,)),
    }

    def apply(params, x):
        return x.reshape(x.shape[0], -1) @ params["w"] + params["b"][None, :]

    x, y = make_linear_batch(seed=1, n=n)
    return params, apply, jnp.asarray(x), jnp.asarray(y)


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])
def test_grad_of_caller_through_attack_equals_grad_at_stopped_point(attack):
    """jax.grad through an attack works, and (sign steps being piecewise constant) equals the
    gradient at the stop_gradient'ed adversarial point, as in adversarial training."""
    params, apply, x, y = _parametric_linear()

    def make_x_adv(params):
        logits_fn = lambda z: apply(params, z)  # noqa: E731
        if attack == "fgsm":
            return fgsm(logits_fn, x, y, EPS).x_adv
        return pgd(logits_fn, x, y, EPS, key=KEY, steps=3, restarts=2).x_adv

    def adv_loss(params, stop):
        x_adv = make_x_adv(params)
        x_adv = jax.lax.stop_gradient(x_adv) if stop else x_adv
        return per_example_cross_entropy(apply(params, x_adv), y).mean()

    through = jax.grad(adv_loss)(params, False)
    stopped = jax.grad(adv_loss)(params, True)
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(through))
    chex.assert_trees_all_close(through, stopped, atol=1e-6)


def test_grad_of_fgsm_output_wrt_eps_and_x():
    """d sum(fgsm(x, eps).x_adv) / d eps = sum of sign(grad) over unclipped pixels; d/dx is the
    indicator of unclipped pixels (the sign term has zero derivative)."""
    logits_fn, x, y = _linear_setup()
    x = jnp.asarray(x)
    eps = 0.05
    x_adv = fgsm(logits_fn, x, y, eps).x_adv
    interior = (x_adv > 0) & (x_adv < 1)
    signs = jnp.sign(x_adv - x)
    d_eps = jax.grad(lambda e: fgsm(logits_fn, x, y, e).x_adv.sum())(eps)
    np.testing.assert_allclose(d_eps, jnp.sum(jnp.where(interior, signs, 0.0)), rtol=1e-5)
    d_x = jax.grad(lambda z: fgsm(logits_fn, z, y, eps).x_adv.sum())(x)
    np.testing.assert_array_equal(np.asarray(d_x), np.asarray(interior, np.float32))


def test_attacks_do_not_modify_numpy_inputs():
    """Passing numpy arrays: x, y (and an array eps) are unchanged after fgsm and pgd."""
    logits_fn, x, y = _linear_setup()
    eps = np.float32(EPS)
    x_copy, y_copy = x.copy(), y.copy()
    fgsm(logits_fn, x, y, eps).x_adv
    pgd(logits_fn, x, y, eps, key=KEY, steps=2, restarts=2)
    np.testing.assert_array_equal(x, x_copy)
    np.testing.assert_array_equal(y, y_copy)
    assert eps == np.float32(EPS)


# ---------------------------------------------------------------------------
# Argument checking, before anything is traced.

_X, _Y = make_linear_batch(n=4)
_BAD_ARGUMENTS = {
    "negative eps": (dict(eps=-0.1), ValueError, "eps"),
    "NaN eps": (dict(eps=math.nan), ValueError, "eps"),
    "eps above 1": (dict(eps=1.5), ValueError, "eps"),
    "infinite eps": (dict(eps=math.inf), ValueError, "eps"),
    "NaN eps as numpy scalar": (dict(eps=np.float32("nan")), ValueError, "eps"),
    "eps above 1 as 0-d jax array": (dict(eps=jnp.asarray(2.0)), ValueError, "eps"),
    "int x": (dict(x=(_X * 255).astype(np.uint8)), TypeError, "dtype"),
    "float y": (dict(y=_Y.astype(np.float32)), TypeError, "dtype"),
    "x without batch axis": (dict(x=_X[0, 0, 0], y=_Y[:3]), ValueError, "x.shape"),
}
_BAD_PGD_ARGUMENTS = {
    "steps 0": (dict(steps=0), ValueError, "steps"),
    "negative steps": (dict(steps=-3), ValueError, "steps"),
    "non-integer steps": (dict(steps=2.5), ValueError, "steps"),
    "float-valued steps": (dict(steps=2.0), ValueError, "steps"),
    "bool steps": (dict(steps=True), ValueError, "steps"),
    "restarts 0": (dict(restarts=0), ValueError, "restarts"),
    "non-integer restarts": (dict(restarts=1.5), ValueError, "restarts"),
    "negative step_size": (dict(step_size=-0.01), ValueError, "must be in"),
    "NaN step_size": (dict(step_size=math.nan), ValueError, "must be in"),
}
_BAD_SHAPES = {
    "mismatched batch sizes": dict(y=_Y[:3]),
    "y of rank 2": dict(y=_Y[:, None]),
}


class _RecordingLogitsFn:
    """A logits function that records every call (so a test can see nothing was traced)."""

    def __init__(self):
        self.calls = 0
        self._fn = make_linear_logits_fn()

    def __call__(self, x):
        self.calls += 1
        return self._fn(x)


def _call(attack, **overrides):
    logits_fn = _RecordingLogitsFn()
    args = {"x": _X, "y": _Y, "eps": EPS, **overrides}
    if attack == "fgsm":
        args = {k: v for k, v in args.items() if k in ("x", "y", "eps")}
        return logits_fn, lambda: fgsm(logits_fn, args["x"], args["y"], args["eps"]).x_adv
    rest = {k: v for k, v in args.items() if k not in ("x", "y", "eps")}
    return (
        logits_fn,
        lambda: pgd(logits_fn, args["x"], args["y"], args["eps"], key=KEY, **rest).x_adv,
    )


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])
@pytest.mark.parametrize("case", list(_BAD_ARGUMENTS))
def test_bad_arguments_raise_clear_error_before_tracing(attack, case):
    """Bad eps, dtypes and ranks raise ValueError/TypeError naming the problem, and the
    logits function is never called."""
    overrides, error, fragment = _BAD_ARGUMENTS[case]
    logits_fn, run = _call(attack, **overrides)
    with pytest.raises(error, match=fragment):
        run()
    assert logits_fn.calls == 0


@pytest.mark.parametrize("case", list(_BAD_PGD_ARGUMENTS))
def test_bad_pgd_arguments_raise_clear_error_before_tracing(case):
    """Bad steps, restarts or step_size raise ValueError naming the argument, before tracing."""
    overrides, error, fragment = _BAD_PGD_ARGUMENTS[case]
    logits_fn, run = _call("pgd", **overrides)
    with pytest.raises(error, match=fragment):
        run()
    assert logits_fn.calls == 0


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])
@pytest.mark.parametrize("case", list(_BAD_SHAPES))
def test_bad_shapes_raise_value_error_before_tracing(attack, case):
    """Mismatched batch sizes or a y that is not rank 1 raise ValueError, before tracing."""
    logits_fn, run = _call(attack, **_BAD_SHAPES[case])
    with pytest.raises(ValueError, match="shape"):
        run()
    assert logits_fn.calls == 0


def test_bad_step_size_error_names_step_size():
    """A bad step_size is reported as step_size, not as eps."""
    _, run = _call("pgd", step_size=-0.01)
    with pytest.raises(ValueError, match="step_size"):
        run()


# ---------------------------------------------------------------------------
# Restarts and first-break tracking.


def test_pgd_search_result_shapes_and_broken_step_range():
    """SearchResult: x_adv like x, broken_step int32 (restarts, batch) in [-1, steps], loss (B,)."""
    logits_fn, x, y = _linear_setup(n=32)
    result = pgd(logits_fn, x, y, 0.04, key=KEY, steps=2, restarts=4)
    assert isinstance(result, SearchResult)
    chex.assert_shape(result.x_adv, x.shape)
    chex.assert_type(result.x_adv, jnp.float32)
    chex.assert_shape(result.broken_step, (4, 32))
    chex.assert_type(result.broken_step, jnp.int32)
    chex.assert_shape(result.loss, (32,))
    steps = np.asarray(result.broken_step)
    assert steps.min() >= -1 and steps.max() <= 2


def test_restarts_keep_the_per_example_worst_case():
    """With R restarts, row r of broken_step is restart r run alone with key split(key, R)[r];
    an example is misclassified in the result iff some restart broke it, the returned point
    is the first break of the earliest breaking restart, and for unbroken examples it is the
    highest-loss point over the restarts."""
    logits_fn, x, y = _linear_setup(n=32)
    eps, steps, restarts = 0.04, 2, 4
    result = pgd(logits_fn, x, y, eps, key=KEY, steps=steps, restarts=restarts)
    xj, yj, eps_a = jnp.asarray(x), jnp.asarray(y), jnp.float32(eps)
    single_restart = jax.jit(
        lambda k: single(attacks.PGD_RULE, logits_fn, xj, yj, eps_a, eps_a / 4, steps, k)
    )
    singles = [single_restart(k) for k in jax.random.split(KEY, restarts)]
    single_broken = np.stack([np.asarray(s.broken_step) for s in singles])
    np.testing.assert_array_equal(np.asarray(result.broken_step), single_broken)

    broken = (single_broken >= 0).any(axis=0)
    assert 0 < broken.sum() < len(y), "eps should break some but not all examples"
    partly = broken & ~(single_broken >= 0).all(axis=0)
    assert partly.any(), "some example should be broken by only some restarts"
    np.testing.assert_array_equal(_pred_wrong(logits_fn, result.x_adv, y), broken)

    losses = np.stack([np.asarray(s.best_loss) for s in singles])
    for i in range(len(y)):
        if broken[i]:
            r = int(np.argmax(single_broken[:, i] >= 0))
        else:
            r = int(np.argmax(losses[:, i]))
            np.testing.assert_allclose(result.loss[i], losses[:, i].max(), rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(result.x_adv[i]), np.asarray(singles[r].best[i]))


def test_more_restarts_never_unbreak_an_example():
    """Restarts are split(key, R), a prefix-stable family: R=4 repeats R=1 as its first row,
    so every example broken with 1 restart is still broken with 4."""
    logits_fn, x, y = _linear_setup(n=32)
    one = pgd(logits_fn, x, y, 0.04, key=KEY, steps=2, restarts=1)
    four = pgd(logits_fn, x, y, 0.04, key=KEY, steps=2, restarts=4)
    np.testing.assert_array_equal(np.asarray(four.broken_step[:1]), np.asarray(one.broken_step))
    broken_one = _pred_wrong(logits_fn, one.x_adv, y)
    broken_four = _pred_wrong(logits_fn, four.x_adv, y)
    assert np.all(broken_four[broken_one])
    assert broken_four.sum() > broken_one.sum()


# ---------------------------------------------------------------------------
# A CompactCNN trained on real CIFAR-10.

PGD_STEPS = 8


@pytest.fixture(scope="module")
def attacked(trained_model):
    """Clean, FGSM and PGD (8 steps, 1 restart) logits on the eval images at eps = 8/255."""
    model, variables, x, y = trained_model
    logits_fn = eval_logits_fn(model, variables)
    x_fgsm = jax.jit(lambda x, y: fgsm(logits_fn, x, y, EPS).x_adv)(x, y)
    result = jax.jit(lambda x, y, key: pgd(logits_fn, x, y, EPS, key=key, steps=PGD_STEPS))(
        x, y, jax.random.key(7)
    )
    logits = {
        name: logits_fn(z) for name, z in (("clean", x), ("fgsm", x_fgsm), ("pgd", result.x_adv))
    }
    return dict(x=x, y=y, x_fgsm=x_fgsm, pgd=result, logits=logits)


def _accuracy(logits, y) -> float:
    return float(jnp.mean(jnp.argmax(logits, -1) == y))


def _mean_ce(logits, y) -> float:
    return float(per_example_cross_entropy(logits, y).mean())


def test_trained_model_attacks_stay_in_budget(attacked):
    """On the trained model, FGSM and PGD at 8/255 stay in the eps-ball and in [0, 1]."""
    _assert_in_ball(attacked["x_fgsm"], attacked["x"], EPS)
    _assert_in_ball(attacked["pgd"].x_adv, attacked["x"], EPS)


def test_trained_model_loss_rises_under_attack(attacked):
    """Mean cross-entropy: FGSM > clean and PGD > clean at 8/255.

    (PGD returns the *first* misclassified iterate of a broken example, a point just past
    the decision boundary, so its mean loss is not expected to exceed FGSM's.)
    """
    y, logits = attacked["y"], attacked["logits"]
    clean = _mean_ce(logits["clean"], y)
    assert _mean_ce(logits["fgsm"], y) > clean
    assert _mean_ce(logits["pgd"], y) > clean


def test_trained_model_pgd_beats_fgsm_and_robust_accuracy_is_low(attacked):
    """Clean accuracy is well above chance; at 8/255 PGD robust accuracy <= FGSM's, and both
    are well below clean accuracy."""
    y, logits = attacked["y"], attacked["logits"]
    clean, fgsm_acc, pgd_acc = (_accuracy(logits[k], y) for k in ("clean", "fgsm", "pgd"))
    assert clean >= 0.25, f"{clean=}: the fixture model should be well above chance (0.1)"
    assert pgd_acc <= fgsm_acc < clean
    assert pgd_acc <= 0.5 * clean, f"{pgd_acc=} {clean=}"


def test_trained_model_pgd_x_adv_is_misclassified_exactly_where_broken(attacked):
    """The returned point is misclassified iff broken_step records a break (up to exact ties
    of the top logits), and SearchResult.loss is the cross-entropy at the returned point."""
    y, logits, result = attacked["y"], attacked["logits"]["pgd"], attacked["pgd"]
    broken = np.asarray((result.broken_step >= 0).any(axis=0))
    wrong = np.asarray(jnp.argmax(logits, -1) != y)
    true_logit = jnp.take_along_axis(logits, y[:, None], axis=1)[:, 0]
    other = jnp.max(jnp.where(jax.nn.one_hot(y, 10) > 0, -jnp.inf, logits), axis=1)
    near_tie = np.asarray(jnp.abs(true_logit - other) < 1e-4)
    assert np.all((wrong == broken) | near_tie)
    assert broken.sum() > len(y) // 2
    chex.assert_trees_all_close(
        result.loss, per_example_cross_entropy(logits, y), atol=1e-4, rtol=1e-4
    )


def test_trained_model_robust_accuracy_by_step_is_non_increasing(attacked):
    """Robust accuracy after k steps (no break at steps <= k) is non-increasing in k and at
    k = steps equals the accuracy on the returned x_adv."""
    y, result = attacked["y"], attacked["pgd"]
    steps = np.asarray(result.broken_step)
    curve = np.array(
        [np.mean(~((steps >= 0) & (steps <= k)).any(axis=0)) for k in range(PGD_STEPS + 1)]
    )
    assert np.all(np.diff(curve) <= 0), curve
    assert curve[-1] < curve[0], curve  # the gradient steps do break examples
    np.testing.assert_allclose(curve[-1], _accuracy(attacked["logits"]["pgd"], y), atol=1e-6)


def test_jitted_pgd_does_not_retrace_on_new_data(trained_model):
    """A jitted PGD wrapper traces once; new data and a new key of the same shape reuse it."""
    model, variables, x, y = trained_model
    logits_fn = eval_logits_fn(model, variables)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def attack(x, y, key):
        return pgd(logits_fn, x, y, EPS, key=key, steps=2).x_adv

    first = attack(x[:8], y[:8], jax.random.key(0))
    second = attack(x[8:16], y[8:16], jax.random.key(1))
    _assert_in_ball(first, x[:8], EPS)
    _assert_in_ball(second, x[8:16], EPS)
