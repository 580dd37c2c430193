"""Catastrophic-overfitting sentinel: a fixed PGD probe every epoch and the rule that flags it.

Single-step adversarial training can overfit catastrophically: within an epoch the
model's PGD accuracy falls to about zero while its FGSM accuracy rises (Wong, Rice &
Kolter, "Fast is better than free", ICLR 2020, who stop early on the PGD accuracy of a
training minibatch). The sentinel attacks one fixed set of training images with PGD
after every epoch, with the same per-example random starts each time, so that a change
between epochs is the model's; `collapse_flags` turns that series into flags. `fit`
(advjax_train) runs it when given a `SentinelConfig`, and can stop on a flag and choose its
checkpoint by PGD accuracy on a fixed validation subset instead of clean accuracy.

Everything here is pure or a thin host loop over a jitted function; no file I/O.
"""

import dataclasses
import functools
import math
import numbers
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attacks import check_budget, fgsm, pgd
from advjax.evaluation.engine import case_keys
from advjax.types import Array
from advjax_train._augment import to_float

SELECTION_CRITERIA = ("val_accuracy", "val_pgd_accuracy")


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


@dataclasses.dataclass(frozen=True)
class SentinelConfig:
    """The probe, the collapse rule and the checkpoint selection of a monitored `fit`.

    Attributes:
      probe_size: training images probed every epoch (chosen once from `seed`).
      seed: seed of the probe and validation subsets and of the attacks' random starts.
      eps: attack budget; None means the run's `TrainConfig.adv_eps`.
      steps: PGD steps of the probe and of the validation attack.
      step_fraction: PGD step size as a fraction of eps.
      max_drop: flag an epoch whose probe PGD accuracy is more than this (absolute)
        below the best so far.
      min_ratio: also flag an epoch below `min_ratio` times the best so far (None: off).
      stop_on_collapse: end training after the first flagged epoch.
      select_by: "val_accuracy" (clean, `fit`'s default) or "val_pgd_accuracy" (PGD
        accuracy on `val_size` validation images); flagged epochs are never selected.
      val_size: validation images attacked per epoch when selecting by PGD accuracy
        (all of them when there are fewer).
      batch_size: images per jitted attack call.
    """

    probe_size: int = 256
    seed: int = 0
    eps: float | None = None
    steps: int = 10
    step_fraction: float = 0.25
    max_drop: float = 0.2
    min_ratio: float | None = None
    stop_on_collapse: bool = False
    select_by: str = "val_accuracy"
    val_size: int = 1000
    batch_size: int = 256

    def __post_init__(self):
        for name in ("probe_size", "steps", "val_size", "batch_size"):
            _check_int(name, getattr(self, name), 1)
        _check_int("seed", self.seed, 0)
        if self.eps is not None:
            check_budget(self.eps)
        if not (math.isfinite(self.step_fraction) and 0 < self.step_fraction <= 1):
            raise ValueError(f"step_fraction={self.step_fraction!r} must be in (0, 1]")
        if not 0 <= self.max_drop <= 1:
            raise ValueError(f"max_drop={self.max_drop!r} must be in [0, 1]")
        if self.min_ratio is not None and not 0 < self.min_ratio < 1:
            raise ValueError(f"min_ratio={self.min_ratio!r} must be in (0, 1) or None")
        if self.select_by not in SELECTION_CRITERIA:
            raise ValueError(f"select_by={self.select_by!r} must be one of {SELECTION_CRITERIA}")


def collapse_flags(
    accuracies: Sequence[float], *, max_drop: float = 0.2, min_ratio: float | None = None
) -> list[bool]:
    """Per epoch: has the probe PGD accuracy collapsed relative to the best epoch so far?

    Epoch t is flagged when `best - acc[t] > max_drop` or `acc[t] < min_ratio * best`,
    with `best = max(acc[0..t])`; the first epoch is never flagged.

    Example:
      >>> collapse_flags([0.30, 0.40, 0.05], max_drop=0.2)
      [False, False, True]
    """
    flags, best = [], -math.inf
    for acc in accuracies:
        best = max(best, acc)
        ratio_low = min_ratio is not None and acc < min_ratio * best
        flags.append(bool(best - acc > max_drop or ratio_low))
    return flags


def subset_indices(n: int, size: int, key: jax.Array) -> np.ndarray:
    """`min(size, n)` sorted indices of range(n) without replacement, fixed by `key`."""
    return np.sort(np.asarray(jax.random.permutation(key, n))[: min(size, n)])


