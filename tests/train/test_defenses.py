"""Properties of the defenses: FGSM-RS, PGD and TRADES training (advjax_train) and the
catastrophic-overfitting sentinel (advjax_train, `fit(..., sentinel=...)`).

The example generators are checked on the tiny linear model; the train steps on an
8-image synthetic batch with the CompactCNN (eps passed traced, so one compilation per
mode serves eps = 8/255 and eps = 0); `fit` with an injected probe on synthetic data; and
a short real-data run per mode (skipped without ADVJAX_DATA_DIR).
"""

import dataclasses
import functools
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import linear_weights, make_linear_batch, make_linear_logits_fn, numpy_ce_and_grad

import advjax_train._loop
from advjax.attacks._losses import per_example_cross_entropy
from advjax.attacks._pgd import PGD_RULE
from advjax_train import (
    Batch,
    SentinelConfig,
    TrainConfig,
    collapse_flags,
    create_train_state,
    fgsm_rs_train_step,
    fit,
    make_train_step,
    pgd_accuracy,
    pgd_train_step,
    random_start_pgd,
    standard_train_step,
    trades_examples,
    trades_train_step,
)

EPS = 8 / 255
TOL = 1e-6
KEY = jax.random.key(0)


def _linear_setup(n: int = 16):
    logits_fn = make_linear_logits_fn()
    x, y = make_linear_batch(n=n)
    return logits_fn, jnp.asarray(x), jnp.asarray(y)


def _assert_in_ball(x_adv, x, eps):
    x_adv, x = np.asarray(x_adv), np.asarray(x)
    assert x_adv.shape == x.shape and x_adv.dtype == x.dtype
    assert np.max(np.abs(x_adv - x)) <= eps + TOL
    assert x_adv.min() >= 0.0 and x_adv.max() <= 1.0


# ---------------------------------------------------------------------------
# Example generators (linear model).


@pytest.mark.parametrize("steps,fraction", [(1, 1.25), (7, 0.25), (3, 2.0)])
@pytest.mark.parametrize("eps", [EPS, 0.3])
def test_random_start_pgd_stays_in_eps_ball_and_raises_the_loss(steps, fraction, eps):
    """FGSM-RS / PGD training examples lie in the eps-ball and [0, 1] (also when the step
    overshoots the ball) and have a higher mean loss than the clean batch."""
    logits_fn, x, y = _linear_setup()
    x_adv = random_start_pgd(logits_fn, x, y, eps, key=KEY, steps=steps, step_size=fraction * eps)
    _assert_in_ball(x_adv, x, eps)
    loss = lambda z: float(per_example_cross_entropy(logits_fn(z), y).mean())  # noqa: E731
    assert loss(x_adv) > loss(x)


def test_random_start_pgd_is_deterministic_per_key_and_identity_at_eps_zero():
    """Same key -> identical examples; another key -> another random start; eps=0 -> x."""
    logits_fn, x, y = _linear_setup()
    run = functools.partial(random_start_pgd, logits_fn, x, y, EPS, steps=1, step_size=1.25 * EPS)
    chex.assert_trees_all_equal(run(key=KEY), run(key=KEY))
    assert not np.array_equal(run(key=KEY), run(key=jax.random.key(1)))
    x0 = random_start_pgd(logits_fn, x, y, 0.0, key=KEY, steps=7, step_size=0.0)
    chex.assert_trees_all_equal(x0, x)


def test_random_start_pgd_last_iterate_is_pgd_steps_from_the_random_start():
    """One step from the random start x0 is clip(proj(x0 + a * sign(grad at x0)))."""
    logits_fn, x, y = _linear_setup()
    delta = jax.random.uniform(KEY, x.shape, x.dtype, minval=-EPS, maxval=EPS)
    x0 = jnp.clip(x + delta, 0.0, 1.0)
    grad = jax.grad(lambda z: per_example_cross_entropy(logits_fn(z), y).sum())(x0)
    want = jnp.clip(jnp.clip(x0 + 1.25 * EPS * jnp.sign(grad), x - EPS, x + EPS), 0.0, 1.0)
    got = random_start_pgd(logits_fn, x, y, EPS, key=KEY, steps=1, step_size=1.25 * EPS)
    chex.assert_trees_all_close(got, want, atol=TOL, rtol=0)


