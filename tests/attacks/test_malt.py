"""MALT's target order (`advjax.attacks.malt_targets`) and the attack on it (`malt`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_boundary_case

from advjax.attacks import malt, malt_targets, perturbation_norm

DUAL = {"linf": 1, "l2": 2}


def _weights(logits_fn, shape):
    """The linear model's weights read off by finite differences of its outputs (exact for
    a linear model; no autodiff)."""
    d = int(np.prod(shape))
    base = np.asarray(logits_fn(jnp.full((1, *shape), 0.5)))[0]
    basis = jnp.eye(d).reshape(d, *shape) * 0.25 + 0.5
    return (np.asarray(logits_fn(basis), np.float64) - base) / 0.25


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_on_a_linear_model_the_order_is_the_exact_boundary_distance_order(norm):
    """For a linear model MALT's linear estimate is exact: the classes come nearest first
    by (z_y - z_t) / ||w_t - w_y||_dual, computed here from the weights in float64."""
    logits_fn, x, y, _ = linear_boundary_case(batch=12, classes=6)
    w = _weights(logits_fn, x.shape[1:])
    z = np.asarray(logits_fn(x), np.float64)
    order = np.asarray(malt_targets(logits_fn, x, y, norm=norm))
    assert order.shape == (12, 5)
    for i in range(12):
        yi = int(y[i])
        dist = {t: (z[i, yi] - z[i, t]) / np.linalg.norm(w[:, t] - w[:, yi], DUAL[norm])
                for t in range(6) if t != yi}  # fmt: skip
        assert sorted(dist, key=dist.get) == order[i].tolist(), (i, dist, order[i])
        assert yi not in order[i]


def test_malt_breaks_the_cases_within_eps_of_their_nearest_class_and_stays_in_the_ball():
    logits_fn, x, y, exact = linear_boundary_case(batch=16, classes=6, seed=3)
    eps = float(np.median(exact["linf"]))
    r = malt(logits_fn, x, y, eps, key=jax.random.key(0), targets=2, steps=50)
    broken = np.asarray((r.broken_step >= 0).any(axis=0))
    clear = np.abs(exact["linf"] - eps) > 0.02 * eps
    np.testing.assert_array_equal(broken[clear], (exact["linf"] <= eps)[clear])
    assert float(perturbation_norm(r.x_adv - x, "linf").max()) <= eps + 1e-6
    assert float(r.x_adv.min()) >= 0 and float(r.x_adv.max()) <= 1


def test_targets_out_of_range_are_refused():
    logits_fn, x, y, _ = linear_boundary_case(classes=6)
    with pytest.raises(ValueError, match="targets=6"):
        malt(logits_fn, x, y, 0.1, key=jax.random.key(0), targets=6)
