"""The CIFAR-10 robustness study: `python -m experiments.cifar_robustness [--profile P] [--group G]`.

Trains the standard and FGSM-adversarially-trained CompactCNNs on real CIFAR-10, attacks
them with FGSM and PGD on one fixed stratified test subset, runs the profile's further
phases (AutoAttack, attack variants; `config.PHASES`), and writes results.json, tables,
figures and report. Re-running resumes from the last finished phase; --force restarts;
--reuse-from takes models another run trained and attacked under the same protocol;
--repair-records repairs the output folder's record files (duplicated lines) and exits.
One run writes a folder at a time: a second one is refused at once.
"""

import argparse
import dataclasses
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from advjax import backend
from advjax.data import DATA_DIR_ENV
from advjax.records import record_file
from experiments.cifar_robustness import attack_variants, strong_evaluation
from experiments.cifar_robustness.config import (
    PROFILE_GROUPS,
    PROFILE_OUTPUTS,
    PROFILE_POLICIES,
    PROFILES,
    group,
    phases,
    profile,
)
from experiments.cifar_robustness.dry_run import dry_run
from experiments.cifar_robustness.report import write_report
from experiments.cifar_robustness.reuse import reuse_run
from experiments.cifar_robustness.study import load_study_data, run_study, train_models
from experiments.cli import add_repair_flag, hold_output_folder, run_command
from experiments.overrides import add_set_flag, apply_overrides


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--profile", default="default", choices=PROFILES)
    p.add_argument(
        "--group",
        default=None,
        help="a named run of the profile, with its models, overrides, output folder and policy "
        + "; ".join(
            f"{k}: {', '.join(v)} (default {next(iter(v))})" for k, v in PROFILE_GROUPS.items()
        ),
    )
    add_set_flag(
        p,
        "eps_list=0,8/255, pgd_steps=10, models.*.epochs=2, models.fgsm_reference.train_size=4000",
    )
    p.add_argument("--models", nargs="+", default=None, help="train and attack only these models")
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default: the profile's or group's folder under results/cifar10/; "
        "quick: a temporary folder)",
    )
    p.add_argument(
        "--data-dir", default=None, help=f"CIFAR-10 binary folder (else ${DATA_DIR_ENV}, else tfds)"
    )
    p.add_argument("--force", action="store_true", help="discard finished phases and start over")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the threat model and the campaign's query count and wall-time estimate",
    )
    p.add_argument("--policy", default=None, help="release policy JSON applied to the run")
    p.add_argument(
        "--train-only",
        action="store_true",
        help="train (or reuse) the models and stop: no attacks, records or report "
        "(with --models, the surrogate is left out)",
    )
    p.add_argument(
        "--reuse-from",
        default=None,
        metavar="RUN",
        help="take the selected models' checkpoints and case records from another run of the "
        "same protocol where they were trained under the same config (attack only the rest)",
    )
    add_repair_flag(p)
    args = p.parse_args(argv)
    if args.reuse_from and args.force:
        p.error("--reuse-from and --force together: --force would discard what is reused")
    return args


def config_from_args(args: argparse.Namespace):
    """The profile's config with its group's and then the `--set` overrides, and the
    `--models` selection (else the group's models)."""
    chosen = group(args.profile, args.group)
    overrides = [*(chosen.overrides if chosen else ()), *args.overrides]
    config = apply_overrides(profile(args.profile), overrides)
    selection = args.models if args.models is not None else chosen and chosen.models
    if selection:
        names = [m.name for m in config.models]
        unknown = sorted(set(selection) - set(names))
        if unknown:
            raise ValueError(f"unknown models {unknown}; this profile has {names}")
        config = dataclasses.replace(
            config, models=tuple(m for m in config.models if m.name in selection)
        )
    return config


def main(argv: list[str] | None = None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    args = parse_args(argv)
    config = config_from_args(args)
    if args.dry_run and not args.repair_records:
        return dry_run(config)
    chosen = group(args.profile, args.group)
    chosen_phases = phases(args.profile, args.group)
    out = (
        args.out
        or (chosen and chosen.out)
        or PROFILE_OUTPUTS.get(args.profile)
        or tempfile.mkdtemp(prefix="advjax-quick-")
    )
    command = "python -m experiments.cifar_robustness " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    return hold_output_folder(
        out,
        lambda: study(config, args, out, command, chosen, chosen_phases),
        records=[record_file(out), *phase_records(chosen_phases, out)],
        repair=args.repair_records,
    )


PHASE_COMMANDS = {
    "strong_evaluation": (strong_evaluation, strong_evaluation.evaluate, ("",)),
    "attack_variants": (attack_variants, attack_variants.run_variants, attack_variants.PARTS),
}
"""Each phase's command module, its work function and the parts of its folder that hold
records."""


def phase_records(chosen, out) -> list[Path]:
    """The record files of the phases `chosen` in run `out`."""
    return [
        record_file(Path(out) / name / part)
        for name, *_ in chosen
        for part in PHASE_COMMANDS[name][2]
    ]


def run_phases(chosen, out, args: argparse.Namespace) -> None:
    """Each phase after the campaign, as its own command runs on `out` (and resumes the same
    way), holding its subfolder as that command would."""
    for name, *extra in chosen:
        module, work, _ = PHASE_COMMANDS[name]
        argv = ["--study", str(out), *extra]
        argv += ["--data-dir", args.data_dir] if args.data_dir else []
        argv += ["--no-progress"] if args.no_progress else []
        print(f"[phase] {name}: python -m {module.PROG} {shlex.join(argv)}", flush=True)
        folder = Path(out) / name
        hold_output_folder(folder, lambda: work(module.parse_args(argv), folder, argv))


def study(config, args: argparse.Namespace, out: str, command: str, chosen, chosen_phases) -> dict:
    """Run (or resume) the study into `out`, with its group `chosen` (or None) and the phases
    `chosen_phases`, and write its report; the lock is held."""
    print(f"advjax CIFAR-10 robustness study, profile {config.profile}, output {out}")
    if args.reuse_from:
        reuse_run(config, Path(args.reuse_from), Path(out))
    elif chosen and chosen.reuse_from and not args.force:
        if (Path(chosen.reuse_from) / "checkpoints").is_dir():
            reuse_run(config, Path(chosen.reuse_from), Path(out))
        else:
            print(f"[reuse] {chosen.reuse_from} holds no run yet; every model is trained here")
    if args.train_only:
        data, splits = load_study_data(config, args.data_dir)
        checkpoints = train_models(config, data, splits, Path(out), surrogate=args.models is None,
                                   show_progress=not args.no_progress)  # fmt: skip
        for name, path in checkpoints.items():
            print(f"{name}: {path}")
        return {"checkpoints": {k: str(v) for k, v in checkpoints.items()}}
    if args.force:
        for name, *_ in chosen_phases:
            shutil.rmtree(Path(out) / name, ignore_errors=True)
    results = run_study(
        config,
        out,
        data_dir=args.data_dir,
        force=args.force,
        show_progress=not args.no_progress,
        command=command,
        policy_path=args.policy
        or Path(__file__).parent
        / ((chosen and chosen.policy) or PROFILE_POLICIES.get(args.profile, "release_policy.json")),
    )
    run_phases(chosen_phases, out, args)
    write_report(results, out)
    print(f"wrote {out}/results.json")
    return results


if __name__ == "__main__":
    run_command(main, "experiments.cifar_robustness")
