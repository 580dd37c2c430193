"""A jitted attack-and-score function for one batch (used by the speed benchmarks).

Evaluations of many cases go through `advjax.evaluation`, which records every case.
"""

import jax
import jax.numpy as jnp

from advjax.attacks._pgd import fgsm, pgd_search
from advjax.types import Array, LogitsFn

ATTACKS = ("fgsm", "pgd")


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
