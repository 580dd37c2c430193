"""The training loop: epochs of jitted steps, per-epoch validation, best checkpoint.

Optionally with a catastrophic-overfitting sentinel (advjax_train): a fixed PGD probe
per epoch, stopping on a collapse, and selection by robust validation accuracy.
"""

import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from advjax.io import Progress
from advjax_train._ema import BN_RECOMPUTE_BATCHES, ema_decay_at, ema_update, recompute_batch_stats
from advjax_train._resume import FitProgress, Selection
from advjax_train._sentinel import SentinelConfig, collapse_flags, make_probe
from advjax_train._sharding import check_batch_size, replicate, sharded_train_step
from advjax_train._state import TrainConfig, create_train_state, make_train_step, train_step_fn
from advjax_train._steps import Batch, TrainState, eval_step, tree_shape_mismatch

_PROGRESS_EVERY = 20  # steps between progress updates; each one waits for the device
_BN_STREAM = 7  # fold_in of the run's key for the averaged weights' batch-statistics batches


class FitResult(NamedTuple):
    """The best-by-validation state and the per-epoch history of a `fit` run.

    `best_val_accuracy` is the clean validation accuracy of `best_epoch` (the maximum
    unless a sentinel selects by another criterion). With weight averaging, `live` is the
    same for the live (non-averaged) weights, selected by the same criterion on their own
    metrics: what the same config without `ema_decay` returns, from the same training.
    """

    state: TrainState
    history: list[dict]
    best_epoch: int
    best_val_accuracy: float
    live: "FitResult | None" = None


def evaluate(state: TrainState, images: np.ndarray, labels: np.ndarray, batch_size: int = 500):
    """Accuracy and mean loss of the eval-mode model on uint8 images."""
    correct, loss_sum = 0, 0.0
    for start in range(0, len(labels), batch_size):
        batch = Batch(
            jnp.asarray(images[start : start + batch_size]),
            jnp.asarray(labels[start : start + batch_size]),
        )
        out = eval_step(state, batch)
        correct += int(out["correct"])
        loss_sum += float(out["loss_sum"])
    n = len(labels)
    return {"accuracy": correct / n, "correct": correct, "total": n, "loss": loss_sum / n}


