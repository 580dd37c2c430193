"""bfloat16 against float32 on this CPU, advjax and PyTorch side by side:
`python -m benchmarks.bfloat16 [--reps 5] [--rounds 2]`.

Does computing the CompactCNN in bfloat16 (weights and inputs cast at the start, float32
master weights and loss) make the study's work faster here? Three workloads, each in float32
and bfloat16, on the study's `standard` checkpoint and the first images of its 1,000 test
cases: inference (batch 250), the input gradient of one attack step (batch 250) and the
weight gradient of one training step (batch 128, batch norm in training mode). The PyTorch
peer (`torch_bfloat16.py`, channels_last, `torch.autocast` bfloat16) runs the same weights,
workloads and images in the same run; advjax and PyTorch alternate by round. Also scored:
how often bfloat16's top-1 decision equals float32's on all 1,000 images, and each one's
clean accuracy. Writes `bfloat16.json` and `bfloat16.md` to `--out`.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from advjax import backend
from benchmarks.autoattack_peer import REPO, run_torch_script
from benchmarks.jax_workloads import matmul_peak
from benchmarks.machine import describe_machine, load_average

DTYPES = ("float32", "bfloat16")
WORKLOADS = ("inference", "input_gradient", "train_gradient")
LABELS = {
    "inference": "inference",
    "input_gradient": "input gradient (one attack step)",
    "train_gradient": "weight gradient (one training step)",
}


def cast(tree, dtype):
    return jax.tree_util.tree_map(lambda a: a.astype(dtype), tree)


def jax_programs(model, variables, x, y, train_batch: int) -> dict:
    """The three workloads as jitted functions of the float32 inputs, keyed by (name, dtype)."""

    def logits(v, xs, dtype):
        return model.apply(cast(v, dtype), xs.astype(dtype), train=False).astype(jnp.float32)

    def input_loss(xs, dtype):
        return optax.softmax_cross_entropy_with_integer_labels(
            logits(variables, xs, dtype), y
        ).mean()

    def train_loss(params, dtype):
        v = {"params": cast(params, dtype), "batch_stats": cast(variables["batch_stats"], dtype)}
        out, _ = model.apply(v, x[:train_batch].astype(dtype), train=True, mutable=["batch_stats"],
                             rngs={"dropout": jax.random.key(0)})  # fmt: skip
        return optax.softmax_cross_entropy_with_integer_labels(
            out.astype(jnp.float32), y[:train_batch]
        ).mean()

    programs = {}
    for dtype in DTYPES:
        dt = jnp.dtype(dtype)
        programs["inference", dtype] = jax.jit(lambda xs, dt=dt: logits(variables, xs, dt))
        programs["input_gradient", dtype] = jax.jit(jax.grad(lambda xs, dt=dt: input_loss(xs, dt)))
        programs["train_gradient", dtype] = jax.jit(jax.grad(lambda p, dt=dt: train_loss(p, dt)))
    return programs


def time_jax(programs, variables, x, reps: int) -> dict:
    args = {"inference": x, "input_gradient": x, "train_gradient": variables["params"]}
    out = {}
    for name in WORKLOADS:
        for dtype in DTYPES:
            fn = programs[name, dtype]
            jax.block_until_ready(fn(args[name]))
            times = []
            for _ in range(reps):
                started = time.perf_counter()
                jax.block_until_ready(fn(args[name]))
                times.append(time.perf_counter() - started)
            out[name, dtype] = times
    return out


def run_torch(torch_python, model, variables, x, y, *, reps, batch, train_batch) -> dict:
    args = ("--reps", reps, "--batch", batch, "--train-batch", train_batch)
    return run_torch_script(torch_python, "torch_bfloat16.py", model, variables, x, y, args)


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# bfloat16 against float32 on this CPU, advjax and PyTorch",
        "",
        f"`{r['command']}` · git {m['git'].get('commit', '?')[:10]} · model `{r['model']}` · "
        f"{r['rounds']} rounds x {r['reps']} repetitions per side and precision · "
        f"{m['usable_cores']} cores ({m['cpu_model']}; AVX-512 BF16: "
        f"{'yes' if 'avx512_bf16' in r['cpu_bf16_flags'] else 'no'}) · jax {m['versions']['jax']}, "
        f"torch {r['torch']['torch']} ({r['torch']['layout']}, {r['torch']['threads']} threads)",
        "",
        f"Machine: load average at start {r['load_start']}, at end {r['load_end']}; float32 "
        f"matmul (2048^2 `jnp.dot`) {r['matmul_gflops']:.0f} GFLOP/s. {r['idle_note']}",
        "",
        "Median images per second; the ratio is bfloat16 ÷ float32 (above 1, bfloat16 is faster).",
        "",
        "| workload | batch | advjax float32 | advjax bfloat16 | ratio | PyTorch float32 "
        "| PyTorch bfloat16 | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in WORKLOADS:
        j, t = r["advjax"][name], r["torch_rows"][name]
        lines.append(
            f"| {LABELS[name]} | {j['images']} | {j['float32']:,.0f} | {j['bfloat16']:,.0f} | "
            f"{j['bfloat16'] / j['float32']:.2f} | {t['float32']:,.0f} | {t['bfloat16']:,.0f} | "
            f"{t['bfloat16'] / t['float32']:.2f} |"
        )
    a, t = r["agreement"], r["torch"]
    lines += [
        "",
        f"Top-1 decisions on the {a['n']:,} test images, bfloat16 against float32: advjax "
        f"{a['advjax']:,} the same (clean accuracy {100 * a['accuracy']['float32']:.1f} % → "
        f"{100 * a['accuracy']['bfloat16']:.1f} %), PyTorch {t['top1_agreement']:,} the same "
        f"({100 * t['accuracy']['float32']:.1f} % → {100 * t['accuracy']['bfloat16']:.1f} %).",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--study", default=str(REPO / "results" / "cifar10" / "default"))
    p.add_argument("--model", default="standard")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--train-batch", type=int, default=128)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--torch-python", default=str(REPO / ".torchvenv" / "bin" / "python"))
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--idle-note", default="", help="what else the machine ran, for the report")
    args = p.parse_args(argv)
    from advjax.data import load_cifar10
    from advjax.io import load_checkpoint
    from advjax.records import atomic_write_json, atomic_write_text
    from advjax_train import CompactCNN, to_float

    machine = describe_machine(str(REPO))
    study = json.loads((Path(args.study) / "results.json").read_text())
    index = np.asarray(study["data"]["eval_indices"])
    data = load_cifar10(args.data_dir, splits=("test",))
    x, y = np.asarray(to_float(data.test_images[index])), np.asarray(data.test_labels[index])
    model, variables = load_checkpoint(
        Path(args.study) / "checkpoints" / f"{args.model}.msgpack", CompactCNN
    )
    xb, yb = jnp.asarray(x[: args.batch]), jnp.asarray(y[: args.batch])
    programs = jax_programs(model, variables, xb, yb, args.train_batch)

    jax_times = {k: [] for k in ((n, d) for n in WORKLOADS for d in DTYPES)}
    torch_times = {}
    torch_result = None
    for _ in range(args.rounds):
        for k, v in time_jax(programs, variables, xb, args.reps).items():
            jax_times[k] += v
        torch_result = run_torch(args.torch_python, model, variables, x, y, reps=args.reps,
                                 batch=args.batch, train_batch=args.train_batch)  # fmt: skip
        for row in torch_result["rows"]:
            torch_times.setdefault((row["workload"], row["dtype"]), []).extend(row["times_s"])
    images = {"inference": args.batch, "input_gradient": args.batch,
              "train_gradient": args.train_batch}  # fmt: skip
    per_s = lambda times, n: n / statistics.median(times)  # noqa: E731
    advjax = {n: {"images": images[n], **{d: per_s(jax_times[n, d], images[n]) for d in DTYPES}}
              for n in WORKLOADS}  # fmt: skip
    torch_rows = {n: {d: per_s(torch_times[n, d], images[n]) for d in DTYPES} for n in WORKLOADS}

    top = {}
    for dtype in DTYPES:
        fn = programs["inference", dtype]
        top[dtype] = np.concatenate([np.asarray(fn(jnp.asarray(x[i : i + args.batch]))).argmax(1)
                                     for i in range(0, len(y), args.batch)])  # fmt: skip
    result = {
        "command": " ".join(
            ["python -m benchmarks.bfloat16", *(sys.argv[1:] if argv is None else argv)]
        ),
        "machine": machine,
        "model": args.model,
        "reps": args.reps,
        "rounds": args.rounds,
        "cpu_bf16_flags": [f for f in machine["cpu_flags"] if "bf16" in f],
        "load_start": machine["load_average_start"],
        "load_end": load_average(),
        "matmul_gflops": matmul_peak(2048, 10)["gflops_median"],
        "idle_note": args.idle_note,
        "advjax": advjax,
        "advjax_times_s": {f"{n}/{d}": t for (n, d), t in jax_times.items()},
        "torch_rows": torch_rows,
        "torch_times_s": {f"{n}/{d}": t for (n, d), t in torch_times.items()},
        "torch": {k: v for k, v in torch_result.items() if k != "rows"},
        "agreement": {
            "n": len(y),
            "advjax": int((top["float32"] == top["bfloat16"]).sum()),
            "accuracy": {d: float((top[d] == y).mean()) for d in DTYPES},
        },
    }
    out = Path(args.out)
    atomic_write_json(out / "bfloat16.json", result)
    atomic_write_text(out / "bfloat16.md", markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
