"""Properties of advjax_train (config, steps), advjax.io and advjax_train."""

import dataclasses
import math
import pickle

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization

import advjax.records._atomic
import advjax_train._loop
from advjax.io import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from advjax.io._checkpoint import seal_checkpoint
from advjax_train import (
    Batch,
    CompactCNN,
    TrainConfig,
    create_train_state,
    evaluate,
    fit,
    make_train_step,
)

STEPS = 8
BATCH = 32


def _config(mode: str) -> TrainConfig:
    return TrainConfig(mode=mode, batch_size=BATCH, augment=False, dropout_rate=0.0)


@pytest.fixture(scope="module")
def fixed_batch(cifar10) -> Batch:
    """The first 32 real training images (uint8) and labels."""
    images, labels = cifar10.train_images[:BATCH], cifar10.train_labels[:BATCH]
    return Batch(jnp.asarray(images), jnp.asarray(labels))


@pytest.fixture(scope="module")
def train_steps():
    """One jitted train step per mode (shared so each compiles once per module)."""
    return {mode: make_train_step(_config(mode)) for mode in ("standard", "fgsm")}


@pytest.fixture(scope="module")
def initial_state():
    """A fresh train state (the same for both modes: only `mode` differs between configs)."""
    return create_train_state(jax.random.key(0), _config("standard"), total_steps=STEPS)


def _copy(tree):
    """A copy of a state, since make_train_step donates (invalidates) its state argument."""
    return jax.tree.map(jnp.copy, tree)


# ---------------------------------------------------------------------------
# Train steps.


@pytest.mark.parametrize("mode", ["standard", "fgsm"])
def test_repeated_steps_on_one_real_batch_lower_the_loss(
    mode, fixed_batch, train_steps, initial_state
):
    """Eight steps on one fixed real batch (no augmentation) cut the training loss clearly."""
    state, step = _copy(initial_state), train_steps[mode]
    losses = []
    for i in range(STEPS):
        state, metrics = step(state, fixed_batch, jax.random.fold_in(jax.random.key(1), i))
        losses.append(float(metrics["loss"]))
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < 0.75 * losses[0], losses
    if mode == "fgsm":
        assert set(metrics) == {"loss", "accuracy", "adv_accuracy"}
        for name in ("accuracy", "adv_accuracy"):
            chex.assert_shape(metrics[name], ())
            assert 0.0 <= float(metrics[name]) <= 1.0
    else:
        assert set(metrics) == {"loss", "accuracy"}


@pytest.mark.parametrize("mode", ["standard", "fgsm"])
def test_train_step_is_deterministic(mode, fixed_batch, train_steps, initial_state):
    """Same state, batch and key -> bit-identical new params, batch stats and metrics.

    (make_train_step donates its state argument, so each call gets its own copy.)
    """
    state, step = initial_state, train_steps[mode]
    key = jax.random.key(5)
    a_state, a_metrics = step(_copy(state), fixed_batch, key)
    b_state, b_metrics = step(_copy(state), fixed_batch, key)
    chex.assert_trees_all_equal(a_state.params, b_state.params)
    chex.assert_trees_all_equal(a_state.batch_stats, b_state.batch_stats)
    chex.assert_trees_all_equal(a_metrics, b_metrics)
    changed = jax.tree.map(lambda a, b: not np.array_equal(a, b), state.params, a_state.params)
    assert all(jax.tree.leaves(changed)), "every parameter should move in one AdamW step"


# ---------------------------------------------------------------------------
# TrainConfig.


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (dict(mode="foo"), "mode"),
        (dict(epochs=0), "epochs"),
        (dict(epochs=-2), "epochs"),
        (dict(epochs=1.5), "epochs"),
        (dict(batch_size=0), "batch_size"),
        (dict(adv_eps=-0.01), "eps"),
        (dict(adv_eps=1.5), "eps"),
        (dict(adv_eps=math.nan), "eps"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(weight_decay=-1e-4), "weight_decay"),
        (dict(augment_pad=-1), "augment_pad"),
        (dict(augment_pad=2.0), "augment_pad"),
    ],
)
def test_train_config_rejects_bad_values(overrides, fragment):
    """TrainConfig raises ValueError naming the field for out-of-range values."""
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(**overrides)