def fit(
    config: TrainConfig,
    train: Batch,
    val: Batch,
    *,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    name: str = "train",
    sentinel: SentinelConfig | None = None,
    mesh: Mesh | None = None,
    init: dict | None = None,
    resume: FitProgress | None = None,
    on_epoch: Callable[[FitProgress], None] | None = None,
) -> FitResult:
    """Train a CompactCNN per `config`; keep the epoch with the best validation accuracy.

    Each epoch visits a fresh permutation of the training set in full batches (a last
    partial batch is dropped; the permutation differs every epoch). Every random choice
    derives from `jax.random.key(config.seed)`: init, shuffles, augmentation, dropout and
    in-training attacks, so the same config and data give the same weights.

    With a `sentinel`, every epoch also runs its PGD probe (advjax_train.make_probe)
    and records `probe_*` accuracies and a `collapse` flag (`collapse_flags` on the probe
    PGD accuracies so far); flagged epochs are never kept, training ends after the first
    one if `sentinel.stop_on_collapse`, and the kept epoch is the best by
    `sentinel.select_by` (ties: the earliest). Without one, nothing changes.

    With a `mesh` (`advjax_train.data_mesh()`), every training step runs data-parallel:
    each batch split over the mesh's devices, parameters and optimiser state replicated,
    gradients all-reduced by XLA; the same keys and batches as on one device, so the same
    training up to float summation order. `config.batch_size` must be a multiple of the
    device count. Validation and the sentinel run unsharded.

    With `init` (`{"params": ..., "batch_stats": ...}` of a trained CompactCNN) training
    fine-tunes those weights instead of a fresh initialisation, with a fresh optimiser.

    With `config.ema_decay`, an exponential moving average of the weights is updated after
    every step (`advjax_train.ema_update`), and at every epoch's end its batch statistics are
    recomputed on `BN_RECOMPUTE_BATCHES` training batches (`recompute_batch_stats`, keys from
    their own stream); validation, the sentinel, selection and the returned state use the
    averaged model, and the history adds the live weights' `live_val_accuracy` and
    `live_val_loss` (and, with a sentinel, their probe and collapse flag, `live_`-prefixed);
    `FitResult.live` holds the live weights selected on those, so one run also trains the
    model without averaging.

    After every epoch `on_epoch` receives the loop's `FitProgress` (e.g. for
    `save_fit_progress`); `resume` (such a progress of the same config and data, e.g. from
    `load_fit_progress`) continues after its epoch, exactly as the uninterrupted run would.
    """
    n = len(train.labels)
    steps_per_epoch = n // config.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"{n} training images is fewer than one batch of {config.batch_size}")
    key = jax.random.key(config.seed)
    init_key, shuffle_key, step_key = jax.random.split(key, 3)
    state = create_train_state(init_key, config, config.epochs * steps_per_epoch)
    if resume is not None:
        state = resume.state
    elif init is not None:
        state = _with_weights(state, init)
    if mesh is None:
        train_step = make_train_step(config)
    else:
        check_batch_size(mesh, config.batch_size)
        train_step = sharded_train_step(train_step_fn(config), mesh)
        state = replicate(mesh, state)
    images, labels = jnp.asarray(train.images), jnp.asarray(train.labels)
    ema = None if config.ema_decay is None else jax.tree.map(jnp.copy, state.params)
    if resume is not None:
        ema = None if resume.ema is None else jax.tree.map(jnp.asarray, resume.ema)
        if (ema is None) != (config.ema_decay is None):
            raise ValueError("resume: its weight averaging does not match config.ema_decay")
    recompute_step = None if ema is None else jax.jit(train_step_fn(config))
    bn_key = jax.random.fold_in(key, _BN_STREAM)
    probe = None if sentinel is None else make_probe(sentinel, config.adv_eps, train, val)
    select_by = "val_accuracy" if sentinel is None else sentinel.select_by
    history, kept, live_kept, first_epoch = [], Selection(), None, 0
    if ema is not None:
        live_kept = Selection()
    if resume is not None:
        history, kept, live_kept = list(resume.history), resume.kept, resume.live_kept
        if (live_kept is None) != (ema is None):
            raise ValueError("resume: its live-weight selection does not match config.ema_decay")
        stopped = bool(history) and history[-1].get("collapse") and sentinel.stop_on_collapse
        first_epoch = config.epochs if stopped else resume.epoch
    for epoch in range(first_epoch, config.epochs):
        started = time.perf_counter()
        order = jax.random.permutation(jax.random.fold_in(shuffle_key, epoch), n)
        bar = Progress(steps_per_epoch, f"{name} epoch {epoch + 1}/{config.epochs}", show_progress)
        sums = None
        for i in range(steps_per_epoch):
            idx = order[i * config.batch_size : (i + 1) * config.batch_size]
            key_i = jax.random.fold_in(jax.random.fold_in(step_key, epoch), i)
            state, metrics = train_step(state, Batch(images[idx], labels[idx]), key_i)
            if ema is not None:
                decay = ema_decay_at(epoch * steps_per_epoch + i, config.ema_decay)
                ema = ema_update(ema, state.params, decay)
            sums = metrics if sums is None else jax.tree.map(jnp.add, sums, metrics)
            if (i + 1) % _PROGRESS_EVERY == 0 or i + 1 == steps_per_epoch:
                bar.update(i + 1 - bar.count, postfix=f"loss {float(sums['loss']) / (i + 1):.3f}")
        bar.close()
        record = {
            "epoch": epoch + 1,
            **{f"train_{k}": float(v) / steps_per_epoch for k, v in jax.device_get(sums).items()},
        }
        scored = state
        if ema is not None:
            live = evaluate(state, val.images, val.labels)
            record.update(live_val_accuracy=live["accuracy"], live_val_loss=live["loss"])
            scored = state.replace(
                params=ema,
                batch_stats=recompute_batch_stats(
                    recompute_step, state, ema, _bn_batches(bn_key, epoch, images, labels, config)
                ),
            )
        val_metrics = evaluate(scored, val.images, val.labels)
        record.update(val_accuracy=val_metrics["accuracy"], val_loss=val_metrics["loss"])
        collapsed = live_collapsed = False
        if probe is not None:
            if ema is not None:
                record.update({f"live_{k}": v for k, v in probe(state).items()})
                live_collapsed = record["live_collapse"] = _collapsed(
                    history, record, "live_probe_pgd_accuracy", sentinel
                )
            record.update(probe(scored))
            collapsed = record["collapse"] = _collapsed(
                history, record, "probe_pgd_accuracy", sentinel
            )
        record["seconds"] = time.perf_counter() - started
        history.append(record)
        log(_epoch_line(name, epoch, config.epochs, record, val_metrics))
        if not collapsed:
            kept = _select(kept, record, select_by, "val_accuracy", scored)
        if live_kept is not None and not live_collapsed:
            live_kept = _select(live_kept, record, f"live_{select_by}", "live_val_accuracy", state)
        if on_epoch is not None:
            on_epoch(FitProgress(epoch + 1, state, ema, list(history), kept, live_kept))
        if collapsed and sentinel.stop_on_collapse:
            log(f"{name}: catastrophic overfitting flagged at epoch {epoch + 1}; stopping")
            break
    live_result = None
    if live_kept is not None:
        live_result = FitResult(
            _with_kept(state, live_kept),
            _live_history(history),
            live_kept.epoch,
            live_kept.accuracy,
        )
    return FitResult(_with_kept(state, kept), history, kept.epoch, kept.accuracy, live_result)


