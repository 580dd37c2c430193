"""What every runner needs to know about an attack, declared once by the attack's module.

An attack module declares one `Attack` per method it offers (name, norms, whether it is
targeted, gradient- or score-based, its cost, its key stream and the function that runs it
on a batch); `advjax.attacks.ATTACKS` collects them, and the evaluation layer (campaigns,
AutoAttack members, threat-model query bounds, the command's choices) reads that registry
instead of listing attack names.
"""

import dataclasses
import hashlib
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
      queries: int32: model queries the run spent on the case (at most `Attack.queries`).
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
names of `Attack.options` to their values. Pure, safe under `jit` and `vmap`."""


STREAMS = {
    "apgd-ce": 0, "apgd-dlr": 1, "apgd-t": 2, "fab": 3, "fab-t": 4, "square": 5, "fgsm": 6,
    "pgd": 7, "pgd-t": 8, "fmn": 9, "malt": 10,
}  # fmt: skip
"""The key streams of the attacks whose records are committed; every other attack's stream
comes from its name (`stream_of`)."""


def stream_of(name: str) -> int:
    """An attack's key stream: fold_in(case key, stream) feeds its runs, so adding an attack
    never moves another's keys. Named streams above 2**20, from the name's SHA-256."""
    if name in STREAMS:
        return STREAMS[name]
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    return 2**20 + digest % (2**31 - 2**20)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Attack:
    """An attack, declared once: what every runner needs to know, and the function to call.

    Calling it (`attack(logits_fn, x, y, eps, *, norm="linf", ...)`) refuses a norm it does not
    declare, then runs `function` (which checks its inputs and runs the model on
    `advjax.backend.fast_path`).

    Attributes:
      name: the one spelling of the method everywhere (records, members, the command).
      run: the batch run the runners call (`RunFn`).
      norms: the threat models' norms it attacks in.
      targeted: one run per target class (`targets` of them per restart).
      kind: "gradient" (needs white-box access) or "score" (needs the logits only).
      queries: model queries one run spends on a case at most, given its steps (the
        records' count: a gradient evaluation or a forward pass is one query).
      passes: (forward, backward) passes one run spends on a case at most, given its steps
        and the number of classes.
      options: the hyper-parameters of `AttackSpec` the method reads (others are not hashed).
      restarts: whether it takes random restarts.
      steps: the fixed number of steps of a one-step attack (FGSM: 1), else None.
      reference: the paper.
      function: the function users call, `function(logits_fn, x, y, eps, *, norm, ...)`.
      rule: an iterative gradient attack's step rule (`StepRule`): the runners then step it in
        chunks and drop the cases it has broken between chunks.
      stream: the method's fixed key stream (`stream_of(name)`).
    """

    name: str
    run: RunFn
    norms: tuple[str, ...]
    targeted: bool
    kind: str
    queries: Callable[[int], int]
    passes: Callable[[int, int], tuple[int, int]]
    options: tuple[str, ...] = ()
    restarts: bool = True
    steps: int | None = None
    reference: str = ""
    function: Callable | None = None
    rule: Any = None
    stream: int = dataclasses.field(init=False)

    def __post_init__(self):
        if not self.name or self.name != self.name.lower() or "_" in self.name:
            raise ValueError(f"attack name {self.name!r} must be lower case, words joined by '-'")
        if not set(self.norms) <= set(NORMS) or not self.norms:
            raise ValueError(f"attack {self.name!r}: norms={self.norms!r} must be among {NORMS}")
        if self.kind not in KINDS:
            raise ValueError(f"attack {self.name!r}: kind={self.kind!r} must be one of {KINDS}")
        if not set(self.options) <= set(OPTIONS):
            raise ValueError(f"attack {self.name!r}: options must be among {OPTIONS}")
        object.__setattr__(self, "stream", stream_of(self.name))

    def check_norm(self, norm: str) -> None:
        """Refuse, before any work, a norm this attack does not declare."""
        if norm not in self.norms:
            raise ValueError(
                f"attack {self.name!r} runs under norm {' or '.join(self.norms)} only, "
                f"got norm={norm!r}"
            )

    def __call__(self, logits_fn, x, y, eps, *, norm: str = "linf", **kwargs):
        if self.function is None:
            raise TypeError(f"attack {self.name!r} runs through the runners only")
        self.check_norm(norm)
        return self.function(logits_fn, x, y, eps, norm=norm, **kwargs)


def per_case(value, like: Array, dtype=jnp.int32) -> Array:
    """`value` broadcast to one entry per case of `like` (the batch axis of y)."""
    return jnp.broadcast_to(jnp.asarray(value, dtype), like.shape[:1])


def option(options: Mapping[str, Any], name: str):
    """`options[name]`, or a ValueError naming the missing option."""
    if name not in options:
        raise ValueError(f"option {name!r} is required")
    return options[name]
