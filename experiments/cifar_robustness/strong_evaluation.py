"""Stronger evaluation of the study's models: `python -m experiments.cifar_robustness.strong_evaluation`.

Re-attacks every trained model of a study run (its checkpoints) on the same evaluation
cases with an AutoAttack-style ensemble at 8/255: APGD-CE (100 steps), then APGD-T (the
targeted DLR loss, 9 target classes x 100 steps) on the cases still robust, then the
score-based Square attack (5,000 queries) on the rest. APGD-T and Square are the held-out
suite: no model was trained or selected with them. Everything goes through the evidence
machinery: a declared threat model, per-case records, numbers from the records, checks.
Writes <out>/records.jsonl, summary.json and tables.md; resumes where it stopped.
"""

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from advjax import backend
from advjax.data import load_cifar10
from advjax.evaluation import (
    ENSEMBLE,
    AttackSpec,
    Check,
    RecordLog,
    ThreatModel,
    aggregate_records,
    check_finite_loss,
    check_perturbations,
    find_group,
    format_eps,
    format_rate,
    run_ensemble,
    run_summary,
)
from advjax.io import atomic_write_json, atomic_write_text, environment
from advjax.train import to_float
from experiments.cifar_robustness.evaluation import load_model
from experiments.cifar_robustness.report import checks_table

HELD_OUT = ("apgd_t", "square")


def members(steps: int, targets: int, queries: int, batch_size: int) -> list[AttackSpec]:
    """The ensemble, in the order it runs."""
    return [
        AttackSpec(
            name="apgd_ce", method="apgd_ce", eps=(8 / 255,), steps=steps, batch_size=batch_size
        ),
        AttackSpec(
            name="apgd_t",
            method="apgd_t",
            eps=(8 / 255,),
            steps=steps,
            targets=targets,
            batch_size=batch_size,
        ),
        AttackSpec(
            name="square", method="square", eps=(8 / 255,), steps=queries, batch_size=batch_size
        ),
    ]


def threat_model(eps: float, steps: int, targets: int, queries: int) -> ThreatModel:
    return ThreatModel(eps=(eps,), steps=steps, restarts=1, queries=max(queries, steps * targets))


def checks(groups: list[dict], study: dict, model_names, eps: float) -> list[Check]:
    """Validity checks, and the ensemble against the study's PGD-20 on the same cases."""
    out = [check_perturbations(groups), check_finite_loss(groups)]
    label = f"{eps * 255:g}"
    for name in model_names:
        ens = find_group(groups, model=name, attack=ENSEMBLE, eps=eps)
        attacks = study["models"].get(name, {}).get("attacks", {})  # absent: not in the study
        pgd = attacks.get("pgd", {}).get(label, {}).get("robust_accuracy")
        first = find_group(groups, model=name, attack="apgd_ce", eps=eps)
        if pgd is not None:
            out.append(
                Check(
                    f"ensemble_not_weaker_than_pgd20[{name}]",
                    ens["robust_accuracy"]["count"] <= pgd["count"],
                    f"ensemble {format_rate(ens['robust_accuracy'])} vs PGD-20 {format_rate(pgd)}",
                )
            )
            out.append(
                Check(
                    f"apgd_ce_not_weaker_than_pgd20[{name}]",
                    first["robust_accuracy"]["count"] <= pgd["count"],
                    f"APGD-CE {format_rate(first['robust_accuracy'])} vs PGD-20 {format_rate(pgd)}",
                )
            )
    return out


