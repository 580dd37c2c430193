"""Pure training steps, `step(state, batch, key, ...) -> (state, metrics)`: standard, FGSM,
FGSM with random start and PGD (Madry et al. 2018), TRADES (Zhang et al. 2019), and the
eval step. Adversarial inputs are crafted from the current parameters inside the step.
"""

import numbers
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax.training import train_state

from advjax.attacks import ATTACKS, attack_loss, check_budget, fgsm, project
from advjax.types import Array, ArrayLike, LogitsFn
from advjax_train._augment import augment, to_float

_cross_entropy = attack_loss("ce")


class TrainState(train_state.TrainState):
    """Flax train state plus BatchNorm running statistics."""

    batch_stats: Any


def tree_shape_mismatch(reference: Any, candidate: Any) -> str | None:
    """Where `candidate` differs from `reference` in tree structure or in a leaf's shape, in
    words; None when both match (weights restored from a file into a model's structure)."""
    if jax.tree.structure(reference) != jax.tree.structure(candidate):
        return "a different tree structure"
    leaves = jax.tree_util.tree_leaves_with_path(reference)
    for (path, want), got in zip(leaves, jax.tree.leaves(candidate), strict=True):
        if jnp.shape(want) != jnp.shape(got):
            where = jax.tree_util.keystr(path)
            return f"leaf {where} of shape {jnp.shape(got)} where {jnp.shape(want)} is expected"
    return None


class Batch(NamedTuple):
    """A training or evaluation batch: uint8 NHWC images and int32 labels."""

    images: Array
    labels: Array


def _train_logits_fn(state: TrainState, params, key: jax.Array) -> Callable[[Array], Array]:
    """Train-mode logits (batch statistics, dropout) without the running-stat update."""

    def logits_fn(x: Array) -> Array:
        logits, _ = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            x,
            train=True,
            rngs={"dropout": key},
            mutable=["batch_stats"],
        )
        return logits

    return logits_fn


