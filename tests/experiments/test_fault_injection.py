"""Fault injection: the CIFAR-10 study's quick profile, SIGKILLed at seeded random moments and
resumed with the same command, ends with exactly the uninterrupted run's numbers."""

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from flax import traverse_util

from advjax.data import DATA_DIR_ENV
from advjax.io import model_hash, read_checkpoint
from advjax.io._lock import LOCK_NAME
from advjax.records import is_temporary, read_records, record_file
from experiments.cifar_robustness.config import profile
from experiments.cifar_robustness.evaluation import attack_specs

REPO_ROOT = Path(__file__).resolve().parents[2]
PROFILE = "quick"
KILLS = 4
KILL_SEED = 0
KILL_WINDOW = (0.15, 0.90)
"""Each kill lands at a seeded random fraction of the clean run's wall time after a start;
the fractions are sorted so that the early kills, the likeliest to land before a start has
nothing left to do, come first."""
RUN_TIMEOUT_S = 3600
"""Upper bound on one full run of the quick profile, however loaded the machine is."""
REAP_TIMEOUT_S = 60

TIMING_KEYS = frozenset({"timings_seconds", "seconds", "attack_seconds"})
"""Wall-clock measurements: they differ from run to run and, after a kill, lose the part of
the work the kill threw away."""
PROVENANCE_KEYS = frozenset(
    {"environment", "command", "folder", "git_revision", "resumed_after_epoch"}
)
"""Where and how a run was made: the command and `folder` name its own output folder, the git
state moves when others commit in the same checkout while the test runs, and a training a kill
interrupted says after which epoch it resumed."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get(DATA_DIR_ENV), reason=f"{DATA_DIR_ENV} not set"),
]


def study_command(out: Path) -> list[str]:
    """The quick profile into `out`, the same command for the first start and each resume."""
    return [
        sys.executable,
        "-m",
        "experiments.cifar_robustness",
        "--profile",
        PROFILE,
        "--out",
        str(out),
        "--no-progress",
    ]


def start(out: Path, log: Path) -> subprocess.Popen:
    """Start the study in its own process group, output appended to `log`."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            study_command(out),
            cwd=REPO_ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def run_to_completion(out: Path, log: Path) -> int:
    """Run the study into `out` until it exits; its exit status."""
    proc = start(out, log)
    try:
        return proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        kill_group(proc)


def kill_group(proc: subprocess.Popen) -> int:
    """SIGKILL `proc`'s process group unless `proc` was already reaped (its pid may then
    name another process) and reap it; its exit status."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.wait(timeout=REAP_TIMEOUT_S)


def run_and_kill(out: Path, log: Path, after_s: float) -> int:
    """Run the study into `out` and SIGKILL it `after_s` seconds after its start, unless it
    exits first; its exit status (-9 when killed)."""
    proc = start(out, log)
    try:
        return proc.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        return kill_group(proc)
    finally:
        kill_group(proc)


def checkpoint_covering_hashes(folder: Path) -> dict[str, str]:
    """{hash: what it names} for the digests of `folder` that cover a checkpoint's metadata
    (training seconds included), recomputed from its checkpoints: each checkpoint's
    `model_hash`, and the config hash of each transfer attack, which holds its source model's.
    Two runs' digests differ although their weights are equal; what they name does not."""
    checkpoints = folder / "checkpoints"
    names = {model_hash(p): f"model_hash of {p.name}" for p in checkpoints.glob("*.msgpack")}
    for spec in attack_specs(profile(PROFILE)):
        if spec.source is not None:
            source_hash = model_hash(checkpoints / f"{spec.source}.msgpack")
            names[spec.config_hash(source_hash)] = f"config_hash of {spec.name} from {spec.source}"
    return names


def comparable(tree, hashes: dict[str, str]):
    """`tree` without its `TIMING_KEYS` and `PROVENANCE_KEYS` (at any depth), and with every
    checkpoint-covering hash (`hashes`) replaced by what it names."""
    if isinstance(tree, dict):
        return {
            k: comparable(v, hashes)
            for k, v in tree.items()
            if k not in TIMING_KEYS | PROVENANCE_KEYS
        }
    if isinstance(tree, list | tuple):
        return [comparable(v, hashes) for v in tree]
    if isinstance(tree, str):
        return hashes.get(tree, tree)
    return tree


