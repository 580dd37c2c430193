"""PGD with restarts on the full 10,000-image CIFAR-10 test split, within a memory budget.

`python -m benchmarks.full_test_split [--study results/cifar10/default] [--model standard] [--restarts 4]`

Attacks every test image through the record campaign (`advjax.evaluation.run_attack`): fixed-
size batches, PGD in chunks of steps with the still-unbroken cases compacted between chunks,
restarts one after another over the unbroken cases, one record per case appended as cases
are decided (a killed run resumes), and a progress bar. Memory is bounded by the batch, not
by the number of images: the images (123 MB as float32) and the per-case outcome are the
only arrays that grow with the split. Reports wall time, robust accuracy and the process's
peak resident memory against the budget (default 4 GiB), in
benchmarks/results/full_test_split.{json,md}.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from advjax import backend
from advjax.data import EvalCases, load_cifar10
from advjax.evaluation import AttackSpec, Model, ThreatModel, parse_eps, run_attack
from advjax.evaluation.stats import format_rate, rate
from advjax.records import RecordLog
from advjax_train import load_logits_fn, to_float
from benchmarks.machine import describe_machine, maxrss_mib
from benchmarks.report import write_report

REPO = str(Path(__file__).resolve().parents[1])


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--study", default="results/cifar10/default")
    p.add_argument("--model", default="standard")
    p.add_argument("--eps", type=parse_eps, default=8 / 255, help="L-inf budget, e.g. 8/255")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--restarts", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=250)
    p.add_argument("--limit", type=int, default=None, help="attack only the first N test images")
    p.add_argument("--max-rss-gib", type=float, default=4.0)
    p.add_argument("--records", default=None, help="record file (default: a temporary one)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", default=str(Path(REPO) / "benchmarks" / "results"))
    args = p.parse_args(argv)
    if args.eps is not None and not args.eps <= 1:
        p.error(f"--eps {args.eps:g} must be in [0, 1], e.g. 8/255")
    eps = args.eps
    data = load_cifar10(args.data_dir)
    n = len(data.test_labels) if args.limit is None else args.limit
    x, y = np.asarray(to_float(data.test_images[:n])), np.asarray(data.test_labels[:n])
    logits_fn, mhash = load_logits_fn(Path(args.study) / "checkpoints" / f"{args.model}.msgpack")
    tm = ThreatModel(eps=(eps,), steps=args.steps, restarts=args.restarts)
    spec = AttackSpec(
        name="pgd_full_test",
        method="pgd",
        eps=(eps,),
        steps=args.steps,
        restarts=args.restarts,
        batch_size=args.batch_size,
    )
    records_path = Path(args.records or tempfile.mkdtemp(prefix="advjax-full-test-")) / "r.jsonl"
    log = RecordLog(records_path)
    started = time.perf_counter()
    run_attack(
        log,
        Model(args.model, logits_fn, mhash),
        EvalCases(x, y, np.arange(n)),
        spec,
        threat_model=tm,
        key=jax.random.key(0),
        stream="full_test_split",
        show_progress=not args.no_progress,
    )
    seconds = time.perf_counter() - started
    peak_mib = maxrss_mib()
    records = log.read()
    robust = sum(r.status in ("failed", "budget_exhausted") for r in records)
    clean = sum(r.clean_pred == r.true_class for r in records)
    result = {
        "command": "python -m benchmarks.full_test_split "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "model": args.model,
        "cases": n,
        "attack": spec.to_dict(),
        "seconds": seconds,
        "images_per_second": n / seconds,
        "clean_accuracy": rate(clean, n),
        "robust_accuracy": rate(robust, n),
        "queries": int(sum(r.queries for r in records)),
        "max_queries": n * spec.max_queries(),
        "peak_rss_mib": peak_mib,
        "budget_mib": args.max_rss_gib * 1024,
        "within_budget": peak_mib <= args.max_rss_gib * 1024,
        "image_array_mib": x.nbytes / 2**20,
        "machine": describe_machine(REPO),
    }
    text = (
        "\n".join(
            [
                "# PGD on the full CIFAR-10 test split within a memory budget",
                f"`{result['command']}` · git {result['machine']['git']['commit']}",
                "",
                f"- model `{args.model}`, {n:,} test images, PGD {args.steps} steps x "
                f"{args.restarts} restarts at {args.eps * 255:g}/255, batches of {args.batch_size}",
                f"- wall time {seconds:.0f} s ({n / seconds:.1f} images/s); gradient queries "
                f"{result['queries']:,} of at most {result['max_queries']:,} (early stop)",
                f"- clean accuracy {format_rate(result['clean_accuracy'])}; robust accuracy "
                f"{format_rate(result['robust_accuracy'])}",
                f"- peak resident memory {peak_mib:,.0f} MiB against a budget of "
                f"{result['budget_mib']:,.0f} MiB: {'within' if result['within_budget'] else 'OVER'} "
                f"(the float32 images alone: {result['image_array_mib']:.0f} MiB)",
            ]
        )
        + "\n"
    )
    write_report(args.out, "full_test_split", result, text)
    return result


if __name__ == "__main__":
    main()
