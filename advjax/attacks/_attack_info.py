"""What every runner needs to know about an attack, declared once by the attack's module.

An attack module declares one `AttackInfo` per method it offers (name, norms, whether it is
targeted, gradient- or score-based, its cost, its key stream and the function that runs it
on a batch); `advjax.attacks.ATTACKS` collects them, and the evaluation layer (campaigns,
AutoAttack members, threat-model query bounds, the command's choices) reads that registry
instead of listing attack names.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax.numpy as jnp

from advjax.attacks._norms import NORMS
from advjax.types import Array

KINDS = ("gradient", "score")
OPTIONS = ("loss", "p_init", "step_fraction", "targets")


class BatchRun(NamedTuple):
    """One run of an attack on a batch, per case.

    Attributes:
      x_adv: the run's point: its first misclassified iterate, else its best (highest-loss)
        one.
      broken: int32: queries spent when the case first broke (0: broken at its start),
        -1 if never.
      queries: int32: model queries the run spent on the case (at most `AttackInfo.queries`).
      capped: bool: a score-based search stopped at its query budget without success.
    """

    x_adv: Array
    broken: Array
    queries: Array
    capped: Array


RunFn = Callable[..., BatchRun]
"""`run(logits_fn, x, y, eps, *, keys, restart, target, norm, steps, options) -> BatchRun`.

`keys` holds one PRNG key per case; `restart` and `target` are (possibly traced) int32
indices of the run (target t: the class of rank t + 2 among the clean logits, for targeted
attacks); `steps` is static (a score-based attack's query budget); `options` maps the
names of `AttackInfo.options` to their values. Pure, safe under `jit` and `vmap`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttackInfo:
    """An attack as the runners see it.

    Attributes:
      name: the one spelling of the method everywhere (records, members, the command).
      run: the batch run (`RunFn`).
      norms: the threat models' norms it attacks in.
      targeted: one run per target class (`targets` of them per restart).
      kind: "gradient" (needs white-box access) or "score" (needs the logits only).
      stream: the method's fixed key stream: a member of AutoAttack draws from
        fold_in(case key, stream), so adding an attack never moves another's keys.
      queries: model queries one run spends on a case at most, given its steps (the
        records' count: a gradient evaluation or a forward pass is one query).
      passes: (forward, backward) passes one run spends on a case at most, given its steps
        and the number of classes.
      options: the hyper-parameters of `AttackSpec` the method reads (others are not hashed).
      restarts: whether it takes random restarts.
      steps: the fixed number of steps of a one-step attack (FGSM: 1), else None.
      reference: the paper.
    """

    name: str
    run: RunFn
    norms: tuple[str, ...]
    targeted: bool
    kind: str
    stream: int
    queries: Callable[[int], int]
    passes: Callable[[int, int], tuple[int, int]]
    options: tuple[str, ...] = ()
    restarts: bool = True
    steps: int | None = None
    reference: str = ""

    def __post_init__(self):
        if not self.name or self.name != self.name.lower() or "_" in self.name:
            raise ValueError(f"attack name {self.name!r} must be lower case, words joined by '-'")
        if not set(self.norms) <= set(NORMS) or not self.norms:
            raise ValueError(f"attack {self.name!r}: norms={self.norms!r} must be among {NORMS}")
        if self.kind not in KINDS:
            raise ValueError(f"attack {self.name!r}: kind={self.kind!r} must be one of {KINDS}")
        if not set(self.options) <= set(OPTIONS):
            raise ValueError(f"attack {self.name!r}: options must be among {OPTIONS}")
        if isinstance(self.stream, bool) or not isinstance(self.stream, int) or self.stream < 0:
            raise ValueError(f"attack {self.name!r}: stream={self.stream!r} must be an int >= 0")


def registry(*infos: AttackInfo) -> Mapping[str, AttackInfo]:
    """The attacks by name; refuses a name or a key stream declared twice."""
    names = [i.name for i in infos]
    streams = [i.stream for i in infos]
    for label, values in (("name", names), ("stream", streams)):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"attack {label}s declared twice: {twice}")
    return {i.name: i for i in infos}


def per_case(value, like: Array, dtype=jnp.int32) -> Array:
    """`value` broadcast to one entry per case of `like` (the batch axis of y)."""
    return jnp.broadcast_to(jnp.asarray(value, dtype), like.shape[:1])


def option(options: Mapping[str, Any], name: str):
    """`options[name]`, or a ValueError naming the missing option."""
    if name not in options:
        raise ValueError(f"option {name!r} is required")
    return options[name]
