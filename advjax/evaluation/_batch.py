"""A jitted attack-and-score function for one batch (used by the speed benchmarks).

Evaluations of many cases go through `advjax.evaluation`, which records every case.
"""

import functools

import jax
import jax.numpy as jnp

from advjax._jit_argument import as_jit_argument
from advjax.attacks import fgsm, pgd
from advjax.evaluation._attack_spec import AttackSpec
from advjax.types import LogitsFn

ATTACKS = ("fgsm", "pgd")


@functools.partial(jax.jit, static_argnames=("attack", "steps", "restarts", "step_fraction"))
def _attack_program(logits_fn, x, y, eps, key, *, attack, steps, restarts, step_fraction):
    if attack == "fgsm":
        x_adv, broken = fgsm(logits_fn, x, y, eps).x_adv, None
    else:
        result = pgd(
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


def make_attack_fn(logits_fn: LogitsFn, spec: AttackSpec):
    """A jitted `(x, y, eps, key) -> (x_adv, predictions, broken_step | None)` for an FGSM or
    PGD `spec` (its steps, restarts and step fraction; PGD steps `step_fraction * eps`, the
    reference protocol's eps / 4). The logits function is an argument of the compiled
    program, so models of one architecture share it.
    """
    if spec.method not in ATTACKS:
        raise ValueError(f"make_attack_fn runs {ATTACKS}, got method={spec.method!r}")
    return functools.partial(
        _attack_program, as_jit_argument(logits_fn), attack=spec.method, steps=spec.steps,
        restarts=spec.restarts, step_fraction=spec.step_fraction,
    )  # fmt: skip
