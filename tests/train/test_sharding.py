"""Data-parallel training and evaluation (advjax_train) against the single-device path.

The multi-device checks run `tests/sharding_worker.py` in a subprocess with 4 simulated CPU
devices (`XLA_FLAGS=--xla_force_host_platform_device_count=4`, fixed when JAX starts) and
read its JSON. The rest run here, on whatever devices this process has (one on a CPU box).

Tolerances: one sharded step differs from the unsharded one only by float reduction order
(gradient all-reduce, global batch-norm statistics), so gradients, loss and metrics agree to
rtol 1e-4 / atol 1e-5. The *parameters* after an AdamW step can differ by up to a learning
rate for an element whose gradient is ~0 (Adam divides by |g| + 1e-8, which turns a rounding
difference in g into a different update), and over several steps such differences compound
(FGSM's sign() of the input gradient too), so trajectories are compared more loosely.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

from advjax_train import _sharding as sharding

DEVICES = 4
RTOL, ATOL = 1e-4, 1e-5
WORKER = Path(__file__).with_name("sharding_worker.py")
REPO_ROOT = WORKER.parents[2]


@pytest.fixture(scope="module")
def worker() -> dict:
    """The JSON printed by sharding_worker.py run on 4 simulated CPU devices (~30-60 s)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(DEVICES)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"sharding_worker.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_worker_ran_on_a_4_device_mesh(worker):
    """The subprocess saw 4 devices and built the 1-D "data" mesh over all of them."""
    assert worker["num_devices"] == DEVICES
    assert worker["mesh_shape"] == {"data": DEVICES}


@pytest.mark.parametrize("mode", ["standard", "fgsm"])
def test_one_sharded_train_step_matches_unsharded(worker, mode):
    """From the same state, batch and key, the 4-device step gives the unsharded
    `make_train_step` gradient (read from AdamW's first moment), loss, metrics and batch-norm
    statistics to float tolerance; parameters agree except for the rare elements whose
    gradient is ~0, which Adam's normalisation may move by at most a learning rate.

    The gradient is compared as a whole (relative L2 distance) and element-wise on all but
    a small share of elements: a max-pool window whose two largest inputs differ by float
    rounding, or a pre-ReLU value at ~0, may route its gradient differently when the batch
    statistics are summed in another order, which moves a few gradient elements by more
    than a rounding error without changing the gradient's direction.
    """
    lr = worker[mode]["learning_rate"]
    for i, step in enumerate(worker[mode]["per_step"]):
        assert step["grad_relative_l2"] < 1e-3, (i, step)
        assert step["grad_outside_tol"] < 0.05, (i, step)
        assert step["metrics_max_abs_diff"] < ATOL, (i, step)
        assert step["batch_stats_max_abs_diff"] < ATOL, (i, step)
        assert step["params_outside_tol"] < 1e-3, (i, step)
        assert step["params_max_abs_diff"] <= lr, (i, step)


@pytest.mark.parametrize("mode", ["standard", "fgsm"])
def test_sharded_training_trajectory_stays_close(worker, mode):
    """Three AdamW steps run apart on 1 and 4 devices keep the same loss (rtol 1e-3) and
    parameters within a few learning rates; standard training stays tight (loss within
    1e-5, fewer than 0.1% of parameters outside rtol 1e-4 / atol 1e-5)."""
    trajectory = worker[mode]["trajectory"]
    lr = worker[mode]["learning_rate"]
    for i, step in enumerate(trajectory):
        assert step["loss"] == pytest.approx(step["plain_loss"], rel=1e-3), (i, step)
        assert step["params_max_abs_diff"] <= (i + 1) * lr, (i, step)
        if mode == "standard":
            assert abs(step["loss"] - step["plain_loss"]) < ATOL, (i, step)
            assert step["params_outside_tol"] < 1e-3, (i, step)
    assert worker[mode]["step"] == len(trajectory)


def test_sharded_state_is_replicated_and_gradients_all_reduced(worker):
    """The new parameters are a full copy on each of the 4 devices, and the compiled step
    contains the all-reduce XLA inserted for the gradients."""
    for mode in ("standard", "fgsm"):
        layout = worker[mode]["param_sharding"]
        assert layout == {
            "devices": DEVICES,
            "shard_shapes": [[128, 10]],
            "num_shards": DEVICES,
            "matches": True,
        }
        assert worker[mode]["hlo_has_all_reduce"]


def test_sharded_eval_matches_single_device(worker):
    """Predictions and PGD (per-example keys, 2 restarts) split over 4 devices equal the
    single-device results: same predictions and first-break steps, x_adv and loss within
    1e-5, and the attack really moved the inputs."""
    ev = worker["eval"]
    assert ev["predictions_equal"] and ev["predictions_mismatches"] == 0
    assert ev["broken_step_mismatches"] == 0
    assert ev["x_adv_max_abs_diff"] <= 1e-5
    assert ev["loss_max_abs_diff"] <= 1e-5
    assert ev["x_adv_moved"] > 0


def test_sharded_eval_outputs_are_split_over_4_devices(worker):
    """Each output of `sharded_eval` is laid out as `batch_sharding`: 4 shards of 8 of the
    32 examples, one per device."""
    ev = worker["eval"]
    expected = {
        "x_adv_sharding": [[8, 32, 32, 3]],
        "predictions_sharding": [[8]],
        "broken_step_sharding": [[8, 2]],
    }
    for name, shapes in expected.items():
        assert ev[name] == {
            "devices": DEVICES,
            "shard_shapes": shapes,
            "num_shards": DEVICES,
            "matches": True,
        }, name