def _apply_gradients(state: TrainState, x: Array, y: Array, key: jax.Array):
    def loss_fn(params):
        logits, updates = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            x,
            train=True,
            rngs={"dropout": key},
            mutable=["batch_stats"],
        )
        return _cross_entropy(logits, y).mean(), (logits, updates)

    (loss, (logits, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    state = state.apply_gradients(grads=grads, batch_stats=updates["batch_stats"])
    return state, loss, logits


def _prepare(batch: Batch, key: jax.Array, use_augment: bool, augment_pad: int) -> Array:
    x = to_float(batch.images)
    return augment(key, x, pad=augment_pad) if use_augment else x


def _train_on(state, x, x_adv, y, key, adv_mix: bool):
    """One AdamW step on x_adv alone or on [x, x_adv]; metrics named for what was seen."""
    x_adv = jax.lax.stop_gradient(x_adv)
    if not adv_mix:
        state, loss, logits = _apply_gradients(state, x_adv, y, key)
        return state, {"loss": loss, "adv_accuracy": jnp.mean(jnp.argmax(logits, -1) == y)}
    labels = jnp.concatenate([y, y])
    state, loss, logits = _apply_gradients(state, jnp.concatenate([x, x_adv]), labels, key)
    correct = jnp.argmax(logits, -1) == labels
    n = y.shape[0]
    return state, {
        "loss": loss,
        "accuracy": jnp.mean(correct[:n]),
        "adv_accuracy": jnp.mean(correct[n:]),
    }


def standard_train_step(
    state: TrainState,
    batch: Batch,
    key: jax.Array,
    *,
    use_augment: bool = True,
    augment_pad: int = 4,
) -> tuple[TrainState, dict[str, Array]]:
    """One AdamW step on the cross-entropy of the (augmented) clean batch."""
    aug_key, dropout_key = jax.random.split(key)
    x = _prepare(batch, aug_key, use_augment, augment_pad)
    state, loss, logits = _apply_gradients(state, x, batch.labels, dropout_key)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == batch.labels)
    return state, {"loss": loss, "accuracy": accuracy}


def fgsm_train_step(
    state: TrainState,
    batch: Batch,
    key: jax.Array,
    *,
    eps: float = 8 / 255,
    use_augment: bool = True,
    adv_mix: bool = True,
    augment_pad: int = 4,
) -> tuple[TrainState, dict[str, Array]]:
    """One AdamW step on the clean batch and its FGSM version together.

    FGSM at `eps` is generated from the current parameters in train mode (batch statistics,
    dropout), as in the reference study; the loss is the mean cross-entropy over the
    concatenation of the clean and attacked batches (`adv_mix=False`: the attacked batch
    alone, plain FGSM training without a random start, prone to catastrophic overfitting).
    """
    aug_key, attack_key, dropout_key = jax.random.split(key, 3)
    x = _prepare(batch, aug_key, use_augment, augment_pad)
    x_adv = fgsm(_train_logits_fn(state, state.params, attack_key), x, batch.labels, eps).x_adv
    return _train_on(state, x, x_adv, batch.labels, dropout_key, adv_mix)


def _check_steps(steps) -> None:
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1")


def random_start_pgd(
    logits_fn: LogitsFn,
    x: ArrayLike,
    y: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int,
    step_size: float | ArrayLike,
) -> Array:
    """Training-time L-inf attack: uniform random start, `steps` signed steps, last iterate.

    Starts at x + U[-eps, eps] (clipped to [0, 1]), ascends the cross-entropy with
    `steps` steps of `step_size`, projecting to the eps-ball and [0, 1] after each, and
    returns the last iterate (not the best one, unlike `advjax.attacks.pgd`). `steps=1`,
    `step_size=1.25 * eps` is FGSM with random start; `steps=7`, `step_size=eps / 4` is
    Madry et al.'s CIFAR-10 training attack. eps=0 returns x exactly.

    Args:
      logits_fn: pure function from a batch of pixels in [0, 1] to logits.
      x: float batch in [0, 1]; y: integer labels, shape (batch,).
      eps: L-inf budget in pixel units, in [0, 1].
      key: one PRNG key (one draw for the batch) or one per example (see `advjax.attacks.restart_keys`).
      steps: number of gradient steps, >= 1 (static).
      step_size: step in pixel units.

    Returns:
      The adversarial batch, same shape and dtype as x, within eps of x and in [0, 1].

    Example:
      >>> x_adv = random_start_pgd(logits_fn, x, y, 8 / 255, key=key, steps=1,
      ...                          step_size=10 / 255)

    References: Wong, Rice & Kolter, "Fast is better than free", ICLR 2020; Madry et al.,
    "Towards Deep Learning Models Resistant to Adversarial Attacks", ICLR 2018.
    """
    check_budget(eps)
    _check_steps(steps)
    x, y = jnp.asarray(x), jnp.asarray(y)
    rule = ATTACKS["pgd"].rule
    state = rule.run_steps(logits_fn, rule.start(x, eps, key), x, y, eps, step_size, 0, steps)
    return state.x_adv


def pgd_train_step(
    state: TrainState,
    batch: Batch,
    key: jax.Array,
    *,
    eps: float = 8 / 255,
    steps: int = 7,
    step_fraction: float = 0.25,
    adv_mix: bool = False,
    use_augment: bool = True,
    augment_pad: int = 4,
) -> tuple[TrainState, dict[str, Array]]:
    """One AdamW step on the PGD batch (Madry et al., ICLR 2018).

    The attack (`random_start_pgd`, `steps` steps of `step_fraction * eps`) runs on the
    current parameters in train mode, like `fgsm_train_step`'s. Keys:
    `split(key, 4)` = (augmentation, dropout of the update, random start, dropout of the
    attack); the first two are `standard_train_step`'s keys, so at eps=0 with
    `adv_mix=False` this step is the standard step. Metrics: loss and `adv_accuracy`
    (train-mode accuracy on the attacked batch), plus clean `accuracy` when `adv_mix`.
    """
    aug_key, dropout_key, start_key, attack_key = jax.random.split(key, 4)
    x = _prepare(batch, aug_key, use_augment, augment_pad)
    logits_fn = _train_logits_fn(state, state.params, attack_key)
    x_adv = random_start_pgd(
        logits_fn, x, batch.labels, eps, key=start_key, steps=steps, step_size=step_fraction * eps
    )
    return _train_on(state, x, x_adv, batch.labels, dropout_key, adv_mix)


def fgsm_rs_train_step(
    state: TrainState,
    batch: Batch,
    key: jax.Array,
    *,
    eps: float = 8 / 255,
    step_fraction: float = 1.25,
    adv_mix: bool = False,
    use_augment: bool = True,
    augment_pad: int = 4,
) -> tuple[TrainState, dict[str, Array]]:
    """One AdamW step on the FGSM-with-random-start batch (Wong, Rice & Kolter, ICLR 2020).

    delta ~ U[-eps, eps], one signed-gradient step of `step_fraction * eps` (1.25 eps in
    the paper), projected to the eps-ball and [0, 1]: `pgd_train_step` with one step, and
    the same keys, attack mode and metrics.
    """
    return pgd_train_step(
        state,
        batch,
        key,
        eps=eps,
        steps=1,
        step_fraction=step_fraction,
        adv_mix=adv_mix,
        use_augment=use_augment,
        augment_pad=augment_pad,
    )


def _kl(p_logits: Array, q_logits: Array) -> Array:
    """Per-example KL(softmax(p_logits) || softmax(q_logits))."""
    log_p, log_q = jax.nn.log_softmax(p_logits), jax.nn.log_softmax(q_logits)
    return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)


