"""FAB-T with the projections' sort on XLA against NumPy, side by side in one run.

    python -m benchmarks.fab_sort [--study results/cifar10/default] [--model fgsm_matched] [--targets 1] [--rounds 1]

Attacks the cases that the study's model classifies correctly and that PGD-20 at 8/255 leaves
robust (the cases FAB-T meets inside AutoAttack) with `advjax.attacks.fab` (targeted, 100
steps), once with `jnp.argsort` inside the projections (XLA's CPU sort) and once with the
default NumPy sort, alternating `--rounds` times; checks both give the same adversarial
points and writes `<out>/fab_sort.{json,md}`. Run it on an otherwise idle machine.
"""

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from advjax import backend

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> dict:
    backend.configure()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--study", default=str(REPO / "results" / "cifar10" / "default"))
    p.add_argument("--model", default="fgsm_matched")
    p.add_argument("--targets", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = p.parse_args(argv)

    from advjax.attacks import _fab, _fab_projection
    from advjax.data import load_cifar10
    from advjax.records import atomic_write_json, atomic_write_text, read_records, record_file
    from advjax_train import load_logits_fn, to_float
    from benchmarks.machine import describe_machine, load_average

    study = Path(args.study)
    results = json.loads((study / "results.json").read_text())
    eps = 8 / 255
    robust = sorted(
        r.case_id
        for r in read_records(record_file(study))
        if r.model == args.model and r.attack == "pgd" and abs(r.eps - eps) < 1e-9
        and r.status in ("failed", "budget_exhausted")
    )  # fmt: skip
    index = np.asarray(results["data"]["eval_indices"])[robust]
    data = load_cifar10()
    x = jnp.asarray(to_float(data.test_images[index]))
    y = jnp.asarray(data.test_labels[index])
    logits_fn, _ = load_logits_fn(study / "checkpoints" / f"{args.model}.msgpack")
    sorts = {"xla": lambda a: jnp.argsort(a, axis=-1), "numpy": _fab_projection.argsort}

    def run(sort):
        _fab_projection.argsort = sorts[sort]
        attack = jax.jit(lambda x, y: _fab.fab(logits_fn, x, y, eps, key=jax.random.key(0),
                                                targets=args.targets).x_adv)  # fmt: skip
        jax.block_until_ready(attack(x, y))  # compile
        start = time.perf_counter()
        out = jax.block_until_ready(attack(x, y))
        return time.perf_counter() - start, np.asarray(out)

    started = load_average()
    seconds = {"xla": [], "numpy": []}
    outputs = {}
    try:
        for _ in range(args.rounds):
            for sort in ("xla", "numpy"):
                s, outputs[sort] = run(sort)
                seconds[sort].append(s)
    finally:
        _fab_projection.argsort = sorts["numpy"]
    identical = bool(np.array_equal(outputs["xla"], outputs["numpy"]))
    best = {k: min(v) for k, v in seconds.items()}
    report = {
        "command": "python -m benchmarks.fab_sort " + " ".join(argv or []),
        "machine": describe_machine(str(REPO)),
        "load_average": {"start": started, "end": load_average()},
        "model": args.model,
        "cases": len(robust),
        "targets": args.targets,
        "steps": 100,
        "seconds": seconds,
        "speedup": best["xla"] / best["numpy"],
        "identical_x_adv": identical,
    }
    out = Path(args.out)
    atomic_write_json(out / "fab_sort.json", report)
    atomic_write_text(
        out / "fab_sort.md",
        "# FAB-T: the projections' sort on XLA against NumPy\n\n"
        f"`{report['command']}` · {report['machine']['cpu_model']}, "
        f"{report['machine']['usable_cores']} usable cores · git "
        f"{report['machine']['git'].get('commit', '')[:10]}\n\n"
        f"FAB-T (100 steps x {args.targets} targets) on the {len(robust)} cases of "
        f"`{args.model}` that PGD-20 at 8/255 leaves robust, one jitted call each, best of "
        f"{args.rounds} alternating rounds; load average {started} at the start, "
        f"{report['load_average']['end']} at the end.\n\n"
        "| sort in the projections | seconds |\n|---|---|\n"
        f"| `jnp.argsort` (XLA's CPU sort) | {best['xla']:.1f} |\n"
        f"| NumPy's stable argsort (`pure_callback`, the default on the CPU) | {best['numpy']:.1f} |\n\n"
        f"Speed-up: {report['speedup']:.2f}x; the same adversarial points: {identical}.\n",
    )
    print(Path(out / "fab_sort.md").read_text())
    return report


if __name__ == "__main__":
    main()