def test_trades_examples_stay_in_eps_ball_and_raise_the_kl():
    """TRADES's inner maximisation stays in the eps-ball and [0, 1], is deterministic per
    key and moves the prediction away from the clean one (KL > that of its start)."""
    logits_fn, x, _ = _linear_setup()
    x_adv = trades_examples(logits_fn, x, EPS, key=KEY, steps=5, step_size=0.25 * EPS)
    _assert_in_ball(x_adv, x, EPS)
    chex.assert_trees_all_equal(
        x_adv, trades_examples(logits_fn, x, EPS, key=KEY, steps=5, step_size=0.25 * EPS)
    )
    p = jax.nn.log_softmax(logits_fn(x))
    kl = lambda z: float(jnp.sum(jnp.exp(p) * (p - jax.nn.log_softmax(logits_fn(z)))))  # noqa: E731
    x_random = jnp.clip(x + jax.random.uniform(KEY, x.shape, minval=-EPS, maxval=EPS), 0, 1)
    assert kl(x_adv) > 10 * kl(x_random)


@pytest.mark.parametrize(
    "kwargs,fragment", [(dict(steps=0), "steps"), (dict(steps=1, eps=1.5), "eps")]
)
def test_random_start_pgd_rejects_bad_arguments(kwargs, fragment):
    """steps < 1 or eps outside [0, 1] raise ValueError naming the argument."""
    logits_fn, x, y = _linear_setup()
    kwargs = {"eps": EPS, "step_size": EPS, **kwargs}
    with pytest.raises(ValueError, match=fragment):
        random_start_pgd(logits_fn, x, y, kwargs.pop("eps"), key=KEY, **kwargs)


class GeneratorVariantsTest(chex.TestCase):
    """The generators, called eagerly and under the caller's jit, equal a NumPy transcription."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_random_start_pgd_matches_a_numpy_transcription(self):
        """From the same random start (the PGD rule's start with the key), 3 signed steps of eps/4 on
        the closed-form gradient, each projected to the eps-ball and [0, 1]; the last iterate."""
        logits_fn, x, y = _linear_setup()
        w, b = linear_weights(logits_fn)
        x_k = np.asarray(PGD_RULE.start(jnp.asarray(x), EPS, KEY).x_adv, np.float64)
        for _ in range(3):
            _, grad, _ = numpy_ce_and_grad(w, b, x_k, y)
            x_k = np.clip(np.clip(x_k + EPS / 4 * np.sign(grad), x - EPS, x + EPS), 0.0, 1.0)
        actual = self.variant(
            lambda x, y, eps, key: random_start_pgd(
                logits_fn, x, y, eps, key=key, steps=3, step_size=eps / 4
            )
        )(x, y, EPS, KEY)
        np.testing.assert_allclose(np.asarray(actual), x_k, atol=TOL, rtol=0)


# ---------------------------------------------------------------------------
# TrainConfig.


def test_new_fields_default_to_none_and_old_configs_are_unchanged():
    """Existing configs keep every old field's value (augment_pad's default 4 is the crop,
    activation's default ReLU the activation and width 1 the CNN they always used); the
    adversarial ones and the weight averaging are None (mode defaults, no averaging), and
    each mode resolves to its paper's settings."""
    old = {
        "mode": "standard", "epochs": 12, "batch_size": 128, "learning_rate": 1e-3,
        "weight_decay": 5e-4, "dropout_rate": 0.5, "adv_eps": 8 / 255, "augment": True,
        "seed": 42, "augment_pad": 4, "activation": "relu", "width": 1,
    }  # fmt: skip
    d = dataclasses.asdict(TrainConfig())
    assert {k: d[k] for k in old} == old
    assert {k: v for k, v in d.items() if k not in old} == dict.fromkeys(
        ("adv_steps", "adv_step_fraction", "adv_mix", "trades_beta", "ema_decay")
    )
    assert TrainConfig().adv_settings() == {}
    assert TrainConfig(mode="fgsm").adv_settings() == {"adv_mix": True}
    assert TrainConfig(mode="fgsm_rs").adv_settings() == {
        "adv_step_fraction": 1.25,
        "adv_mix": False,
    }
    assert TrainConfig(mode="pgd", adv_steps=3).adv_settings() == {
        "adv_steps": 3,
        "adv_step_fraction": 0.25,
        "adv_mix": False,
    }
    assert TrainConfig(mode="trades").adv_settings() == {
        "adv_steps": 10,
        "adv_step_fraction": 0.25,
        "trades_beta": 6.0,
    }


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (dict(mode="fgsm", adv_step_fraction=1.25), "adv_step_fraction"),
        (dict(mode="fgsm_rs", adv_steps=2), "adv_steps"),
        (dict(mode="standard", adv_mix=True), "adv_mix"),
        (dict(mode="trades", adv_mix=True), "adv_mix"),
        (dict(mode="pgd", trades_beta=1.0), "trades_beta"),
        (dict(mode="pgd", adv_steps=0), "adv_steps"),
        (dict(mode="pgd", adv_steps=True), "adv_steps"),
        (dict(mode="pgd", adv_step_fraction=0.0), "adv_step_fraction"),
        (dict(mode="pgd", adv_step_fraction=math.nan), "adv_step_fraction"),
        (dict(mode="pgd", adv_mix=1), "adv_mix"),
        (dict(mode="trades", trades_beta=-1.0), "trades_beta"),
    ],
)
def test_train_config_rejects_unused_or_bad_adversarial_settings(overrides, fragment):
    """A setting the mode does not use, or an out-of-range one, raises naming the field."""
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(**overrides)


