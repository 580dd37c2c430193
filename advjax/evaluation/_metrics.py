"""Robustness metrics from per-example predictions, with their counts and intervals."""

import math

import numpy as np
from jax.typing import ArrayLike


def wilson_interval(
    successes: int, total: int, z: float = 1.959963984540054
) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (default 95 %); (0, 1) when total=0."""
    if total < 0 or not 0 <= successes <= max(total, 0):
        raise ValueError(f"need 0 <= {successes=} <= {total=}")
    if total == 0:
        return 0.0, 1.0
    p = successes / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(successes: int, total: int) -> dict:
    """A proportion with its numerator, denominator and Wilson 95 % interval."""
    low, high = wilson_interval(int(successes), int(total))
    value = successes / total if total else float("nan")
    return {"value": value, "count": int(successes), "total": int(total), "ci95": [low, high]}


def format_rate(r: dict, name: str = "") -> str:
    """'robust accuracy 27.0 % (270/1,000, 95 % CI 24.3-29.8)'."""
    low, high = r["ci95"]
    text = (
        f"{100 * r['value']:.1f} % ({r['count']:,}/{r['total']:,}, "
        f"95 % CI {100 * low:.1f}-{100 * high:.1f})"
    )
    return f"{name} {text}" if name else text


def attack_summary(labels: ArrayLike, clean_pred: ArrayLike, adv_pred: ArrayLike) -> dict:
    """Clean accuracy, robust accuracy and attack success rate, each with its counts.

    Robust accuracy is the share of all examples classified correctly both clean and
    after the attack (as AutoAttack counts: an example the model already gets wrong is
    never robust, whatever the attack returned); attack success rate is the share of
    initially-correct examples whose prediction the attack flipped.
    """
    labels, clean_pred, adv_pred = (np.asarray(a) for a in (labels, clean_pred, adv_pred))
    if not labels.shape == clean_pred.shape == adv_pred.shape or labels.ndim != 1:
        raise ValueError(
            f"need equal 1-D shapes, got {labels.shape=} {clean_pred.shape=} {adv_pred.shape=}"
        )
    clean_ok = clean_pred == labels
    adv_ok = clean_ok & (adv_pred == labels)
    n = labels.size
    return {
        "clean_accuracy": rate(clean_ok.sum(), n),
        "robust_accuracy": rate(adv_ok.sum(), n),
        "attack_success_rate": rate((clean_ok & ~adv_ok).sum(), clean_ok.sum()),
    }


def per_class_accuracy(labels: ArrayLike, pred: ArrayLike, num_classes: int) -> list[dict]:
    """Accuracy per true class, each as a `rate`."""
    labels, pred = np.asarray(labels), np.asarray(pred)
    return [
        rate(((pred == labels) & (labels == c)).sum(), (labels == c).sum())
        for c in range(num_classes)
    ]


def confusion_matrix(labels: ArrayLike, pred: ArrayLike, num_classes: int) -> np.ndarray:
    """Counts [true class, predicted class]."""
    matrix = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(matrix, (np.asarray(labels), np.asarray(pred)), 1)
    return matrix
