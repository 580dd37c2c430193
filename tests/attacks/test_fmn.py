"""Properties of the Fast Minimum-Norm attack (`advjax.attacks.fmn`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_boundary_case, tanh_mlp_batch

from advjax.attacks import ATTACKS, fmn, perturbation_norm


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_finds_the_closed_form_minimal_distance_of_a_linear_model(norm):
    """Never below the exact minimum (it is the distance of a real adversarial point), and
    within 2 % of it after 100 steps on every case. An exactly linear model is FMN's
    degenerate case: its boundary estimate is exact, and in L2 the projection puts the
    iterate on the boundary along the gradient, where it can stay, rounding to the true
    class, without ever crossing; the confirming push must carry it across."""
    logits_fn, x, y, exact = linear_boundary_case(batch=16)
    r = jax.jit(lambda a, b: fmn(logits_fn, a, b, norm=norm, steps=100))(x, y)
    d = np.asarray(r.distance, np.float64)
    assert np.all(d >= exact[norm] * (1 - 1e-4)), (d, exact[norm])
    assert np.all(d <= exact[norm] * 1.02), d / exact[norm]


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_returned_points_are_adversarial_in_the_box_at_the_reported_distance(norm):
    logits_fn, x, y = tanh_mlp_batch(batch=16)
    r = fmn(logits_fn, x, y, norm=norm, steps=50)
    found = np.isfinite(np.asarray(r.distance))
    assert found.sum() >= 12
    assert bool(jnp.all((jnp.argmax(logits_fn(r.x_adv), -1) != y)[found]))
    assert float(r.x_adv.min()) >= 0 and float(r.x_adv.max()) <= 1
    size = np.asarray(perturbation_norm(r.x_adv - x, norm))
    np.testing.assert_allclose(size[found], np.asarray(r.distance)[found], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(r.x_adv)[~found], np.asarray(x)[~found])


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_returned_points_clear_the_boundary_by_more_than_rounding(norm):
    """Minimum-norm points lie on the boundary, where the last bit of the logits decides;
    the point returned is adversarial by a margin that a differently compiled forward pass
    (here: eager, one example at a time, in float64 after the logits) does not round away."""
    logits_fn, x, y = tanh_mlp_batch(batch=16)
    r = jax.jit(lambda a, b: fmn(logits_fn, a, b, norm=norm, steps=100))(x, y)
    found = np.flatnonzero(np.isfinite(np.asarray(r.distance)))
    assert len(found) >= 12
    for i in found:
        z = np.asarray(logits_fn(r.x_adv[i : i + 1]), np.float64)[0]
        gap = np.max(np.delete(z, int(y[i]))) - z[int(y[i])]
        assert gap > 0, (i, gap)


def test_misclassified_inputs_are_returned_unchanged_at_distance_zero():
    logits_fn, x, y, _ = linear_boundary_case(seed=2)
    wrong = (jnp.argmax(logits_fn(x), -1) + 1) % 6
    r = fmn(logits_fn, x, wrong, steps=5)
    np.testing.assert_array_equal(r.distance, 0.0)
    np.testing.assert_array_equal(r.x_adv, x)
    np.testing.assert_array_equal(r.first_step, 0)


def test_a_smaller_budget_is_never_reached_sooner():
    """`first_step` dates the first adversarial iterate within eps: a tighter eps is never
    reached at an earlier step, and a case whose distance exceeds eps has none (-1)."""
    logits_fn, x, y, exact = linear_boundary_case(seed=3)
    loose = fmn(logits_fn, x, y, steps=60, eps=0.3)
    tight = fmn(logits_fn, x, y, steps=60, eps=float(np.median(exact["linf"])))
    reached = np.asarray(tight.first_step) >= 0
    assert reached.any() and not reached.all()
    assert np.all(np.asarray(tight.first_step)[reached] >= np.asarray(loose.first_step)[reached])
    assert np.all(np.asarray(tight.distance)[~reached] > float(np.median(exact["linf"])))


def test_eager_call_equals_the_jitted_program():
    logits_fn, x, y, _ = linear_boundary_case(seed=4)
    eager = fmn(logits_fn, x, y, norm="l2", steps=20)
    jitted = jax.jit(lambda a, b: fmn(logits_fn, a, b, norm="l2", steps=20))(x, y)
    np.testing.assert_allclose(eager.distance, jitted.distance, rtol=1e-3)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(norm="l1"), "norm"),
        (dict(steps=0), "steps"),
        (dict(alpha_init=0.0), "alpha_init"),
        (dict(gamma_init=1.5), "gamma_init"),
        (dict(eps=-1.0), "eps"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(kwargs, match):
    logits_fn, x, y, _ = linear_boundary_case()
    with pytest.raises(ValueError, match=match):
        fmn(logits_fn, x, y, **kwargs)


def test_pixels_outside_the_unit_interval_are_refused():
    logits_fn, x, y, _ = linear_boundary_case()
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fmn(logits_fn, x + 1.0, y)


def test_registry_run_breaks_exactly_the_cases_within_eps():
    """As a bounded attack (campaigns, AutoAttack members): broken where the minimal
    distance is within eps, the returned point inside the eps-ball either way."""
    logits_fn, x, y, exact = linear_boundary_case(seed=5)
    eps = float(np.median(exact["linf"]))
    info = ATTACKS["fmn"]
    r = info.run(logits_fn, x, y, eps, keys=None, restart=0, target=0, norm="linf", steps=100,
                 options={})  # fmt: skip
    broken = np.asarray(r.broken) >= 0
    clear = np.abs(exact["linf"] - eps) > 0.02 * eps
    np.testing.assert_array_equal(broken[clear], (exact["linf"] <= eps)[clear])
    assert float(perturbation_norm(r.x_adv - x, "linf").max()) <= eps + 1e-6
    wrong = np.asarray(jnp.argmax(logits_fn(r.x_adv), -1) != y)
    np.testing.assert_array_equal(wrong[broken], True)
