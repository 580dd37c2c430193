"""AutoAttack any JAX model from the command line, with per-case records, a summary, a
one-page report and the release gate.

    python -m advjax.evaluate --checkpoint results/cifar10/research/checkpoints/pgd_continue2_silu.msgpack \\
        --data cifar10 --n 1000 --eps 8/255 --out runs/aa
    python -m advjax.evaluate --model mypackage.models:make_logits_fn --n 1000 --out runs/aa
    python -m advjax.evaluate --model mypackage.models:make_logits_fn --data my_test_set.npz \
        --out runs/aa

`--model module:function` names any importable factory that returns a `logits_fn` (a
function from a batch of NHWC pixels in [0, 1] to logits). `--data` is `cifar10` (the test
split; `--n` takes the first n cases of the study's stratified draw, seed 42: the CIFAR
study's 1,000 images for n=1000, every test image for n=10000) or any dataset as a `.npz`
file holding `x` (N, H, W, C) pixels, float in [0, 1] or uint8, and `y` (N,) integer labels
(`--n`: its first n cases, default all). The records are written as cases are decided: a run killed
at any moment resumes with the same command, without duplicates or lost cases; one run
writes a folder at a time (a second one is refused at once), and `--out DIR --repair-records`
repairs DIR/records.jsonl.gz (or .jsonl) when it holds a record twice. Exit code: 0 done (gate allows, or
no policy), 1 the gate holds, 3 it rolls back, 2 bad input (one line; ADVJAX_DEBUG=1 or --debug shows the
traceback), 130 interrupted. Every run, finished or interrupted, adds its attack time to
DIR/attack_seconds.json, so that the summary gives the whole evaluation's time, not only the last
resumed run's.
"""

import argparse
import hashlib
import importlib
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from advjax import backend

CIFAR10 = "cifar10"
PROG = "advjax.evaluate"
DEBUG_ENV = "ADVJAX_DEBUG"
CACHE_ENV = "ADVJAX_COMPILE_CACHE"


def parse_eps(text: str) -> float:
    """`8/255` or `0.031` -> float (input units), by `advjax.evaluation.parse_eps`."""
    from advjax.evaluation import parse_eps as parse

    try:
        return parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--eps {text!r}: expected a number such as 8/255"
        ) from None


