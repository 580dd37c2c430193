"""The main job from scratch, timed: `python -m benchmarks.end_to_end`.

Runs the CIFAR-10 study (`python -m experiments.cifar_robustness --no-progress --out
WORK/run`, plus `--study-args`) in this process on a new, empty output folder, so every
model is trained and every attack run; right before and right after it, in the same
process, the training-step benchmark (`benchmarks.run`'s `train` and `fgsm_at` rows: the
same jitted step, batch 128, on synthetic images) and the float32 matmul speed.

Writes `benchmarks/results/end_to_end.{json,md}`: the wall time against the goal (20 min),
the phase table (data, each model's training, each model's attacks by attack, everything
else), each training's throughput over its epochs (validation and compilation included)
against the step benchmark's, and each model's clean and PGD accuracies against the
95 % intervals of the committed results (`--compare`, default `results/cifar10/default/results.json`, copied
into WORK when the run starts), and the PyTorch reference's minutes for the seed study's
computation at the rates it measures right after the study (`peer_study`; `--no-peer` leaves
it out). `--report-only` rebuilds the report from a finished WORK folder.
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from advjax import backend
from benchmarks.machine import describe_machine, load_average, usable_cores
from benchmarks.report import write_atomic, write_report

REPO = Path(__file__).resolve().parents[1]
WALL_FILE = "e2e_wall.json"
COMPARED_FILE = "compared_results.json"
"""A copy of `--compare` taken when the run starts (the committed results it is compared with
may be replaced by the run's own afterwards)."""
PEER_FILE = "peer_study.json"
GOAL_MINUTES = 20.0
PEER_WORKLOADS = {"standard": "train", "fgsm": "fgsm_at_mix"}
"""The PyTorch reference's workload for each training mode of the default profile."""
TRAINING_SHARE_GOAL = 0.90
STEP_ROWS = {"standard": "train", "fgsm": "fgsm_at"}
"""The step benchmark's row for each training mode the default profile uses."""


def step_benchmark(reps: int = 6) -> dict:
    """Images per second of the training-step rows, median over `reps` timed repetitions."""
    from benchmarks.config import PROFILES, WORKLOADS
    from benchmarks.jax_workloads import build_workload

    config = PROFILES["full"]
    out = {}
    for spec in WORKLOADS:
        if spec.key not in STEP_ROWS.values():
            continue
        workload = build_workload(spec, config)
        workload.first_call()
        times = [workload.rep() for _ in range(reps)]
        out[spec.key] = workload.images_per_rep / statistics.median(times)
        print(f"[e2e] step benchmark {spec.key}: {out[spec.key]:,.0f} img/s", flush=True)
    return out


def machine_speed() -> float:
    """Median GFLOP/s of a 2048^2 float32 `jnp.dot`: the same 2 cores are not equally fast
    from day to day, so the wall time is read beside it."""
    from benchmarks.jax_workloads import matmul_peak

    return matmul_peak(2048, 10)["gflops_median"]


def run_study(run: Path, study_args: list[str]) -> dict:
    """The study into the empty folder `run`, in this process; its timing record."""
    from experiments.cifar_robustness.main import main as study_main

    if run.exists() and any(run.iterdir()):
        raise SystemExit(f"{run} is not empty: the benchmark runs the study from scratch")
    argv = ["--no-progress", "--out", str(run), *study_args]
    record = {
        "command": "python -m experiments.cifar_robustness " + shlex.join(argv),
        "load_average_start": load_average(),
        "matmul_gflops_before": machine_speed(),
        "step_benchmark_before": step_benchmark(),
    }
    start = time.perf_counter()
    study_main(argv)
    record["wall_seconds"] = time.perf_counter() - start
    record["load_average_end"] = load_average()
    record["step_benchmark_after"] = step_benchmark()
    record["matmul_gflops_after"] = machine_speed()
    write_atomic(str(run / WALL_FILE), json.dumps(record, indent=2))
    return record


def peer_study(results: dict, reps: int = 3) -> dict:
    """The PyTorch reference's seconds for the seed study's computation, at the throughputs
    it measures now, on this machine, in both layouts: every training of the run (its images
    and epochs, the step of its mode) and FGSM and PGD-20 on the run's evaluation cases at
    each of its eps, per model. A model of the time, from measured rates: the reference has
    no study to run whole. Budget curves, transfer checks, replay, checks and report are
    advjax's alone and not in it."""
    from benchmarks.config import BenchConfig
    from benchmarks.torch_peer import TorchPeer, check_peer, default_paths, run_reference

    python, reference = default_paths(str(REPO))
    peer = TorchPeer(python=python, reference=reference, threads=usable_cores())
    version, why = check_peer(peer)
    if version is None:
        return {"error": why}
    config = BenchConfig()
    workloads = sorted({*PEER_WORKLOADS.values(), "fgsm", "pgd"})
    out: dict = {"torch": version, "reps": reps, "layouts": {}}
    for layout in ("nchw", "channels_last"):
        rates = {}
        for workload in workloads:
            r = run_reference(peer, workload, reps, config, channels_last=layout != "nchw")
            if "error" in r:
                return {"error": f"{workload} ({layout}): {r['error']}"}
            rates[workload] = r["ips_median"]
            print(f"[e2e] PyTorch {layout} {workload}: {rates[workload]:,.1f} img/s", flush=True)
        out["layouts"][layout] = {"rates": rates, **study_seconds(results, rates)}
    return out


def trained_images(results: dict, model: dict) -> int:
    """Images one model's training went through: whole batches, every epoch."""
    batch = model["spec"].get("batch_size") or results["config"]["batch_size"]
    return (model["training"]["train_size"] // batch) * batch * len(model["training"]["history"])


def study_seconds(results: dict, rates: dict) -> dict:
    """Seconds of the run's trainings and FGSM/PGD evaluations at `rates` (images/s)."""
    cases, eps = results["config"]["eval_size"], len(results["config"]["eps_list"])
    train = {
        name: trained_images(results, m) / rates[PEER_WORKLOADS[m["spec"]["mode"]]]
        for name, m in results["models"].items()
    }
    attack = len(results["models"]) * eps * cases * (1 / rates["fgsm"] + 1 / rates["pgd"])
    return {"train_seconds": train, "attack_seconds": attack,
            "seconds": sum(train.values()) + attack}  # fmt: skip


def training_rows(results: dict, steps: dict) -> list[dict]:
    """Per model: images per second over its whole training (every epoch's seconds, with
    validation and the first epoch's compilation) against the step benchmark's row."""
    rows = []
    for name, m in results["models"].items():
        history = m["training"]["history"]
        images = trained_images(results, m)
        seconds = sum(e["seconds"] for e in history)
        row_key = STEP_ROWS.get(m["spec"]["mode"])
        bench = steps.get(row_key)
        study = images / seconds
        rows.append(
            {
                "model": name,
                "mode": m["spec"]["mode"],
                "epochs": len(history),
                "images": images,
                "epoch_seconds": seconds,
                "phase_seconds": m["training"]["seconds"],
                "study_images_per_second": study,
                "step_row": row_key,
                "step_images_per_second": bench,
                "share": study / bench if bench else None,
            }
        )
    return rows


def accuracy_rows(results: dict, committed: dict | None) -> list[dict]:
    """Each model's clean and PGD robust accuracies beside the committed ones' 95 % intervals."""
    if committed is None:
        return []
    rows = []
    for name, m in results["models"].items():
        theirs = committed["models"].get(name)
        if theirs is None:
            continue
        pairs = [("clean", m["clean_accuracy"], theirs["clean_accuracy"])]
        for eps, a in m["attacks"]["pgd"].items():
            if eps != "0" and eps in theirs["attacks"]["pgd"]:
                b = theirs["attacks"]["pgd"][eps]["robust_accuracy"]
                pairs.append((f"PGD-20 {eps}/255", a["robust_accuracy"], b))
        for what, new, old in pairs:
            low, high = old["ci95"]
            rows.append(
                {
                    "model": name,
                    "what": what,
                    "value": new["value"],
                    "committed": old["value"],
                    "committed_ci95": [low, high],
                    "inside": low - 1e-9 <= new["value"] <= high + 1e-9,
                }
            )
    return rows


def phase_rows(results: dict, attack_seconds: dict, wall: float) -> list[tuple[str, float]]:
    """(phase, seconds): data, each training, each model's attacks by attack, the rest."""
    timings = results["timings_seconds"]
    rows = [("load data", timings["load_data"])]
    rows += [(f"train {k[6:]}", v) for k, v in timings.items() if k.startswith("train_")]
    for model, per_attack in attack_seconds.items():
        rows += [(f"attack {model}: {a}", s) for a, s in per_attack.items()]
    rows.append(("everything else", wall - sum(s for _, s in rows)))
    return rows


def build_report(work: Path, compare: str | None, command: str) -> dict:
    run = work / "run"
    for path in (run / WALL_FILE, run / "results.json"):
        if not path.exists():
            raise SystemExit(f"{path} is missing: run the benchmark without --report-only first")
    record = json.loads((run / WALL_FILE).read_text())
    results = json.loads((run / "results.json").read_text())
    attack_seconds = json.loads((run / "attack_seconds.json").read_text())
    before, after = record["step_benchmark_before"], record["step_benchmark_after"]
    steps = {k: (before[k] + after[k]) / 2 for k in before}
    kept = work / COMPARED_FILE
    committed = json.loads(kept.read_text()) if kept.exists() else None
    peer_path = work / PEER_FILE
    peer = json.loads(peer_path.read_text()) if peer_path.exists() else None
    mine = {
        "train_seconds": sum(
            v for k, v in results["timings_seconds"].items() if k.startswith("train_")
        ),
        "attack_seconds": sum(a.get("fgsm", 0) + a.get("pgd", 0) for a in attack_seconds.values()),
    }
    return {
        "command": command,
        "machine": describe_machine(str(REPO)),
        "run": record,
        "revision": results["environment"].get("git_revision"),
        "xla_flags": results["environment"].get("xla_flags_set_by_advjax"),
        "minutes": record["wall_seconds"] / 60,
        "goal_minutes": GOAL_MINUTES,
        "phases": phase_rows(results, attack_seconds, record["wall_seconds"]),
        "step_benchmark": steps,
        "training": training_rows(results, steps),
        "accuracy": accuracy_rows(results, committed),
        "compared_with": compare if committed else None,
        "gate": results["gate"]["verdict"],
        "checks": [len([c for c in results["checks"] if c["passed"]]), len(results["checks"])],
        "advjax_seed_phases": mine,
        "cases": results["config"].get("eval_size"),
        "peer": peer,
    }


def peer_lines(report: dict) -> list[str]:
    """The PyTorch reference's seed study at its measured rates, beside this run."""
    peer = report.get("peer")
    if not peer:
        return []
    if "error" in peer:
        return ["", f"PyTorch reference not measured: {peer['error']}"]
    wall, mine = report["run"]["wall_seconds"], report["advjax_seed_phases"]
    lines = [
        "",
        "The PyTorch reference (`../shared/peers/torch_reference.py`, torch "
        f"{peer['torch']}, median of {peer['reps']} repetitions per workload, measured right "
        "after the study on the same machine) on the seed study's computation: every training "
        "of this run (its images and epochs, at the reference's `train` or `fgsm_at_mix` "
        f"rate) and FGSM and PGD-20 on the {report['cases']:,} cases at each eps of the run, "
        "per model. Its minutes are its measured rates times that work (the reference has no "
        "whole study to run); advjax's are the measured wall time of the whole default profile, budget "
        "curves, transfer checks, the 64/255 probe, replay, checks and report included.",
        "",
        "| | minutes | trainings s | FGSM + PGD-20 s | its minutes ÷ advjax's |",
        "|---|---|---|---|---|",
        f"| advjax, the whole default profile (measured) | **{wall / 60:.1f}** | "
        f"{mine['train_seconds']:,.0f} | {mine['attack_seconds']:,.0f} | |",
    ]
    for layout, side in peer["layouts"].items():
        train = sum(side["train_seconds"].values())
        lines.append(
            f"| PyTorch reference, {layout} (its rates x the work) | {side['seconds'] / 60:.1f} | "
            f"{train:,.0f} | {side['attack_seconds']:,.0f} | "
            f"{side['seconds'] / wall:.2f}x |"
        )
    return lines


def markdown(report: dict) -> str:
    run, machine = report["run"], report["machine"]
    minutes = report["minutes"]
    verdict = "within" if minutes <= report["goal_minutes"] else "over"
    lines = [
        "# The main job from scratch",
        "",
        f"`{report['command']}` · {machine['cpu_model']}, {machine['usable_cores']} usable "
        f"cores · revision `{(report['revision'] or '?')[:10]}` · advjax's XLA flags: "
        f"{' '.join(report['xla_flags'] or []) or 'none'}",
        "",
        f"`{run['command']}` on an empty folder: **{minutes:.1f} min** "
        f"({run['wall_seconds']:,.0f} s), {verdict} the {report['goal_minutes']:.0f}-minute goal. "
        f"Load average at the start {run['load_average_start']}, at the end "
        f"{run['load_average_end']} (the study itself keeps both cores busy; nothing else ran). "
        f"float32 matmul (2048^2) {run['matmul_gflops_before']:.0f} GFLOP/s before, "
        f"{run['matmul_gflops_after']:.0f} after. Checks {report['checks'][0]} of "
        f"{report['checks'][1]} passed; gate {report['gate']}.",
        "",
        "| phase | seconds | share |",
        "|---|---|---|",
    ]
    wall = run["wall_seconds"]
    lines += [f"| {p} | {s:,.0f} | {100 * s / wall:.0f} % |" for p, s in report["phases"]]
    lines += [f"| **wall** | **{wall:,.0f}** | |", ""]
    lines += [
        "Training throughput: every epoch of the study (validation and the first epoch's "
        "compilation included) against the training-step benchmark (`benchmarks.run`'s row, "
        "the same step on synthetic images, mean of its runs right before and right after the "
        f"study, in this process); goal {100 * TRAINING_SHARE_GOAL:.0f} %.",
        "",
        "| model | mode | epochs | images | epoch seconds | study img/s | step benchmark "
        "img/s | share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["training"]:
        bench = r["step_images_per_second"]
        bench_text = f"{bench:,.0f} ({r['step_row']})" if bench else ""
        share_text = f"{100 * r['share']:.0f} %" if r["share"] else ""
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['epochs']} | {r['images']:,} | "
            f"{r['epoch_seconds']:,.0f} | {r['study_images_per_second']:,.0f} | "
            f"{bench_text} | {share_text} |"
        )
    lines += peer_lines(report)
    if report["accuracy"]:
        inside = sum(r["inside"] for r in report["accuracy"])
        lines += [
            "",
            f"Accuracies against the committed run (`{report['compared_with']}`): "
            f"{inside} of {len(report['accuracy'])} inside its 95 % interval.",
            "",
            "| model | accuracy | this run | committed | committed 95 % CI | inside |",
            "|---|---|---|---|---|---|",
        ]
        for r in report["accuracy"]:
            low, high = r["committed_ci95"]
            lines.append(
                f"| {r['model']} | {r['what']} | {100 * r['value']:.1f} % | "
                f"{100 * r['committed']:.1f} % | {100 * low:.1f}-{100 * high:.1f} % | "
                f"{'yes' if r['inside'] else '**no**'} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "advjax-e2e"))
    p.add_argument("--study-args", default="", help="extra study arguments, one string")
    p.add_argument(
        "--compare", default=str(REPO / "results" / "cifar10" / "default" / "results.json")
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="report the run already in --work (measuring the PyTorch reference if not yet)",
    )
    p.add_argument("--no-peer", action="store_true", help="leave the PyTorch reference out")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = p.parse_args(argv)
    work = Path(args.work)
    if not args.report_only:
        work.mkdir(parents=True, exist_ok=True)
        if args.compare and Path(args.compare).exists():
            shutil.copyfile(args.compare, work / COMPARED_FILE)
        run_study(work / "run", shlex.split(args.study_args))
    peer_path = work / PEER_FILE
    if not args.no_peer and not peer_path.exists() and (work / "run" / "results.json").exists():
        results = json.loads((work / "run" / "results.json").read_text())
        write_atomic(str(peer_path), json.dumps(peer_study(results), indent=2))
    command = "python -m benchmarks.end_to_end " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    report = build_report(work, args.compare, command)
    write_report(args.out, "end_to_end", report, markdown(report))
    return report


if __name__ == "__main__":
    main()
