"""Pure white-box attacks: FGSM and PGD with random restarts, L-inf or L2, with the
cross-entropy or the margin (CW) loss, untargeted or targeted.

Every attack takes a pure `logits_fn(x) -> logits` and arrays, works under `jit`, `vmap`
and `grad` of the caller, and never modifies its inputs. Inputs are pixels in [0, 1]; eps
and step sizes are in the same pixel units (L2: the Euclidean norm over the whole image).
"""

import chex
import jax
import jax.numpy as jnp

from advjax.attacks import _norms as norms
from advjax.attacks._attack import Attack, BatchRun, per_case
from advjax.attacks._checks import _check_inputs, _is_concrete, check_budget, check_labels
from advjax.attacks._iterative import (
    SearchResult,
    StepRule,
    gradient_attack,
    loss_and_grad,
    one_restart,
    search,
)
from advjax.attacks._losses import attack_loss, attack_success
from advjax.backend import fast_path
from advjax.types import ArrayLike, LogitsFn


def _pgd_step(x_adv, grad, carry, *, norm, step_size):
    return x_adv + step_size * norms.ascent_direction(grad, norm), carry


PGD_RULE = StepRule(step=_pgd_step)
"""PGD's step: steepest ascent (L-inf: signed gradient, L2: normalised) from a random start."""


def fgsm(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    norm: str = "linf",
) -> SearchResult:
    """Fast Gradient Sign Method: one signed-gradient step of size eps, clipped to [0, 1].

    With `norm="l2"` it is the fast gradient method: one step of L2 length eps along the
    gradient (Goodfellow et al.'s L2 variant), clipped to [0, 1].

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of inputs in [0, 1], leading axis the examples.
      y: integer true labels, shape (batch,).
      eps: L-inf budget in pixel units, in [0, 1] (L2: >= 0); eps=0 returns x unchanged.
      norm: "linf" or "l2".

    Returns:
      A `SearchResult`: x_adv (the adversarial batch, same shape and dtype as x),
      broken_step (shape (1, batch): 0 where x itself is misclassified, 1 where x_adv is,
      else -1) and the cross-entropy at x_adv.

    Raises:
      ValueError / TypeError: eps outside its range or NaN; unknown norm; wrong ranks,
        shapes or dtypes.

    Example:
      >>> x_adv = fgsm(logits_fn, x, y, eps=8 / 255).x_adv

    Reference: Goodfellow, Shlens & Szegedy, "Explaining and Harnessing Adversarial
    Examples", ICLR 2015.
    """
    check_budget(eps, norm)
    x, y = _check_inputs(x, y)
    check_labels(logits_fn, x, y)
    eps = jnp.asarray(eps, x.dtype)
    logits_fn = fast_path(logits_fn)
    losses, logits, grad = loss_and_grad(logits_fn, x, y)
    if _is_concrete(losses) and not bool(jnp.all(jnp.isfinite(losses))):
        raise ValueError("logits_fn returned NaN or infinite logits on the clean inputs x")
    chex.assert_equal_shape((grad, x))
    x_adv = jnp.clip(x + eps * norms.ascent_direction(grad, norm), 0.0, 1.0)
    logits_adv = logits_fn(x_adv)
    broken = jnp.where(
        attack_success(logits, y), 0, jnp.where(attack_success(logits_adv, y), 1, -1)
    ).astype(jnp.int32)
    return SearchResult(x_adv, broken[None], attack_loss("ce")(logits_adv, y))


