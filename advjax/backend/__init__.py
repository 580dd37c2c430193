"""XLA's CPU backend: the process flags entry points set (`configure`) and the rewrite that
keeps any model's convolutions and pooling on the fast path inside attacks (`fast_path`).

Importing advjax changes nothing; `configure()` is called by entry points before JAX starts,
and `fast_path` is applied by the attacks to the `logits_fn` they are given.
"""

from advjax.backend._fast_path import FAST_PATH_VARIABLE, fast_path, fast_path_enabled
from advjax.backend._flags import (
    CPU_FLAGS,
    MEASURED_JAXLIB,
    MEASURED_SLOWDOWN,
    OPT_OUT_VARIABLE,
    applied,
    configure,
    flags_to_add,
    warn_if_unconfigured,
)

__all__ = [
    "applied",
    "configure",
    "CPU_FLAGS",
    "fast_path",
    "FAST_PATH_VARIABLE",
    "fast_path_enabled",
    "flags_to_add",
    "MEASURED_JAXLIB",
    "MEASURED_SLOWDOWN",
    "OPT_OUT_VARIABLE",
    "warn_if_unconfigured",
]