# ---------------------------------------------------------------------------
# Train steps (CompactCNN, 8 synthetic images, eps traced).

N = 8
MODES = {
    "fgsm_rs": functools.partial(fgsm_rs_train_step, step_fraction=1.25),
    "pgd": functools.partial(pgd_train_step, steps=3, step_fraction=0.25),
    "trades": functools.partial(trades_train_step, steps=2, step_fraction=0.25, beta=6.0),
}


def _synthetic(n: int, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(
        rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, n).astype(np.int32),
    )


@pytest.fixture(scope="module")
def small_batch() -> Batch:
    return Batch(*map(jnp.asarray, _synthetic(N)))


@pytest.fixture(scope="module")
def small_state():
    """Dropout and augmentation on, so that every key of the steps matters."""
    return create_train_state(jax.random.key(0), TrainConfig(dropout_rate=0.5), total_steps=10)


def _copy(state):
    """A copy of `state` for a step that donates its input buffers (`make_train_step`)."""
    return jax.tree.map(jnp.copy, state)


@pytest.fixture(scope="module")
def jitted_steps():
    """Each step under jax.jit, eps a traced keyword argument."""
    return {mode: jax.jit(step) for mode, step in MODES.items()} | {
        "standard": jax.jit(standard_train_step)
    }


@pytest.mark.parametrize("mode", list(MODES))
def test_new_steps_are_pure_deterministic_and_key_dependent(
    mode, jitted_steps, small_state, small_batch
):
    """Jitted step: same state, batch and key -> identical state and metrics; the inputs
    are left unchanged; another key gives other parameters; metrics are finite."""
    step = jitted_steps[mode]
    before = jax.device_get(small_state)
    a_state, a_metrics = step(small_state, small_batch, KEY, eps=EPS)
    b_state, b_metrics = step(small_state, small_batch, KEY, eps=EPS)
    chex.assert_trees_all_equal(jax.device_get(small_state), before)
    chex.assert_trees_all_equal((a_state.params, a_state.batch_stats, a_metrics),
                                (b_state.params, b_state.batch_stats, b_metrics))  # fmt: skip
    c_state, _ = step(small_state, small_batch, jax.random.key(1), eps=EPS)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_equal(a_state.params, c_state.params)
    expected = {"loss", "adv_accuracy"} | ({"accuracy", "kl"} if mode == "trades" else set())
    assert set(a_metrics) == expected
    assert all(math.isfinite(float(v)) for v in a_metrics.values())
    assert int(a_state.step) == 1
    assert step._cache_size() == 1  # one compilation for every key (and eps)