def _live_history(history: list[dict]) -> list[dict]:
    """The history of an averaged run as the live weights' own: the training metrics, and the
    `live_`-prefixed validation and probe metrics under their plain names."""
    out = []
    for record in history:
        own = {k: v for k, v in record.items() if k == "epoch" or k.startswith("train_")}
        own.update({k[len("live_") :]: v for k, v in record.items() if k.startswith("live_")})
        own["seconds"] = record["seconds"]
        out.append(own)
    return out


def _collapsed(history: list[dict], record: dict, key: str, sentinel: SentinelConfig) -> bool:
    flags = collapse_flags(
        [r[key] for r in (*history, record)],
        max_drop=sentinel.max_drop,
        min_ratio=sentinel.min_ratio,
    )
    return flags[-1]


def _select(kept: Selection, record: dict, by: str, accuracy: str, state) -> Selection:
    """`kept`, or this epoch's weights where its `record[by]` beats it (ties: the earlier)."""
    if record[by] > kept.score:
        weights = jax.device_get((state.params, state.batch_stats))
        return Selection(weights, record["epoch"], record[accuracy], record[by])
    return kept


def _with_kept(state: TrainState, kept: Selection) -> TrainState:
    params, batch_stats = jax.tree.map(jnp.asarray, kept.weights)
    return state.replace(params=params, batch_stats=batch_stats)


def _bn_batches(key: jax.Array, epoch: int, images, labels, config: TrainConfig):
    """The (batch, key) pairs on which an epoch's averaged weights get their statistics."""
    order_key, step_key = jax.random.split(jax.random.fold_in(key, epoch))
    order = jax.random.permutation(order_key, len(labels))
    steps = min(BN_RECOMPUTE_BATCHES, len(labels) // config.batch_size)
    for j in range(steps):
        idx = order[j * config.batch_size : (j + 1) * config.batch_size]
        yield Batch(images[idx], labels[idx]), jax.random.fold_in(step_key, j)


def _with_weights(state: TrainState, init: dict) -> TrainState:
    """`state` with the params and batch statistics of `init`; raises on a structure mismatch."""
    loaded = {}
    for part in ("params", "batch_stats"):
        fresh = getattr(state, part)
        if part not in init:
            raise ValueError(f"init has no {part!r}")
        value = jax.tree.map(jnp.asarray, init[part])
        problem = tree_shape_mismatch(fresh, value)
        if problem is not None:
            raise ValueError(f"init {part!r} does not match the model: {problem}")
        loaded[part] = jax.tree.map(lambda a, b: a.astype(b.dtype), value, fresh)
    return state.replace(**loaded)


def _epoch_line(name: str, epoch: int, epochs: int, record: dict, val_metrics: dict) -> str:
    if "train_accuracy" in record:
        train_acc = f"acc {record['train_accuracy']:.4f}"
    else:
        train_acc = f"adv acc {record['train_adv_accuracy']:.4f}"
    probe = ""
    if "probe_pgd_accuracy" in record:
        probe = (
            f" | probe clean {record['probe_clean_accuracy']:.4f} "
            f"pgd {record['probe_pgd_accuracy']:.4f}"
        )
        if "val_pgd_accuracy" in record:
            probe += f" val pgd {record['val_pgd_accuracy']:.4f}"
        if record["collapse"]:
            probe += " COLLAPSE"
    if "live_val_accuracy" in record:
        probe += f" | live val acc {record['live_val_accuracy']:.4f}"
        if "live_val_pgd_accuracy" in record:
            probe += f" pgd {record['live_val_pgd_accuracy']:.4f}"
    return (
        f"{name} epoch {epoch + 1}/{epochs}: train loss {record['train_loss']:.4f} "
        f"{train_acc} | val acc {record['val_accuracy']:.4f} "
        f"({val_metrics['correct']}/{val_metrics['total']}){probe} | {record['seconds']:.1f}s"
    )
