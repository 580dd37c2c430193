"""XLA settings for JAX's CPU backend, applied by the entry points that call `configure()`.

Importing advjax changes nothing; the experiments, the benchmarks and `python -m
advjax.evaluate` call `configure()` first, before any JAX computation starts a backend.

On the CPU, jaxlib 0.10 hands convolutions to YNNPACK by default. In a training step or a
PGD loop those kernels ran on one thread each (the runtime overlaps independent ops on
the two cores instead), and the backward convolutions were the slowest part of the step.
Keeping convolutions on XLA's own multi-threaded (Eigen) kernels made the CIFAR training
step ~1.4x and PGD-20 ~1.5x faster on a 2-core machine (`benchmarks/results/`). XLA's
default CPU scheduler orders independent ops for concurrency; its memory-optimised order
ran the training step 1.07-1.17x and FGSM adversarial training ~1.1x faster, with
bit-identical parameters after 5 steps (same ops, another order; presumably less
contention between the multi-threaded convolutions and the memory-bound fusions).

A flag is added to `XLA_FLAGS` only when all of these hold: JAX has not started a backend
yet (XLA reads the flags once), the user's `XLA_FLAGS` does not already set it, the jaxlib
version is one it was measured on (an unknown flag aborts the process), and
`ADVJAX_XLA_DEFAULTS` is not "0". It only concerns the CPU backend; on GPU it is inert.
Results depend on the first in the last float bits (another convolution kernel), so `applied()`
is stored with every run's environment.
"""

import os
import sys
import warnings
from collections.abc import Mapping, MutableMapping

CPU_FLAGS: tuple[str, ...] = (
    "--xla_cpu_experimental_ynn_fusion_type=-individual_convolution",
    "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
)
MEASURED_JAXLIB: tuple[str, ...] = ("0.10.2",)
OPT_OUT_VARIABLE = "ADVJAX_XLA_DEFAULTS"

_applied: list[str] = []


def _flag_name(flag: str) -> str:
    return flag.split("=", 1)[0]


def flags_to_add(
    xla_flags: str, jaxlib_version: str, opt_out: str | None = None
) -> tuple[str, ...]:
    """The CPU flags missing from `xla_flags` (none if opted out or on an unmeasured jaxlib)."""
    if opt_out == "0" or jaxlib_version not in MEASURED_JAXLIB:
        return ()
    present = {_flag_name(token) for token in xla_flags.split()}
    return tuple(flag for flag in CPU_FLAGS if _flag_name(flag) not in present)


def configure(environ: MutableMapping[str, str] = os.environ) -> tuple[str, ...]:
    """Add advjax's CPU flags to `environ["XLA_FLAGS"]` if JAX has no backend yet.

    Returns the flags added. If a backend is already running, nothing can change and a
    warning says so (call configure() before running any JAX computation).
    """
    import jaxlib
    from jax._src import xla_bridge

    wanted = flags_to_add(
        environ.get("XLA_FLAGS", ""), jaxlib.__version__, environ.get(OPT_OUT_VARIABLE)
    )
    if not wanted:
        return ()
    if xla_bridge.backends_are_initialized():
        warnings.warn(
            f"advjax: JAX's backend started before advjax.backend.configure() was called, so {wanted} "
            "could not be set; convolutions on CPU will be slower",
            stacklevel=2,
        )
        return ()
    environ["XLA_FLAGS"] = " ".join([environ.get("XLA_FLAGS", ""), *wanted]).strip()
    _applied.extend(wanted)
    return wanted


def applied() -> tuple[str, ...]:
    """The flags this process added (for the run's environment record)."""
    return tuple(_applied)


MEASURED_SLOWDOWN = 1.9
_warned: list[bool] = []


def warn_if_unconfigured(environ: Mapping[str, str] = os.environ) -> bool:
    """Warn once per process when JAX runs on the CPU without advjax's flags.

    Called by every attack (through `fast_path`). Silent on other backends, on jaxlib versions
    the flags were not measured on, when the flags are set, and with `ADVJAX_XLA_DEFAULTS=0`
    (XLA's defaults chosen on purpose). Returns whether it warned now.
    """
    import jax
    import jaxlib

    if _warned or jax.default_backend() != "cpu":
        return False
    missing = flags_to_add(
        environ.get("XLA_FLAGS", ""), jaxlib.__version__, environ.get(OPT_OUT_VARIABLE)
    )
    if not missing:
        return False
    _warned.append(True)
    warnings.warn(
        "advjax: JAX is running on the CPU without advjax's XLA flags, where attacks measured "
        f"about {MEASURED_SLOWDOWN}x slower (PGD-20 on the study's CNN). Call "
        "advjax.backend.configure() first thing, before any JAX computation, or set "
        f"{OPT_OUT_VARIABLE}=0 to keep XLA's defaults and silence this.",
        stacklevel=_first_caller_outside_advjax(),
    )
    return True


def _first_caller_outside_advjax() -> int:
    """The `stacklevel` of the innermost frame outside the advjax package (the user's call)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level
