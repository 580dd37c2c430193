"""advjax's AutoAttack against the PyTorch one, side by side in one run:
`python -m benchmarks.autoattack_peer [--model pgd_continue2_silu] [--n 1000]`.

The same weights (a study checkpoint, exported to the peer's PyTorch `Net`), the same images
(the first n of the study's stratified test cases), eps 8/255 L-inf, the standard members
with 100 iterations (APGD-CE, APGD-T and FAB-T with 9 targets, Square with 5,000 queries),
each member on the cases still robust. advjax runs `advjax.evaluation.autoattack` in this process;
the peer runs torchattacks in its own environment (`--torch-python`, default
.torchvenv/bin/python: `pip install torch==2.13.0 torchattacks --no-deps scipy tqdm
requests`), 2 threads. Reports robust accuracy with intervals, per-case agreement, each
member's seconds, the queries early stop saved and peak memory, to
benchmarks/results/autoattack_peer.{json,md}. Run it on an otherwise idle machine.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from advjax import backend

REPO = Path(__file__).resolve().parents[1]


def torch_weights(variables: dict) -> dict:
    """advjax's CompactCNN variables in the peer Net's layout (OIHW kernels, NCHW flatten)."""
    params, stats = variables["params"], variables["batch_stats"]
    out = {}
    blocks = sorted(
        (k for k in params if k.startswith("ConvBNReLU_")), key=lambda k: int(k.split("_")[1])
    )
    for i, name in enumerate(blocks):
        out[f"conv{i}"] = np.transpose(
            np.asarray(params[name]["Conv3x3_0"]["kernel"]), (3, 2, 0, 1)
        )
        bn, st = params[name]["BatchNorm_0"], stats[name]["BatchNorm_0"]
        out[f"bn{i}_weight"], out[f"bn{i}_bias"] = np.asarray(bn["scale"]), np.asarray(bn["bias"])
        out[f"bn{i}_running_mean"], out[f"bn{i}_running_var"] = (
            np.asarray(st["mean"]),
            np.asarray(st["var"]),
        )
    kernel = np.asarray(params["Dense_0"]["kernel"])  # (4*4*128 in NHWC order, 128)
    kernel = kernel.reshape(4, 4, 128, -1).transpose(2, 0, 1, 3).reshape(4 * 4 * 128, -1)
    out["dense0_weight"], out["dense0_bias"] = (
        kernel.T.copy(),
        np.asarray(params["Dense_0"]["bias"]),
    )
    out["dense1_weight"] = np.asarray(params["Dense_1"]["kernel"]).T.copy()
    out["dense1_bias"] = np.asarray(params["Dense_1"]["bias"])
    return {k: v.astype(np.float32) for k, v in out.items()}  # fmt: skip


DEFAULT_STUDY = REPO / "results" / "cifar10" / "research"
"""The study whose checkpoint and images the benchmark uses unless `--study` names another."""


def run_torch_script(
    torch_python: str, script: str, model, variables, x, y, args=(), **arrays
) -> dict:
    """Run `benchmarks/<script>` in the PyTorch environment on `variables` exported to the
    peer's `Net` (`torch_weights`), NHWC images `x` (sent as NCHW), labels `y` and any other
    `arrays`, with `args` after the common flags; its JSON result."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs, output = Path(tmp) / "inputs.npz", Path(tmp) / "torch.json"
        np.savez(inputs, x=np.ascontiguousarray(x.transpose(0, 3, 1, 2)), y=y.astype(np.int64),
                 activation=np.asarray(model.activation), **arrays, **torch_weights(variables))  # fmt: skip
        subprocess.run(
            [torch_python, str(REPO / "benchmarks" / script), "--peer-dir",
             str(REPO.parent / "shared" / "peers"), "--inputs", str(inputs), "--out", str(output),
             *map(str, args)],
            check=True,
        )  # fmt: skip
        return json.loads(output.read_text())