def test_train_config_defaults_are_valid_and_frozen():
    """The defaults construct, both modes are accepted, and a config cannot be mutated."""
    config = TrainConfig()
    TrainConfig(mode="fgsm", adv_eps=0.0, epochs=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 3  # type: ignore[misc]


# ---------------------------------------------------------------------------
# Checkpoints.


@pytest.fixture(scope="module")
def model_and_variables():
    """A CompactCNN with non-default hyper-parameters and random variables of the right
    shapes (from jax.eval_shape, so nothing is compiled)."""
    model = CompactCNN(num_classes=7, dropout_rate=0.25)
    shapes = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)
    )
    rng = np.random.default_rng(0)
    variables = jax.tree.map(
        lambda s: jnp.asarray(0.05 * rng.standard_normal(s.shape), s.dtype), shapes
    )
    variables["batch_stats"] = jax.tree.map(jnp.abs, variables["batch_stats"])
    return model, variables


def test_checkpoint_round_trip_is_bit_exact(tmp_path, model_and_variables):
    """load(save(model, variables)) gives the same hyper-parameters, every leaf bit-identical
    (same dtype and shape), identical logits, and the metadata back."""
    model, variables = model_and_variables
    path = save_checkpoint(tmp_path / "ckpt.msgpack", model, variables, {"epoch": 3, "acc": 0.5})
    loaded_model, loaded = load_checkpoint(path, CompactCNN)
    assert loaded_model == model
    assert jax.tree.structure(loaded) == jax.tree.structure(variables)
    for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(variables)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    x = jax.random.uniform(jax.random.key(2), (2, 32, 32, 3))
    chex.assert_trees_all_equal(
        loaded_model.apply(loaded, x, train=False), model.apply(variables, x, train=False)
    )
    assert read_checkpoint(path)["metadata"] == {"epoch": 3, "acc": 0.5}


def test_checkpoint_keeps_the_activation_and_reads_older_ones_as_relu(
    tmp_path, model_and_variables
):
    """A SiLU model comes back as SiLU; a checkpoint written before the activation was
    recorded loads as the ReLU model it was; an unknown activation is a CheckpointError."""
    _, variables = model_and_variables
    silu = CompactCNN(num_classes=7, dropout_rate=0.0, activation="silu")
    path = save_checkpoint(tmp_path / "silu.msgpack", silu, variables)
    assert load_checkpoint(path, CompactCNN)[0] == silu
    for activation, expected in ((None, "relu"), ("tanh", None)):
        payload = read_checkpoint(path)
        if activation is None:
            del payload["model"]["activation"]
        else:
            payload["model"]["activation"] = activation
        old = tmp_path / f"{activation}.msgpack"
        old.write_bytes(serialization.msgpack_serialize(payload))
        seal_checkpoint(old)
        if expected is None:
            with pytest.raises(CheckpointError, match="activation"):
                load_checkpoint(old, CompactCNN)
        else:
            assert load_checkpoint(old, CompactCNN)[0] == CompactCNN(
                num_classes=7, dropout_rate=0.0
            )


def test_train_config_activation_reaches_the_model():
    """TrainConfig's activation builds the train state's model; an unknown one raises."""
    state = create_train_state(jax.random.key(0), TrainConfig(activation="silu"), 1)
    assert state.apply_fn.__self__.activation == "silu"
    with pytest.raises(ValueError, match="activation"):
        TrainConfig(activation="gelu")


def test_checkpoint_is_msgpack_not_pickle(tmp_path, model_and_variables):
    """The file is msgpack (a map with the format tag), not a pickle (no 0x80 opcode)."""
    model, variables = model_and_variables
    raw = save_checkpoint(tmp_path / "ckpt.msgpack", model, variables).read_bytes()
    assert raw[:1] != b"\x80"
    assert 0x80 <= raw[0] <= 0x8F or raw[0] in (0xDE, 0xDF)  # msgpack fixmap / map16 / map32
    payload = serialization.msgpack_restore(raw)
    assert payload["format"] == "advjax-checkpoint-v1"
    with pytest.raises(Exception):
        pickle.loads(raw)