def parse_members(text: str) -> tuple[str, ...]:
    """`apgd-ce,fab-t` -> the member methods, each an attack of `advjax.attacks.ATTACKS`."""
    from advjax.attacks import ATTACKS

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in ATTACKS]
    if not names or unknown:
        raise ValueError(
            f"--members {text!r}: expected comma-separated attacks among {', '.join(ATTACKS)}"
        )
    return names


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m advjax.evaluate",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", help="an advjax checkpoint (.msgpack)")
    source.add_argument("--model", help="module:function, a factory returning logits_fn")
    p.add_argument("--data", default=CIFAR10, help="cifar10, or a .npz file with x and y")
    p.add_argument(
        "--data-dir", default=None, help="CIFAR-10 binary folder (else $ADVJAX_DATA_DIR)"
    )
    p.add_argument(
        "--n",
        type=int,
        default=None,
        help="cases (cifar10: stratified, default 1000; .npz: first n)",
    )
    p.add_argument("--eps", type=parse_eps, default=8 / 255, help="budget, e.g. 8/255")
    p.add_argument("--norm", default="linf", choices=("linf", "l2"))
    p.add_argument(
        "--version",
        default="standard",
        choices=("standard", "plus", "rand", "fast"),
        help="AutoAttack's version (fast: APGD-CE and MALT, a gradient-masking probe, and the "
        "standard members where it escalates; docs/evaluation.md, section 6)",
    )
    p.add_argument(
        "--members",
        default=None,
        help="a custom member list instead of --version's, in order, e.g. apgd-ce,apgd-t,square "
        "(any attack of advjax.attacks.ATTACKS, at AutoAttack's default budgets)",
    )
    p.add_argument("--seed", type=int, default=0, help="root seed of every random choice")
    p.add_argument("--batch-size", type=int, default=250)
    p.add_argument("--out", required=True, help="output folder (records, summary, report)")
    p.add_argument("--policy", default=None, help="release policy JSON the gate applies")
    p.add_argument("--name", default=None, help="model name in the records (default: file stem)")
    p.add_argument(
        "--compile-cache",
        default=os.environ.get(CACHE_ENV),
        help=f"folder of JAX's persistent compilation cache (else ${CACHE_ENV}; default none): "
        "a resumed or repeated run loads the attacks' compiled programs instead of compiling",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--no-progress", action="store_true", help="no per-batch progress line")
    p.add_argument(
        "--repair-records",
        action="store_true",
        help="repair <out>/records.jsonl.gz and exit: keep the first copy of each record, append the "
        "other copies to records.duplicates.jsonl beside it",
    )
    args = p.parse_args(argv)
    if not (args.checkpoint or args.model or args.repair_records):
        p.error("one of the arguments --checkpoint --model is required")
    return args


def load_logits_fn(args):
    """(logits_fn, name, model hash) of --checkpoint or --model."""
    if args.checkpoint:
        from advjax.io import load_logits_fn

        path = Path(args.checkpoint)
        logits_fn, digest = load_logits_fn(path)
        return logits_fn, args.name or path.stem, digest
    module_name, sep, function = args.model.partition(":")
    if not sep or not module_name or not function:
        raise ValueError(f"--model {args.model!r}: expected module:function")
    factory = getattr(importlib.import_module(module_name), function)
    digest = hashlib.sha256(args.model.encode()).hexdigest()[:16]
    return factory(), args.name or function, digest


def load_cases(args):
    """(x, y, case ids, number of classes) of --data: the first --n cases of the CIFAR study's
    stratified draw of the test split (seed 42), so n=1000 gives its 1,000 images and
    n=10,000 every test image; or the first --n cases of a .npz file's x and y."""
    if args.data != CIFAR10:
        if Path(args.data).suffix != ".npz":
            raise ValueError(f"--data {args.data!r}: expected cifar10 or a .npz file with x and y")
        return _npz_cases(Path(args.data), args.n)
    from advjax.data import load_cifar10, study_eval_indices
    from advjax.train import to_float

    data = load_cifar10(args.data_dir, splits=("test",))
    total, n = len(data.test_labels), 1000 if args.n is None else args.n
    if not 1 <= n <= total:
        raise ValueError(f"--n {n} must be in [1, {total}]")
    if n == total:
        index = np.arange(total)
    else:
        size = 10 * -(-n // 10)
        index = study_eval_indices(data.test_labels, eval_size=size)[:n]
    x = np.asarray(to_float(data.test_images[index]))
    return x, data.test_labels[index], index, len(data.class_names)


def _npz_cases(path: Path, n: int | None):
    from advjax.data import load_npz

    x, y = load_npz(path, name="--data")
    n = len(y) if n is None else n
    if not 1 <= n <= len(y):
        raise ValueError(f"--n {n} must be in [1, {len(y)}]")
    return x[:n], y[:n], np.arange(n), None


def main(argv=None) -> int:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from advjax.io import LockedError, OutputLock, RecordError

    try:
        with OutputLock(args.out):
            return repair(args) if args.repair_records else evaluate(args, argv)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted; everything finished so far is kept in {args.out}, and "
              "running the same command again resumes from there", file=sys.stderr)  # fmt: skip
        return 130
    except (ValueError, TypeError, OSError, LockedError, RecordError) as error:
        if args.debug or os.environ.get(DEBUG_ENV):
            raise
        message = " ".join(str(error).split())
        print(f"{PROG}: error: {message} ({DEBUG_ENV}=1 shows the traceback)", file=sys.stderr)
        return 2


def repair(args) -> int:
    """`--repair-records`: repair <out>'s record file (the lock is held); exit code 0."""
    from advjax.io import record_file, repair_records

    path = record_file(args.out)
    print(repair_records(path).describe() if path.is_file() else f"no record file: {path}")
    return 0


def use_compile_cache(folder: str) -> None:
    """Keep every compiled program of this process in JAX's persistent cache at `folder`
    (made if missing), however short its compilation."""
    import jax

    Path(folder).mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(Path(folder).resolve()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def evaluate(args, argv) -> int:
    import jax

    from advjax.evaluation import (
        AUTOATTACK,
        Member,
        aggregate_records,
        autoattack_threat_model,
        decide,
        run_autoattack,
        run_summary,
    )
    from advjax.evaluation._autoattack import FAST, eps_zero_check
    from advjax.evaluation._autoattack_checks import black_box_check, probe_checks
    from advjax.evaluation._autoattack_records import (
        broken_by_member,
        fast_outcome,
        member_passes,
        schedule_members,
    )
    from advjax.evaluation._autoattack_report import cumulative_rows, write_report
    from advjax.evaluation.checks import check_finite_loss, check_perturbations
    from advjax.evaluation.gate import EXIT_CODES, format_decision, load_policy
    from advjax.io import (
        Progress,
        RecordLog,
        add_attack_time,
        atomic_write_json,
        atomic_write_text,
        environment,
        record_file,
        untimed_records,
    )

    limit = 1.0 if args.norm == "linf" else float("inf")
    if not 0 <= args.eps <= limit:
        raise ValueError(
            f"--eps {args.eps:g} must be in [0, {limit:g}] for --norm {args.norm} (e.g. 8/255)"
        )
    if args.compile_cache:
        use_compile_cache(args.compile_cache)
    if args.members is not None:
        args.members = parse_members(args.members)
    custom = None if args.members is None else [Member(method) for method in args.members]
    fast = args.version == "fast" and custom is None
    members = schedule_members(args.version, custom, args.norm)
    tm = autoattack_threat_model(args.eps, members, args.norm)
    print(tm.describe())
    if fast:
        print(f"members: {', '.join(m.name for m in FAST.always)} on every case; "
              f"{', '.join(m.name for m in FAST.probe)} on a sample of those left robust; "
              f"{', '.join(m.name for m in FAST.escalation)} on all of them if the sample "
              "or a model check shows masked gradients")  # fmt: skip
    else:
        print(f"members: {', '.join(m.name for m in members)}")
    logits_fn, name, digest = load_logits_fn(args)
    x, y, index, classes = load_cases(args)
    if classes is None:
        classes = int(jax.eval_shape(logits_fn, x[:1]).shape[-1])
    out = Path(args.out)
    log = RecordLog(record_file(out))
    run_key = {"model": name, "eps": float(args.eps), "norm": args.norm, "version": args.version}
    if args.members is not None:
        run_key["members"] = list(args.members)
    untimed = untimed_records(out, log.read(), run_key)
    started = time.perf_counter()

    def on_run(member, target, restart, left):
        elapsed = time.perf_counter() - started
        print(f"  [{elapsed:6.0f} s] {member.name} target {target} restart {restart}: "
              f"{left} still robust", flush=True)  # fmt: skip

    bars: dict = {}

    def on_batch(member, target, restart, done, total):
        run = (member.name, target, restart)
        if run not in bars:
            bars[run] = Progress(total, f"  {member.name} target {target} restart {restart}")
        bars[run].update(done - bars[run].count)

    finished = False
    try:
        run_autoattack(
            log, logits_fn, x, y, args.eps, key=jax.random.key(args.seed), model=name, model_hash=digest,
            case_ids=index, norm=args.norm, version=args.version, members=custom,
            batch_size=args.batch_size,
            on_run=on_run, on_batch=None if args.no_progress else on_batch,
        )  # fmt: skip
        finished = True
    finally:
        seconds = time.perf_counter() - started
        runs = add_attack_time(out, run_key, seconds, finished=finished, untimed=untimed)
    total = None if runs[0]["untimed_records_before"] else sum(r["seconds"] for r in runs)
    records = [r for r in log.read() if r.model == name and r.eps == float(args.eps)]
    groups = aggregate_records(records, num_classes=classes)
    random_model = args.version == "rand"
    model_checks = probe_checks(logits_fn, x, y, random_model=random_model)
    schedule, probe_check, stages = None, [], [(m, m.name) for m in members]
    if fast:
        failed = [c.name for c in model_checks if not c.passed]
        outcome = fast_outcome(records, model=name, eps=float(args.eps),
                               key=jax.random.key(args.seed), ids=index, failed=failed)  # fmt: skip
        members, schedule, probe_check = outcome["members"], outcome["schedule"], [outcome["check"]]
        stages = outcome["stages"]
    broken_by = broken_by_member(records, members, index)
    clean_correct = broken_by != -2
    found = [
        *model_checks,
        *black_box_check(broken_by, members),
        eps_zero_check(logits_fn, x, y, clean_correct, members, args.norm,
                       jax.random.key(args.seed), random_model),
        *probe_check,
    ]  # fmt: skip
    summary = run_summary(
        groups,
        [check_perturbations(groups), check_finite_loss(groups), *found],
        tm,
        extra={
            "command": "python -m advjax.evaluate " + shlex.join(args_list(argv)),
            "members": [m.name for m in members],
            "model_passes": member_passes(
                records,
                [m for m, _ in stages],
                model=name,
                eps=float(args.eps),
                classes=classes,
                names=[label for _, label in stages],
            ),
            "version": args.version if args.members is None else "custom",
            "schedule": schedule,
            "seconds": seconds,
            "seconds_all_runs": total,
            "attack_runs": len(runs),
            "threat_model_text": tm.describe(),
            "robust_accuracy_after": [
                {"after": label, **rate} for label, rate in cumulative_rows(groups, members, name)
            ],
            "environment": environment(),
        },
    )
    atomic_write_json(out / "summary.json", summary)
    decision_text = ""
    code = 0
    if args.policy:
        policy, policy_hash = load_policy(args.policy)
        decision = decide(policy, summary)
        decision_text = (
            format_decision(decision) + f"\n  policy {args.policy} (sha256 {policy_hash})\n"
        )
        atomic_write_text(out / "gate.txt", decision_text)
        code = EXIT_CODES[decision.verdict]
    write_report(out / "report.html", summary, groups, members, name, decision_text)
    final = next(g for g in groups if g["attack"] == AUTOATTACK)
    ra = final["robust_accuracy"]
    print(f"{name}: robust accuracy {100 * ra['value']:.1f} % ({ra['count']}/{ra['total']}) "
          f"under AutoAttack {summary['extra']['version']} at eps {args.eps:.5g} ({args.norm}); "
          f"{_describe_time(seconds, total, len(runs))}")  # fmt: skip
    if decision_text:
        print(decision_text.rstrip())
    print(f"wrote {log.path}, {out}/summary.json, report.html")
    return code


def args_list(argv):
    return list(sys.argv[1:] if argv is None else argv)


def _describe_time(seconds: float, total: float | None, runs: int) -> str:
    if total is None:
        return f"{seconds:.0f} s this run (earlier runs untimed)"
    return (
        f"{seconds:.0f} s"
        if runs == 1
        else f"{seconds:.0f} s this run, {total:.0f} s over {runs} runs"
    )


if __name__ == "__main__":
    sys.exit(main())
