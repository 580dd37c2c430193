"""Stronger evaluation of the study's models: `python -m experiments.cifar_robustness.strong_evaluation`.

Re-attacks every trained model of a study run (its checkpoints) on the same evaluation
cases with AutoAttack's standard version at 8/255 (`advjax.evaluation.run_autoattack`):
APGD-CE (100 steps), then APGD-T (the targeted DLR loss, 9 target classes x 100 steps),
FAB-T (9 targets x 100 steps) and the score-based Square attack (5,000 queries), each on
the cases every earlier member left robust. APGD-T, FAB-T and Square are the held-out
suite: no model was trained or selected with them. Writes <out>/records.jsonl,
summary.json and tables.md (with torchattacks' numbers on the same models and cases
beside them, where `benchmarks.autoattack_peer_study` has written <out>/peer_torchattacks.json);
resumes where it stopped. --repair-records repairs
<out>/records.jsonl (duplicated lines) and exits; one run writes a folder at a time.
"""

import argparse
import json
import shlex
import sys
from pathlib import Path

import jax
import numpy as np

from advjax import backend
from advjax.data import EvalCases, load_cifar10
from advjax.evaluation import (
    AUTOATTACK,
    AttackSpec,
    AutoAttackConfig,
    Check,
    Model,
    aggregate_records,
    find_group,
    format_eps,
    parse_eps,
    run_autoattack,
    run_summary,
)
from advjax.evaluation.checks import check_finite_loss, check_perturbations
from advjax.evaluation.stats import format_rate, rate
from advjax.io import environment
from advjax.records import RecordLog, atomic_write_json, atomic_write_text, record_file
from advjax_train import load_logits_fn, to_float
from experiments.cifar_robustness.report import checks_table
from experiments.cli import add_repair_flag, hold_output_folder, run_command

PROG = "experiments.cifar_robustness.strong_evaluation"

HELD_OUT = ("apgd-t", "fab-t", "square")


def members(steps: int, targets: int, queries: int) -> list[AttackSpec]:
    """AutoAttack's standard members, in the order they run."""
    return [
        AttackSpec("apgd-ce", steps=steps),
        AttackSpec("apgd-t", steps=steps, targets=targets),
        AttackSpec("fab-t", steps=steps, targets=targets),
        AttackSpec("square", steps=queries),
    ]


def checks(groups: list[dict], study: dict, model_names, eps: float) -> list[Check]:
    """Validity checks, and the ensemble against the study's PGD-20 on the same cases."""
    out = [check_perturbations(groups), check_finite_loss(groups)]
    label = f"{eps * 255:g}"
    for name in model_names:
        ens = find_group(groups, model=name, attack=AUTOATTACK, eps=eps)
        attacks = study["models"].get(name, {}).get("attacks", {})  # absent: not in the study
        pgd = attacks.get("pgd", {}).get(label, {}).get("robust_accuracy")
        first = find_group(groups, model=name, attack="apgd-ce", eps=eps)
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


PEER_FILE = "peer_torchattacks.json"
"""torchattacks' AutoAttack on the same models and cases (`benchmarks.autoattack_peer_study`)."""


def peer_cells(peer: dict | None, records, model_names) -> dict[str, str]:
    """Per model, the peer's robust accuracy and the cases where both give the same verdict,
    for the models the peer attacked with the checkpoint these records were made with."""
    if not peer:
        return {}
    hashes = {r.model: r.model_hash for r in records}
    cells = {}
    for name in model_names:
        entry = peer["models"].get(name)
        if entry and entry["model_hash"] == hashes.get(name):
            agree, total = entry["agreement"]["same_verdict"], entry["robust"]["total"]
            robust = format_rate(rate(entry["robust"]["count"], total))
            cells[name] = f"{robust}; same verdict on {agree:,}/{total:,}"
    return cells