def test_fit_with_a_mesh_trains_like_one_device(worker):
    """`fit(..., mesh=data_mesh())` over 4 devices runs FGSM training like one device: the
    same steps, mean loss within rtol 1e-3, parameters within the bound AdamW allows: each
    step moves an element by at most about one learning rate, so an element whose gradient
    sign differs (FGSM's sign amplifies summation-order differences, as in the trajectory
    test) can drift apart by two learning rates per step."""
    fit = worker["fit"]
    assert fit["step"] == 3
    assert fit["params_max_abs_diff"] <= 2 * 3 * 1e-3, fit
    assert fit["train_loss"][1] == pytest.approx(fit["train_loss"][0], rel=1e-3)
    assert abs(fit["val_accuracy"][0] - fit["val_accuracy"][1]) <= 1 / 32


def test_indivisible_batch_raises_clear_error(worker):
    """A batch of 30 on 4 devices raises a ValueError naming the batch size and device count."""
    message = worker["indivisible_error"]
    assert "batch size 30" in message and "4 devices" in message


# ---------------------------------------------------------------------------
# In this process, on whatever devices exist (one on a CPU-only machine).


def _tiny_state() -> train_state.TrainState:
    w = jax.random.normal(jax.random.key(0), (6, 3))
    params = {"w": w, "b": jnp.zeros((3,))}
    return train_state.TrainState.create(apply_fn=None, params=params, tx=optax.sgd(0.1))


def _tiny_step(state, batch, key):
    """One SGD step of softmax regression with a random input mask (uses `key`)."""
    x, y = batch
    x = x * jax.random.bernoulli(key, 0.9, x.shape).astype(x.dtype)

    def loss_fn(params):
        logits = x @ params["w"] + params["b"][None, :]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), {"loss": loss}


def _tiny_batch(n: int = 8):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    return x, rng.integers(0, 3, size=n).astype(np.int32)


def test_data_mesh_spans_all_devices_by_default():
    """`data_mesh()` is 1-D over every device, axis "data"; an explicit list is honoured."""
    mesh = sharding.data_mesh()
    assert mesh.axis_names == ("data",)
    assert sharding.num_shards(mesh) == jax.device_count()
    assert sharding.num_shards(sharding.data_mesh(jax.devices()[:1])) == 1
    with pytest.raises(ValueError, match="at least one device"):
        sharding.data_mesh([])


def test_shard_batch_and_replicate_place_arrays():
    """`shard_batch` lays leaves out as `batch_sharding`, `replicate` as `replicated`."""
    mesh = sharding.data_mesh()
    n = 8 * jax.device_count()
    x, y = sharding.shard_batch(mesh, _tiny_batch(n))
    chex.assert_shape(x, (n, 6))
    assert x.sharding.is_equivalent_to(sharding.batch_sharding(mesh), x.ndim)
    assert y.sharding.is_equivalent_to(sharding.batch_sharding(mesh), y.ndim)
    params = sharding.replicate(mesh, _tiny_state().params)
    assert params["w"].sharding.is_equivalent_to(sharding.replicated(mesh), 2)


def test_check_batch_rejects_malformed_batches():
    """Scalars, unequal leading sizes and empty trees raise ValueError saying why."""
    mesh = sharding.data_mesh()
    n = 2 * jax.device_count()
    with pytest.raises(ValueError, match="scalar"):
        sharding.shard_batch(mesh, (np.zeros((n, 3)), np.float32(1.0)))
    with pytest.raises(ValueError, match="same leading size"):
        sharding.shard_batch(mesh, (np.zeros((n, 3)), np.zeros((n + jax.device_count(),))))
    with pytest.raises(ValueError, match="at least one array"):
        sharding.shard_batch(mesh, ())
    with pytest.raises(ValueError, match="non-negative"):
        sharding.sharded_eval(lambda x: x, mesh, replicated_argnums=(-1,))


def test_sharded_train_step_matches_plain_jit_on_local_devices():
    """On this process's devices, the sharded step equals the plain jitted step, returns a
    replicated state, and donates (deletes) the state passed in, like `make_train_step`."""
    mesh = sharding.data_mesh()
    batch, key = _tiny_batch(8 * jax.device_count()), jax.random.key(1)
    plain, plain_metrics = jax.jit(_tiny_step)(_tiny_state(), batch, key)
    state = sharding.replicate(mesh, _tiny_state())
    donated = state.params["w"]
    step = sharding.sharded_train_step(_tiny_step, mesh)
    new, metrics = step(state, sharding.shard_batch(mesh, batch), key)
    chex.assert_trees_all_close(new.params, plain.params, rtol=RTOL, atol=ATOL)
    chex.assert_trees_all_close(metrics, plain_metrics, rtol=RTOL, atol=ATOL)
    assert new.params["w"].sharding.is_equivalent_to(sharding.replicated(mesh), 2)
    assert donated.is_deleted()


def test_sharded_eval_matches_plain_and_traces_once():
    """`sharded_eval` with a replicated weight argument equals the plain computation, its
    output is split like the batch, and a second call of the same shapes does not retrace."""
    mesh = sharding.data_mesh()
    w = _tiny_state().params["w"]
    x, _ = _tiny_batch(4 * jax.device_count())

    @chex.assert_max_traces(n=1)
    def scores(w, x):
        return x @ w

    run = sharding.sharded_eval(scores, mesh, replicated_argnums=(0,))
    out = run(w, x)
    run(w, x + 1.0)
    chex.assert_trees_all_close(out, x @ np.asarray(w), rtol=RTOL, atol=ATOL)
    assert out.sharding.is_equivalent_to(sharding.batch_sharding(mesh), out.ndim)
    with pytest.raises(ValueError, match="out of range"):
        sharding.sharded_eval(scores, mesh, replicated_argnums=(2,))(w, x)