@pytest.mark.parametrize("mode", ["fgsm_rs", "pgd"])
def test_at_eps_zero_new_steps_equal_the_standard_step(
    mode, jitted_steps, small_state, small_batch
):
    """With eps=0 and adversarial-only batches, FGSM-RS and PGD train on x itself. Their
    keys are split(key, 4) = (augmentation, dropout, start, attack), whose first two are
    the standard step's split(key, 2) (JAX's counter-based threefry split), so the update
    equals the standard step's on the same key, augmentation and dropout included."""
    keys4, keys2 = jax.random.split(KEY, 4)[:2], jax.random.split(KEY, 2)
    np.testing.assert_array_equal(jax.random.key_data(keys4), jax.random.key_data(keys2))
    state, metrics = jitted_steps[mode](small_state, small_batch, KEY, eps=0.0)
    want_state, want = jitted_steps["standard"](small_state, small_batch, KEY)
    chex.assert_trees_all_close(state.params, want_state.params, atol=1e-6, rtol=1e-5)
    chex.assert_trees_all_close(state.batch_stats, want_state.batch_stats, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss"], want["loss"], rtol=1e-6)
    assert metrics["adv_accuracy"] == want["accuracy"]


def test_make_train_step_builds_each_mode_from_the_config(small_state, small_batch):
    """make_train_step's program for each mode makes the update of that mode's pure step
    with the config's settings (here: eps 0 for the adversarial modes, so FGSM-RS and PGD
    train on x itself, and TRADES without its KL term, equal the standard step; FGSM, which
    mixes clean and attacked batches, does not)."""
    settings = {"fgsm_rs": {}, "pgd": {}, "trades": {"trades_beta": 0.0}}
    want, _ = jax.jit(standard_train_step)(_copy(small_state), small_batch, KEY)
    for mode in ("standard", "fgsm", "fgsm_rs", "pgd", "trades"):
        config = TrainConfig(mode=mode, adv_eps=0.0, **settings.get(mode, {}))
        state, metrics = make_train_step(config)(_copy(small_state), small_batch, KEY)
        assert np.isfinite(float(metrics["loss"])), mode
        same = jax.tree.map(
            lambda a, b: np.allclose(a, b, atol=1e-6, rtol=1e-5), state.params, want.params
        )
        assert all(jax.tree.leaves(same)) == (mode != "fgsm"), mode


# ---------------------------------------------------------------------------
# Sentinel rule.


def test_collapse_rule_flags_a_collapse_and_not_a_steady_rise():
    """A drop of more than max_drop below the best epoch so far is flagged (and stays
    flagged while it lasts); a steady or noisy rise, or a drop of exactly max_drop, is not."""
    steady = [0.05, 0.15, 0.22, 0.26, 0.25, 0.28, 0.27]
    assert collapse_flags(steady) == [False] * len(steady)
    collapse = [0.10, 0.30, 0.38, 0.40, 0.12, 0.01, 0.02]
    assert collapse_flags(collapse) == [False] * 4 + [True] * 3
    assert collapse_flags([0.5, 0.25, 0.3], max_drop=0.25) == [False, False, False]
    assert collapse_flags([0.4, 0.25], max_drop=0.2, min_ratio=0.7) == [False, True]
    assert collapse_flags([]) == []


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (dict(probe_size=0), "probe_size"),
        (dict(steps=0), "steps"),
        (dict(eps=2.0), "eps"),
        (dict(max_drop=1.5), "max_drop"),
        (dict(min_ratio=1.0), "min_ratio"),
        (dict(select_by="test_accuracy"), "select_by"),
        (dict(step_fraction=0.0), "step_fraction"),
    ],
)
def test_sentinel_config_rejects_bad_values(overrides, fragment):
    with pytest.raises(ValueError, match=fragment):
        SentinelConfig(**overrides)


# ---------------------------------------------------------------------------
# fit with an injected probe (synthetic data, standard mode).


def _scripted_fit(monkeypatch, sentinel, val_accuracies, probe_records):
    """fit for len(val_accuracies) epochs with scripted validation accuracy and probe
    metrics; returns the result and each epoch's parameters."""
    train = _synthetic(32, seed=1)
    val = Batch(train.images[:8], train.labels[:8])
    real_evaluate, params_by_epoch = advjax_train.evaluate, []
    accuracies, records = iter(val_accuracies), iter(probe_records)

    def scripted_evaluate(state, images, labels):
        params_by_epoch.append(jax.device_get(state.params))
        return {**real_evaluate(state, images, labels), "accuracy": next(accuracies)}

    def scripted_make_probe(sentinel_, adv_eps, train_, val_):
        assert sentinel_ is sentinel and adv_eps == 8 / 255 and val_ is val
        return lambda state: dict(next(records))

    monkeypatch.setattr(advjax_train._loop, "evaluate", scripted_evaluate)
    monkeypatch.setattr(advjax_train._loop, "make_probe", scripted_make_probe)
    config = TrainConfig(epochs=len(val_accuracies), batch_size=16, augment=False)
    result = fit(config, train, val, show_progress=False, log=lambda _: None, sentinel=sentinel)
    return result, params_by_epoch