def table(groups, study, model_names, member_specs, eps) -> str:
    label = f"{eps * 255:g}"
    head = ["model", "clean", f"PGD-20 {label}/255"]
    head += [
        f"after {m.name}" + (" (held out)" if m.name in HELD_OUT else "") for m in member_specs
    ]
    head += ["PGD-20 overstatement (points)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in model_names:
        if name not in study["models"]:
            continue  # re-run once the study holds the model's PGD-20 numbers
        m = study["models"][name]
        pgd = m["attacks"]["pgd"][label]["robust_accuracy"]
        cells = [m["label"], format_rate(m["clean_accuracy"]), format_rate(pgd)]
        n = pgd["total"]
        for spec in member_specs:
            g = find_group(groups, model=name, attack=spec.name, eps=eps)
            robust = g["robust_accuracy"]["count"] if g else 0
            cells.append(f"{100 * robust / n:.1f} % ({robust:,}/{n:,})")
        ens = find_group(groups, model=name, attack=ENSEMBLE, eps=eps)["robust_accuracy"]
        cells[-1] = format_rate(ens)
        cells.append(f"{100 * (pgd['value'] - ens['value']):.1f}")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--study", default="results", help="the study run (results.json, checkpoints/)")
    p.add_argument("--out", default=None, help="output folder (default <study>/strong_evaluation)")
    p.add_argument("--models", nargs="+", default=None)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--targets", type=int, default=9)
    p.add_argument("--queries", type=int, default=5000)
    p.add_argument("--eps", type=float, default=8.0, help="eps in /255")
    p.add_argument("--batch-size", type=int, default=250)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    study_dir = Path(args.study)
    out = Path(args.out) if args.out else study_dir / "strong_evaluation"
    study = json.loads((study_dir / "results.json").read_text())
    eps = args.eps / 255
    tm = threat_model(eps, args.steps, args.targets, args.queries)
    print(tm.describe())
    specs = [
        AttackSpec(**(s.to_dict() | {"eps": (eps,)}))
        for s in members(args.steps, args.targets, args.queries, args.batch_size)
    ]
    data = load_cifar10(args.data_dir)
    idx = np.asarray(study["data"]["eval_indices"])
    x, y = np.asarray(to_float(data.test_images[idx])), data.test_labels[idx]
    names = args.models or list(study["models"])
    log = RecordLog(out / "records.jsonl")
    for name in names:
        logits_fn, mhash = load_model(study_dir / "checkpoints" / f"{name}.msgpack")
        derived = run_ensemble(
            log,
            specs,
            eps=eps,
            x=x,
            y=y,
            case_ids=np.arange(len(y)),
            threat_model=tm,
            model=name,
            model_hash=mhash,
            logits_fn=logits_fn,
            root_path=[study["config"]["seed"], "strong_evaluation"],
            show_progress=not args.no_progress,
        )
        log.append(derived, skip_existing=True)
    every = log.read()
    records = [r for r in every if r.model in names]
    left_out = sorted({r.model for r in every} - set(names))
    if left_out:
        print(
            f"[note] {out / 'records.jsonl'} also holds {', '.join(left_out)}, left out of this "
            f"summary ({'--models' if args.models else 'not in ' + str(study_dir / 'results.json')})"
        )
    groups = aggregate_records(records, num_classes=len(data.class_names))
    summary = run_summary(
        groups,
        checks(groups, study, names, eps),
        tm,
        extra={
            "command": "python -m experiments.cifar_robustness.strong_evaluation "
            + shlex.join(argv or sys.argv[1:]),
            "study": str(study_dir),
            "members": [s.to_dict() for s in specs],
            "held_out": list(HELD_OUT),
            "environment": environment(),
            "study_git_revision": study["environment"]["git_revision"],
        },
    )
    atomic_write_json(out / "summary.json", summary)
    text = (
        "\n\n".join(
            [
                f"# Stronger evaluation at {format_eps(eps)} (L-inf, same {len(y):,} cases as the study)",
                f"Generated by `{summary['extra']['command']}` at git revision "
                f"`{summary['extra']['environment']['git_revision']}`.",
                "```\n" + tm.describe() + "\n```",
                "Robust accuracy after each member of the ensemble, cumulative (each member attacks "
                "only the cases every earlier member left robust). Held out: never used to train or "
                "select a model.",
                table(groups, study, names, specs, eps),
                "## Checks\n\n" + checks_table(summary),
            ]
        )
        + "\n"
    )
    atomic_write_text(out / "tables.md", text)
    print(text)
    return summary


if __name__ == "__main__":
    main()