def comparable_results(folder: Path) -> dict:
    """The folder's results.json as `comparable` makes it."""
    results = json.loads((folder / "results.json").read_text())
    return comparable(results, checkpoint_covering_hashes(folder))


def comparable_records(folder: Path) -> Counter:
    """The folder's per-case records as a multiset of JSON lines, as `comparable` makes them
    (JSON text, so that NaN losses compare equal)."""
    hashes = checkpoint_covering_hashes(folder)
    return Counter(
        json.dumps(comparable(dataclasses.asdict(r), hashes), sort_keys=True)
        for r in read_records(record_file(folder))
    )


def comparable_checkpoints(folder: Path) -> dict[str, dict]:
    """{checkpoint name: its model and metadata sections as `comparable` makes them}."""
    hashes = checkpoint_covering_hashes(folder)
    return {
        p.stem: comparable({k: read_checkpoint(p)[k] for k in ("model", "metadata")}, hashes)
        for p in sorted((folder / "checkpoints").glob("*.msgpack"))
    }


def checkpoint_weights(folder: Path) -> dict[str, dict[tuple, np.ndarray]]:
    """{checkpoint name: {variable path: array}} of the folder's checkpoints."""
    return {
        p.stem: traverse_util.flatten_dict(read_checkpoint(p)["variables"])
        for p in sorted((folder / "checkpoints").glob("*.msgpack"))
    }


def leftovers(folder: Path) -> list[Path]:
    """Lock files and atomic-write temporaries anywhere under `folder`."""
    return [p for p in folder.rglob("*") if p.name == LOCK_NAME or is_temporary(p.name)]


def test_a_run_killed_at_random_moments_and_resumed_ends_with_the_uninterrupted_numbers(
    tmp_path, record_property
):
    """A run of the quick profile SIGKILLed four times at seeded random moments and resumed
    each time with the same command ends, on its final exit 0, with exactly the numbers of an
    uninterrupted run: bit-identical checkpoint weights, the same per-case records and the
    same results.json up to timings, provenance and hashes of checkpoint metadata; neither
    folder keeps a lock file or an atomic-write temporary."""
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    started = time.perf_counter()
    assert run_to_completion(clean, tmp_path / "clean.log") == 0, (
        tmp_path / "clean.log"
    ).read_text()[-4000:]
    clean_seconds = time.perf_counter() - started

    rng = random.Random(KILL_SEED)
    delays = sorted(rng.uniform(*KILL_WINDOW) * clean_seconds for _ in range(KILLS))
    attempts = [run_and_kill(killed, tmp_path / "killed.log", d) for d in delays]
    final = run_to_completion(killed, tmp_path / "killed.log")
    record_property("clean_seconds", round(clean_seconds, 1))
    record_property("kill_after_seconds", [round(d, 1) for d in delays])
    record_property("attempt_exit_codes", [*attempts, final])
    print(f"clean run {clean_seconds:.1f} s; kills after {delays}; exit codes {attempts} {final}")
    assert final == 0, (tmp_path / "killed.log").read_text()[-4000:]
    if -signal.SIGKILL not in attempts:
        warnings.warn(f"no kill landed (exit codes {attempts}): the resume went untested")

    clean_weights, killed_weights = checkpoint_weights(clean), checkpoint_weights(killed)
    assert killed_weights.keys() == clean_weights.keys()
    for name, variables in clean_weights.items():
        assert killed_weights[name].keys() == variables.keys(), name
        for path, value in variables.items():
            assert killed_weights[name][path].dtype == value.dtype, (name, path)
            assert np.array_equal(killed_weights[name][path], value), (name, path)
    assert comparable_checkpoints(killed) == comparable_checkpoints(clean)

    clean_records = comparable_records(clean)
    assert clean_records and max(clean_records.values()) == 1
    assert comparable_records(killed) == clean_records
    assert comparable_results(killed) == comparable_results(clean)
    assert leftovers(clean) == [] and leftovers(killed) == []
