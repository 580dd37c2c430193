"""Shared type aliases."""

from typing import Callable

import jax
from jax.typing import ArrayLike

Array = jax.Array
LogitsFn = Callable[[Array], Array]
"""A pure function mapping a batch of inputs in [0, 1] to unnormalised logits."""

__all__ = ["Array", "ArrayLike", "LogitsFn"]
