"""The attack-time file of an output folder: every run of an evaluation, finished or
interrupted, adds its seconds, so that a resumed evaluation reports its whole time."""

import json
import time
from collections.abc import Iterable
from pathlib import Path

from advjax.records import atomic_write_json

ATTACK_TIME_FILE = "attack_seconds.json"


def untimed_records(out: Path, records: Iterable, run_key: dict) -> bool:
    """Whether `out` holds records of this evaluation (`run_key`: model, eps, norm, version)
    from runs that `ATTACK_TIME_FILE` did not time (made before the folder was timed)."""
    if _runs_of(read_attack_times(Path(out) / ATTACK_TIME_FILE), run_key):
        return False
    return any(r.model == run_key["model"] and r.eps == run_key["eps"] for r in records)


def read_attack_times(path: Path) -> list[dict]:
    """The runs in an attack-time file, oldest first ([] where there is none); ValueError
    naming the file where it is not one."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        runs = json.loads(path.read_text())["runs"]
        return [{**r, "seconds": float(r["seconds"]), "eps": float(r["eps"])} for r in runs]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} is not an attack-time file ({error!r}); move it away to time this "
            "folder's runs afresh"
        ) from error


def _runs_of(runs: list[dict], run_key: dict) -> list[dict]:
    return [r for r in runs if all(r.get(k) == v for k, v in run_key.items())]


def add_attack_time(
    out: Path, run_key: dict, seconds: float, *, finished: bool, untimed: bool
) -> list[dict]:
    """Add one run's attack time to `out`/`ATTACK_TIME_FILE` (atomically; the caller holds
    the output lock) and return this evaluation's runs, oldest first."""
    runs = read_attack_times(Path(out) / ATTACK_TIME_FILE)
    runs.append({
        **run_key,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds)),
        "seconds": round(seconds, 1),
        "finished": finished,
        "untimed_records_before": untimed,
    })  # fmt: skip
    atomic_write_json(Path(out) / ATTACK_TIME_FILE, {"runs": runs})
    return _runs_of(runs, run_key)
