"""Weight averaging (advjax_train: ema_update, recompute_batch_stats, fit with ema_decay) and
the CNN's width multiplier."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax.io import load_checkpoint, save_checkpoint
from advjax_train import (
    BN_RECOMPUTE_BATCHES,
    Batch,
    CompactCNN,
    TrainConfig,
    create_train_state,
    ema_decay_at,
    ema_update,
    evaluate,
    fit,
    recompute_batch_stats,
    to_float,
)


def _data(n: int, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    return Batch(
        rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, n).astype(np.int32),
    )


def test_ema_update_is_the_convex_combination_leaf_by_leaf():
    average = {"a": jnp.zeros(3), "b": {"c": jnp.full((2,), 4.0)}}
    params = {"a": jnp.ones(3), "b": {"c": jnp.zeros(2)}}
    out = ema_update(average, params, 0.75)
    chex.assert_trees_all_close(out, {"a": jnp.full(3, 0.25), "b": {"c": jnp.full((2,), 3.0)}})


def test_the_decay_warms_up_and_then_stays_at_the_given_value():
    assert ema_decay_at(0, 0.999) == pytest.approx(0.1)
    assert ema_decay_at(90, 0.999) == pytest.approx(91 / 100)
    assert ema_decay_at(10**6, 0.999) == 0.999
    decays = [ema_decay_at(t, 0.99) for t in range(2000)]
    assert all(a <= b for a, b in zip(decays, decays[1:]))


def _statistics_step(state, batch, key):
    """A train-mode forward pass that only updates the running statistics (a cheap stand-in
    for a training step: `recompute_batch_stats` keeps nothing else of the step)."""
    _, updates = state.apply_fn(
        {"params": state.params, "batch_stats": state.batch_stats},
        to_float(batch.images),
        train=True,
        rngs={"dropout": key},
        mutable=["batch_stats"],
    )
    return state.replace(params=None, batch_stats=updates["batch_stats"]), {}


def test_recomputed_statistics_belong_to_the_given_weights_and_leave_them_unchanged():
    """Running the step on other weights moves the running statistics away from the state's
    and towards those weights' batch statistics; the weights, the live state's statistics and
    its optimiser state are untouched, and the same batches give the same statistics."""
    config = TrainConfig(batch_size=32, augment=False)
    state = create_train_state(jax.random.key(0), config, 10)
    other = create_train_state(jax.random.key(1), config, 10).params
    step = jax.jit(_statistics_step)
    data = _data(64)
    batches = [(Batch(data.images[i : i + 32], data.labels[i : i + 32]), jax.random.key(i))
               for i in (0, 32)]  # fmt: skip
    before = jax.device_get(state.batch_stats)
    stats = recompute_batch_stats(step, state, other, batches)
    again = recompute_batch_stats(step, state, other, batches)
    chex.assert_trees_all_equal(stats, again)
    chex.assert_trees_all_equal(jax.device_get(state.batch_stats), before)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(jax.device_get(stats), before)
    chex.assert_trees_all_equal_shapes_and_dtypes(stats, state.batch_stats)


def test_fit_with_ema_returns_averaged_weights_selected_by_their_own_validation():
    """With ema_decay, the returned weights are the average (not the live weights), their
    recorded validation accuracy is what evaluate() gives for the returned state, and the
    history also has the live weights' accuracy, which averaging does not change."""
    train, val = _data(96, 1), _data(32, 2)
    config = TrainConfig(epochs=2, batch_size=32, ema_decay=0.9, seed=3)
    plain = fit(
        TrainConfig(epochs=2, batch_size=32, seed=3),
        train,
        val,
        show_progress=False,
        log=lambda _: None,
    )
    first = fit(config, train, val, show_progress=False, log=lambda _: None)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(
            jax.device_get(first.state.params), jax.device_get(plain.state.params)
        )
    assert all("live_val_accuracy" in r for r in first.history)
    assert [r["live_val_accuracy"] for r in first.history] == [
        r["val_accuracy"] for r in plain.history
    ]
    assert evaluate(first.state, val.images, val.labels)["accuracy"] == first.best_val_accuracy
    assert BN_RECOMPUTE_BATCHES >= 1


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -0.1, 1])
def test_ema_decay_outside_the_open_unit_interval_is_refused(bad):
    with pytest.raises(ValueError, match="ema_decay"):
        TrainConfig(ema_decay=bad)


def test_a_wider_cnn_has_wider_layers_and_keeps_its_width_in_the_checkpoint(tmp_path):
    """width=2 doubles every layer's channels (and about quadruples the parameters); the
    checkpoint records it and loads the same model; width 0 or a float is refused."""
    wide = CompactCNN(width=2)
    variables = wide.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)
    kernels = [leaf.shape for leaf in jax.tree.leaves(variables["params"]) if leaf.ndim == 4]
    assert [k[-1] for k in kernels] == [64, 64, 128, 128, 256]
    count = sum(leaf.size for leaf in jax.tree.leaves(variables["params"]))
    assert 3.5 * 403_306 < count < 4.5 * 403_306
    path = save_checkpoint(tmp_path / "wide.msgpack", wide, variables)
    assert load_checkpoint(path, CompactCNN)[0] == wide
    assert create_train_state(jax.random.key(0), TrainConfig(width=2), 1).apply_fn.__self__ == (
        CompactCNN(width=2)
    )
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="width"):
            CompactCNN(width=bad)


@pytest.mark.slow
@pytest.mark.parametrize("with_sentinel", [False, True], ids=["clean_selection", "pgd_selection"])
def test_an_averaged_run_also_returns_the_plain_run_of_the_same_config(with_sentinel):
    """`FitResult.live` of a run with `ema_decay` is the run without it: the same weights,
    selected epoch and history (the `live_` metrics are the plain run's), bit for bit."""
    from advjax_train import SentinelConfig

    train, val = _data(64, 1), _data(32, 2)
    sentinel = None
    if with_sentinel:
        sentinel = SentinelConfig(probe_size=32, steps=2, val_size=32, select_by="val_pgd_accuracy")
    kw = dict(show_progress=False, log=lambda _: None, sentinel=sentinel)
    base = dict(mode="fgsm", epochs=3, batch_size=32, seed=3)
    plain = fit(TrainConfig(**base), train, val, **kw)
    averaged = fit(TrainConfig(**base, ema_decay=0.9), train, val, **kw)
    live = averaged.live
    assert plain.live is None and live is not None
    chex.assert_trees_all_equal(
        jax.device_get(live.state.params), jax.device_get(plain.state.params)
    )
    chex.assert_trees_all_equal(
        jax.device_get(live.state.batch_stats), jax.device_get(plain.state.batch_stats)
    )
    assert (live.best_epoch, live.best_val_accuracy) == (plain.best_epoch, plain.best_val_accuracy)
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert drop(live.history) == drop(plain.history)
    with pytest.raises(AssertionError):
        chex.assert_trees_all_close(
            jax.device_get(averaged.state.params), jax.device_get(live.state.params)
        )
