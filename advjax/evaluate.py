"""Batched evaluation of a model under attack: predictions and first-break steps.

Thin, jitted drivers around the pure attacks for datasets larger than one batch. eps is
a traced argument, so one compilation serves every eps of a study.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attacks import check_eps, fgsm, pgd_search
from advjax.progress import Progress
from advjax.types import Array, LogitsFn

ATTACKS = ("fgsm", "pgd")


class AttackRun(NamedTuple):
    """Per-example outcome of one attack at one eps over a dataset."""

    predictions: np.ndarray
    broken_step: np.ndarray | None
    x_adv: np.ndarray


def predict(logits_fn: LogitsFn, x: np.ndarray, batch_size: int = 500) -> np.ndarray:
    """Argmax predictions of `logits_fn` on float inputs, batch by batch."""
    step = jax.jit(lambda xb: jnp.argmax(logits_fn(xb), axis=-1))
    return np.concatenate(
        [np.asarray(step(x[i : i + batch_size])) for i in range(0, len(x), batch_size)]
    )


def make_attack_fn(
    logits_fn: LogitsFn,
    attack: str,
    *,
    steps: int = 20,
    restarts: int = 1,
    step_fraction: float = 0.25,
):
    """A jitted `(x, y, eps, key) -> (x_adv, predictions, broken_step | None)`.

    PGD takes steps of `step_fraction * eps` (the reference protocol: eps / 4).
    """
    if attack not in ATTACKS:
        raise ValueError(f"unknown attack {attack!r}; choose from {ATTACKS}")

    def run(x: Array, y: Array, eps: Array, key: jax.Array):
        if attack == "fgsm":
            x_adv, broken = fgsm(logits_fn, x, y, eps), None
        else:
            result = pgd_search(
                logits_fn,
                x,
                y,
                eps,
                key=key,
                steps=steps,
                restarts=restarts,
                step_size=step_fraction * eps,
            )
            x_adv, broken = result.x_adv, result.broken_step
        return x_adv, jnp.argmax(logits_fn(x_adv), axis=-1), broken

    return jax.jit(run)


def attack_dataset(
    attack_fn,
    x: np.ndarray,
    y: np.ndarray,
    eps: float,
    *,
    key: jax.Array,
    batch_size: int = 250,
    keep_adv: int = 0,
    desc: str = "attack",
    show_progress: bool = True,
) -> AttackRun:
    """Run a `make_attack_fn` attack over (x, y) in batches; batch i uses fold_in(key, i).

    Keeps the first `keep_adv` adversarial examples (float32) for inspection.
    """
    check_eps(eps)
    bar = Progress(len(y), desc, show_progress)
    preds, broken, kept = [], [], []
    for i, start in enumerate(range(0, len(y), batch_size)):
        xb, yb = (
            jnp.asarray(x[start : start + batch_size]),
            jnp.asarray(y[start : start + batch_size]),
        )
        x_adv, pred, broken_step = attack_fn(xb, yb, jnp.float32(eps), jax.random.fold_in(key, i))
        preds.append(np.asarray(pred))
        if broken_step is not None:
            broken.append(np.asarray(broken_step))
        if start < keep_adv:
            kept.append(np.asarray(x_adv[: keep_adv - start]))
        bar.update(len(yb))
    bar.close()
    return AttackRun(
        predictions=np.concatenate(preds),
        broken_step=np.concatenate(broken, axis=1) if broken else None,
        x_adv=np.concatenate(kept) if kept else np.zeros((0,) + x.shape[1:], np.float32),
    )
