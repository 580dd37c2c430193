"""One side of `benchmarks.engine_speed`: run from a git worktree of the revision measured.

`PYTHONPATH=TREE python benchmarks/engine_speed_side.py --checkpoints DIR --best NAME --out OUT`

Imports only advjax and the CIFAR study of the revision on `PYTHONPATH` (names both revisions
have), so the work is the same code path each revision offers its users: the study's default
attack phases (`evaluate_model`, timed per attack by the study itself) on the committed
checkpoints, then `advjax.evaluation.autoattack` standard at 8/255 on the first cases of the best model.
Writes OUT/side.json: seconds, the outcome of every case (to show both sides did the same work)
and where advjax was imported from.
"""

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from advjax import backend

backend.configure()

import advjax  # noqa: E402
from experiments.cifar_robustness.config import profile  # noqa: E402
from experiments.cifar_robustness.evaluation import (  # noqa: E402
    evaluate_model,
    study_threat_model,
)
from experiments.cifar_robustness.study import load_study_data  # noqa: E402

# the trainers', record log's and checkpoint reader's packages at this side's revision
if (Path(advjax.__file__).parents[1] / "advjax_train").is_dir():
    from advjax.records import RecordLog, record_file
    from advjax_train import load_logits_fn, to_float
else:
    from advjax.train import to_float

    try:
        from advjax.model import load_logits_fn

        from advjax.records import RecordLog, record_file
    except ImportError:
        from advjax.io import RecordLog, load_logits_fn, record_file

OUTCOME_FIELDS = ("status", "clean_pred", "adv_pred", "queries", "first_break_step", "key_path")


def record_outcomes(log: RecordLog) -> dict:
    """Per record key (model, attack, eps, case): the fields that say what the attack did."""
    return {
        f"{r.model}|{r.attack}|{r.eps!r}|{r.case_id}": [
            list(v) if isinstance(v, tuple) else v for v in (getattr(r, f) for f in OUTCOME_FIELDS)
        ]
        for r in log.read()
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoints", required=True, help="folder of the committed .msgpack files")
    p.add_argument("--best", required=True, help="the model AutoAttack evaluates")
    p.add_argument("--aa-cases", type=int, required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=False)
    config = profile("default")
    data, splits = load_study_data(config)
    x = np.asarray(to_float(data.test_images[splits.eval]))
    y = data.test_labels[splits.eval]
    ckpt = {m.name: Path(args.checkpoints) / f"{m.name}.msgpack" for m in config.models}
    threat_model = study_threat_model(config)
    sources = {
        name: load_logits_fn(ckpt[name])
        for name in {config.transfer_source(m.name) for m in config.models} - {None}
    }
    log = RecordLog(record_file(out))
    for spec in config.models:
        evaluate_model(
            config, spec, ckpt[spec.name], x, y, log, threat_model, sources, out, False, print
        )
    attack_seconds = json.loads((out / "attack_seconds.json").read_text())

    logits_fn, _ = load_logits_fn(ckpt[args.best])
    n = args.aa_cases
    started = time.perf_counter()
    result = advjax.evaluation.autoattack(
        logits_fn, x[:n], y[:n], 8 / 255, key=jax.random.key(config.seed), version="standard"
    )
    aa_seconds = time.perf_counter() - started
    side = {
        "advjax_file": advjax.__file__,
        "attack_seconds": attack_seconds,
        "autoattack": {
            "model": args.best,
            "cases": n,
            "seconds": aa_seconds,
            "robust": int(np.sum(result.robust)),
            "clean_correct": int(np.sum(result.clean_correct)),
            "broken_by": np.asarray(result.broken_by).tolist(),
            "queries": np.asarray(result.queries).tolist(),
        },
        "records": record_outcomes(log),
    }
    (out / "side.json").write_text(json.dumps(side))


if __name__ == "__main__":
    main()
