"""Benchmark advjax against the PyTorch reference in one run.

    python -m benchmarks.run [--reps N] [--rounds N] [--quick] [--out benchmarks/results]

For each workload the JAX version runs in this process, then torch_reference.py runs as a
subprocess in NCHW and in channels_last layout; the whole list is repeated `--rounds` times
so machine load drifts hit both frameworks alike. Writes `<out>/speed.json` and
`<out>/speed.md` and prints the markdown table. See benchmarks/README.md.
"""

import argparse
import dataclasses
import os
import sys

from advjax import backend
from benchmarks import report
from benchmarks.config import PROFILES, WORKLOADS, BenchConfig, WorkloadSpec
from benchmarks.jax_workloads import build_workload, matmul_peak
from benchmarks.machine import describe_machine, load_average, maxrss_mib, reset_peak_rss
from benchmarks.torch_peer import TorchPeer, check_peer, default_paths, run_reference

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUT_FLAGS = {"nchw": False, "channels_last": True}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line flags; torch paths default to $ADVJAX_TORCH_PYTHON / $ADVJAX_TORCH_REFERENCE."""
    python, reference = default_paths(REPO)
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="few reps and images (~2 min idle)")
    p.add_argument("--reps", type=int, help="measured reps per framework and workload, all rounds")
    p.add_argument("--rounds", type=int, help="times the workload list is repeated, alternating")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results"))
    p.add_argument(
        "--workloads",
        default=",".join(s.key for s in WORKLOADS),
        help="comma-separated subset of: " + ", ".join(s.key for s in WORKLOADS),
    )
    p.add_argument("--no-torch", action="store_true", help="JAX only")
    p.add_argument("--torch-python", default=python)
    p.add_argument("--torch-reference", default=reference)
    p.add_argument("--threads", type=int, help="torch threads; default: all usable cores")
    p.add_argument("--torch-timeout", type=float, default=3600.0, help="seconds per subprocess")
    return p.parse_args(argv)


def make_config(args: argparse.Namespace) -> tuple[str, BenchConfig]:
    """The profile's config with --reps / --rounds applied."""
    profile = "quick" if args.quick else "full"
    overrides = {k: getattr(args, k) for k in ("reps", "rounds") if getattr(args, k) is not None}
    return profile, dataclasses.replace(PROFILES[profile], **overrides)


def select(keys: str) -> list[WorkloadSpec]:
    """The workloads named in a comma-separated list, in the table's order."""
    wanted = {k.strip() for k in keys.split(",") if k.strip()}
    unknown = wanted - {s.key for s in WORKLOADS}
    if unknown:
        known = [s.key for s in WORKLOADS]
        raise SystemExit(f"unknown workloads {sorted(unknown)}; choose from {known}")
    return [s for s in WORKLOADS if s.key in wanted]


def torch_source(spec: WorkloadSpec, specs: list[WorkloadSpec]) -> tuple[str, str | None]:
    """(row whose torch runs this row uses, torch workload this row must run itself or None)."""
    if spec.torch_from and spec.torch_from in {s.key for s in specs}:
        return spec.torch_from, None
    if spec.torch_from:
        source = next(s for s in WORKLOADS if s.key == spec.torch_from)
        return spec.key, source.torch_workload
    return spec.key, spec.torch_workload


def _label(spec: WorkloadSpec, config: BenchConfig) -> str:
    return spec.label.format(n=f"{config.n_eval:,}", steps=config.pgd_steps)


