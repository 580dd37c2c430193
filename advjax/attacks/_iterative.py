"""The loop every iterative gradient attack shares, around the one thing that differs: its step.

An attack of this family (PGD, MI-FGSM, ...) is a `StepRule`: how one iterate moves along the
loss gradient, with an optional carry (momentum). The loop around it is written once: the
random start, the loss and its input gradient, the projection onto the norm's ball intersected
with [0, 1] after every step, first-break and highest-loss tracking, restarts (vmapped, each
with its own key), and stepping in chunks (steps [0, k) then [k, n) give the state of [0, n) at
once) so the runners can stop spending steps on cases already broken.
"""

import dataclasses
import numbers
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax

from advjax.attacks import _norms as norms
from advjax.attacks._attack import Attack, BatchRun, per_case
from advjax.attacks._checks import (
    _check_inputs,
    _check_positive_int,
    _is_concrete,
    check_budget,
    check_finite_logits,
    check_key,
    check_labels,
)
from advjax.attacks._losses import LOSSES, attack_loss, attack_success, per_example_cross_entropy
from advjax.backend import fast_path
from advjax.types import Array, ArrayLike, LogitsFn


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class StepRule:
    """How an iterative gradient attack moves one iterate (compared and hashed by identity:
    one rule per attack, so the `Attack` holding it stays hashable).

    Attributes:
      step: `step(x_adv, grad, carry, *, norm, step_size, **hyper) -> (x_next, carry)`; the
        loop projects `x_next` onto the eps-ball and [0, 1].
      init: `init(x) -> carry`, the carry before the first step (default: none).
      random_start: start uniformly in the eps-ball (else at x).
      hyper: the rule's own hyper-parameters and their defaults (e.g. MI-FGSM's decay).
      step_fraction: whether the step size is a fraction of eps the caller sets (PGD: eps / 4
        by default); otherwise it is eps / steps (the whole budget over the steps).
    """

    step: Callable
    init: Callable[[Array], Any] = lambda x: ()
    random_start: bool = True
    hyper: Mapping[str, float] = dataclasses.field(default_factory=dict)
    step_fraction: bool = True

    def default_step_size(self, eps, steps: int):
        return eps / 4 if self.step_fraction else eps / steps

    def step_size(self, eps, steps: int, options):
        """The runners' step size: `options["step_fraction"]` of eps, or the default."""
        return options["step_fraction"] * eps if self.step_fraction else eps / steps

    def start(self, x, eps, key, norm="linf") -> "IterateState":
        """`start` with this rule."""
        return start(self, x, eps, key, norm)

    def run_steps(self, logits_fn, state, x, y, eps, step_size, lo, hi, **objective):
        """`run_steps` with this rule."""
        return run_steps(self, logits_fn, state, x, y, eps, step_size, lo, hi, **objective)

    def finish(self, logits_fn, state, y, steps, **objective) -> "IterateState":
        """`finish` (the rule plays no part in it)."""
        return finish(logits_fn, state, y, steps, **objective)


class IterateState(NamedTuple):
    """The state of one restart between steps (`start`, `run_steps`, `finish`).

    Attributes:
      x_adv: the current iterate.
      best: the point kept so far: the first misclassified iterate, else the highest-loss one.
      best_loss: loss at `best` (-inf before the first evaluation).
      broken_step: steps after which the example was first misclassified, -1 if not yet.
      carry: the step rule's own state (e.g. momentum), `()` for none.
    """

    x_adv: Array
    best: Array
    best_loss: Array
    broken_step: Array
    carry: Any = ()


class SearchResult(NamedTuple):
    """Per-example outcome of an iterative attack's search over its restarts.

    Attributes:
      x_adv: the first misclassified iterate of the earliest restart that broke the example,
        else the highest-loss iterate over all restarts.
      broken_step: for each restart (axis 0) and example, the number of steps after which
        the example was first misclassified (0 = at the start), or -1 if it never was.
      loss: the attack loss (see `attack_loss`) at `x_adv`.
    """

    x_adv: Array
    broken_step: Array
    loss: Array


def loss_and_grad(
    logits_fn: LogitsFn, x: Array, y: Array, loss_fn=per_example_cross_entropy
) -> tuple[Array, Array, Array]:
    """Per-example loss (`loss_fn(logits, y)`, to maximise), logits and the input gradient
    of the summed loss."""

    def total(z):
        logits = logits_fn(z)
        losses = loss_fn(logits, y)
        return losses.sum(), (losses, logits)

    (_, (losses, logits)), grad = jax.value_and_grad(total, has_aux=True)(x)
    return losses, logits, grad


def _track(state: IterateState, step, losses: Array, wrong: Array) -> IterateState:
    """Record the point just evaluated: first successful point wins, else highest loss."""
    unbroken = state.broken_step < 0
    newly_broken = unbroken & wrong
    improved = unbroken & (newly_broken | (losses > state.best_loss))
    mask = improved.reshape((-1,) + (1,) * (state.x_adv.ndim - 1))
    return state._replace(
        best=jnp.where(mask, state.x_adv, state.best),
        best_loss=jnp.where(improved, losses, state.best_loss),
        broken_step=jnp.where(newly_broken, step, state.broken_step),
    )


