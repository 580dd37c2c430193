"""PGD-20 on models advjax never saw (Flax Linen, Flax NNX, Equinox, plain `jax.numpy`, a small
ResNet), against torchattacks' PGD on the same weights and images, in one run.

    python -m benchmarks.any_model [--images 500] [--reps 2] [--rounds 2] [--models a,b]
                                   [--slow-path-images 250] [--out benchmarks/results]

For each model of `benchmarks/user_models.py`: advjax.attacks.pgd (20 steps, eps 8/255, step 2/255,
random start, jitted, batches of 250) with the fast path (the default) and with
`ADVJAX_FAST_PATH=0` (the model's own layouts; on `--slow-path-images` only, once), then
torchattacks.PGD with the same settings in the PyTorch environment (NCHW and
channels_last). Rounds alternate the frameworks. The peer's environment is `.torchvenv`
(`$ADVJAX_TORCH_PYTHON`), with torch==2.13.0 and torchattacks. Writes
`<out>/any_model.{json,md}`. Run it on an otherwise idle machine.
"""

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from advjax import backend

REPO = Path(__file__).resolve().parents[1]
STEPS = 20
EPS = 8 / 255


def _time_advjax(logits_fn, x, y, batch: int, reps: int, fast: bool) -> list[float]:
    import jax

    import advjax

    os.environ["ADVJAX_FAST_PATH"] = "1" if fast else "0"
    try:
        attack = jax.jit(
            lambda a, b, k: (
                advjax.attacks.pgd(
                    logits_fn, a, b, EPS, key=k, steps=STEPS, step_size=2 / 255
                ).x_adv
            )
        )
        batches = [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(y), batch)]
        jax.block_until_ready(attack(*batches[0], jax.random.key(0)))  # compile
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            for i, (xb, yb) in enumerate(batches):
                jax.block_until_ready(attack(xb, yb, jax.random.key(i)))
            times.append(time.perf_counter() - start)
        return times
    finally:
        os.environ.pop("ADVJAX_FAST_PATH", None)


def _run_torch(python: str, inputs: Path, reps: int, batch: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "torch.json"
        command = [
            python, str(REPO / "benchmarks" / "torch_user_models.py"), "--inputs", str(inputs),
            "--out", str(out), "--reps", str(reps), "--batch", str(batch),
            "--threads", str(threads), "--steps", str(STEPS),
        ]  # fmt: skip
        subprocess.run(command, check=True, timeout=7200)
        return json.loads(out.read_text())


def main(argv=None) -> dict:
    backend.configure()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=500)
    p.add_argument("--batch", type=int, default=250)
    p.add_argument("--reps", type=int, default=2, help="timed repetitions per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--slow-path-images", type=int, default=250)
    p.add_argument("--models", default="")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--torch-python", default="")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from benchmarks import user_models
    from benchmarks.machine import describe_machine, load_average
    from benchmarks.report import write_report
    from benchmarks.torch_peer import default_paths

    python = args.torch_python or default_paths(str(REPO))[0]
    names = [n for n in args.models.split(",") if n] or list(user_models.MODELS)
    x = jax.random.uniform(jax.random.key(0), (args.images, 32, 32, 3))
    started = load_average()
    machine = describe_machine(str(REPO))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            arch, build = user_models.MODELS[name]
            weights = user_models.WEIGHTS[arch]()
            logits_fn = build(weights)
            logits = np.asarray(jax.jit(logits_fn)(x))
            y = jnp.asarray(logits.argmax(-1))
            inputs = Path(tmp) / f"{name}.npz"
            np.savez(
                inputs, arch=arch, x=np.asarray(x).transpose(0, 3, 1, 2), y=np.asarray(y),
                logits=logits, **user_models.torch_layout(arch, weights),
            )  # fmt: skip
            row = {"arch": arch, "advjax": [], "torch_nchw": [], "torch_channels_last": []}
            n_slow = min(args.slow_path_images, args.images)
            row["advjax_slow_path"] = _time_advjax(
                logits_fn, x[:n_slow], y[:n_slow], args.batch, 1, fast=False
            )
            row["slow_path_images"] = n_slow
            for _ in range(args.rounds):
                row["advjax"] += _time_advjax(logits_fn, x, y, args.batch, args.reps, fast=True)
                peer = _run_torch(python, inputs, args.reps, args.batch, args.threads)
                row["torch_nchw"] += peer["seconds"]["nchw"]
                row["torch_channels_last"] += peer["seconds"]["channels_last"]
                row["max_logit_difference"] = peer["max_logit_difference"]
                row["torch"] = peer["torch"]
            rows[name] = row
            print(name, json.dumps({k: v for k, v in row.items()}), flush=True)
    report = {
        "command": "python -m benchmarks.any_model " + " ".join(argv or []),
        "machine": machine,
        "load_average": {"start": started, "end": load_average()},
        "images": args.images,
        "batch": args.batch,
        "steps": STEPS,
        "model_passes_per_image": {
            "advjax": {"forward": STEPS + 1, "backward": STEPS},
            "torchattacks": {"forward": STEPS, "backward": STEPS},
        },
        "rows": rows,
    }
    write_report(args.out, "any_model", report, render(report))
    return report


def render(report: dict) -> str:
    """The markdown table: images/s at the median repetition, and ratios."""
    m = report["machine"]
    lines = [
        "# PGD-20 on models advjax never saw, against torchattacks",
        "",
        f"`{report['command'].strip()}` · {m['cpu_model']}, {m['usable_cores']} usable cores · "
        f"jax {m['versions']['jax']}, XLA flags `{m['xla_flags'] or 'none'}` · git "
        f"{m['git'].get('commit', '')[:10]} · load average {report['load_average']['start']} at "
        f"the start, {report['load_average']['end']} at the end (the benchmark alone keeps "
        "the 1-minute load near the core count).",
        "",
        f"{report['images']} random images, batches of {report['batch']}, eps 8/255, step "
        "2/255, random start, the same weights on both sides (largest logit difference in "
        "the last column). advjax: `advjax.attacks.pgd` jitted, fast path on (default) and off "
        "(`ADVJAX_FAST_PATH=0`, one repetition on fewer images); PyTorch: "
        "`torchattacks.PGD`, NCHW and channels_last. Model passes per image: advjax 21 "
        "forward + 20 backward, torchattacks 20 + 20. Images/s at the median repetition.",
        "",
        "| model | advjax | advjax, fast path off | torch NCHW | torch channels_last | "
        "advjax / best torch | fast path speed-up | logit diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in report["rows"].items():
        rate = lambda times, n=report["images"]: n / float(np.median(times))  # noqa: E731
        jax_rate = rate(row["advjax"])
        slow = rate(row["advjax_slow_path"], row["slow_path_images"])
        nchw, cl = rate(row["torch_nchw"]), rate(row["torch_channels_last"])
        lines.append(
            f"| {name} | {jax_rate:.1f} | {slow:.1f} | {nchw:.1f} | {cl:.1f} | "
            f"{jax_rate / max(nchw, cl):.2f}x | {jax_rate / slow:.1f}x | "
            f"{row['max_logit_difference']:.1e} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
