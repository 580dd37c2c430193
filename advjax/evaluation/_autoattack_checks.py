"""What AutoAttack checks before and after it runs: inputs that would make its numbers
meaningless are refused before any work, and the signs of a masked or broken evaluation
become named checks that a release gate can require (the original only prints warnings).
"""

import numbers

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attacks import attack_loss, check_budget, perturbation_norm
from advjax.evaluation._sanity import Check

PROBE = 32  # cases probed for randomness, probabilities and gradients
RANDOM_TOLERANCE = 1e-5
ZERO_GRADIENT_LIMIT = 0.05
BALL_TOLERANCE = 1e-6


def check_eps_argument(eps, norm: str) -> None:
    if not isinstance(eps, numbers.Real) or isinstance(eps, bool):
        raise TypeError(f"eps={eps!r} must be a real number (input units, e.g. 8/255)")
    check_budget(eps, norm)


def validate_inputs(logits_fn, x, y, eps, *, norm: str, key, random_model: bool):
    """Host arrays (x float32, y int) and the number of classes, after every check that needs
    no attack; raises ValueError / TypeError naming the argument and the expected range."""
    check_eps_argument(eps, norm)
    if not isinstance(key, jax.Array) or not (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.ndim == 0
    ):
        raise TypeError(f"key must be one typed PRNG key (jax.random.key(seed)), got {key!r}")
    x, y = np.asarray(x), np.asarray(y)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"x must hold floating point inputs in [0, 1], got dtype {x.dtype}")
    if not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"y must hold integer class labels, got dtype {y.dtype}")
    if x.ndim < 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(
            f"x must be (n, ...) and y (n,) with the same n >= 1, got {x.shape}, {y.shape}"
        )
    lo, hi = float(x.min()), float(x.max())
    if not (0.0 <= lo and hi <= 1.0):
        scale = " (pixels on a 0..255 scale? divide by 255)" if hi > 1.5 else ""
        raise ValueError(f"x must lie in [0, 1], got values in [{lo}, {hi}]{scale}")
    probe = jnp.asarray(x[:PROBE], jnp.float32)
    logits = logits_fn(probe, jax.random.key(0)) if random_model else logits_fn(probe)
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape[0] != len(probe):
        raise ValueError(f"logits_fn must return (batch, classes) logits, got shape {logits.shape}")
    if not np.isfinite(logits).all():
        raise ValueError("logits_fn returned NaN or infinite logits on the clean inputs")
    classes = logits.shape[1]
    if int(y.min()) < 0 or int(y.max()) >= classes:
        raise ValueError(
            f"y must lie in [0, {classes}) (the logits' classes), got [{y.min()}, {y.max()}]"
        )
    return x.astype(np.float32), y.astype(np.int32), classes


def probe_checks(logits_fn, x, y, *, random_model: bool) -> list[Check]:
    """Randomness, probability outputs and all-zero input gradients on the first cases."""
    probe, labels = jnp.asarray(x[:PROBE]), jnp.asarray(y[:PROBE])
    if random_model:
        first, second = logits_fn(probe, jax.random.key(1)), logits_fn(probe, jax.random.key(2))
        fn = lambda z: logits_fn(z, jax.random.key(1))  # noqa: E731
    else:
        first, second, fn = logits_fn(probe), logits_fn(probe), logits_fn
    spread = float(jnp.max(jnp.abs(first - second)))
    is_random = spread > RANDOM_TOLERANCE
    checks = [
        Check(
            "model_randomness",
            is_random == random_model,
            f"two identical calls differ by {spread:.2e} (random above {RANDOM_TOLERANCE:g}); "
            + (
                "the rand version expects a random model"
                if random_model
                else "a random model needs version='rand' (EOT)"
            ),
        )  # fmt: skip
    ]
    rows = np.asarray(first)
    looks_like_probabilities = bool(
        (rows >= 0).all() and (rows <= 1).all() and np.allclose(rows.sum(axis=1), 1, atol=1e-4)
    )
    checks.append(
        Check(
            "outputs_are_logits",
            not looks_like_probabilities,
            "rows in [0, 1] summing to 1: the model returns probabilities, which flatten the "
            "gradients (return logits)"
            if looks_like_probabilities
            else "outputs are not probability rows",
        )  # fmt: skip
    )
    grad = jax.grad(lambda z: attack_loss("ce")(fn(z), labels).sum())(probe)
    zero = float(np.mean(np.all(np.asarray(grad).reshape(len(labels), -1) == 0, axis=1)))
    checks.append(
        Check(
            "zero_input_gradients",
            zero <= ZERO_GRADIENT_LIMIT,
            f"{100 * zero:.1f} % of {len(labels)} probed cases have an all-zero input gradient "
            f"(must be <= {100 * ZERO_GRADIENT_LIMIT:.0f} %)",
        )
    )
    return checks


def black_box_check(broken_by, members) -> list[Check]:
    """A score-based (black-box) member breaking cases that every earlier white-box member
    left robust points at masked gradients; empty when no gradient member runs before the
    first score-based one."""
    kinds = [m.info.kind for m in members]
    if "score" not in kinds or "gradient" not in kinds[: kinds.index("score")]:
        return []
    s = kinds.index("score")
    extra = int(np.sum(np.asarray(broken_by) == s))
    return [
        Check(
            "black_box_not_stronger",
            extra == 0,
            f"{members[s].name.capitalize()} broke {extra} cases every earlier white-box member "
            "left robust (> 0 suggests masked gradients)",
        )
    ]


def ball_check(x, x_adv, eps, norm) -> Check:
    size = np.asarray(perturbation_norm(jnp.asarray(x_adv) - jnp.asarray(x), norm))
    worst = float(size.max()) if len(size) else 0.0
    low, high = float(x_adv.min()), float(x_adv.max())
    return Check(
        "perturbations_in_ball_and_box",
        worst <= eps + BALL_TOLERANCE and low >= 0 and high <= 1,
        f"largest {norm} perturbation {worst:.6g} (eps {eps:.6g}); inputs in [{low:.3g}, {high:.3g}]",
    )


def run_checks(logits_fn, x, y, eps, x_adv, broken_by, members, *, norm, random_model,
               model_checks=None):  # fmt: skip
    """The named checks of one AutoAttack result (`model_checks`: those of `probe_checks`
    where they already ran on these cases)."""
    if model_checks is None:
        model_checks = probe_checks(logits_fn, x, y, random_model=random_model)
    return [
        *model_checks,
        ball_check(x, x_adv, eps, norm),
        *black_box_check(broken_by, members),
    ]