def table(groups, study, model_names, member_specs, eps, peer=None) -> str:
    """One row per model: clean, PGD-20, robust accuracy after each member, and, where
    `peer` (model name -> cell) has the model, the peer AutoAttack's numbers beside them."""
    peer = peer or {}
    label = f"{eps * 255:g}"
    head = ["model", "clean", f"PGD-20 {label}/255"]
    head += [
        f"after {m.name}" + (" (held out)" if m.name in HELD_OUT else "") for m in member_specs
    ]
    head += ["PGD-20 overstatement (points)"]
    if peer:
        head += ["torchattacks AutoAttack (peer)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in model_names:
        if name not in study["models"]:
            continue  # re-run once the study holds the model's PGD-20 numbers
        m = study["models"][name]
        pgd = m["attacks"]["pgd"][label]["robust_accuracy"]
        cells = [m["label"], format_rate(m["clean_accuracy"]), format_rate(pgd)]
        n = pgd["total"]
        robust = m["clean_accuracy"]["count"]
        for spec in member_specs:
            g = find_group(groups, model=name, attack=spec.name, eps=eps)
            robust -= g["status_counts"]["success"] if g else 0
            cells.append(f"{100 * robust / n:.1f} % ({robust:,}/{n:,})")
        ens = find_group(groups, model=name, attack=AUTOATTACK, eps=eps)["robust_accuracy"]
        cells[-1] = format_rate(ens)
        cells.append(f"{100 * (pgd['value'] - ens['value']):.1f}")
        if peer:
            cells.append(peer.get(name, "not run"))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _progress(model: str):
    def on_run(member, target, restart, left):
        print(f"  {model}: {member.name} target {target} restart {restart}: {left} robust",
              flush=True)  # fmt: skip

    return on_run


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--study",
        default="results/cifar10/default",
        help="the study run (results.json, checkpoints/)",
    )
    p.add_argument("--out", default=None, help="output folder (default <study>/strong_evaluation)")
    p.add_argument("--models", nargs="+", default=None)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--targets", type=int, default=9)
    p.add_argument("--queries", type=int, default=5000)
    p.add_argument("--eps", type=parse_eps, default=8 / 255, help="L-inf budget, e.g. 8/255")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--no-progress", action="store_true")
    add_repair_flag(p)
    args = p.parse_args(argv)
    if args.eps is not None and not args.eps <= 1:
        p.error(f"--eps {args.eps:g} must be in [0, 1], e.g. 8/255")
    return args


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    args = parse_args(argv)
    out = Path(args.out) if args.out else Path(args.study) / "strong_evaluation"
    return hold_output_folder(
        out,
        lambda: evaluate(args, out, argv),
        records=[record_file(out)],
        repair=args.repair_records,
    )


def evaluate(args: argparse.Namespace, out: Path, argv) -> dict:
    """AutoAttack every model of the study into `out`; the summary (the lock is held)."""
    study_dir = Path(args.study)
    study = json.loads((study_dir / "results.json").read_text())
    eps = args.eps
    specs = members(args.steps, args.targets, args.queries)
    tm = AutoAttackConfig(eps=eps, members=specs).threat_model
    print(tm.describe())
    data = load_cifar10(args.data_dir)
    idx = np.asarray(study["data"]["eval_indices"])
    x, y = np.asarray(to_float(data.test_images[idx])), data.test_labels[idx]
    names = args.models or list(study["models"])
    log = RecordLog(record_file(out))
    for name in names:
        logits_fn, mhash = load_logits_fn(study_dir / "checkpoints" / f"{name}.msgpack")
        progress = None if args.no_progress else _progress(name)
        run_autoattack(
            log, Model(name, logits_fn, mhash), EvalCases(x, y, np.arange(len(y))),
            AutoAttackConfig(eps=eps, members=specs, batch_size=args.batch_size),
            key=jax.random.key(study["config"]["seed"]), on_run=progress,
        )  # fmt: skip
    every = log.read()
    records = [r for r in every if r.model in names]
    left_out = sorted({r.model for r in every} - set(names))
    if left_out:
        print(
            f"[note] {log.path} also holds {', '.join(left_out)}, left out of this "
            f"summary ({'--models' if args.models else 'not in ' + str(study_dir / 'results.json')})"
        )
    groups = aggregate_records(records, num_classes=len(data.class_names))
    summary = run_summary(
        groups,
        checks(groups, study, names, eps),
        tm,
        extra={
            "command": f"python -m {PROG} " + shlex.join(sys.argv[1:] if argv is None else argv),
            "study": str(study_dir),
            "members": [{"name": s.name, **s.member_fields()} for s in specs],
            "held_out": list(HELD_OUT),
            "environment": environment(),
            "study_git_revision": study["environment"]["git_revision"],
        },
    )
    atomic_write_json(out / "summary.json", summary)
    peer = json.loads((out / PEER_FILE).read_text()) if (out / PEER_FILE).exists() else None
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
                table(groups, study, names, specs, eps, peer_cells(peer, records, names)),
                "## Checks\n\n" + checks_table(summary),
            ]
        )
        + "\n"
    )
    atomic_write_text(out / "tables.md", text)
    print(text)
    return summary


if __name__ == "__main__":
    run_command(main, PROG)
