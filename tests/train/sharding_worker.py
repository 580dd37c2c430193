"""Run by tests/test_sharding.py in a subprocess with several (simulated) devices.

The device count is fixed when JAX starts, so the parent sets
`XLA_FLAGS=--xla_force_host_platform_device_count=N` (and `JAX_PLATFORMS=cpu`) in this
process's environment. It runs the same computations unsharded (one device, the plain
`make_train_step` / jit path) and data-parallel over all devices, and prints one JSON object
with the largest differences and the observed shardings; the test asserts on them.
"""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from optax.tree_utils import tree_get

jax.config.update("jax_numpy_rank_promotion", "raise")

from advjax.attacks import pgd  # noqa: E402
from advjax_train import (  # noqa: E402  # noqa: E402
    Batch,
    CompactCNN,
    TrainConfig,
    create_train_state,
    eval_logits_fn,
    fit,
    make_train_step,
    to_float,
)
from advjax_train import _sharding as sharding  # noqa: E402

BATCH, STEPS, TOTAL_STEPS = 32, 3, 100
PGD_STEPS, PGD_RESTARTS, EPS = 5, 2, 8 / 255
RTOL, ATOL = 1e-4, 1e-5
ADAM_B1 = 0.9  # optax.adamw's default, as in advjax_train.make_optimizer


