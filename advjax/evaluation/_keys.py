"""PRNG keys named by paths: one root, then a `fold_in` per name or index.

A key path such as `[42, "attack", "standard", "pgd", "8/255", 17]` names the key of
case 17 under PGD at 8/255 on the standard model: `jax.random.key(42)` folded with each
later element in turn (strings by their CRC-32). Every random choice of an evaluation
comes from such a path, and a record stores its path, so any one case can be replayed
without a hidden global key. The root is the run's key as one integer (`key_root`): the
seed itself for `jax.random.key(seed)`, the key's two 32-bit words otherwise.
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


_IMPL = "threefry2x32"
_WORD = 2**32


def root_key(root: int) -> jax.Array:
    """The threefry key whose two 32-bit words are `root`'s: `jax.random.key(root)` for
    every root below 2**32.

    Raises:
      ValueError: a root that is not an integer in [0, 2**64).
    """
    if isinstance(root, bool) or not isinstance(root, numbers.Integral) or not 0 <= root < _WORD**2:
        raise ValueError(f"key root {root!r} must be an integer in [0, 2**64)")
    words = np.array([int(root) // _WORD, int(root) % _WORD], np.uint32)
    return jax.random.wrap_key_data(words, impl=_IMPL)


def key_root(key: jax.Array) -> int:
    """The integer a record stores for the run key `key` (`root_key` gives the key back):
    `seed` for `jax.random.key(seed)`.

    Raises:
      TypeError: `key` is not one threefry PRNG key (typed, or a legacy uint32 pair).
    """
    typed = isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    if typed and str(jax.random.key_impl(key)) == _IMPL and key.shape == ():
        words = np.asarray(jax.random.key_data(key))
    elif isinstance(key, (jax.Array, np.ndarray)) and key.dtype == np.uint32 and key.shape == (2,):
        words = np.asarray(key)
    else:
        raise TypeError(f"key must be one key from jax.random.key(seed) (threefry), got {key!r}")
    return int(words[0]) * _WORD + int(words[1])


def key_from_path(path: Sequence[int | str]) -> jax.Array:
    """The key a path names: `root_key(path[0])` folded with the rest.

    Raises:
      ValueError: empty path, or a root that is not an integer in [0, 2**64).
    """
    if not path or isinstance(path[0], (str, bool)) or not isinstance(path[0], numbers.Integral):
        raise ValueError(f"key path {list(path)!r} must start with an integer root")
    return fold_path(root_key(path[0]), path[1:])


def case_keys(group_key: jax.Array, case_ids: Sequence[int] | np.ndarray) -> jax.Array:
    """One key per case, `fold_in(group_key, case_id)`, shape (len(case_ids),)."""
    ids = jnp.asarray(np.asarray(case_ids, np.uint32))
    return jax.vmap(lambda i: jax.random.fold_in(group_key, i))(ids)