def study_images(study_dir, n: int, data_dir=None) -> tuple[np.ndarray, np.ndarray]:
    """The first n of a study's stratified evaluation cases: float NHWC images, labels."""
    from advjax.data import load_cifar10
    from advjax_train import to_float

    study = json.loads((Path(study_dir) / "results.json").read_text())
    index = np.asarray(study["data"]["eval_indices"])[:n]
    data = load_cifar10(data_dir)
    return np.asarray(to_float(data.test_images[index])), data.test_labels[index]


def peer_parser(doc: str, *, n: int) -> argparse.ArgumentParser:
    """The arguments the AutoAttack peer benchmarks share: whose images (`--study`, `--n`,
    `--data-dir`), `--seed`, the PyTorch environment's interpreter and `--out`; each adds the
    model it evaluates."""
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--study", default=str(DEFAULT_STUDY), help="whose evaluation images to use")
    p.add_argument("--n", type=int, default=n)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-python", default=str(REPO / ".torchvenv" / "bin" / "python"))
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    p.add_argument("--data-dir", default=None)
    return p


def study_checkpoint(study, model: str):
    """A study's committed checkpoint by model name: (model, variables)."""
    from advjax.io import load_checkpoint
    from advjax_train import CompactCNN

    return load_checkpoint(Path(study) / "checkpoints" / f"{model}.msgpack", CompactCNN)


def batched_logits(logits_fn, x, batch: int = 250) -> np.ndarray:
    """`logits_fn` on every case of `x`, jitted, in batches."""
    fn = jax.jit(logits_fn)
    return np.concatenate([np.asarray(fn(x[i : i + batch])) for i in range(0, len(x), batch)])


def run_peer(torch_python: str, model, variables, x, y, logits, *, threads: int) -> dict:
    """torchattacks' standard members (`torch_autoattack.py`, in its own environment) on
    `variables` exported to the peer's `Net`, on NHWC images `x`; its JSON result."""
    return run_torch_script(torch_python, "torch_autoattack.py", model, variables, x, y,
                            ("--threads", threads), logits=logits)  # fmt: skip


def run_advjax(logits_fn, x, y, eps, seed, *, version="standard", checks=False):
    """`advjax.evaluation.autoattack`, timed: (result, seconds, seconds per member from its runs)."""
    from advjax.evaluation import autoattack

    marks = []

    def on_run(member, target, restart, left):
        marks.append((member.name, time.perf_counter(), left))

    started = time.perf_counter()
    result = autoattack(logits_fn, x, y, eps, key=jax.random.key(seed), version=version,
                        on_run=on_run, checks=checks)  # fmt: skip
    total = time.perf_counter() - started
    seconds, previous = {}, started
    for name, t, _ in marks:
        seconds[name] = seconds.get(name, 0.0) + t - previous
        previous = t
    return result, total, seconds


def full_budget(members, n_attacked: int) -> int:
    """Queries the members would spend on every clean-correct case without early stop."""
    return sum(len(m.runs()) * m.queries_per_run for m in members) * n_attacked


