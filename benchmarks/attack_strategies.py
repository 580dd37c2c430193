"""Less work for the same answer: early stopping, and vmapped restarts / eps against loops.

`python -m benchmarks.attack_strategies [--study results/cifar10/default] [--model standard] [--n 500]`

On a trained model of a study run and its evaluation images, each comparison runs both
strategies on the same cases, checks that they decide every case alike (the "ever broken"
rule: same robust cases), and times them (median of --reps, after a compile call):

- early stop: PGD (--steps x --restarts at each --eps) as one vmapped program over every
  step of every restart, against `advjax.evaluation` (chunks of steps, still-unbroken
  cases compacted between chunks, restarts one after another over the unbroken cases);
- restarts: 4 restarts vmapped in one program against a loop of 4 single-restart programs;
- eps: one program vmapped over the eps values against a loop over them.

Writes benchmarks/results/attack_strategies.{json,md} with the machine description.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from advjax import backend
from advjax.attacks import pgd
from advjax.data import load_cifar10
from advjax.evaluation import AttackSpec, parse_eps
from advjax.evaluation.engine import attack_cases, case_keys, key_from_path, make_program
from advjax_train import load_logits_fn, to_float
from benchmarks.machine import describe_machine, maxrss_mib
from benchmarks.report import write_report

REPO = str(Path(__file__).resolve().parents[1])


def _median_seconds(fn, reps: int) -> tuple[float, object]:
    out = fn()  # compile and warm up
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return float(np.median(times)), out


def _robust_full(result, logits_fn, x, y) -> np.ndarray:
    """Robust under the ever-broken rule: clean-correct and no restart ever broke it."""
    clean = np.asarray(jnp.argmax(logits_fn(x), -1)) == y
    return clean & ~np.asarray((result.broken_step >= 0).any(axis=0))


def early_stop_row(logits_fn, x, y, eps, steps, restarts, batch, reps) -> dict:
    spec = AttackSpec(
        name="pgd_budget",
        method="pgd",
        eps=(eps,),
        steps=steps,
        restarts=restarts,
        batch_size=batch,
    )
    keys = case_keys(key_from_path([0, "bench", format(eps, ".6f")]), np.arange(len(y)))
    full_fn = jax.jit(
        lambda x, y, k: pgd(logits_fn, x, y, eps, key=k, steps=steps, restarts=restarts)
    )

    def full():
        parts = [
            full_fn(x[i : i + batch], y[i : i + batch], keys[i : i + batch])
            for i in range(0, len(y), batch)
        ]
        return jax.block_until_ready(parts)

    program = make_program(logits_fn, spec)

    def early():
        return attack_cases(program, spec, x, y, eps, keys, on_final=lambda *_: None)

    t_full, parts = _median_seconds(full, reps)
    t_early, outcome = _median_seconds(early, reps)
    robust_full = np.concatenate(
        [
            _robust_full(p, logits_fn, x[i : i + batch], y[i : i + batch])
            for p, i in zip(parts, range(0, len(y), batch))
        ]
    )
    robust_early = (outcome.clean_pred == y) & (outcome.by_restart < 0).all(axis=0)
    return {
        "comparison": f"early stop, PGD {steps} steps x {restarts} restarts, eps {eps * 255:g}/255",
        "baseline_s": t_full,
        "candidate_s": t_early,
        "speedup": t_full / t_early,
        "same_decisions": bool((robust_full == robust_early).all()),
        "robust": int(robust_early.sum()),
        "cases": len(y),
    }


def restarts_row(logits_fn, x, y, eps, steps, reps) -> dict:
    key = jax.random.key(0)
    vmapped = jax.jit(lambda x, y: pgd(logits_fn, x, y, eps, key=key, steps=steps, restarts=4))
    single = jax.jit(
        lambda x, y, r: pgd(logits_fn, x, y, eps, key=key, steps=steps, first_restart=r),
        static_argnums=2,
    )
    t_v, rv = _median_seconds(lambda: jax.block_until_ready(vmapped(x, y)), reps)
    t_l, rl = _median_seconds(
        lambda: jax.block_until_ready([single(x, y, r) for r in range(4)]), reps
    )
    broken_v = np.asarray(rv.broken_step)
    broken_l = np.concatenate([np.asarray(r.broken_step) for r in rl])
    return {
        "comparison": f"4 restarts of PGD-{steps}: vmapped (baseline: loop)",
        "baseline_s": t_l,
        "candidate_s": t_v,
        "speedup": t_l / t_v,
        "same_decisions": bool((broken_v == broken_l).all()),
        "cases": len(y),
    }


def eps_row(logits_fn, x, y, eps_values, steps, reps) -> dict:
    key = jax.random.key(0)
    eps_arr = jnp.asarray(eps_values, jnp.float32)
    one = jax.jit(lambda x, y, e: pgd(logits_fn, x, y, e, key=key, steps=steps).broken_step)
    vmapped = jax.jit(jax.vmap(lambda e: one(x, y, e)))
    t_v, bv = _median_seconds(lambda: jax.block_until_ready(vmapped(eps_arr)), reps)
    t_l, bl = _median_seconds(lambda: jax.block_until_ready([one(x, y, e) for e in eps_arr]), reps)
    return {
        "comparison": f"PGD-{steps} at {len(eps_values)} eps: vmapped (baseline: loop)",
        "baseline_s": t_l,
        "candidate_s": t_v,
        "speedup": t_l / t_v,
        "same_decisions": bool((np.asarray(bv) == np.stack([np.asarray(b) for b in bl])).all()),
        "cases": len(y),
    }


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        "# Attack strategies: same decisions, less work",
        f"`{result['command']}` · model `{result['model']}` ({result['cases']} evaluation images) · "
        f"git {m['git']['commit']}{' (dirty)' if m['git'].get('dirty') else ''}",
        f"Machine: {m['cpu_model']}, {m['usable_cores']} usable cores; load average at start "
        f"{result['load_start']}, at end {result['load_end']}; peak RSS {result['peak_rss_mib']:.0f} MiB.",
        "",
        "| comparison | baseline s | candidate s | speed-up | same decisions |",
        "|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['comparison']} | {r['baseline_s']:.2f} | {r['candidate_s']:.2f} | "
            f"{r['speedup']:.2f}x | {'yes' if r['same_decisions'] else '**NO**'} |"
        )
    lines += ["", result["note"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--study", default="results/cifar10/default")
    p.add_argument("--model", default="standard")
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--restarts", type=int, default=4)
    p.add_argument("--eps", type=parse_eps, nargs="+", default=[2 / 255, 8 / 255],
                   help="early-stop L-inf budgets, e.g. 2/255 8/255")  # fmt: skip
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=str(Path(REPO) / "benchmarks" / "results"))
    args = p.parse_args(argv)
    if not all(e <= 1 for e in args.eps):
        p.error(f"--eps {args.eps} must be in [0, 1], e.g. 8/255")
    from benchmarks.machine import load_average

    study = Path(args.study)
    results = json.loads((study / "results.json").read_text())
    logits_fn, _ = load_logits_fn(study / "checkpoints" / f"{args.model}.msgpack")
    data = load_cifar10(args.data_dir)
    idx = np.asarray(results["data"]["eval_indices"])[: args.n]
    x = jnp.asarray(to_float(data.test_images[idx]))
    y = np.asarray(data.test_labels[idx])
    load_start = load_average()
    rows = [
        early_stop_row(logits_fn, x, y, e, args.steps, args.restarts, args.batch, args.reps)
        for e in args.eps
    ]
    xs, ys = x[: args.batch * 2], y[: args.batch * 2]
    rows.append(restarts_row(logits_fn, xs, ys, 8 / 255, 20, args.reps))
    rows.append(eps_row(logits_fn, xs, ys, [2 / 255, 4 / 255, 8 / 255], 20, args.reps))
    result = {
        "command": "python -m benchmarks.attack_strategies "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "model": args.model,
        "cases": len(y),
        "rows": rows,
        "machine": describe_machine(REPO),
        "load_start": load_start,
        "load_end": load_average(),
        "peak_rss_mib": maxrss_mib(),
        "note": (
            "Early stop: the baseline runs every step of every restart on every case in one "
            "vmapped program per batch; the candidate stops a case at its first misclassified "
            "iterate and runs later restarts only on unbroken cases. Restarts and eps: the same "
            "computation as one vmapped program or as a Python loop of programs; on a 2-core "
            "CPU a vmapped program is one larger batch for the same arithmetic, so any gain "
            "comes from fewer dispatches and better-shaped matrix products, not from more "
            "cores. 'same decisions': identical per-case break steps (vmap vs loop) or "
            "identical robust cases (early stop vs full)."
        ),
    }
    write_report(args.out, "attack_strategies", result, markdown(result))
    return result


if __name__ == "__main__":
    main()
