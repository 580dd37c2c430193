"""Properties of the FAB / FAB-T attack (`advjax.attacks.fab`)."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_boundary_case, tanh_mlp, tanh_mlp_batch

from advjax.attacks import fab
from advjax.attacks._fab import _fab_ranks
from advjax.attacks._fab_projection import projection_l2, projection_linf

_MLP = tanh_mlp()


def _pgd_linf(logits_fn, x, y, eps, key, steps=50):
    def loss(z):
        logp = jax.nn.log_softmax(logits_fn(z))
        return -jnp.take_along_axis(logp, y[:, None], 1).sum()

    def step(_, z):
        z = z + eps / 4 * jnp.sign(jax.grad(loss)(z))
        return jnp.clip(jnp.clip(z, x - eps, x + eps), 0.0, 1.0)

    z0 = jnp.clip(x + jax.random.uniform(key, x.shape, minval=-eps, maxval=eps), 0.0, 1.0)
    z = jax.lax.fori_loop(0, steps, step, z0)
    return jnp.argmax(logits_fn(z), -1) != y


def _bisection_projection(t, w, b, norm):
    """Reference: the minimal step is the box-clipped move along -sign(w) (L-inf) or -w (L2)
    of the smallest size reaching the hyperplane, else the largest such move."""
    c = w @ t - b
    unit = np.sign(w) if norm == "linf" else w

    def along(size):
        return np.clip(-np.sign(c) * unit * size, -t, 1 - t)

    lo, hi = 0.0, 1e3
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if abs(w @ along(mid)) < abs(c) else (lo, mid)
    return along(hi)


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("dim", [1, 5, 16])
def test_projections_match_bisection(norm, dim):
    rng = np.random.default_rng(dim)
    t, w = rng.uniform(0, 1, (12, dim)), rng.normal(size=(12, dim))
    w[::3, rng.integers(dim)] = 0.0
    b = np.sum(w * t, 1) + rng.normal(size=12) * np.tile([0.01, 0.3, 3.0], 4)
    project = jax.vmap(projection_linf if norm == "linf" else projection_l2)
    d = project(*(jnp.asarray(v, jnp.float32) for v in (t, w, b)))
    for d_i, t_i, w_i, b_i in zip(np.asarray(d), t, w, b, strict=True):
        np.testing.assert_allclose(d_i, _bisection_projection(t_i, w_i, b_i, norm), atol=2e-5)


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("n_classes", [2, 5])
def test_linear_distance_is_closed_form(norm, n_classes):
    logits_fn, x, y, refs = linear_boundary_case(n_classes, classes=n_classes, batch=6)
    eps = 1.0 if norm == "linf" else 10.0
    attack = functools.partial(fab, logits_fn, x, y, eps, key=jax.random.key(0), norm=norm)
    fine = attack(eta=1.001, targets=n_classes - 1)
    assert np.all(fine.broken)
    np.testing.assert_allclose(fine.distance, refs[norm], rtol=1e-3)
    assert np.all(fine.distance >= refs[norm] * (1 - 1e-5))
    if n_classes == 2:
        default = attack(targets=1)
        assert np.all(default.distance >= refs[norm] * (1 - 1e-5))
        assert np.all(default.distance <= refs[norm] * 1.05)


def test_untargeted_linear_distance():
    logits_fn, x, y, refs = linear_boundary_case(7, classes=4, batch=6)
    res = fab(logits_fn, x, y, 1.0, key=jax.random.key(0), targets=None, eta=1.001)
    np.testing.assert_allclose(res.distance, refs["linf"], rtol=1e-3)


_SMALL = dict(steps=20, restarts=2, targets=3)


@functools.cache
def _jitted(norm):
    return jax.jit(lambda x, y, eps, key: fab(_MLP, x, y, eps, key=key, norm=norm, **_SMALL))


@pytest.mark.parametrize("norm, eps", [("linf", 0.03), ("l2", 0.4)])
def test_budget_box_and_misclassification(norm, eps):
    _, x, y = tanh_mlp_batch()
    y = y.at[0].set((y[0] + 1) % 10)
    x_copy, y_copy = np.array(x), np.array(y)
    res = _jitted(norm)(x, y, eps, jax.random.split(jax.random.key(1), 8))
    np.testing.assert_array_equal(x, x_copy)
    np.testing.assert_array_equal(y, y_copy)
    delta = (res.x_adv - x).reshape(x.shape[0], -1)
    size = jnp.max(jnp.abs(delta), 1) if norm == "linf" else jnp.linalg.norm(delta, axis=1)
    assert np.all(size <= eps + 1e-6)
    assert np.all((res.x_adv >= 0) & (res.x_adv <= 1))
    assert 1 < res.broken.sum() < x.shape[0]
    pred = jnp.argmax(_MLP(res.x_adv), -1)
    assert np.all(pred[res.broken] != y[res.broken])
    assert np.all(res.distance[res.broken] <= eps)
    assert np.all(res.distance[~res.broken] > eps)
    assert res.broken[0] and res.distance[0] == 0 and np.all(res.x_adv[0] == x[0])
    np.testing.assert_allclose(size[res.broken][1:], res.distance[res.broken][1:], atol=1e-6)


def test_zero_eps_leaves_inputs():
    _, x, y = tanh_mlp_batch()
    res = _jitted("linf")(x, y, 0.0, jax.random.split(jax.random.key(2), 8))
    np.testing.assert_array_equal(res.x_adv, x)
    assert not np.any(res.broken)
    assert np.all(res.distance > 0)


def test_jit_same_key_same_result_and_batch_independence():
    _, x, y = tanh_mlp_batch()
    keys = jax.random.split(jax.random.key(5), 8)
    run = _jitted("linf")
    full = run(x, y, 0.02, keys)
    again = run(x, y, 0.02, keys)
    eager = fab(_MLP, x, y, 0.02, key=keys, **_SMALL)
    for a, b, c in zip(full, eager, again, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert 0 < full.broken.sum() < 8
    idx = jnp.array([6, 1, 3])
    sub = run(x[idx], y[idx], 0.02, keys[idx])
    np.testing.assert_array_equal(sub.broken, full.broken[idx])
    np.testing.assert_allclose(sub.distance, full.distance[idx], rtol=1e-5)
    np.testing.assert_allclose(sub.x_adv, full.x_adv[idx], atol=1e-6)


def test_at_least_as_strong_as_pgd():
    """On cases where PGD-50 breaks some but not all, FAB-50 breaks at least as many."""
    logits_fn, x, y = tanh_mlp_batch(batch=32, seed=4)
    eps = 0.02
    pgd = _pgd_linf(logits_fn, x, y, eps, jax.random.key(0))
    res = fab(logits_fn, x, y, eps, key=jax.random.key(0), steps=50)
    assert 0 < pgd.sum() < 32
    assert res.broken.sum() >= pgd.sum()


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(x=-0.1), ValueError, r"x must lie in \[0, 1\]"),
        (dict(x=np.nan), ValueError, r"x must lie in \[0, 1\]"),
        (dict(y=10), ValueError, r"y must lie in \[0, 10\)"),
        (dict(y=0.5), TypeError, "y must hold integer"),
        (dict(eps=1.5), ValueError, "eps must be"),
        (dict(eps=-0.1), ValueError, "eps must be"),
        (dict(eps=np.inf, norm="l2"), ValueError, "eps must be"),
        (dict(norm="l1"), ValueError, "norm='l1'"),
        (dict(steps=0), ValueError, "steps=0"),
        (dict(restarts=1.5), TypeError, "restarts"),
        (dict(targets=10), ValueError, r"targets .* must lie in 1 \.\. 9"),
        (dict(targets=0), ValueError, "targets=0"),
        (dict(targets=1.0), TypeError, "targets"),
        (dict(beta=0.0), ValueError, "beta"),
        (dict(eta=0.5), ValueError, "eta"),
        (dict(alpha_max=2.0), ValueError, "alpha_max"),
        (dict(eps_init=-1.0), ValueError, "eps_init"),
        (dict(key=jnp.zeros((3,), jnp.float32)), TypeError, "key"),
    ],
)
def test_validation(change, error, match):
    logits_fn, x, y = tanh_mlp_batch(batch=2)
    args = dict(x=x, y=y, eps=0.1, key=jax.random.key(0))
    if "x" in change:
        change = dict(change, x=x.at[0, 0, 0, 0].set(change["x"]))
    if "y" in change:
        change = dict(change, y=jnp.full((2,), change["y"]))
    args.update(change)
    with pytest.raises(error, match=match):
        fab(logits_fn, args.pop("x"), args.pop("y"), args.pop("eps"), **args)


def test_empty_batch():
    x = jnp.zeros((0, 4, 4, 3))
    res = fab(_MLP, x, jnp.zeros((0,), jnp.int32), 0.1, key=jax.random.key(0))
    assert res.x_adv.shape == x.shape and res.broken.shape == res.distance.shape == (0,)


@pytest.mark.slow
def test_targets_one_call_at_a_time_equal_one_call_over_all():
    """The runners' form of FAB-T runs targets one by one (a traced rank each, one program),
    dropping the cases broken so far, with the same outcome per case as `fab` over every
    target in one call."""
    logits_fn, x, y = tanh_mlp_batch(batch=8)
    keys = jax.random.split(jax.random.key(5), y.shape[0])
    whole = fab(logits_fn, x, y, 0.03, key=keys, targets=3, steps=10)
    broken = np.zeros(y.shape, bool)
    dist = np.full(y.shape, np.inf, np.float32)
    one = jax.jit(lambda x, y, k, rank: _fab_ranks(logits_fn, x, y, 0.03, k, rank[None], steps=10))
    for rank in (2, 3, 4):
        rest = np.flatnonzero(~broken)
        part = one(x[rest], y[rest], keys[rest], jnp.int32(rank))
        dist[rest] = np.minimum(dist[rest], np.asarray(part.distance))
        broken[rest] = np.asarray(part.broken)
    np.testing.assert_array_equal(broken, np.asarray(whole.broken))
    np.testing.assert_allclose(dist, np.asarray(whole.distance), rtol=1e-5)


def test_the_numpy_sort_on_cpu_gives_the_projections_exactly_what_jnp_argsort_gives(monkeypatch):
    """FAB's projections sort by NumPy on the CPU (XLA's CPU sort is much slower): the same
    indices as the stable jnp.argsort, ties at the box bounds included, so the same steps."""
    from advjax.attacks import _fab_projection

    keys = jax.random.split(jax.random.key(0), 3)
    t = jnp.clip(jax.random.uniform(keys[0], (6, 48), minval=-0.3, maxval=1.3), 0.0, 1.0)
    w = jax.random.normal(keys[1], (6, 48)) * (jax.random.uniform(keys[2], (6, 48)) > 0.2)
    b = jnp.linspace(-2.0, 2.0, 6)
    for projection in (_fab_projection.projection_linf, _fab_projection.projection_l2):
        host = jax.jit(jax.vmap(projection))(t, w, b)
        with monkeypatch.context() as m:
            m.setattr(_fab_projection, "argsort", lambda a: jnp.argsort(a, axis=-1))
            device = jax.jit(jax.vmap(projection))(t, w, b)
        np.testing.assert_array_equal(np.asarray(host), np.asarray(device))


def test_the_host_sort_split_over_threads_gives_numpys_stable_indices_ties_included():
    """Large batches of rows are sorted on every usable core; pixel values (k / 255) tie
    everywhere, and the indices must still be NumPy's stable ones, in any leading shape."""
    from advjax.attacks import _fab_projection

    rng = np.random.default_rng(0)
    a = (rng.integers(0, 256, (2, 37, 3072)) / 255).astype(np.float32)
    got = _fab_projection._host_argsort(a)
    assert got.dtype == np.int32 and got.shape == a.shape
    np.testing.assert_array_equal(got, np.argsort(a, axis=-1, kind="stable"))