def trades_examples(
    logits_fn: LogitsFn,
    x: ArrayLike,
    eps: float | ArrayLike,
    *,
    key: jax.Array,
    steps: int,
    step_size: float | ArrayLike,
) -> Array:
    """TRADES inner maximisation: signed ascent on KL(f(x) || f(x')) from x + 0.001 N(0, 1).

    Projects to the eps-ball and [0, 1] after every step and returns the last iterate
    (labels are not used). Raises ValueError for eps outside [0, 1] or steps < 1.

    Example:
      >>> x_adv = trades_examples(logits_fn, x, 8 / 255, key=key, steps=10,
      ...                         step_size=2 / 255)

    Reference: Zhang et al., "Theoretically Principled Trade-off between Robustness and
    Accuracy", ICML 2019.
    """
    check_budget(eps)
    _check_steps(steps)
    x = jnp.asarray(x)
    clean = jax.lax.stop_gradient(logits_fn(x))
    x0 = jnp.clip(x + 0.001 * jax.random.normal(key, x.shape, x.dtype), 0.0, 1.0)

    def body(_, x_adv):
        grad = jax.grad(lambda z: _kl(clean, logits_fn(z)).sum())(x_adv)
        return project(x_adv + step_size * jnp.sign(grad), x, eps, "linf")

    return jax.lax.fori_loop(0, steps, body, x0)


def trades_train_step(
    state: TrainState,
    batch: Batch,
    key: jax.Array,
    *,
    eps: float = 8 / 255,
    steps: int = 10,
    step_fraction: float = 0.25,
    beta: float = 6.0,
    use_augment: bool = True,
    augment_pad: int = 4,
) -> tuple[TrainState, dict[str, Array]]:
    """One AdamW step on CE(f(x), y) + beta * KL(f(x) || f(x_adv)) (Zhang et al., 2019).

    As in the authors' code, the attack uses the eval-mode model (running statistics, no
    dropout) and the loss two train-mode passes, clean then adversarial, each with its own
    batch statistics (running statistics updated by both). Keys: `split(key, 4)` =
    (augmentation, dropout of the clean pass, random start, dropout of the adversarial
    pass). Metrics: loss, clean `accuracy`, `adv_accuracy` and the mean `kl`.
    """
    aug_key, dropout_key, start_key, adv_dropout_key = jax.random.split(key, 4)
    x = _prepare(batch, aug_key, use_augment, augment_pad)
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    eval_fn = lambda z: state.apply_fn(variables, z, train=False)  # noqa: E731
    x_adv = trades_examples(
        eval_fn, x, eps, key=start_key, steps=steps, step_size=step_fraction * eps
    )
    x_adv = jax.lax.stop_gradient(x_adv)

    def loss_fn(params):
        logits, updates = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats},
            x,
            train=True,
            rngs={"dropout": dropout_key},
            mutable=["batch_stats"],
        )
        adv_logits, updates = state.apply_fn(
            {"params": params, "batch_stats": updates["batch_stats"]},
            x_adv,
            train=True,
            rngs={"dropout": adv_dropout_key},
            mutable=["batch_stats"],
        )
        kl = _kl(logits, adv_logits).mean()
        loss = _cross_entropy(logits, batch.labels).mean() + beta * kl
        return loss, (logits, adv_logits, kl, updates)

    (loss, (logits, adv_logits, kl, updates)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params
    )
    state = state.apply_gradients(grads=grads, batch_stats=updates["batch_stats"])
    return state, {
        "loss": loss,
        "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch.labels),
        "adv_accuracy": jnp.mean(jnp.argmax(adv_logits, -1) == batch.labels),
        "kl": kl,
    }


@jax.jit
def eval_step(state: TrainState, batch: Batch) -> dict[str, Array]:
    """Summed loss and number correct of the eval-mode model on a uint8 batch."""
    logits = state.apply_fn(
        {"params": state.params, "batch_stats": state.batch_stats},
        to_float(batch.images),
        train=False,
    )
    return {
        "loss_sum": _cross_entropy(logits, batch.labels).sum(),
        "correct": jnp.sum(jnp.argmax(logits, -1) == batch.labels),
    }
