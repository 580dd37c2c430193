"""MALT: APGD-T toward the target classes a linear estimate puts nearest, L-inf and L2.

AutoAttack's APGD-T attacks the classes ranked 2 .. 10 by the clean logits. MALT
(mesoscopic almost linearity targeting) ranks them by the linear estimate of the distance
to each class's decision boundary at the clean input, (z_y - z_t) / ||grad z_t - grad z_y||_*
(the dual norm: L1 for an L-inf threat model, L2 for L2), nearest first, and so reaches a
case's breaking class in fewer targets. The estimate needs the input gradient of every
logit once (one backward pass per class); each target is then one APGD run on the targeted
DLR loss, as in APGD-T.

Reference: Melamed, Yehudai & Vardi, "MALT Powers Up Adversarial Attacks", NeurIPS 2024;
Croce & Hein, ICML 2020 (APGD-T).
"""

import jax
import jax.numpy as jnp
from jax import lax

from advjax.attacks._apgd import SearchResult, apgd, keep_worst, worst_start
from advjax.attacks._attack import Attack, BatchRun, per_case
from advjax.attacks._checks import _check_inputs, check_finite_logits, check_labels
from advjax.attacks._losses import per_example_targeted_dlr
from advjax.attacks._norms import check_norm
from advjax.backend import fast_path
from advjax.types import Array, ArrayLike, LogitsFn

_DUAL = {"linf": 1, "l2": 2}


def malt_targets(logits_fn: LogitsFn, x: ArrayLike, y: ArrayLike, *, norm: str = "linf") -> Array:
    """Per case, the other classes ordered by the linear estimate of their boundary's
    distance at x, nearest first: int32 (batch, classes - 1).

    The estimate for class t is (z_y - z_t) / ||grad z_t - grad z_y||_* at x, with the dual
    norm of `norm`; one forward pass and one backward pass per class.
    """
    check_norm(norm)
    x, y = jnp.asarray(x), jnp.asarray(y)
    logits, pullback = jax.vjp(logits_fn, x)
    classes = logits.shape[-1]
    grads = jax.vmap(lambda k: pullback(jnp.broadcast_to(jax.nn.one_hot(k, classes), logits.shape)
                                        .astype(logits.dtype))[0])(jnp.arange(classes))  # fmt: skip
    grads = jnp.moveaxis(grads, 0, 1).reshape(x.shape[0], classes, -1)
    own = jnp.take_along_axis(grads, y[:, None, None], axis=1)
    scale = jnp.linalg.norm(grads - own, ord=_DUAL[norm], axis=-1)
    gap = jnp.take_along_axis(logits, y[:, None], axis=1) - logits
    distance = gap / jnp.maximum(scale, 1e-12)
    distance = jnp.where(jax.nn.one_hot(y, classes, dtype=bool), jnp.inf, distance)
    return jnp.argsort(distance, axis=-1)[:, : classes - 1].astype(jnp.int32)


def malt(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int = 100,
    norm: str = "linf",
    targets: int = 3,
    restarts: int = 1,
) -> SearchResult:
    """APGD-T toward the `targets` nearest classes by MALT's linear estimate, in turn.

    Args and result as in `advjax.attacks.apgd_targeted` (broken_step has shape
    (targets * restarts, batch), target-major), the targets ordered by MALT's estimate
    rather than by the clean logits. Target t of case i draws its restarts from
    fold_in(key_i, t). Per case: the first breaking target's point, else the
    highest-loss one, as in `apgd_targeted`.

    Example:
      >>> result = malt(logits_fn, x, y, 8 / 255, key=jax.random.key(0), targets=3)

    Reference: Melamed, Yehudai & Vardi, NeurIPS 2024.
    """
    x, y = _check_inputs(x, y)
    check_labels(logits_fn, x, y)
    check_finite_logits(logits_fn, x)
    classes = jax.eval_shape(logits_fn, x).shape[-1]
    if isinstance(targets, bool) or not isinstance(targets, int) or not 1 <= targets < classes:
        raise ValueError(f"targets={targets!r} must be an integer in [1, {classes - 1}]")
    fast_fn = fast_path(logits_fn)
    order = malt_targets(fast_fn, x, y, norm=norm)
    keys = jax.random.split(key, x.shape[0]) if jnp.ndim(key) == 0 else key
    carry, steps_broken = worst_start(x, y), []
    for t in range(targets):
        goal = order[:, t]
        loss_fn = lambda logits, labels, g=goal: per_example_targeted_dlr(logits, labels, g)  # noqa: E731
        run_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, t)
        r = apgd(logits_fn, x, y, eps, key=run_keys, steps=steps, norm=norm, loss=loss_fn,
                 restarts=restarts)  # fmt: skip
        carry, steps_broken = keep_worst(carry, r), [*steps_broken, r.broken_step]
    return SearchResult(carry[0], jnp.concatenate(steps_broken, axis=0), carry[1])


# ---------------------------------------------------------------------------
# Declaration for the runners (`advjax.attacks.ATTACKS`).


def _run(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
    """Target `target` is the (target + 1)-th nearest class by MALT's estimate."""
    del options
    order = malt_targets(fast_path(logits_fn), x, y, norm=norm)
    goal = lax.dynamic_index_in_dim(order, target, axis=1, keepdims=False)
    loss_fn = lambda logits, labels: per_example_targeted_dlr(logits, labels, goal)  # noqa: E731
    r = apgd(logits_fn, x, y, eps, key=keys, steps=steps, norm=norm, loss=loss_fn,
             first_restart=restart)  # fmt: skip
    return BatchRun(r.x_adv, r.broken_step[0], per_case(steps + 2, y), per_case(False, y, bool))


DECLARED = (
    Attack(
        name="malt", run=_run, function=malt, norms=("linf", "l2"), targeted=True, kind="gradient",
        queries=lambda steps: steps + 2,
        passes=lambda steps, classes: (steps + 2, steps + 1 + classes),
        reference="Melamed et al., NeurIPS 2024",
    ),
)  # fmt: skip