def restart_keys(key: jax.Array, restarts: int, first_restart: int = 0) -> jax.Array:
    """Keys of restarts first_restart .. first_restart + restarts - 1, shape (restarts,) + key.shape.

    A scalar key is split; per-example keys (shape (batch,)) give restart r of example i
    the key `fold_in(key[i], r)`, so each example's random starts depend on its own key
    alone, not on the batch it is in (replayable case by case), and restarts can run one
    at a time (`first_restart`) with the same starts as all at once.
    """
    if key.ndim == 0:
        return jax.random.split(key, first_restart + restarts)[first_restart:]
    return jax.vmap(lambda r: jax.vmap(lambda k: jax.random.fold_in(k, r))(key))(
        first_restart + jnp.arange(restarts)
    )


def checked_restart_keys(key, batch: int, restarts: int, first_restart: int = 0) -> jax.Array:
    """`restart_keys` of a checked key: one PRNG key or one per example (legacy uint32 keys,
    shape (2,) or (batch, 2), wrapped); `first_restart` an integer >= 0."""
    check_key(key)
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    if key.ndim not in (0, 1) or (key.ndim == 1 and key.shape[0] != batch):
        raise ValueError(
            f"key must be one PRNG key or one per example (shape ({batch},)), got shape {key.shape}"
        )
    if (
        isinstance(first_restart, bool)
        or not isinstance(first_restart, numbers.Integral)
        or first_restart < 0
    ):
        raise ValueError(f"first_restart={first_restart!r} must be an integer >= 0")
    return restart_keys(key, restarts, first_restart)


def start(rule: StepRule, x: Array, eps, key: jax.Array, norm: str = "linf") -> IterateState:
    """A restart's state at its start: uniform in the eps-ball (clipped to [0, 1]) when the
    rule starts at random, else x. `key` is one key or one per example (`restart_keys`)."""
    x0 = jnp.clip(x + norms.random_start(key, x, eps, norm), 0.0, 1.0) if rule.random_start else x
    return IterateState(
        x_adv=x0,
        best=x0,
        best_loss=jnp.full(x.shape[:1], -jnp.inf, x.dtype),
        broken_step=jnp.full(x.shape[:1], -1, jnp.int32),
        carry=rule.init(x),
    )


def run_steps(
    rule: StepRule,
    logits_fn: LogitsFn,
    state: IterateState,
    x: Array,
    y: Array,
    eps,
    step_size,
    lo,
    hi,
    *,
    norm: str = "linf",
    loss: str = "ce",
    targeted: bool = False,
    hyper: Mapping[str, float] | None = None,
) -> IterateState:
    """Steps lo..hi-1 of a restart: evaluate and track the iterate, then step and project.

    `y` holds the targets when `targeted`."""
    logits_fn = fast_path(logits_fn)
    loss_fn = attack_loss(loss, targeted)
    hyper = dict(rule.hyper) | dict(hyper or {})

    def body(i, state: IterateState) -> IterateState:
        losses, logits, grad = loss_and_grad(logits_fn, state.x_adv, y, loss_fn)
        state = _track(state, i, losses, attack_success(logits, y, targeted))
        x_next, carry = rule.step(
            state.x_adv, grad, state.carry, norm=norm, step_size=step_size, **hyper
        )
        return state._replace(x_adv=norms.project(x_next, x, eps, norm), carry=carry)

    return lax.fori_loop(lo, hi, body, state)


def finish(
    logits_fn: LogitsFn,
    state: IterateState,
    y: Array,
    steps,
    *,
    loss: str = "ce",
    targeted: bool = False,
) -> IterateState:
    """Evaluate and track the last iterate, reached after `steps` steps."""
    logits_fn = fast_path(logits_fn)
    logits = logits_fn(state.x_adv)
    losses = attack_loss(loss, targeted)(logits, y)
    return _track(state, steps, losses, attack_success(logits, y, targeted))


def single_restart(
    rule, logits_fn, x, y, eps, step_size, steps, key, norm="linf", loss="ce", targeted=False,
    hyper=None,
) -> IterateState:  # fmt: skip
    state = start(rule, x, eps, key, norm)
    objective = dict(loss=loss, targeted=targeted)
    state = run_steps(
        rule, logits_fn, state, x, y, eps, step_size, 0, steps, norm=norm, hyper=hyper, **objective
    )
    return finish(logits_fn, state, y, steps, **objective)


def select_restart(states: IterateState) -> tuple[Array, Array]:
    """Per example: earliest broken restart if any broke, else the highest-loss restart."""
    broken = states.broken_step >= 0
    first_broken = jnp.argmax(broken, axis=0)
    highest_loss = jnp.argmax(states.best_loss, axis=0)
    choice = jnp.where(broken.any(axis=0), first_broken, highest_loss)

    def take(a: Array) -> Array:
        index = choice.reshape((1, -1) + (1,) * (a.ndim - 2))
        return jnp.take_along_axis(a, index, axis=0)[0]

    return take(states.best), take(states.best_loss)


