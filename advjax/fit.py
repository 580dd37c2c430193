"""The training loop: epochs of jitted steps, per-epoch validation, best checkpoint."""

import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax.progress import Progress
from advjax.train import (
    Batch,
    TrainConfig,
    TrainState,
    create_train_state,
    eval_step,
    make_train_step,
)


class FitResult(NamedTuple):
    """The best-by-validation state and the per-epoch history of a `fit` run."""

    state: TrainState
    history: list[dict]
    best_epoch: int
    best_val_accuracy: float


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
) -> FitResult:
    """Train a CompactCNN per `config`; keep the epoch with the best validation accuracy.

    Each epoch visits a fresh permutation of the training set in full batches (a last
    partial batch is dropped; the permutation differs every epoch). Every random choice
    derives from `jax.random.key(config.seed)`: init, shuffles, augmentation, dropout and
    in-training attacks, so the same config and data give the same weights.
    """
    n = len(train.labels)
    steps_per_epoch = n // config.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"{n} training images is fewer than one batch of {config.batch_size}")
    key = jax.random.key(config.seed)
    init_key, shuffle_key, step_key = jax.random.split(key, 3)
    state = create_train_state(init_key, config, config.epochs * steps_per_epoch)
    train_step = make_train_step(config)
    images, labels = jnp.asarray(train.images), jnp.asarray(train.labels)
    history, best, best_epoch, best_acc = [], None, -1, -1.0
    for epoch in range(config.epochs):
        started = time.perf_counter()
        order = jax.random.permutation(jax.random.fold_in(shuffle_key, epoch), n)
        bar = Progress(steps_per_epoch, f"{name} epoch {epoch + 1}/{config.epochs}", show_progress)
        sums: dict[str, float] = {}
        for i in range(steps_per_epoch):
            idx = order[i * config.batch_size : (i + 1) * config.batch_size]
            key_i = jax.random.fold_in(jax.random.fold_in(step_key, epoch), i)
            state, metrics = train_step(state, Batch(images[idx], labels[idx]), key_i)
            metrics = jax.device_get(metrics)
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + float(v)
            bar.update(postfix=f"loss {sums['loss'] / (i + 1):.3f}")
        bar.close()
        record = {
            "epoch": epoch + 1,
            **{f"train_{k}": v / steps_per_epoch for k, v in sums.items()},
        }
        val_metrics = evaluate(state, val.images, val.labels)
        record.update(
            val_accuracy=val_metrics["accuracy"],
            val_loss=val_metrics["loss"],
            seconds=time.perf_counter() - started,
        )
        history.append(record)
        log(
            f"{name} epoch {epoch + 1}/{config.epochs}: train loss {record['train_loss']:.4f} "
            f"acc {record['train_accuracy']:.4f} | val acc {record['val_accuracy']:.4f} "
            f"({val_metrics['correct']}/{val_metrics['total']}) | {record['seconds']:.1f}s"
        )
        if val_metrics["accuracy"] > best_acc:
            best_acc, best_epoch = val_metrics["accuracy"], epoch + 1
            best = jax.device_get((state.params, state.batch_stats))
    params, batch_stats = jax.tree.map(jnp.asarray, best)
    return FitResult(
        state.replace(params=params, batch_stats=batch_stats), history, best_epoch, best_acc
    )
