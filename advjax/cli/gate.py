"""The release gate's command: `python -m advjax.gate --policy P --run R [--baseline B]`.

Prints ALLOW, HOLD or ROLLBACK with every rule's verdict and numbers; exits 0 for allow,
1 for hold, 3 for rollback, 2 for a missing or unreadable file, a malformed policy or a
summary off its schema (one line). The rules are `advjax.evaluation.decide`'s.
"""

import argparse
import sys
from collections.abc import Sequence

from advjax.cli._command import run_command

PROG = "advjax.gate"


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 allow, 1 hold, 3 rollback, 2 error)."""
    parser = argparse.ArgumentParser(
        prog="python -m advjax.gate",
        description="Release gate: allow or hold a model from thresholds declared in advance.",
    )
    parser.add_argument(
        "--policy", required=True, help="policy JSON (thresholds declared in advance)"
    )
    parser.add_argument(
        "--run", required=True, help="the run's summary JSON (advjax.evaluation.run_summary)"
    )
    parser.add_argument("--baseline", help="a baseline run's summary JSON")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return run_command(PROG, lambda: gate(args))


def gate(args) -> int:
    from advjax.evaluation import decide
    from advjax.evaluation.gate import format_decision, load_policy
    from advjax.evaluation.summary import read_run_summary

    policy, policy_hash = load_policy(args.policy)
    run = read_run_summary(args.run)
    baseline = read_run_summary(args.baseline) if args.baseline else None
    decision = decide(policy, run, baseline)
    print(format_decision(decision))
    print(
        f"  policy {args.policy} (sha256 {policy_hash}); run {args.run} "
        f"(threat model {run['threat_model_hash']})"
        + (f"; baseline {args.baseline}" if args.baseline else "")
    )
    return decision.exit_code