def _probe(pgd, val_pgd=None):
    record = {"probe_clean_accuracy": 0.5, "probe_fgsm_accuracy": 0.5, "probe_pgd_accuracy": pgd}
    return record if val_pgd is None else {**record, "val_pgd_accuracy": val_pgd}


def test_fit_stops_on_a_flagged_collapse_and_never_keeps_the_collapsed_epoch(monkeypatch):
    """Probe PGD accuracy 0.30, 0.35, 0.05 (a drop of 0.30 > 0.2) with stop_on_collapse:
    training ends after epoch 3 of 5, epoch 3 is flagged, and although it has the best
    clean validation accuracy the kept epoch is epoch 2."""
    sentinel = SentinelConfig(stop_on_collapse=True)
    result, params = _scripted_fit(
        monkeypatch, sentinel, [0.3, 0.4, 0.9, 0.95, 0.95], [_probe(a) for a in (0.3, 0.35, 0.05)]
    )
    assert [r["collapse"] for r in result.history] == [False, False, True]
    assert [r["probe_pgd_accuracy"] for r in result.history] == [0.3, 0.35, 0.05]
    assert result.best_epoch == 2 and result.best_val_accuracy == 0.4
    chex.assert_trees_all_equal(jax.device_get(result.state.params), params[1])


def test_fit_selects_the_epoch_with_the_best_robust_validation_accuracy(monkeypatch):
    """select_by='val_pgd_accuracy' keeps epoch 2 (val PGD 0.3) over epoch 1 (best clean
    validation accuracy 0.6); best_val_accuracy is epoch 2's clean accuracy."""
    sentinel = SentinelConfig(select_by="val_pgd_accuracy")
    result, params = _scripted_fit(
        monkeypatch, sentinel, [0.6, 0.4, 0.5], [_probe(0.2, v) for v in (0.1, 0.3, 0.2)]
    )
    assert len(result.history) == 3 and not any(r["collapse"] for r in result.history)
    assert [r["val_pgd_accuracy"] for r in result.history] == [0.1, 0.3, 0.2]
    assert result.best_epoch == 2 and result.best_val_accuracy == 0.4
    chex.assert_trees_all_equal(jax.device_get(result.state.params), params[1])


# ---------------------------------------------------------------------------
# Short real runs.


@pytest.fixture(scope="module")
def real_subsets(cifar10):
    """512 training and 100 validation images (from the CIFAR-10 training set)."""
    train = Batch(cifar10.train_images[:512], cifar10.train_labels[:512])
    val = Batch(cifar10.train_images[-100:], cifar10.train_labels[-100:])
    return train, val


@pytest.mark.slow
@pytest.mark.parametrize("mode,epochs", [("fgsm_rs", 2), ("pgd", 1)])
def test_short_real_run_trains_without_nan_and_records_the_probe(mode, epochs, real_subsets):
    """fgsm_rs (2 epochs) and pgd (1 epoch, 7 steps) on 512 real images: finite losses,
    probe and validation PGD accuracies in [0, 1] in every record, and the probe's PGD
    at eps=0 is exactly its clean accuracy."""
    train, val = real_subsets
    config = TrainConfig(mode=mode, epochs=epochs, batch_size=64, seed=0)
    sentinel = SentinelConfig(probe_size=100, steps=5, select_by="val_pgd_accuracy", val_size=100)
    lines = []
    result = fit(config, train, val, show_progress=False, log=lines.append, sentinel=sentinel)
    assert len(result.history) == epochs and len(lines) == epochs
    for record in result.history:
        assert math.isfinite(record["train_loss"]) and record["collapse"] is False
        for name in ("probe_clean_accuracy", "probe_fgsm_accuracy", "probe_pgd_accuracy",
                     "val_pgd_accuracy", "val_subset_clean_accuracy"):  # fmt: skip
            assert 0.0 <= record[name] <= 1.0, name
        assert record["val_subset_clean_accuracy"] == record["val_accuracy"]  # all 100
    assert "probe clean" in lines[0] and "val pgd" in lines[0]
    at_zero = pgd_accuracy(
        result.state, val.images, val.labels, eps=0.0, steps=5, step_size=0.0, key=KEY,
        batch_size=100,
    )  # fmt: skip
    assert at_zero["pgd_accuracy"] == at_zero["fgsm_accuracy"] == at_zero["clean_accuracy"]
    assert at_zero["clean_accuracy"] == result.best_val_accuracy
