"""MI-FGSM (Dong et al., CVPR 2018): momentum of L1-normalised gradients, steps of eps / steps
along its steepest-ascent direction (L-inf: sign; L2: unit vector), from x itself."""

import jax.numpy as jnp

from advjax.attacks._iterative import StepRule, gradient_attack
from advjax.attacks._norms import ascent_direction, per_example


def _step(x_adv, grad, momentum, *, norm, step_size, decay):
    l1 = jnp.sum(jnp.abs(grad), axis=tuple(range(1, grad.ndim)))
    momentum = decay * momentum + grad / per_example(l1 + 1e-12, grad)
    return x_adv + step_size * ascent_direction(momentum, norm), momentum


MI_FGSM = gradient_attack(
    "mi-fgsm",
    StepRule(
        step=_step,
        init=jnp.zeros_like,
        random_start=False,
        hyper={"decay": 1.0},
        step_fraction=False,
    ),
    norms=("linf", "l2"),
    reference="Dong et al., CVPR 2018",
)
"""`MI_FGSM(logits_fn, x, y, eps, *, key, steps=10, norm="linf", decay=1.0)`."""
