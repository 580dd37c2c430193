"""MI-FGSM (Dong et al. 2018), the attack added as one module on the attack wrapper: it follows
the paper's algorithm iterate by iterate, keeps the ball and [0, 1], and every runner takes it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_weights, make_linear_batch, make_linear_logits_fn, numpy_ce_and_grad

from advjax.attacks import ATTACKS, fgsm, perturbation_norm
from advjax.data import EvalCases
from advjax.evaluation import AttackSpec, Model, ThreatModel, autoattack, run_attack
from advjax.records import RecordLog

MI_FGSM = ATTACKS["mi-fgsm"]
KEY = jax.random.key(0)


def numpy_mi_fgsm(w, b, x, y, eps, steps, decay, norm):
    """Algorithm 1 of Dong et al. in float64: g <- mu g + grad / ||grad||_1, x <- x + alpha
    sign(g) (L2: g / ||g||_2), alpha = eps / T, clipped to the ball and [0, 1]; returns every
    iterate."""
    x = x.astype(np.float64)
    g, x_k, iterates = np.zeros_like(x), x.copy(), [x.copy()]
    axes = tuple(range(1, x.ndim))
    for _ in range(steps):
        _, grad, _ = numpy_ce_and_grad(w, b, x_k, y)
        g = decay * g + grad / (np.abs(grad).sum(axes, keepdims=True) + 1e-12)
        if norm == "linf":
            x_k = np.clip(np.clip(x_k + eps / steps * np.sign(g), x - eps, x + eps), 0, 1)
        else:
            direction = g / (np.sqrt((g**2).sum(axes, keepdims=True)) + 1e-12)
            delta = x_k + eps / steps * direction - x
            size = np.sqrt((delta**2).sum(axes, keepdims=True))
            x_k = np.clip(x + delta * np.minimum(1, eps / (size + 1e-12)), 0, 1)
        iterates.append(x_k.copy())
    return iterates


@pytest.mark.parametrize("norm, eps", [("linf", 8 / 255), ("l2", 0.5)])
def test_each_iterate_follows_the_papers_algorithm(norm, eps):
    """The wrapper's iterates (the rule stepped by the shared loop, which projects) are the
    transcription's, step by step; the function returns the first misclassified one."""
    logits_fn = make_linear_logits_fn()
    w, b = linear_weights(logits_fn)
    x, y = make_linear_batch(n=12)
    y = np.asarray(jnp.argmax(logits_fn(x), -1), np.int32)  # every case starts correct
    steps = 6
    reference = numpy_mi_fgsm(w, b, x, y, eps, steps, 1.0, norm)
    rule, state = MI_FGSM.rule, MI_FGSM.rule.start(jnp.asarray(x), eps, KEY, norm)
    for k in range(steps):
        state = rule.run_steps(logits_fn, state, jnp.asarray(x), y, eps, eps / steps, k, k + 1,
                               norm=norm)  # fmt: skip
        np.testing.assert_allclose(state.x_adv, reference[k + 1], atol=2e-5)
    ours = np.asarray(MI_FGSM(logits_fn, x, y, eps, key=KEY, steps=steps, norm=norm).x_adv)
    for i in range(len(y)):
        wrong = [
            k for k, it in enumerate(reference) if (it[i].reshape(-1) @ w + b).argmax() != y[i]
        ]
        if wrong:
            np.testing.assert_allclose(ours[i], reference[wrong[0]][i], atol=2e-5)
    assert 0 < sum(bool(np.any(ours[i] != x[i])) for i in range(len(y)))


@pytest.mark.parametrize("norm, eps", [("linf", 8 / 255), ("linf", 0.3), ("l2", 0.5), ("l2", 3.0)])
def test_points_stay_in_the_ball_and_the_box(norm, eps):
    logits_fn = make_linear_logits_fn(1)
    x, y = make_linear_batch(1, n=16)
    x_adv = MI_FGSM(logits_fn, x, y, eps, key=KEY, steps=7, norm=norm).x_adv
    assert float(jnp.min(x_adv)) >= 0 and float(jnp.max(x_adv)) <= 1
    size = np.asarray(perturbation_norm(x_adv - x, norm))
    assert (size <= eps * (1 + 1e-5) + 1e-6).all()