def _corrupt_files(good_bytes: bytes) -> dict[str, bytes]:
    return {
        "garbage": np.random.default_rng(0).bytes(64),
        "truncated": good_bytes[: len(good_bytes) // 2],
        "empty": b"",
        "pickle": pickle.dumps({"format": "advjax-checkpoint-v1"}),
        "other msgpack": serialization.msgpack_serialize({"format": "something-else"}),
    }


def test_loading_missing_or_corrupt_checkpoint_raises_checkpoint_error(
    tmp_path, model_and_variables
):
    """A missing, garbage, truncated, empty, pickled or foreign file raises CheckpointError
    (a ValueError) whose message names the path."""
    model, variables = model_and_variables
    good = save_checkpoint(tmp_path / "good.msgpack", model, variables).read_bytes()
    missing = tmp_path / "missing.msgpack"
    with pytest.raises(CheckpointError, match="missing.msgpack"):
        load_checkpoint(missing, CompactCNN)
    for name, data in _corrupt_files(good).items():
        path = tmp_path / f"{name.replace(' ', '_')}.msgpack"
        path.write_bytes(data)
        with pytest.raises(CheckpointError, match=path.name) as info:
            load_checkpoint(path, CompactCNN)
        assert str(path) in str(info.value), name
        assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("missing", ["model", "variables"])
def test_checkpoint_missing_a_section_raises_checkpoint_error(tmp_path, missing):
    """A correctly tagged file without its model or variables section is a CheckpointError."""
    payload = {
        "format": "advjax-checkpoint-v1",
        "model": {"name": "CompactCNN", "num_classes": 10, "dropout_rate": 0.5},
        "variables": {},
        "metadata": {},
    }
    del payload[missing]
    path = tmp_path / "partial.msgpack"
    path.write_bytes(serialization.msgpack_serialize(payload))
    with pytest.raises(CheckpointError, match="partial.msgpack"):
        load_checkpoint(path, CompactCNN)


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path, model_and_variables, monkeypatch):
    """Saving (and overwriting) leaves only the checkpoint in its folder; a save that fails
    at the rename leaves the previous file intact and no temporary file behind."""
    model, variables = model_and_variables
    path = tmp_path / "ckpt.msgpack"
    save_checkpoint(path, model, variables, {"version": 1})
    save_checkpoint(path, model, variables, {"version": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.msgpack"]
    before = path.read_bytes()

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(advjax.records._atomic.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, variables, {"version": 3})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.msgpack"]
    assert path.read_bytes() == before
    assert read_checkpoint(path)["metadata"] == {"version": 2}


# ---------------------------------------------------------------------------
# fit.


def test_fit_returns_the_epoch_with_the_best_validation_accuracy(monkeypatch):
    """With validation accuracies 0.2, 0.5, 0.3 over three epochs, fit reports epoch 2 and
    returns epoch 2's parameters (not the last epoch's); history has one record per epoch."""
    rng = np.random.default_rng(0)
    train = Batch(
        rng.integers(0, 256, (32, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, 32).astype(np.int32),
    )
    val = Batch(train.images[:8], train.labels[:8])
    scripted = iter([0.2, 0.5, 0.3])
    params_by_epoch = []
    real_evaluate = advjax_train.evaluate

    def scripted_evaluate(state, images, labels):
        params_by_epoch.append(jax.device_get(state.params))
        return {**real_evaluate(state, images, labels), "accuracy": next(scripted)}

    monkeypatch.setattr(advjax_train._loop, "evaluate", scripted_evaluate)
    config = TrainConfig(epochs=3, batch_size=16, augment=False)
    result = fit(config, train, val, show_progress=False, log=lambda _: None)
    assert len(result.history) == 3
    assert [r["epoch"] for r in result.history] == [1, 2, 3]
    assert [r["val_accuracy"] for r in result.history] == [0.2, 0.5, 0.3]
    assert result.best_epoch == 2 and result.best_val_accuracy == 0.5
    chex.assert_trees_all_equal(jax.device_get(result.state.params), params_by_epoch[1])
    with pytest.raises(AssertionError):
        chex.assert_trees_all_equal(jax.device_get(result.state.params), params_by_epoch[2])


def test_fit_on_real_data_reports_a_consistent_best_epoch(trained_run):
    """The real-data fixture run: one history record per epoch, best_epoch is the argmax of
    val_accuracy, and the returned state reproduces that accuracy on the validation set."""
    config, result, val = trained_run
    accuracies = [record["val_accuracy"] for record in result.history]
    assert len(result.history) == config.epochs
    assert result.best_val_accuracy == max(accuracies)
    assert accuracies[result.best_epoch - 1] == max(accuracies)
    assert result.best_val_accuracy > 0.3
    assert evaluate(result.state, val.images, val.labels)["accuracy"] == result.best_val_accuracy


@pytest.mark.parametrize("mode", ["standard", pytest.param("fgsm", marks=pytest.mark.slow)])
def test_fit_with_the_same_seed_gives_bit_identical_weights_and_history(mode):
    """Every random choice (init, shuffles, augmentation, dropout, FGSM) derives from the
    config's seed: two fits with the same seed agree exactly; another seed differs."""
    rng = np.random.default_rng(1)
    train = Batch(
        rng.integers(0, 256, (48, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, 48).astype(np.int32),
    )
    val = Batch(train.images[:16], train.labels[:16])

    def run(seed):
        config = TrainConfig(mode=mode, epochs=2, batch_size=16, seed=seed)
        return fit(config, train, val, show_progress=False, log=lambda _: None)

    first, second, other = run(7), run(7), run(8)
    chex.assert_trees_all_equal(
        jax.device_get(first.state.params), jax.device_get(second.state.params)
    )
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in first.history] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in second.history
    ]
    with pytest.raises(AssertionError):
        chex.assert_trees_all_equal(
            jax.device_get(first.state.params), jax.device_get(other.state.params)
        )


def test_augment_pad_zero_only_flips():
    """With augment_pad=0 the step's augmentation is the random flip alone: every augmented
    image equals its original or its left-right mirror (the crop is the identity)."""
    from advjax_train import augment, to_float
    from advjax_train._steps import _prepare

    images = np.random.default_rng(0).integers(0, 256, (16, 8, 8, 3), dtype=np.uint8)
    batch = Batch(images, np.zeros(16, np.int32))
    x = np.asarray(to_float(images))
    out = np.asarray(_prepare(batch, jax.random.key(3), True, 0))
    same = np.all(out == x, axis=(1, 2, 3))
    mirrored = np.all(out == x[:, :, ::-1], axis=(1, 2, 3))
    assert np.all(same | mirrored) and same.any() and mirrored.any()
    padded = np.asarray(augment(jax.random.key(3), jnp.asarray(x), pad=4))
    assert not np.all(padded == out)  # the default pad does crop


def test_fit_from_init_at_a_vanishing_learning_rate_keeps_the_given_weights(trained_run):
    """Fine-tuning starts from `init`, not a fresh initialisation: at a learning rate of
    1e-12 one epoch leaves the trained weights as given."""
    state, val = trained_run.result.state, trained_run.val
    init = jax.device_get({"params": state.params, "batch_stats": state.batch_stats})
    config = dataclasses.replace(
        trained_run.config, epochs=1, learning_rate=1e-12, weight_decay=0.0
    )
    tuned = fit(
        config,
        Batch(val.images[:256], val.labels[:256]),
        val,
        show_progress=False,
        log=lambda _: None,
        init=init,
    )
    chex.assert_trees_all_close(
        jax.device_get(tuned.state.params), init["params"], atol=1e-6, rtol=0
    )
    # Only the batch-norm running statistics move (they follow the batches, not the
    # learning rate); a fresh initialisation would sit near chance (0.1).
    assert abs(tuned.history[0]["val_accuracy"] - trained_run.result.best_val_accuracy) < 0.05


def test_fit_rejects_init_weights_of_another_shape():
    """Weights of another architecture are an error that names the mismatch, not a crash
    deep inside the first step."""
    config = TrainConfig(epochs=1, batch_size=16)
    state = create_train_state(jax.random.key(0), config, total_steps=1)
    params = jax.device_get(state.params)
    bad = {"params": jax.tree.map(lambda a: np.zeros((*a.shape, 2)), params), "batch_stats": {}}
    rng = np.random.default_rng(0)
    data = Batch(rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8), np.zeros(16, np.int32))
    names_leaf = r"init 'params' does not match the model: leaf \[.+\] of shape \(.+\) where \(.+\)"
    with pytest.raises(ValueError, match=names_leaf):
        fit(config, data, data, show_progress=False, log=lambda _: None, init=bad)
    with pytest.raises(ValueError, match="no 'batch_stats'"):
        fit(config, data, data, show_progress=False, log=lambda _: None, init={"params": params})