def check_target(target, y: Array) -> Array:
    """The targets as an array: one integer class per example, each different from y."""
    target = jnp.asarray(target)
    if target.shape != y.shape or not jnp.issubdtype(target.dtype, jnp.integer):
        raise ValueError(
            f"target must hold one integer class per example like y {y.shape}; "
            f"got {target.dtype} {target.shape}"
        )
    if _is_concrete(target) and _is_concrete(y) and bool(jnp.any(target == y)):
        raise ValueError("every target must differ from the example's true label")
    return target


def search(rule: StepRule, logits_fn: LogitsFn, x: ArrayLike, y: ArrayLike, eps, *, key: jax.Array,
           steps: int, step_size=None, restarts: int = 1, first_restart: int = 0,
           norm: str = "linf", loss: str = "ce", target=None, **hyper) -> SearchResult:  # fmt: skip
    """The rule's attack with every input checked, per-example first-break tracking and
    vmapped restarts (restart r of example i from fold_in(key[i], first_restart + r)); the
    arguments as `advjax.attacks.pgd` documents them, `hyper` the rule's hyper-parameters."""
    check_budget(eps, norm)
    _check_positive_int("steps", steps)
    _check_positive_int("restarts", restarts)
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r} must be one of {LOSSES}")
    unknown = sorted(set(hyper) - set(rule.hyper))
    if unknown:
        raise TypeError(
            f"unknown hyper-parameter(s) {unknown}; this attack takes {tuple(rule.hyper)}"
        )
    if step_size is not None:
        check_budget(step_size, norm, name="step_size")
    check_key(key)
    x, y = _check_inputs(x, y)
    check_labels(logits_fn, x, y)
    check_finite_logits(logits_fn, x)
    targeted = target is not None
    if targeted:
        target = check_target(target, y)
    eps = jnp.asarray(eps, x.dtype)
    step_size = (
        rule.default_step_size(eps, steps) if step_size is None else jnp.asarray(step_size, x.dtype)
    )
    keys = checked_restart_keys(key, y.shape[0], restarts, first_restart)
    labels = target if targeted else y
    objective = dict(norm=norm, loss=loss, targeted=targeted, hyper=hyper)
    states = jax.vmap(
        lambda k: single_restart(rule, logits_fn, x, labels, eps, step_size, steps, k, **objective)
    )(keys)
    x_adv, loss = select_restart(states)
    chex.assert_equal_shape((x_adv, x))
    chex.assert_shape(states.broken_step, (restarts, y.shape[0]))
    return SearchResult(x_adv=x_adv, broken_step=states.broken_step, loss=loss)


def one_restart(rule, logits_fn, x, labels, eps, keys, first, steps, *, norm, options, target=None):
    """One restart of `search` for the runners (key index `first` may be traced): the
    point and the step of the first break (-1 never)."""
    step_size = rule.step_size(eps, steps, options)
    objective = dict(norm=norm, loss=options.get("loss", "ce"), targeted=target is not None)
    states = jax.vmap(
        lambda k: single_restart(
            rule, logits_fn, x, labels if target is None else target, eps, step_size, steps, k,
            **objective,
        )
    )(restart_keys(keys, 1, first))  # fmt: skip
    x_adv, _ = select_restart(states)
    return x_adv, states.broken_step[0]


def gradient_attack(
    name: str, rule: StepRule, *, norms: tuple[str, ...], reference: str, default_steps: int = 10,
    function: Callable | None = None,
) -> Attack:  # fmt: skip
    """An iterative gradient attack from its step rule: the function users call
    (`attack(logits_fn, x, y, eps, *, key, steps, step_size, restarts, norm, loss, target,
    **hyper)` -> `SearchResult`; `function` where the attack documents its own), and its
    declaration for every runner (campaigns step it in chunks, AutoAttack runs it as a
    member), its key stream taken from its name."""

    def made(
        logits_fn, x, y, eps, *, key, steps=default_steps, step_size=None, restarts=1,
        norm="linf", loss="ce", target=None, **hyper,
    ) -> SearchResult:  # fmt: skip
        return search(
            rule, logits_fn, x, y, eps, key=key, steps=steps, step_size=step_size,
            restarts=restarts, norm=norm, loss=loss, target=target, **hyper,
        )  # fmt: skip

    made.__name__ = made.__qualname__ = name.replace("-", "_")
    made.__doc__ = f"{name}: an iterative gradient attack ({reference}); see `search`."

    def run(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun:
        del target
        x_adv, broken = one_restart(rule, logits_fn, x, y, eps, keys, restart, steps, norm=norm,
                                    options=options)  # fmt: skip
        return BatchRun(x_adv, broken, per_case(steps, y), per_case(False, y, bool))

    return Attack(
        name=name, run=run, norms=norms, targeted=False, kind="gradient",
        queries=lambda steps: steps, passes=lambda steps, classes: (steps + 1, steps),
        options=("loss", "step_fraction") if rule.step_fraction else ("loss",),
        restarts=rule.random_start, reference=reference, function=function or made, rule=rule,
    )  # fmt: skip
