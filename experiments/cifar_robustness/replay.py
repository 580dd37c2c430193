"""Re-run single records of a study run and compare them field by field.

    python -m experiments.cifar_robustness.replay --run results/cifar10/default --line 1234 [--line ...]
    python -m experiments.cifar_robustness.replay --run results/cifar10/default --model standard --attack pgd --eps 8/255 --case 17

Each record is re-attacked alone from its stored key path, attack config and threat
model, on the checkpoint whose hash it names, and compared as the study's replay check
does (`replay_evidence.replay_check`: every decision equal, or different only at a tie on the
decision boundary; the loss and norms may differ, since another CPU's kernels round the last
float bits differently); each line says identical, same decisions, differs at a tie or
DIFFERS, with the differing fields. Exit status 0
when every replayed record agrees, 1 otherwise, 2 for bad input.
"""

import argparse
import json
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from advjax import backend
from advjax.data import load_cifar10
from advjax.evaluation import (
    AttackSpec,
    ThreatModel,
    parse_eps,
    replay_record,
)
from advjax.records import CaseRecord, read_records, record_file
from advjax_train import load_logits_fn, to_float
from experiments.cifar_robustness.replay_evidence import logit_margins, replay_check


def _spec(results: dict, attack: str) -> AttackSpec:
    for d in results["attacks"]:
        if d["name"] == attack:
            fields = {k: v for k, v in d.items() if k != "config_hash"}
            return AttackSpec(**fields | {"eps": tuple(fields["eps"])})
    raise ValueError(
        f"attack {attack!r} is not one of the run's {[d['name'] for d in results['attacks']]}"
    )


def replay(run: Path, record: CaseRecord, results: dict, data) -> tuple[CaseRecord, float]:
    """The record re-run alone on the run's checkpoint, and the logit margin
    (`replay_evidence.logit_margins`) at the input it returned."""
    threat_model = ThreatModel.from_dict(results["threat_model"])
    spec = _spec(results, record.attack)
    logits_fn, mhash = load_logits_fn(run / "checkpoints" / f"{record.model}.msgpack")
    if mhash != record.model_hash:
        raise ValueError(
            f"checkpoint of {record.model} has hash {mhash}, record names {record.model_hash}"
        )
    source_fn = source_hash = None
    if spec.source:
        source_fn, source_hash = load_logits_fn(run / "checkpoints" / f"{spec.source}.msgpack")
    index = results["data"]["eval_indices"][record.case_id]
    x = np.asarray(to_float(data.test_images[index : index + 1]))[0]
    y = int(data.test_labels[index])
    kept: dict = {}
    again = replay_record(
        record,
        threat_model=threat_model,
        spec=spec,
        logits_fn=logits_fn,
        x=x,
        y=y,
        source_fn=source_fn,
        source_hash=source_hash,
        on_x_adv=kept.update,
    )
    logits = np.asarray(logits_fn(jnp.asarray(kept[record.case_id][None])))
    return again, float(logit_margins(logits, np.array([y]))[0])


def main(argv=None) -> int:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--run",
        default="results/cifar10/default",
        help="the run's folder (results.json, records.jsonl)",
    )
    p.add_argument("--line", type=int, action="append", default=[], help="1-based record line")
    p.add_argument("--model"), p.add_argument("--attack")
    p.add_argument("--case", type=int, action="append", default=[], help="case id (repeatable)")
    p.add_argument("--eps", type=parse_eps, help="L-inf budget, e.g. 8/255")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    if args.eps is not None and not args.eps <= 1:
        p.error(f"--eps {args.eps:g} must be in [0, 1], e.g. 8/255")
    run = Path(args.run)
    try:
        results = json.loads((run / "results.json").read_text())
        records = read_records(record_file(run))
        chosen = [records[n - 1] for n in args.line]
        if args.case:
            chosen += [
                r
                for r in records
                if (r.model, r.attack) == (args.model, args.attack)
                and r.case_id in args.case
                and abs(r.eps - args.eps) < 1e-9
            ]
        if not chosen:
            raise ValueError("no record chosen: give --line N or --model --attack --eps --case")
        data = load_cifar10(args.data_dir)
    except (OSError, ValueError, IndexError) as error:
        print(f"replay: error: {error}", file=sys.stderr)
        return 2
    agree = 0
    for record in chosen:
        again, margin = replay(run, record, results, data)
        diff = {
            k: (v, again.to_dict()[k])
            for k, v in record.to_dict().items()
            if again.to_dict()[k] != v
        }
        same = replay_check([again], [record], "").passed
        ok = replay_check([again], [record], "", [margin]).passed
        agree += ok
        verdict = (
            "identical"
            if not diff
            else "same decisions"
            if same
            else f"differs at a tie (margin {margin:+.1e})"
            if ok
            else "DIFFERS"
        )
        print(
            f"{record.model} {record.attack} eps {record.eps * 255:g}/255 case {record.case_id}: "
            + verdict
            + (f" {diff}" if diff else "")
        )
    return 0 if agree == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
