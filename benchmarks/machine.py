"""Machine description and process memory: what a benchmark result must carry to be read later."""

import datetime
import os
import platform
import resource
from importlib import metadata

from advjax.io import git_state

_ENV_PREFIXES = ("XLA_", "JAX_", "TF_", "OMP_", "MKL_", "OPENBLAS_", "ADVJAX_")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or `platform.processor()` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    """The AVX-family flags of the CPU (empty where /proc/cpuinfo is missing)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return sorted(x for x in flags if x.startswith(("avx", "fma")))
    except OSError:
        pass
    return []


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other jobs make the numbers noisy)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def describe_machine(repo: str) -> dict:
    """Platform, CPU, cores, library versions, relevant environment and git revision."""
    import jax

    return {
        "timestamp": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_gib": _memory_gib(),
        "jax_devices": [str(d) for d in jax.devices()],
        "versions": {p: _version(p) for p in ("jax", "jaxlib", "flax", "optax", "chex", "numpy")},
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)},
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "git": git_state(repo),
        "load_average_start": load_average(),
    }


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (OSError, ValueError):
        return None


def maxrss_mib(usage: resource.struct_rusage | None = None) -> float:
    """ru_maxrss in MiB (Linux reports KiB) of `usage`, default this process."""
    usage = usage or resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark (Linux `clear_refs` 5); False where unsupported.

    Linux's `ru_maxrss` of a live process is its memory map's high-water mark, which this
    resets, so `maxrss_mib()` read after a workload is that workload's own peak (including
    the process's baseline: interpreter, libraries, compiled executables kept so far).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