def markdown(r: dict) -> str:
    a, t = r["advjax"], r["torch"]
    lines = [
        "# AutoAttack: advjax against torchattacks",
        "",
        f"`{r['command']}` · git {r['machine']['git_revision']} · model `{r['model']}` · "
        f"{r['n']} study test images · eps 8/255 L-inf · standard members, 100 iterations",
        "",
        f"Machine: {r['machine']['cpu_count']} cores; load average at start {r['load_start']}, at end "
        f"{r['load_end']} (the benchmark itself keeps one to two cores busy).",
        "",
        "| | advjax | torchattacks | ratio |",
        "|---|---|---|---|",
        f"| robust accuracy | {a['robust_text']} | {t['robust_text']} | {a['robust'] - t['robust']:+d} cases |",
        f"| wall seconds (all members) | {a['seconds']:.0f} | {t['seconds']:.0f} | {t['seconds'] / a['seconds']:.2f}x faster |",
    ]
    for name in ("apgd-ce", "apgd-t", "fab-t", "square"):
        sa, st = a["member_seconds"].get(name, 0.0), t["member_seconds"].get(name, 0.0)
        lines.append(
            f"| {name} seconds (robust after: {a['after'][name]} / {t['after'][name]}) | {sa:.0f} | {st:.0f} | "
            + (f"{st / sa:.2f}x |" if sa else "- |")
        )
    lines += [
        f"| peak memory (MiB) | {a['peak_rss_mib']:.0f} | {t['peak_rss_mib']:.0f} | |",
        "",
        f"Per case: {r['agreement']['both_robust']} robust under both, {r['agreement']['both_broken']} broken "
        f"by both, {r['agreement']['advjax_only_broken']} broken by advjax only, "
        f"{r['agreement']['torch_only_broken']} by torchattacks only. Largest logit difference between "
        f"the two models: {t['max_logit_difference']:.2e}.",
        f"Early stop: advjax spent {a['queries']:,} model evaluations, {100 * a['queries'] / a['full_budget']:.1f} % "
        f"of the {a['full_budget']:,} that every member on every clean-correct case would cost.",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = peer_parser(__doc__, n=1000)
    p.add_argument("--model", default="pgd_continue2_silu")
    args = p.parse_args(argv)
    from advjax.evaluation.engine import resolve_members
    from advjax.evaluation.stats import format_rate, rate
    from advjax.io import environment
    from advjax.records import atomic_write_json, atomic_write_text
    from advjax_train import eval_logits_fn

    x, y = study_images(args.study, args.n, args.data_dir)
    model, variables = study_checkpoint(args.study, args.model)
    logits_fn = eval_logits_fn(model, variables)
    logits = batched_logits(logits_fn, x)
    load_start = list(os.getloadavg())
    result, seconds, member_seconds = run_advjax(logits_fn, x, y, 8 / 255, args.seed)
    advjax_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    peer = run_peer(args.torch_python, model, variables, x, y, logits, threads=2)
    torch_wall = time.perf_counter() - started
    load_end = list(os.getloadavg())
    members = resolve_members("standard", None, "linf")
    torch_robust = np.asarray(peer["robust"], bool)
    broken_a, broken_t = ~result.robust & result.clean_correct, ~torch_robust & result.clean_correct
    after = {m.name: row["count"] for m, row in zip(members, result.robust_accuracy[1:])}
    r = {
        "command": "python -m benchmarks.autoattack_peer " + " ".join(argv or sys.argv[1:]),
        "model": args.model,
        "n": int(len(y)),
        "load_start": load_start,
        "load_end": load_end,
        "machine": environment(),
        "advjax": {
            "robust": int(result.robust.sum()),
            "robust_text": format_rate(rate(int(result.robust.sum()), len(y))),
            "seconds": seconds,
            "member_seconds": member_seconds,
            "after": after,
            "queries": int(result.queries.sum()),
            "full_budget": full_budget(members, int(result.clean_correct.sum())),
            "peak_rss_mib": advjax_rss,
        },
        "torch": {
            "robust": int(torch_robust.sum()),
            "robust_text": format_rate(rate(int(torch_robust.sum()), len(y))),
            "seconds": sum(row["seconds"] for row in peer["members"]),
            "process_seconds": torch_wall,
            "member_seconds": {row["member"]: row["seconds"] for row in peer["members"][1:]},
            "after": {row["member"]: row["robust"] for row in peer["members"][1:]},
            "max_logit_difference": peer["max_logit_difference"],
            "peak_rss_mib": peer["peak_rss_mib"],
            "versions": {"torch": peer["torch"], "torchattacks": peer["torchattacks"]},
        },
        "agreement": {
            "both_robust": int((result.robust & torch_robust).sum()),
            "both_broken": int((broken_a & broken_t).sum()),
            "advjax_only_broken": int((broken_a & ~broken_t).sum()),
            "torch_only_broken": int((broken_t & ~broken_a).sum()),
        },
        "robust_advjax": result.robust.astype(int).tolist(),
        "robust_torch": torch_robust.astype(int).tolist(),
    }
    out = Path(args.out)
    stem = "autoattack_peer" if args.n == 1000 else f"autoattack_peer_n{args.n}"
    atomic_write_json(out / f"{stem}.json", r)
    atomic_write_text(out / f"{stem}.md", markdown(r))
    print(markdown(r))
    return r


if __name__ == "__main__":
    main()
