"""Logits functions passed to jitted programs as arguments, so one compile serves every model.

A logits function that closes over its weights bakes them into each program that calls
it, as constants: every model then compiles every attack anew. A `jax.tree_util.Partial`
holds its weights as pytree leaves instead; passed as an argument of `jax.jit`, they become
inputs of the program, so models of one architecture (and shape) share one compiled
program, in memory and in JAX's persistent compilation cache. `advjax_train.eval_logits_fn`
returns such a Partial. Any other callable is wrapped as a Partial without leaves: it
still compiles once per function, as it would when closed over.
"""

from collections.abc import Callable

from jax.tree_util import Partial


def as_jit_argument(fn: Callable | None) -> Partial | None:
    """`fn` as a pytree that `jax.jit` takes as an argument (None stays None)."""
    if fn is None or isinstance(fn, Partial):
        return fn
    if not callable(fn):
        raise TypeError(f"logits_fn must be callable, got {type(fn).__name__}")
    return Partial(fn)
