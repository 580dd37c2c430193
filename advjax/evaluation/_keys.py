"""PRNG keys named by paths: one root seed, then a `fold_in` per name or index.

A key path such as `[42, "attack", "standard", "pgd", "8/255", 17]` names the key of
case 17 under PGD at 8/255 on the standard model: `jax.random.key(42)` folded with each
later element in turn (strings by their CRC-32). Every random choice of an evaluation
comes from such a path, and a record stores its path, so any one case can be replayed
without a hidden global key.
"""

import numbers
import zlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def path_item(item: int | str) -> int:
    """The integer folded in for one path element: ints as they are, strings by CRC-32."""
    if isinstance(item, str):
        return zlib.crc32(item.encode("utf-8")) & 0x7FFFFFFF
    if isinstance(item, bool) or not isinstance(item, numbers.Integral):
        raise ValueError(f"key path element {item!r} must be an int or a str")
    if not 0 <= item < 2**31:
        raise ValueError(f"key path element {item!r} must be in [0, 2**31)")
    return int(item)


def fold_path(key: jax.Array, path: Sequence[int | str]) -> jax.Array:
    """`key` folded with every element of `path` in turn."""
    for item in path:
        key = jax.random.fold_in(key, path_item(item))
    return key


def key_from_path(path: Sequence[int | str]) -> jax.Array:
    """The key a path names: `jax.random.key(path[0])` folded with the rest.

    Raises:
      ValueError: empty path, or a root seed that is not an int.
    """
    if not path or isinstance(path[0], (str, bool)) or not isinstance(path[0], numbers.Integral):
        raise ValueError(f"key path {list(path)!r} must start with an integer seed")
    return fold_path(jax.random.key(path_item(path[0])), path[1:])


def case_keys(group_key: jax.Array, case_ids: Sequence[int] | np.ndarray) -> jax.Array:
    """One key per case, `fold_in(group_key, case_id)`, shape (len(case_ids),)."""
    ids = jnp.asarray(np.asarray(case_ids, np.uint32))
    return jax.vmap(lambda i: jax.random.fold_in(group_key, i))(ids)