def pgd(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int = 20,
    step_size: float | ArrayLike | None = None,
    restarts: int = 1,
    first_restart: int = 0,
    norm: str = "linf",
    loss: str = "ce",
    target: ArrayLike | None = None,
) -> SearchResult:
    """Projected Gradient Descent with uniform random start and vmapped restarts.

    Each restart starts uniformly in the eps-ball, takes `steps` steepest-ascent steps of
    `step_size` (default eps/4; L-inf: signed gradient, L2: normalised gradient) on the
    attack loss, and projects to the eps-ball and to [0, 1] after every step. An example
    counts as broken if any iterate of any restart is misclassified (targeted: predicted
    as its target); the earliest such point is returned, otherwise the highest-loss one.

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch of inputs in [0, 1], leading axis the examples.
      y: integer true labels, shape (batch,).
      eps: L-inf budget in pixel units, in [0, 1]; eps=0 returns x unchanged.
      key: PRNG key for the random starts: one key (split once per restart) or one
        key per example, shape (batch,) (restart r of example i uses fold_in(key[i], r)).
      steps: number of gradient steps, >= 1.
      step_size: step in pixel units; default eps / 4.
      restarts: number of random restarts, >= 1, run with `jax.vmap`.
      first_restart: index of the first restart (its key, see `restart_keys`), to run
        restarts one at a time.
      norm: "linf" (eps in [0, 1]) or "l2" (eps >= 0).
      loss: "ce" (cross-entropy) or "margin" (the CW margin loss, `per_example_margin`).
      target: optional target class per example (each different from y): a targeted
        attack that descends the target's loss.

    Returns:
      A `SearchResult`: x_adv (the adversarial batch, same shape and dtype as x), for each
      restart and example the step after which it first broke (-1 never), and the loss at
      x_adv; attack-budget curves (robust accuracy against steps and restarts) come out of
      one run.

    Raises:
      ValueError / TypeError: eps outside its range or NaN, steps or restarts < 1, unknown
        norm or loss, a target equal to the label, wrong ranks, shapes or dtypes.

    Example:
      >>> x_adv = pgd(logits_fn, x, y, 8 / 255, key=jax.random.key(0), steps=20).x_adv

    Reference: Madry et al., "Towards Deep Learning Models Resistant to Adversarial
    Attacks", ICLR 2018.
    """
    return search(
        PGD_RULE, logits_fn, x, y, eps, key=key, steps=steps, step_size=step_size,
        restarts=restarts, first_restart=first_restart, norm=norm, loss=loss, target=target,
    )  # fmt: skip


# ---------------------------------------------------------------------------
# Declarations for the runners (`advjax.attacks.ATTACKS`).


def _run_fgsm(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
    del keys, restart, target, steps, options
    x_adv = fgsm(logits_fn, x, y, eps, norm=norm).x_adv
    wrong = jnp.argmax(logits_fn(x_adv), axis=-1) != y
    return BatchRun(x_adv, jnp.where(wrong, 1, -1).astype(jnp.int32), per_case(1, y),
                    per_case(False, y, bool))  # fmt: skip


def _run_pgd_targeted(
    logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options
) -> BatchRun:
    """Towards the class of rank target + 2 (the top class for a case misclassified clean);
    run (restart, target) draws from fold_in(keys, restart + target). Broken means
    misclassified as any class; a case misclassified elsewhere than the target without the
    search noticing counts the whole run."""
    ranked = jnp.argsort(-logits_fn(x), axis=-1)
    goal = jnp.take_along_axis(ranked, jnp.full((len(y), 1), target + 1), axis=1)[:, 0]
    goal = jnp.where(goal == y, ranked[:, 0], goal)
    x_adv, step = one_restart(PGD_RULE, logits_fn, x, y, eps, keys, restart + target, steps,
                              norm=norm, options=options, target=goal)  # fmt: skip
    wrong = jnp.argmax(logits_fn(x_adv), axis=-1) != y
    broken = jnp.where(wrong, jnp.where(step >= 0, step, steps), -1).astype(jnp.int32)
    return BatchRun(x_adv, broken, per_case(steps, y), per_case(False, y, bool))


def _pgd_targeted(logits_fn, x, y, eps, *, target, **options) -> SearchResult:
    """`pgd` towards each case's `target` class (required)."""
    return pgd(logits_fn, x, y, eps, target=target, **options)


DECLARED = (
    Attack(
        name="fgsm", run=_run_fgsm, function=fgsm, norms=("linf", "l2"), targeted=False, kind="gradient",
        queries=lambda steps: 1, passes=lambda steps, classes: (2, 1),
        restarts=False, steps=1, reference="Goodfellow, Shlens & Szegedy, ICLR 2015",
    ),
    gradient_attack(
        "pgd", PGD_RULE, norms=("linf", "l2"), reference="Madry et al., ICLR 2018", function=pgd
    ),
    Attack(
        name="pgd-t", run=_run_pgd_targeted, function=_pgd_targeted, norms=("linf", "l2"), targeted=True,
        kind="gradient", queries=lambda steps: steps,
        passes=lambda steps, classes: (steps + 3, steps),
        options=("loss", "step_fraction", "targets"), restarts=False,
        reference="Madry et al., ICLR 2018 (targeted)",
    ),
)  # fmt: skip
