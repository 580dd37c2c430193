"""New models evaluated beside baselines that another run already trained and attacked:
`python -m experiments.cifar_robustness ... --reuse-from RUN`.

Before the study runs, each selected model (and the surrogate) that RUN holds under the same
training config is taken from it: its checkpoint is copied into this run unless this run holds
one already (then the two must be the same file), and RUN's case records of that exact
checkpoint under this run's threat model are appended to this run's record file, with the
attack seconds RUN spent on them. The campaign then attacks only what is missing; a copied
record made with another attack config is refused by it as any other would be, and every
number is still computed from this run's record file alone. A lever run compared with its
baseline so pays only for the lever.
"""

import json
from pathlib import Path

from advjax.io import model_hash, read_checkpoint
from advjax.records import (
    RecordLog,
    atomic_write_bytes,
    atomic_write_json,
    read_records,
    record_file,
)
from experiments.cifar_robustness.config import StudyConfig
from experiments.cifar_robustness.evaluation import ATTACK_SECONDS_FILE, study_threat_model


def reuse_run(config: StudyConfig, source: Path, out: Path, log=print) -> dict[str, int]:
    """Take from run `source` what `out` can reuse for `config`; the records appended per
    model reused (0 where only the checkpoint was)."""
    source, out = Path(source), Path(out)
    if not (source / "checkpoints").is_dir():
        raise FileNotFoundError(f"--reuse-from {source}: no checkpoints/ folder, not a study run")
    if source.resolve() == out.resolve():
        raise ValueError(f"--reuse-from {source} is the output folder itself")
    specs = [*config.models, *([config.surrogate] if config.surrogate else [])]
    hashes = {}
    for spec in specs:
        theirs = source / "checkpoints" / f"{spec.name}.msgpack"
        mine = out / "checkpoints" / f"{spec.name}.msgpack"
        if not theirs.is_file():
            continue
        if read_checkpoint(theirs)["metadata"].get("config_digest") != config.model_digest(spec):
            log(f"[reuse] {spec.name}: {theirs} was trained under another config; not reused")
            continue
        if not mine.exists():
            atomic_write_bytes(mine, theirs.read_bytes())
        elif mine.read_bytes() != theirs.read_bytes():
            log(f"[reuse] {spec.name}: this run's checkpoint differs from {theirs}; kept")
            continue
        hashes[spec.name] = model_hash(mine)
    threat = study_threat_model(config).digest()
    found = [
        r
        for r in (read_records(record_file(source)) if record_file(source).exists() else [])
        if hashes.get(r.model) == r.model_hash and r.threat_model_hash == threat
    ]
    added = RecordLog(record_file(out)).append(found, skip_existing=True) if found else 0
    counts = {name: sum(r.model == name for r in found) for name in hashes}
    _copy_attack_seconds(source, out, [name for name, n in counts.items() if n])
    for name, n in counts.items():
        log(f"[reuse] {name}: checkpoint and {n:,} records from {source}")
    if found and added < len(found):
        log(f"[reuse] {len(found) - added:,} of them were in this run's records already")
    return counts


def _copy_attack_seconds(source: Path, out: Path, names: list[str]) -> None:
    """The attack seconds `source` spent on `names`' records, where `out` has none of its own."""
    theirs_path, mine_path = source / ATTACK_SECONDS_FILE, out / ATTACK_SECONDS_FILE
    if not names or not theirs_path.exists():
        return
    theirs = json.loads(theirs_path.read_text())
    mine = json.loads(mine_path.read_text()) if mine_path.exists() else {}
    for name in names:
        if name in theirs and name not in mine:
            mine[name] = theirs[name]
    atomic_write_json(mine_path, mine)
