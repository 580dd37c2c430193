"""Text robustness study: `python -m experiments.text_robustness [--profile quick] [--text-dir D]`.

Trains a word-CNN on SST-2 (standard, and with valid-substitution augmentation as the
defense), evaluates it on SST-2 dev, AdvGLUE SST-2 dev and MR, attacks it with TextFooler-
style word substitution and a held-out character-edit family under declared query / edited-
word budgets and a declared validity rule, and writes into --out (default results/text,
quick: a temporary folder): records.jsonl.gz (one line per case at the largest caps),
results.json, tables.md, budget_curves.png, summary.json (for `python -m advjax.gate`),
gate.txt and provenance.json. One run writes a folder at a time: a second one is refused
at once.
"""

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
from pathlib import Path

from advjax import backend
from advjax_text.data import TEXT_DIR_ENV
from experiments.cli import hold_output_folder, run_command
from experiments.overrides import add_set_flag, apply_overrides
from experiments.text_robustness.config import PROFILES, profile
from experiments.text_robustness.study import POLICY, run


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--profile", default="default", choices=sorted(PROFILES))
    add_set_flag(p, "eval_size=200, max_queries=500, attacks=textfooler")
    p.add_argument("--text-dir", default=None, help=f"text data folder (else ${TEXT_DIR_ENV})")
    p.add_argument(
        "--out", default=None, help="output folder (default results/text; quick: a temp folder)"
    )
    p.add_argument("--policy", default=str(POLICY), help="release policy applied to summary.json")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    args = parse_args(argv)
    config = apply_overrides(profile(args.profile), args.overrides)
    out = Path(
        args.out
        or (
            tempfile.mkdtemp(prefix="advjax-text-quick-")
            if args.profile == "quick"
            else "results/text"
        )
    )
    command = "python -m experiments.text_robustness " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    return hold_output_folder(out, lambda: study(config, args, out, command))


def study(config, args: argparse.Namespace, out: Path, command: str) -> dict:
    """Run the study into `out` (the lock is held); its results."""
    print(f"advjax text robustness study, profile {args.profile}, output {out}")
    print(json.dumps(dataclasses.asdict(config), default=str))
    return run(
        config,
        out,
        text_dir=args.text_dir,
        show_progress=not args.no_progress,
        command=command,
        policy=args.policy,
    )


if __name__ == "__main__":
    run_command(main, "experiments.text_robustness")