def synthetic_batch(n: int, seed: int) -> Batch:
    """Random uint8 CIFAR-shaped images and int32 labels (host numpy arrays)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    return Batch(images, rng.integers(0, 10, size=n).astype(np.int32))


def max_abs_diff(a, b) -> float:
    """Largest absolute difference over all leaves of two equal-structure trees."""
    diffs = jax.tree.map(lambda u, v: float(np.max(np.abs(np.asarray(u) - np.asarray(v)))), a, b)
    return max(jax.tree.leaves(diffs))


def is_sharded_over(array: jax.Array, mesh, spec_sharding) -> dict:
    """How `array` is laid out: device count, shard shapes, equivalence to `spec_sharding`."""
    return {
        "devices": len(array.sharding.device_set),
        "shard_shapes": sorted({tuple(s.data.shape) for s in array.addressable_shards}),
        "num_shards": len(array.addressable_shards),
        "matches": bool(array.sharding.is_equivalent_to(spec_sharding, array.ndim)),
    }


def relative_l2(a, b) -> float:
    """||a - b|| / ||a|| over all leaves of two equal-structure trees."""
    flat = lambda t: np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(t)])  # noqa: E731
    u, v = flat(a).astype(np.float64), flat(b).astype(np.float64)
    return float(np.linalg.norm(u - v) / max(np.linalg.norm(u), 1e-30))


def close_fraction(a, b, *, rtol: float = RTOL, atol: float = ATOL) -> float:
    """Share of elements, over all leaves, with |a - b| > atol + rtol * |a|."""
    bad = jax.tree.leaves(
        jax.tree.map(lambda u, v: int(np.sum(~np.isclose(v, u, rtol=rtol, atol=atol))), a, b)
    )
    return sum(bad) / sum(np.size(leaf) for leaf in jax.tree.leaves(a))


def gradients(state) -> dict:
    """The last step's gradient, read from AdamW's first moment: mu_t = b1 mu_(t-1) + 0.1 g_t."""
    return jax.tree.map(lambda mu: np.asarray(mu) / (1 - ADAM_B1), tree_get(state.opt_state, "mu"))


def step_diffs(plain, sharded, plain_metrics, sharded_metrics) -> dict:
    """Differences between two results of one step (states and metrics)."""
    return {
        "params_max_abs_diff": max_abs_diff(plain.params, sharded.params),
        "params_outside_tol": close_fraction(plain.params, sharded.params),
        "batch_stats_max_abs_diff": max_abs_diff(plain.batch_stats, sharded.batch_stats),
        "metrics_max_abs_diff": max_abs_diff(plain_metrics, sharded_metrics),
        "loss": float(sharded_metrics["loss"]),
        "plain_loss": float(plain_metrics["loss"]),
    }


def compare_training(mode: str, mesh) -> tuple[dict, object]:
    """STEPS real AdamW steps, unsharded (`make_train_step`) and sharded, same keys and batches.

    Two comparisons: each step from the *same* input state (isolates what sharding changes in
    one step: its gradient, loss, metrics and update), and the two trajectories run apart
    (where differences compound through Adam and FGSM's sign).
    """
    config = TrainConfig(mode=mode, batch_size=BATCH, dropout_rate=0.5, augment=True, seed=0)
    init_key = jax.random.key(0)
    step_keys = [jax.random.fold_in(jax.random.key(1), i) for i in range(STEPS)]
    batches = [synthetic_batch(BATCH, seed=i) for i in range(STEPS)]
    plain_step = make_train_step(config)
    # The very function the plain path runs (jit inside jit is inlined); pure steps work too.
    step = sharding.sharded_train_step(plain_step, mesh)

    init = jax.jit(create_train_state, static_argnums=(1, 2))(init_key, config, TOTAL_STEPS)
    plain = jax.tree.map(jnp.copy, init)
    sharded = sharding.replicate(mesh, jax.tree.map(jnp.copy, init))
    per_step, trajectory = [], []
    for batch, key in zip(batches, step_keys):
        start = plain  # both steps donate their input, so each gets its own copy
        plain, plain_metrics = plain_step(
            jax.tree.map(jnp.copy, start), jax.tree.map(jnp.asarray, batch), key
        )
        one, one_metrics = step(
            sharding.replicate(mesh, jax.tree.map(jnp.copy, start)),
            sharding.shard_batch(mesh, batch),
            key,
        )
        diffs = step_diffs(plain, one, plain_metrics, one_metrics)
        diffs["grad_max_abs_diff"] = max_abs_diff(gradients(plain), gradients(one))
        diffs["grad_outside_tol"] = close_fraction(gradients(plain), gradients(one))
        diffs["grad_relative_l2"] = relative_l2(gradients(plain), gradients(one))
        per_step.append(diffs)
        sharded, metrics = step(sharded, sharding.shard_batch(mesh, batch), key)
        trajectory.append(step_diffs(plain, sharded, plain_metrics, metrics))

    kernel = sharded.params["Dense_1"]["kernel"]
    compiled = step.lower(sharded, sharding.shard_batch(mesh, batches[0]), step_keys[0]).compile()
    hlo = compiled.as_text()
    result = {
        "per_step": per_step,
        "trajectory": trajectory,
        "learning_rate": config.learning_rate,
        "param_sharding": is_sharded_over(kernel, mesh, sharding.replicated(mesh)),
        "step": int(sharded.step),
        "hlo_has_all_reduce": "all-reduce" in hlo,
    }
    return result, jax.device_get(sharded)


def compare_eval(state, mesh) -> dict:
    """Predictions and PGD (per-example keys) on one device vs split over the mesh."""
    model = CompactCNN(dropout_rate=0.5)
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    batch = synthetic_batch(BATCH, seed=100)
    x = np.asarray(to_float(batch.images))
    keys = jax.random.split(jax.random.key(7), BATCH)

    def predict(variables, x):
        return jnp.argmax(eval_logits_fn(model, variables)(x), axis=-1)

    def attack(variables, x, y, keys):
        result = pgd(
            eval_logits_fn(model, variables),
            x,
            y,
            EPS,
            key=keys,
            steps=PGD_STEPS,
            restarts=PGD_RESTARTS,
        )
        return result.x_adv, result.broken_step.T, result.loss

    plain_pred = jax.jit(predict)(variables, x)
    plain_adv, plain_broken, plain_loss = jax.jit(attack)(variables, x, batch.labels, keys)

    s_variables = sharding.replicate(mesh, variables)
    s_x, s_y, s_keys = sharding.shard_batch(mesh, (x, batch.labels, keys))
    pred = sharding.sharded_eval(predict, mesh, replicated_argnums=(0,))(s_variables, s_x)
    adv, broken, loss = sharding.sharded_eval(attack, mesh, replicated_argnums=(0,))(
        s_variables, s_x, s_y, s_keys
    )
    batch_spec = sharding.batch_sharding(mesh)
    return {
        "predictions_equal": bool(np.array_equal(plain_pred, pred)),
        "predictions_mismatches": int(np.sum(np.asarray(plain_pred) != np.asarray(pred))),
        "broken_step_mismatches": int(np.sum(np.asarray(plain_broken) != np.asarray(broken))),
        "broken_fraction": float(np.mean(np.asarray(broken) >= 0)),
        "x_adv_max_abs_diff": max_abs_diff(plain_adv, adv),
        "loss_max_abs_diff": max_abs_diff(plain_loss, loss),
        "x_adv_moved": float(np.max(np.abs(np.asarray(adv) - x))),
        "x_adv_sharding": is_sharded_over(adv, mesh, batch_spec),
        "predictions_sharding": is_sharded_over(pred, mesh, batch_spec),
        "broken_step_sharding": is_sharded_over(broken, mesh, batch_spec),
    }


def compare_fit(mesh) -> dict:
    """`fit` for one epoch of 3 FGSM steps on one device and with `mesh=` (data-parallel)."""
    config = TrainConfig(mode="fgsm", epochs=1, batch_size=BATCH, seed=0)
    train, val = synthetic_batch(3 * BATCH, seed=200), synthetic_batch(BATCH, seed=201)
    quiet = dict(show_progress=False, log=lambda _: None)
    plain = fit(config, train, val, **quiet)
    sharded = fit(config, train, val, mesh=mesh, **quiet)
    return {
        "params_max_abs_diff": max_abs_diff(plain.state.params, sharded.state.params),
        "params_outside_tol": close_fraction(plain.state.params, sharded.state.params),
        "train_loss": [plain.history[0]["train_loss"], sharded.history[0]["train_loss"]],
        "val_accuracy": [plain.history[0]["val_accuracy"], sharded.history[0]["val_accuracy"]],
        "step": int(sharded.state.step),
    }


def indivisible_error(mesh) -> str:
    """The message `shard_batch` raises for a batch that does not split evenly ('' if none)."""
    try:
        sharding.shard_batch(mesh, synthetic_batch(sharding.num_shards(mesh) * 8 - 2, seed=0))
    except ValueError as error:
        return str(error)
    return ""


def main(expected_devices: int) -> None:
    devices = jax.devices()
    if len(devices) != expected_devices:
        raise SystemExit(f"expected {expected_devices} devices, JAX sees {len(devices)}")
    mesh = sharding.data_mesh()
    standard, _ = compare_training("standard", mesh)
    fgsm, state = compare_training("fgsm", mesh)
    results = {
        "num_devices": len(devices),
        "platform": devices[0].platform,
        "mesh_shape": dict(mesh.shape),
        "standard": standard,
        "fgsm": fgsm,
        "eval": compare_eval(state, mesh),
        "fit": compare_fit(mesh),
        "indivisible_error": indivisible_error(mesh),
    }
    print(json.dumps(results))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
