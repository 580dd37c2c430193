"""The L2, margin-loss (CW) and targeted attacks on the study's models:
`python -m experiments.cifar_robustness.attack_variants`.

Two declared threat models, each with its own per-case records, summary and checks, on the
study's evaluation cases:

- L-inf 8/255: PGD with the margin loss of Carlini & Wagner (2017) and targeted PGD (the
  same steps towards each of the runner-up classes in turn), beside the study's PGD-20
  with the cross-entropy.
- L2, eps 0.25 and 0.5 (Euclidean norm over the 3,072 pixel values in [0, 1]): the fast
  gradient method (one L2 step) and PGD-L2 (normalised-gradient steps of eps/4).

Writes <out>/{linf,l2}/records.jsonl.gz and summary.json, and <out>/tables.md; resumes.
--repair-records repairs both record files (duplicated lines) and exits; one run writes a
folder at a time.
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
    AttackSpec,
    Check,
    Model,
    ThreatModel,
    aggregate_records,
    find_group,
    format_eps,
    run_attack,
    run_summary,
)
from advjax.evaluation.checks import check_finite_loss, check_perturbations
from advjax.evaluation.stats import format_rate
from advjax.io import environment
from advjax.records import RecordLog, atomic_write_json, atomic_write_text, record_file
from advjax_train import load_logits_fn, to_float
from experiments.cifar_robustness.report import checks_table
from experiments.cli import add_repair_flag, hold_output_folder, run_command

PROG = "experiments.cifar_robustness.attack_variants"
PARTS = ("linf", "l2")

LINF_EPS = 8 / 255
STANDARD_MAX_ROBUST = 0.02
"""On the undefended CNN every L-inf 8/255 attack should leave at most this share robust."""


def linf_specs(steps: int, targets: int, batch_size: int) -> list[AttackSpec]:
    common = dict(eps=(LINF_EPS,), steps=steps, batch_size=batch_size)
    return [
        AttackSpec(name="pgd_margin", method="pgd", loss="margin", **common),
        AttackSpec(name="pgd_targeted", method="pgd-t", targets=targets, **common),
    ]


def l2_specs(eps: tuple[float, ...], steps: int, batch_size: int) -> list[AttackSpec]:
    return [
        AttackSpec(name="fgm_l2", method="fgsm", norm="l2", eps=eps, batch_size=batch_size),
        AttackSpec(
            name="pgd_l2", method="pgd", norm="l2", eps=eps, steps=steps, batch_size=batch_size
        ),
    ]


def linf_checks(groups, study, names) -> list[Check]:
    out = [check_perturbations(groups), check_finite_loss(groups)]
    label = f"{LINF_EPS * 255:g}"
    for name in [n for n in names if n in study["models"]]:  # others: once the study has them
        pgd = study["models"][name]["attacks"]["pgd"][label]["robust_accuracy"]
        for attack in ("pgd_margin", "pgd_targeted"):
            g = find_group(groups, model=name, attack=attack, eps=LINF_EPS)["robust_accuracy"]
            if name == "standard":
                out.append(
                    Check(
                        f"{attack}_breaks_the_standard_cnn",
                        g["value"] <= STANDARD_MAX_ROBUST,
                        f"{format_rate(g)} robust (at most {STANDARD_MAX_ROBUST:.0%} expected)",
                    )
                )
            out.append(
                Check(
                    f"{attack}_near_pgd20[{name}]",
                    abs(g["value"] - pgd["value"]) <= 0.05,
                    f"{attack} {format_rate(g)} vs PGD-20 (CE) {format_rate(pgd)}: a gap over "
                    "5 points would point at a loss-specific weakness (e.g. saturated softmax)",
                )
            )
    return out


def l2_checks(groups, names, eps: tuple[float, ...]) -> list[Check]:
    out = [check_perturbations(groups, norm="l2"), check_finite_loss(groups)]
    for name in names:
        pgd = [find_group(groups, model=name, attack="pgd_l2", eps=e) for e in eps]
        fgm = [find_group(groups, model=name, attack="fgm_l2", eps=e) for e in eps]
        counts = [g["robust_accuracy"]["count"] for g in pgd]
        out.append(
            Check(
                f"pgd_l2_not_weaker_than_fgm_l2[{name}]",
                all(
                    p["robust_accuracy"]["count"] <= f["robust_accuracy"]["count"]
                    for p, f in zip(pgd, fgm)
                ),
                "; ".join(
                    f"{format_eps(e)}: PGD {p['robust_accuracy']['count']} vs FGM "
                    f"{f['robust_accuracy']['count']}"
                    for e, p, f in zip(eps, pgd, fgm)
                ),
            )
        )
        out.append(
            Check(
                f"pgd_l2_robust_non_increasing_in_eps[{name}]",
                all(a >= b for a, b in zip(counts, counts[1:])),
                f"robust counts {counts} at eps {[format_eps(e) for e in eps]}",
            )
        )
    return out


def run_part(out: Path, tm: ThreatModel, specs, names, study, study_dir, x, y, progress) -> list:
    log = RecordLog(record_file(out))
    written = 0
    for name in names:
        logits_fn, mhash = load_logits_fn(study_dir / "checkpoints" / f"{name}.msgpack")
        for spec in specs:
            written += run_attack(
                log,
                Model(name, logits_fn, mhash),
                EvalCases(x, y),
                spec,
                threat_model=tm,
                key=jax.random.key(study["config"]["seed"]),
                stream="attack_variants",
                show_progress=progress,
            )
    records = [r for r in log.read() if r.model in names]
    print(
        f"{log.path}: {len(records):,} records of {len(names)} models, "
        f"{len(records) - written:,} reused and {written:,} computed now"
    )
    return aggregate_records(records, num_classes=10)


def table(groups, study, names, attacks, eps_list, with_pgd20: bool) -> str:
    head = ["model", "clean"] + (["PGD-20 (CE) 8/255"] if with_pgd20 else [])
    head += [f"{a} {format_eps(e)}" for a in attacks for e in eps_list]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in [n for n in names if n in study["models"]]:
        m = study["models"][name]
        cells = [m["label"], format_rate(m["clean_accuracy"])]
        if with_pgd20:
            cells.append(format_rate(m["attacks"]["pgd"]["8"]["robust_accuracy"]))
        for a in attacks:
            for e in eps_list:
                cells.append(
                    format_rate(find_group(groups, model=name, attack=a, eps=e)["robust_accuracy"])
                )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--study",
        default="results/cifar10/default",
        help="the study run (results.json, checkpoints/)",
    )
    p.add_argument("--out", default=None, help="output folder (default <study>/attack_variants)")
    p.add_argument("--models", nargs="+", default=None)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--targets", type=int, default=3)
    p.add_argument("--l2-eps", type=float, nargs="+", default=[0.25, 0.5])
    p.add_argument("--batch-size", type=int, default=250)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--no-progress", action="store_true")
    add_repair_flag(p)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    args = parse_args(argv)
    out = Path(args.out) if args.out else Path(args.study) / "attack_variants"
    return hold_output_folder(
        out,
        lambda: run_variants(args, out, argv),
        records=[record_file(out / part) for part in PARTS],
        repair=args.repair_records,
    )


def run_variants(args: argparse.Namespace, out: Path, argv) -> dict:
    """Both threat models' attacks into `out`; their summaries (the lock is held)."""
    study_dir = Path(args.study)
    study = json.loads((study_dir / "results.json").read_text())
    names = args.models or list(study["models"])
    l2_eps = tuple(sorted(args.l2_eps))
    linf_tm = ThreatModel(eps=(LINF_EPS,), steps=args.steps, restarts=1)
    l2_tm = ThreatModel(eps=l2_eps, steps=args.steps, restarts=1, norm="l2")
    print(linf_tm.describe() + "\n" + l2_tm.describe())
    data = load_cifar10(args.data_dir)
    idx = np.asarray(study["data"]["eval_indices"])
    x, y = np.asarray(to_float(data.test_images[idx])), data.test_labels[idx]
    command = f"python -m {PROG} " + shlex.join(sys.argv[1:] if argv is None else argv)
    extra = {"command": command, "environment": environment(), "study": str(study_dir)}
    progress = not args.no_progress
    linf = linf_specs(args.steps, args.targets, args.batch_size)
    l2 = l2_specs(l2_eps, args.steps, args.batch_size)
    linf_groups = run_part(out / "linf", linf_tm, linf, names, study, study_dir, x, y, progress)
    l2_groups = run_part(out / "l2", l2_tm, l2, names, study, study_dir, x, y, progress)
    summaries = {
        "linf": run_summary(
            linf_groups,
            linf_checks(linf_groups, study, names),
            linf_tm,
            extra=extra | {"attacks": [s.to_dict() for s in linf]},
        ),
        "l2": run_summary(
            l2_groups,
            l2_checks(l2_groups, names, l2_eps),
            l2_tm,
            extra=extra | {"attacks": [s.to_dict() for s in l2]},
        ),
    }
    for part, summary in summaries.items():
        atomic_write_json(out / part / "summary.json", summary)
    text = (
        "\n\n".join(
            [
                "# L2, margin-loss and targeted attacks on the study's models",
                f"Generated by `{command}` at git revision `{extra['environment']['git_revision']}`, "
                f"on the study's {len(y):,} evaluation cases. Robust accuracy (correct after the "
                "attack / all cases), Wilson 95 % intervals.",
                "## L-inf 8/255: margin (CW) loss and targeted PGD",
                "```\n" + linf_tm.describe() + "\n```",
                f"pgd_margin: {args.steps} steps of eps/4 on the margin loss max_(j!=y) z_j - z_y; "
                f"pgd_targeted: {args.steps} steps towards each of the {args.targets} runner-up "
                "classes in turn (cross-entropy of the target), a case broken at the first target "
                "that flips it.",
                table(linf_groups, study, names, ("pgd_margin", "pgd_targeted"), (LINF_EPS,), True),
                checks_table(summaries["linf"]),
                "## L2: fast gradient method and PGD-L2",
                "```\n" + l2_tm.describe() + "\n```",
                table(l2_groups, study, names, ("fgm_l2", "pgd_l2"), l2_eps, False),
                checks_table(summaries["l2"]),
            ]
        )
        + "\n"
    )
    atomic_write_text(out / "tables.md", text)
    print(text)
    return summaries


if __name__ == "__main__":
    run_command(main, PROG)
