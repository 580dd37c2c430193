"""XLA's CPU backend: the process flags entry points set (`configure`) and the rewrite that
keeps any model's convolutions and pooling on the fast path inside attacks (`fast_path`).

Importing advjax changes nothing; `configure()` is called by entry points before JAX starts,
and `fast_path` is applied by the attacks to the `logits_fn` they are given.
"""

from advjax.backend._fast_path import (
    fast_path,
    fast_path_enabled,
)
from advjax.backend._flags import (
    applied,
    configure,
)

__all__ = [
    "applied",
    "configure",
    "fast_path",
    "fast_path_enabled",
]
