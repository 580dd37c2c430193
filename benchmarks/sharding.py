"""Data-parallel train-step throughput at 1, 2 and 4 simulated CPU devices.

    python -m benchmarks.sharding [--devices 1,2,4] [--mode standard] [--batch 128] [--steps 8]

Each device count runs in its own subprocess (the count is fixed when JAX starts) with
`XLA_FLAGS=--xla_force_host_platform_device_count=N` and `JAX_PLATFORMS=cpu`, builds the
same initial state, and times `advjax_train.sharded_train_step` on the same synthetic
uint8 batches of CIFAR shape (each timed step includes `shard_batch`'s host-to-device copy
and ends in `jax.block_until_ready`). It prints a markdown table of images/s and the loss
after the first step, which must agree across device counts to float tolerance.

On a CPU the simulated devices share the same cores, so **no speed-up is expected** (on a
2-core machine, more devices usually means slower): this checks that the sharded step runs
and agrees at every device count and shows the partitioning and all-reduce overhead. It is
not a scaling measurement; run it on real multi-device hardware (without the XLA flag and
JAX_PLATFORMS) for that.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from advjax import backend
from benchmarks.machine import describe_machine
from benchmarks.report import write_atomic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(mode: str, batch: int, steps: int) -> dict:
    """Time `steps` sharded train steps over every device of this process (after one untimed)."""
    import jax
    import numpy as np

    from advjax_train import Batch, TrainConfig, create_train_state, make_train_step
    from advjax_train import _sharding as sharding
    from benchmarks.jax_workloads import synthetic

    config = TrainConfig(mode=mode, batch_size=batch)
    mesh = sharding.data_mesh()
    images, labels = synthetic(batch * (steps + 1), seed=0)
    batches = [
        Batch(images[i * batch : (i + 1) * batch], labels[i * batch : (i + 1) * batch])
        for i in range(steps + 1)
    ]
    keys = [jax.random.fold_in(jax.random.key(1), i) for i in range(steps + 1)]
    state = sharding.replicate(mesh, create_train_state(jax.random.key(0), config, 1000))
    step = sharding.sharded_train_step(make_train_step(config), mesh)

    started = time.perf_counter()
    state, metrics = step(state, sharding.shard_batch(mesh, batches[0]), keys[0])
    first_loss = float(jax.block_until_ready(metrics)["loss"])
    first_call_s = time.perf_counter() - started
    times = []
    for b, key in zip(batches[1:], keys[1:]):
        started = time.perf_counter()
        state, metrics = step(state, sharding.shard_batch(mesh, b), key)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - started)
    return {
        "devices": sharding.num_shards(mesh),
        "platform": jax.devices()[0].platform,
        "first_call_s": first_call_s,
        "first_loss": first_loss,
        "step_s_median": statistics.median(times),
        "images_per_s": batch / statistics.median(times),
        "times_s": times,
        "final_loss_finite": bool(np.isfinite(float(metrics["loss"]))),
    }


def run_worker(devices: int, args: argparse.Namespace) -> dict:
    """`measure` in a fresh process with `devices` simulated CPU devices."""
    env = dict(os.environ)
    flag = f"--xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "benchmarks.sharding", "--worker"]
    command += ["--mode", args.mode, "--batch", str(args.batch), "--steps", str(args.steps)]
    proc = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{devices}-device worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict], batch: int) -> str:
    """Markdown table: throughput relative to one device and the first-step loss difference."""
    base = rows[0]
    lines = [
        f"| devices | images/s (batch {batch}) | ms/step | vs {base['devices']} device(s) "
        "| first call s | loss after step 1 | diff vs first row |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['devices']} | {r['images_per_s']:.0f} | {1000 * r['step_s_median']:.0f} "
            f"| {r['images_per_s'] / base['images_per_s']:.2f}x | {r['first_call_s']:.1f} "
            f"| {r['first_loss']:.6f} | {abs(r['first_loss'] - base['first_loss']):.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(prog="python -m benchmarks.sharding", description=__doc__)
    p.add_argument("--devices", default="1,2,4", help="comma-separated device counts")
    p.add_argument("--mode", default="standard", choices=("standard", "fgsm"))
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=8, help="timed steps after one untimed")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps < 1:
        raise SystemExit(f"--steps={args.steps} must be >= 1")
    if args.worker:
        print(json.dumps(measure(args.mode, args.batch, args.steps)))
        return
    counts = [int(c) for c in args.devices.split(",")]
    bad = [c for c in counts if c < 1 or args.batch % c]
    if bad:
        raise SystemExit(
            f"--batch={args.batch} must be a multiple of every device count, not {bad}"
        )
    rows = []
    for c in counts:
        rows.append(run_worker(c, args))
        print(f"[sharding] {c} device(s): {rows[-1]['images_per_s']:.0f} img/s", flush=True)
    command = ["python", "-m", "benchmarks.sharding", *argv]
    text = (
        f"# Data-parallel train step on simulated CPU devices\n\n"
        f"`{' '.join(command)}` · mode {args.mode}, "
        f"{args.steps} timed steps · {os.cpu_count()} CPU cores; the simulated devices share "
        "them, so this checks agreement and overhead, not scaling (see the module doc).\n\n"
        + table(rows, args.batch)
        + "\n"
    )
    print(text)
    record = {"command": command, "rows": rows}
    write_atomic(
        os.path.join(args.out, "sharding.json"),
        json.dumps(record | {"machine": describe_machine(REPO)}, indent=2),
    )
    write_atomic(os.path.join(args.out, "sharding.md"), text)


if __name__ == "__main__":
    main(sys.argv[1:])
