"""Per-example attack losses (the attacker maximises each) and the success test.

Cross-entropy (Madry et al. 2018), the margin loss of Carlini & Wagner (2017), and the
Difference of Logits Ratio and its targeted form (Croce & Hein 2020).
"""

import jax
import jax.numpy as jnp
import optax
from jax import lax

from advjax.attacks._norms import TINY
from advjax.types import Array

LOSSES = ("ce", "margin")


def per_example_cross_entropy(logits: Array, labels: Array) -> Array:
    """Cross-entropy per example; the attacker *maximises* it (higher = more adversarial)."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def per_example_margin(logits: Array, labels: Array) -> Array:
    """The margin (CW) loss max_{j != y} z_j - z_y; the attacker maximises it, and it is
    positive exactly when the example is misclassified. Unlike the cross-entropy it does
    not saturate when the softmax is confident.

    Reference: Carlini & Wagner, "Towards Evaluating the Robustness of Neural Networks",
    IEEE S&P 2017.
    """
    true = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    is_true = jax.nn.one_hot(labels, logits.shape[-1], dtype=bool)
    return jnp.max(jnp.where(is_true, -jnp.inf, logits), axis=-1) - true


def attack_loss(loss: str = "ce", targeted: bool = False):
    """The per-example loss `(logits, labels) -> (B,)` a PGD attacker maximises.

    Untargeted, `labels` are the true classes: the cross-entropy or the margin. Targeted,
    `labels` are the targets: minus the cross-entropy of the target, or minus the target's
    margin (z_t - max_{j != t} z_j), so ascent pulls the prediction towards the target.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r} must be one of {LOSSES}")
    base = per_example_cross_entropy if loss == "ce" else per_example_margin
    if not targeted:
        return base
    return lambda logits, labels: -base(logits, labels)


def attack_success(logits: Array, labels: Array, targeted: bool = False) -> Array:
    """Per example: the prediction is the target (targeted) or not the true class."""
    pred = jnp.argmax(logits, axis=-1)
    return pred == labels if targeted else pred != labels


def per_example_dlr(logits: Array, labels: Array) -> Array:
    """Untargeted Difference of Logits Ratio, -(z_y - max_{i!=y} z_i) / (z_pi1 - z_pi3).

    Positive exactly when the example is misclassified; unchanged when the logits are
    shifted or scaled by a positive factor (z_pi are the logits sorted descending).
    """
    if logits.shape[-1] < 3:
        raise ValueError(f"the DLR loss needs >= 3 classes, got {logits.shape=}")
    top, index = lax.top_k(logits, 3)
    true = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    other = jnp.where(index[:, 0] == labels, top[:, 1], top[:, 0])
    return -(true - other) / (top[:, 0] - top[:, 2] + TINY)


def per_example_targeted_dlr(logits: Array, labels: Array, target: Array) -> Array:
    """Targeted DLR, -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4) / 2): pushes z_t above z_y, t
    each case's `target` class (as `pgd(target=)` takes it)."""
    if logits.shape[-1] < 4:
        raise ValueError(f"the targeted DLR loss needs >= 4 classes, got {logits.shape=}")
    top = lax.top_k(logits, 4)[0]
    true = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    aimed = jnp.take_along_axis(logits, target[:, None], axis=-1)[:, 0]
    return -(true - aimed) / (top[:, 0] - 0.5 * (top[:, 2] + top[:, 3]) + TINY)