def test_eps_zero_returns_the_input_and_one_step_without_momentum_is_fgsm():
    logits_fn = make_linear_logits_fn(2)
    x, _ = make_linear_batch(2, n=8)
    y = np.asarray(jnp.argmax(logits_fn(x), -1), np.int32)  # attacked from a correct start
    np.testing.assert_array_equal(MI_FGSM(logits_fn, x, y, 0.0, key=KEY).x_adv, x)
    one = MI_FGSM(logits_fn, x, y, 8 / 255, key=KEY, steps=1, decay=0.0).x_adv
    np.testing.assert_allclose(one, fgsm(logits_fn, x, y, 8 / 255).x_adv, atol=1e-7)


def test_momentum_changes_the_path():
    """decay is passed through to the step rule: no momentum (decay 0) is a different attack."""
    logits_fn = make_linear_logits_fn(3)
    x, _ = make_linear_batch(3, n=8)
    y = np.asarray(jnp.argmax(logits_fn(x), -1), np.int32)
    with_m = MI_FGSM(logits_fn, x, y, 0.5, key=KEY, steps=5, norm="l2").x_adv
    without = MI_FGSM(logits_fn, x, y, 0.5, key=KEY, steps=5, norm="l2", decay=0.0).x_adv
    assert not np.allclose(with_m, without)
    with pytest.raises(TypeError, match="unknown hyper-parameter.*momentum"):
        MI_FGSM(logits_fn, x, y, 0.5, key=KEY, momentum=0.5)


def test_an_undeclared_norm_and_bad_inputs_are_refused_before_any_work():
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=4)
    with pytest.raises(
        ValueError, match="'mi-fgsm' runs under norm linf or l2 only, got norm='l1'"
    ):
        MI_FGSM(logits_fn, x, y, 1.0, key=KEY, norm="l1")
    with pytest.raises(ValueError, match=r"eps=1.5 must be in \[0, 1\]"):
        MI_FGSM(logits_fn, x, y, 1.5, key=KEY)
    with pytest.raises(ValueError, match=r"x must lie in \[0, 1\]"):
        MI_FGSM(logits_fn, x * 255, y, 0.1, key=KEY)


def test_the_runners_take_it_from_the_registry_alone(tmp_path):
    """A campaign (chunked, broken cases dropped between chunks) gives the function's verdicts
    case by case (MI-FGSM draws nothing at random, so any key); AutoAttack runs it as a member
    and counts its declared passes."""
    logits_fn = make_linear_logits_fn(4)
    x, y = make_linear_batch(4, n=20)
    y = np.asarray(jnp.argmax(logits_fn(x), -1), np.int32)
    eps = 0.5
    spec = AttackSpec(name="mi", method="mi-fgsm", eps=(eps,), steps=10, norm="l2", batch_size=8)
    log = RecordLog(tmp_path / "records.jsonl")
    run_attack(log, Model("m", logits_fn, "h"), EvalCases(x, y), spec,
               threat_model=ThreatModel(eps=(eps,), steps=10, norm="l2"), key=KEY,
               show_progress=False, log_line=lambda _: None)  # fmt: skip
    alone = MI_FGSM(logits_fn, x, y, eps, key=KEY, steps=10, norm="l2").x_adv
    broken = np.asarray(jnp.argmax(logits_fn(alone), -1)) != y
    records = sorted(log.read(), key=lambda r: r.case_id)
    assert [r.status == "success" for r in records] == list(broken)
    assert broken.any() and not broken.all()

    member = AttackSpec("mi-fgsm", steps=10)
    result = autoattack(logits_fn, x, y, eps, key=KEY, norm="l2", members=[member])
    assert np.array_equal(~result.robust, broken)
    assert result.passes[0]["forward"] == 11 * len(y) and result.passes[0]["backward"] == 10 * len(
        y
    )
