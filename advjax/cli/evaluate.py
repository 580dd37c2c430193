"""AutoAttack any JAX model from the command line, with per-case records, a summary, a
one-page report and the release gate.

    python -m advjax.evaluate --checkpoint results/cifar10/research/checkpoints/pgd_continue2_silu.msgpack \\
        --data cifar10 --n 1000 --eps 8/255 --out runs/aa
    python -m advjax.evaluate --model mypackage.models:make_logits_fn --n 1000 --out runs/aa
    python -m advjax.evaluate --model mypackage.models:make_logits_fn --data my_test_set.npz \\
        --out runs/aa
    python -m advjax.evaluate --model mypackage.models:make_logits_fn --data tfds:mnist \\
        --split test --n 1000 --eps 0.3 --out runs/aa

`--model module:function` names any importable factory that returns a `logits_fn` (a
function from a batch of NHWC pixels in [0, 1] to logits). `--data` (`advjax.data.load_eval_cases`)
is `cifar10` (the test split; `--n` takes the first n cases of the study's stratified draw, seed
42: the CIFAR study's 1,000 images for n=1000, every test image for n=10000), a `.npz` file
holding `x` (N, H, W, C) pixels, float in [0, 1] or uint8, and `y` (N,) integer labels, or
`tfds:DATASET`, any image classification dataset `tfds.data_source` opens (`--split`, default
test; `--data-dir` is TFDS's data folder); `--n`: its first n cases, default all. The records
are written as cases are decided: a run killed at any moment resumes with the same command,
without duplicates or lost cases; one run writes a folder at a time (a second one is refused
at once), and `--out DIR --repair-records` repairs DIR/records.jsonl.gz (or .jsonl) when it
holds a record twice. Exit code: 0 done (gate allows, or no policy), 1 the gate holds, 3 it
rolls back, 2 bad input (one line; ADVJAX_DEBUG=1 or --debug shows the traceback), 130
interrupted. Every run, finished or interrupted, adds its attack time to
DIR/attack_seconds.json, so that the summary gives the whole evaluation's time, not only the
last resumed run's.

On N hosts (or N processes of one), every process runs the same command with
`--coordinator HOST:PORT --processes N --process-id I` (HOST: process 0's machine): each
loads and attacks only its share of the cases (every N-th from I) on its own devices, writing
DIR/processes/I-of-N/records.jsonl.gz; process 0 merges them into DIR once all are done and
writes the summary, report and gate (`advjax.evaluation.run_evaluation`). DIR must be one
folder every process can write (a shared file system).
"""

import argparse
import hashlib
import importlib
import os
import shlex
import sys
from pathlib import Path

from advjax import backend
from advjax.cli._command import run_command

PROG = "advjax.evaluate"
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


def parse_members(text: str, norm: str = "linf") -> tuple[str, ...]:
    """`apgd-ce,fab-t` -> the member methods, each an attack of `advjax.attacks.ATTACKS`
    that declares `norm`."""
    from advjax.attacks import ATTACKS

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in ATTACKS]
    if not names or unknown:
        raise ValueError(
            f"--members {text!r}: expected comma-separated attacks among {', '.join(ATTACKS)}"
        )
    for name in names:
        try:
            ATTACKS[name].check_norm(norm)
        except ValueError as e:
            raise ValueError(f"--members: {e}") from None
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
    p.add_argument(
        "--data", default="cifar10", help="cifar10, a .npz file with x and y, or tfds:DATASET"
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="CIFAR-10 binary folder (else $ADVJAX_DATA_DIR); for tfds:, TFDS's data folder",
    )
    p.add_argument("--split", default="test", help="tfds: the split to read (default test)")
    p.add_argument(
        "--n",
        type=int,
        default=None,
        help="cases (cifar10: stratified, default 1000; .npz and tfds: first n, default all)",
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
    p.add_argument(
        "--coordinator",
        default=None,
        help="HOST:PORT of process 0, to spread the cases over --processes processes "
        "(jax.distributed; every process runs the same command with its --process-id)",
    )
    p.add_argument("--processes", type=int, default=None, help="with --coordinator: how many")
    p.add_argument("--process-id", type=int, default=None, help="with --coordinator: 0 .. N-1")
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
    if args.coordinator and (args.processes is None or args.process_id is None):
        p.error("--coordinator needs --processes N and --process-id I")
    if args.coordinator and not 0 <= args.process_id < args.processes:
        p.error(f"--process-id {args.process_id} must be in [0, {args.processes})")
    return args


def start_processes(args) -> None:
    """Join the `jax.distributed` run that --coordinator names (CPU collectives by gloo, which
    the end-of-run barrier needs on CPU-only hosts)."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.processes,
        process_id=args.process_id,
    )


def load_logits_fn(args):
    """(logits_fn, name, model hash) of --checkpoint or --model."""
    if args.checkpoint:
        from advjax_train import load_logits_fn

        path = Path(args.checkpoint)
        logits_fn, digest = load_logits_fn(path)
        return logits_fn, args.name or path.stem, digest
    module_name, sep, function = args.model.partition(":")
    if not sep or not module_name or not function:
        raise ValueError(f"--model {args.model!r}: expected module:function")
    factory = getattr(importlib.import_module(module_name), function)
    digest = hashlib.sha256(args.model.encode()).hexdigest()[:16]
    return factory(), args.name or function, digest


def main(argv=None) -> int:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from advjax.io import LockedError
    from advjax.records import RecordError

    return run_command(
        PROG,
        lambda: repair(args) if args.repair_records else evaluate(args, argv),
        errors=(ValueError, TypeError, OSError, LockedError, RecordError),
        debug=args.debug,
        resume_hint=f"everything finished so far is kept in {args.out}, and running the same "
        "command again resumes from there",
    )


def repair(args) -> int:
    """`--repair-records`: repair <out>'s record file, holding the folder; exit code 0."""
    from advjax.io import OutputLock
    from advjax.records import record_file, repair_records

    with OutputLock(args.out):
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

    from advjax.attacks import check_budget
    from advjax.data import load_eval_cases
    from advjax.evaluation import AutoAttackConfig, Model, run_evaluation
    from advjax.evaluation.engine import process_folder, this_process
    from advjax.io import OutputLock

    check_budget(args.eps, args.norm, name="--eps")
    members = None if args.members is None else parse_members(args.members, args.norm)
    if args.coordinator:
        start_processes(args)
    index, count = this_process()
    # a folder another run holds is refused before any loading
    with OutputLock(args.out if index == 0 else process_folder(args.out)):
        pass
    if args.compile_cache:
        use_compile_cache(args.compile_cache)
    logits_fn, name, digest = load_logits_fn(args)
    cases = load_eval_cases(
        args.data, n=args.n, data_dir=args.data_dir, split=args.split, name="--data",
        share=(index, count) if count > 1 else None,
    )  # fmt: skip
    config = AutoAttackConfig(eps=args.eps, norm=args.norm, version=args.version,
                              members=members, batch_size=args.batch_size)  # fmt: skip
    result = run_evaluation(
        args.out, Model(name, logits_fn, digest), cases, config,
        key=jax.random.key(args.seed), policy=args.policy,
        show_progress=not args.no_progress,
        command="python -m advjax.evaluate " + shlex.join(sys.argv[1:] if argv is None else argv),
        log_line=lambda line: print(line, flush=True),
    )  # fmt: skip
    return result.exit_code
