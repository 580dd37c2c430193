"""The PyTorch side: torch_reference.py run as a subprocess, one workload and layout per process.

A small launcher process starts each one with `os.posix_spawn` and reaps it with `os.wait4`,
whose rusage gives that subprocess's own peak RSS (torch_reference.py reports none); the peak
includes the interpreter and the torch import.
"""

import dataclasses
import json
import os
import subprocess
import tempfile
import time

from benchmarks.config import BenchConfig

PYTHON_ENV = "ADVJAX_TORCH_PYTHON"
REFERENCE_ENV = "ADVJAX_TORCH_REFERENCE"


@dataclasses.dataclass(frozen=True)
class TorchPeer:
    """Where the PyTorch reference lives and how to run it."""

    python: str
    reference: str
    threads: int
    timeout_s: float = 3600.0


def default_paths(repo: str) -> tuple[str, str]:
    """Interpreter and script from the environment, else `.torchvenv` and `../shared/peers`."""
    python = os.environ.get(PYTHON_ENV) or os.path.join(repo, ".torchvenv", "bin", "python")
    reference = os.environ.get(REFERENCE_ENV) or os.path.join(
        repo, "..", "shared", "peers", "torch_reference.py"
    )
    return python, os.path.normpath(reference)


def check_peer(peer: TorchPeer) -> tuple[str | None, str]:
    """(torch version, "") if the peer can run, else (None, the reason it cannot)."""
    if not os.path.isfile(peer.reference):
        return None, f"PyTorch reference not found at {peer.reference} (set ${REFERENCE_ENV})"
    if not os.access(peer.python, os.X_OK):
        return None, f"PyTorch interpreter not found at {peer.python} (set ${PYTHON_ENV})"
    try:
        probe = subprocess.run(
            [peer.python, "-c", "import torch; print(torch.__version__)"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"cannot run {peer.python}: {error}"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{peer.python} cannot import torch: {last}"
    return probe.stdout.strip(), ""


def reference_args(workload: str, reps: int, config: BenchConfig) -> list[str]:
    """torch_reference.py arguments for the same sizes as the JAX workload."""
    args = ["--workload", workload, "--reps", str(reps)]
    if workload in ("train", "fgsm_at_adv", "fgsm_at_mix"):
        return args + ["--batch", str(config.train_batch), "--steps", str(config.train_steps)]
    return args + [
        "--batch",
        str(config.eval_batch),
        "--n_eval",
        str(config.n_eval),
        "--pgd_steps",
        str(config.pgd_steps),
    ]


def run_reference(
    peer: TorchPeer, workload: str, reps: int, config: BenchConfig, *, channels_last: bool
) -> dict:
    """Run one torch_reference.py process; its JSON result plus `peak_rss_mib` and `wall_s`.

    Never raises for a failing run: returns {"error": ...} with the tail of its output.
    """
    with tempfile.TemporaryDirectory(prefix="advjax-bench-") as tmp:
        names = ("result.json", "log.txt", "usage.json")
        out, log, usage = (os.path.join(tmp, name) for name in names)
        argv = [peer.python, peer.reference, *reference_args(workload, reps, config)]
        argv += ["--threads", str(peer.threads), "--out", out]
        if channels_last:
            argv.append("--channels_last")
        start = time.perf_counter()
        try:
            subprocess.run(
                [peer.python, "-c", _LAUNCHER, str(peer.timeout_s), usage, log, *argv],
                stdin=subprocess.DEVNULL,
                check=True,
                timeout=peer.timeout_s + 120,
            )
            with open(usage) as f:
                child = json.load(f)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            return {"error": f"launcher failed: {error}", "argv": argv}
        wall = time.perf_counter() - start
        with open(log, errors="replace") as f:
            tail = f.read()[-2000:]
        if child["exit_code"] is None:
            return {"error": f"timed out after {peer.timeout_s:.0f} s", "log_tail": tail}
        if child["exit_code"] != 0 or not os.path.isfile(out):
            return {"error": f"exit code {child['exit_code']}", "log_tail": tail, "argv": argv}
        with open(out) as f:
            result = json.load(f)
    result.update(peak_rss_mib=child["maxrss_kib"] / 1024, wall_s=wall, argv=argv)
    return result


# Runs in a small interpreter of its own and starts torch_reference.py from there: a child
# inherits its parent's resident size as the floor of its ru_maxrss (fork copies the memory
# map, exec keeps the old map's peak), so spawned straight from this JAX process every torch
# run would report at least this process's size. Args: timeout, usage file, log file, argv.
_LAUNCHER = r"""
import json, os, signal, sys, time
timeout, usage_path, log, argv = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
           (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
           (os.POSIX_SPAWN_DUP2, 1, 2)]
pid = os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions)
deadline = time.monotonic() + timeout
while True:
    done, status, usage = os.wait4(pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
        break
    if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        _, _, usage = os.wait4(pid, 0)
        code = None
        break
    time.sleep(0.05)
with open(usage_path, "w") as f:
    json.dump({"exit_code": code, "maxrss_kib": usage.ru_maxrss}, f)
"""