def measure(config: BenchConfig, specs: list[WorkloadSpec], peer: TorchPeer | None) -> dict:
    """Run every round; raw JAX times and torch results per workload, and the matmul peaks."""
    size, reps = config.matmul_size, config.matmul_reps
    print(f"float32 matmul peak ({size}^2, {reps} reps) ...", flush=True)
    peak_start = matmul_peak(size, reps)
    peak = peak_start["gflops_median"]
    print(f"  {peak:.1f} GFLOP/s", flush=True)
    jax_runs = {s.key: {"times": [], "first": None, "rss": 0.0} for s in specs}
    torch_runs = {s.key: {layout: [] for layout in LAYOUT_FLAGS} for s in specs}
    workloads = {}
    for round_ in range(config.rounds):
        last = round_ == config.rounds - 1
        for spec in specs:
            tag = f"[round {round_ + 1}/{config.rounds}] {_label(spec, config)}"
            run = jax_runs[spec.key]
            reset_peak_rss()
            if spec.key not in workloads:
                workloads[spec.key] = build_workload(spec, config)
                run["first"] = workloads[spec.key].first_call()
                print(f"{tag}: JAX first call {run['first']:.1f} s", flush=True)
            w = workloads[spec.key]
            times = [w.rep() for _ in range(config.reps_per_round)]
            run["times"] += times
            run["rss"] = max(run["rss"], maxrss_mib())
            best = w.images_per_rep / min(times)
            print(f"{tag}: JAX {best:.1f} img/s (best of round)", flush=True)
            if last:
                del workloads[spec.key]
            _, torch_workload = torch_source(spec, specs)
            if peer is None or torch_workload is None:
                continue
            for layout, channels_last in LAYOUT_FLAGS.items():
                r = run_reference(
                    peer, torch_workload, config.reps_per_round, config, channels_last=channels_last
                )
                torch_runs[spec.key][layout].append(r)
                shown = r["error"] if "error" in r else f"{r['ips_median']:.1f} img/s (median)"
                print(f"{tag}: PyTorch {layout} {shown}", flush=True)
    peak_end = matmul_peak(size, reps)
    return {"jax": jax_runs, "torch": torch_runs, "peak_start": peak_start, "peak_end": peak_end}


def build_rows(
    config: BenchConfig, specs: list[WorkloadSpec], raw: dict, peak: float
) -> list[dict]:
    """One summarised table row per workload."""
    rows = []
    for spec in specs:
        run = raw["jax"][spec.key]
        mflop = spec.mflop_per_image(config.pgd_steps)
        train = spec.kind == "train"
        images = config.train_steps * config.train_batch if train else config.n_eval
        source, _ = torch_source(spec, specs)
        row = {
            "key": spec.key,
            "label": _label(spec, config),
            "batch": config.train_batch if train else config.eval_batch,
            "restarts": spec.restarts if spec.kind == "pgd" else None,
            "images_per_rep": images,
            "mflop_per_image": mflop,
            "torch_divisor": spec.torch_divisor,
            "jax": report.summarize_jax(
                run["times"],
                run["first"],
                images_per_rep=images,
                calls_per_rep=config.train_steps if train else 1,
                mflop_per_image=mflop,
                peak_gflops=peak,
                peak_rss_mib=run["rss"],
            ),
            "torch": {
                layout: report.merge_torch(raw["torch"][source][layout], spec.torch_divisor)
                for layout in LAYOUT_FLAGS
            },
        }
        for peer in row["torch"].values():
            if peer and "ips_compared" in peer:
                peer["gflops"] = peer["ips_compared"] * mflop / 1e3
        row["ratio"] = report.ratios(row)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m benchmarks.run`."""
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    profile, config = make_config(args)
    specs = select(args.workloads)
    machine = describe_machine(REPO)
    peer, torch_version, note = None, None, None
    if args.no_torch:
        note = "--no-torch given"
    else:
        candidate = TorchPeer(
            args.torch_python,
            os.path.abspath(args.torch_reference),
            args.threads or machine["usable_cores"],
            args.torch_timeout,
        )
        torch_version, why = check_peer(candidate)
        peer, note = (candidate, None) if torch_version else (None, why)
    if note:
        print(f"NOTE: PyTorch will not run ({note}); reporting JAX only.", flush=True)
    print(f"profile {profile}: {config}", flush=True)
    raw = measure(config, specs, peer)
    peak = max(raw["peak_start"]["gflops_median"], raw["peak_end"]["gflops_median"])
    result = {
        "command": "python -m benchmarks.run " + " ".join(argv),
        "profile": profile,
        "config": dataclasses.asdict(config),
        "machine": machine,
        "load_average_end": load_average(),
        "torch_version": torch_version,
        "torch_note": note,
        "torch_peer": dataclasses.asdict(peer) if peer else None,
        "matmul_peak": {"peak_gflops": peak, "start": raw["peak_start"], "end": raw["peak_end"]},
        "rows": build_rows(config, specs, raw, peak),
    }
    result["jax_process_peak_rss_mib"] = max(r["jax"]["peak_rss_mib"] for r in result["rows"])
    json_path, md_path = report.write_outputs(result, args.out)
    print()
    print(report.markdown(result))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