@functools.partial(jax.jit, static_argnames=("apply_fn", "steps"))
def _attack_counts(
    apply_fn, variables, images: Array, labels: Array, mask: Array, keys, eps, step_size, *, steps
) -> Array:
    """Numbers correct (clean, FGSM, PGD) of the eval-mode model over the unmasked examples."""

    def logits_fn(x: Array) -> Array:
        return apply_fn(variables, x, train=False)

    x = to_float(images)
    x_fgsm = fgsm(logits_fn, x, labels, eps).x_adv
    x_pgd = pgd(logits_fn, x, labels, eps, key=keys, steps=steps, step_size=step_size).x_adv
    return jnp.stack(
        [jnp.sum(mask & (jnp.argmax(logits_fn(z), -1) == labels)) for z in (x, x_fgsm, x_pgd)]
    )


def pgd_accuracy(
    state,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    eps: float,
    steps: int,
    step_size: float,
    key: jax.Array,
    batch_size: int = 256,
) -> dict[str, float]:
    """Clean, FGSM and PGD accuracy of the eval-mode model of a `TrainState` on uint8 images.

    PGD (`advjax.attacks.pgd`, one restart) starts example i at its own random
    point from `fold_in(key, i)`, so the same images and key give the same starts whatever
    the batching. Every batch, the last one padded, has `batch_size` images, so one
    compilation per model serves every call.

    Returns:
      {"clean_accuracy", "fgsm_accuracy", "pgd_accuracy"}.

    Raises:
      ValueError: eps outside [0, 1], steps or batch_size < 1.

    Example:
      >>> pgd_accuracy(state, images, labels, eps=8 / 255, steps=10, step_size=2 / 255,
      ...              key=jax.random.key(0))["pgd_accuracy"]
    """
    check_budget(eps)
    _check_int("steps", steps, 1)
    _check_int("batch_size", batch_size, 1)
    images, labels = np.asarray(images), np.asarray(labels)
    n = len(labels)
    keys = case_keys(key, np.arange(n))
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    totals = np.zeros(3, np.int64)
    for start in range(0, n, batch_size):
        count = min(batch_size, n - start)
        idx = start + np.arange(batch_size) % count  # the last batch repeats its images
        totals += np.asarray(
            _attack_counts(
                state.apply_fn,
                variables,
                jnp.asarray(images[idx]),
                jnp.asarray(labels[idx]),
                jnp.asarray(np.arange(batch_size) < count),
                keys[idx],
                jnp.float32(eps),
                jnp.float32(step_size),
                steps=steps,
            )
        )
    clean, fgsm_correct, pgd_correct = (float(t) / n for t in totals)
    return {"clean_accuracy": clean, "fgsm_accuracy": fgsm_correct, "pgd_accuracy": pgd_correct}


def make_probe(
    sentinel: SentinelConfig, adv_eps: float, train, val
) -> Callable[[object], dict[str, float]]:
    """The per-epoch probe `probe(state) -> metrics` that `fit` adds to each history record.

    Metrics: `probe_clean_accuracy`, `probe_fgsm_accuracy` and `probe_pgd_accuracy` on
    the fixed training subset and, when selecting by it, `val_pgd_accuracy` (with
    `val_subset_clean_accuracy`) on the fixed validation subset. Both use the eval-mode
    model, eps = `sentinel.eps` or else `adv_eps`, and the same random starts every epoch.
    Validation images only, never test data.
    """
    eps = adv_eps if sentinel.eps is None else sentinel.eps
    root = jax.random.key(sentinel.seed)
    p_idx = subset_indices(len(train.labels), sentinel.probe_size, jax.random.fold_in(root, 0))
    p_images, p_labels = np.asarray(train.images)[p_idx], np.asarray(train.labels)[p_idx]
    v_idx = subset_indices(len(val.labels), sentinel.val_size, jax.random.fold_in(root, 1))
    v_images, v_labels = np.asarray(val.images)[v_idx], np.asarray(val.labels)[v_idx]
    use_val = sentinel.select_by == "val_pgd_accuracy"
    largest = max(len(p_idx), len(v_idx) if use_val else 0)
    attack = functools.partial(
        pgd_accuracy,
        eps=eps,
        steps=sentinel.steps,
        step_size=sentinel.step_fraction * eps,
        batch_size=min(sentinel.batch_size, largest),  # one batch shape for both subsets
    )

    def probe(state) -> dict[str, float]:
        out = attack(state, p_images, p_labels, key=jax.random.fold_in(root, 2))
        metrics = {f"probe_{k}": v for k, v in out.items()}
        if use_val:
            out = attack(state, v_images, v_labels, key=jax.random.fold_in(root, 3))
            metrics.update(
                val_pgd_accuracy=out["pgd_accuracy"],
                val_subset_clean_accuracy=out["clean_accuracy"],
            )
        return metrics

    return probe


__all__ = [
    "SELECTION_CRITERIA",
    "SentinelConfig",
    "collapse_flags",
    "make_probe",
    "pgd_accuracy",
    "subset_indices",
]