def test_the_keyed_sort_is_numpys_stable_argsort_for_signed_zeros_ties_and_extremes():
    """The 64-bit keyed sort gives NumPy's stable indices on rows mixing negative values,
    -0.0 and 0.0 (equal, so ordered by position), repeated values and +-1e12 (the L2
    projection's sentinels), in float32, bfloat16-sized and float64 rows."""
    from advjax.attacks import _fab_projection

    rng = np.random.default_rng(1)
    a = rng.normal(size=(40, 301)).astype(np.float32)
    a[:, ::7], a[:, ::11], a[:, ::13], a[:, ::17] = 0.0, -0.0, 1e12, -1e12
    a[:, ::5] = np.round(a[:, ::5], 1)
    for rows in (a, np.clip(a, -6e4, 6e4).astype(np.float16), a.astype(np.float64)):
        got = _fab_projection._stable_argsort_rows(rows)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, np.argsort(rows, axis=-1, kind="stable"))


class JitOfTheCallerTest(chex.TestCase):
    """FAB's projections, eager and under the caller's jit, equal the bisection reference; the
    attack called eagerly equals its jitted program."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_projections_equal_the_bisection_reference(self):
        rng = np.random.default_rng(3)
        t, w = rng.uniform(0, 1, (6, 16)), rng.normal(size=(6, 16))
        b = np.sum(w * t, 1) + rng.normal(size=6)
        args = [jnp.asarray(v, jnp.float32) for v in (t, w, b)]
        for norm, project in (("linf", projection_linf), ("l2", projection_l2)):
            actual = np.asarray(self.variant(jax.vmap(project))(*args))
            for d_i, t_i, w_i, b_i in zip(actual, t, w, b, strict=True):
                np.testing.assert_allclose(
                    d_i, _bisection_projection(t_i, w_i, b_i, norm), atol=2e-5
                )

    @chex.variants(without_jit=True)
    def test_fab_called_eagerly_equals_the_jitted_program(self):
        _, x, y = tanh_mlp_batch()
        keys = jax.random.split(jax.random.key(5), 8)
        expected = _jitted("linf")(x, y, 0.02, keys)
        actual = self.variant(
            lambda x, y, eps, key: fab(_MLP, x, y, eps, key=key, norm="linf", **_SMALL)
        )(x, y, 0.02, keys)
        assert np.abs(np.asarray(actual.x_adv) - np.asarray(x)).max() <= 0.02 + 1e-6
        chex.assert_trees_all_equal(actual.broken, expected.broken)
        chex.assert_trees_all_close(actual.x_adv, expected.x_adv, atol=1e-6)
