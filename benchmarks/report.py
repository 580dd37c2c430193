"""Summaries, the markdown table and atomic output files of a benchmark run."""

import json
import os
import statistics
import tempfile

LAYOUTS = ("nchw", "channels_last")
_LAYOUT_NAMES = {"nchw": "NCHW", "channels_last": "channels_last"}


def summarize_jax(
    times: list[float],
    first_s: float,
    *,
    images_per_rep: int,
    calls_per_rep: int,
    mflop_per_image: float,
    peak_gflops: float,
    peak_rss_mib: float,
) -> dict:
    """Median images/s, spread, compile time (first call minus a steady call) and GFLOP/s."""
    median = statistics.median(times)
    ips = images_per_rep / median
    gflops = ips * mflop_per_image / 1e3
    return {
        "times_s": times,
        "reps": len(times),
        "ips_median": ips,
        "ips_min": images_per_rep / max(times),
        "ips_max": images_per_rep / min(times),
        "first_call_s": first_s,
        "compile_s": max(first_s - median / calls_per_rep, 0.0),
        "gflops": gflops,
        "pct_of_matmul_peak": 100 * gflops / peak_gflops if peak_gflops else None,
        "peak_rss_mib": peak_rss_mib,
    }


def merge_torch(runs: list[dict], divisor: int) -> dict | None:
    """Pool the repetitions of one workload/layout over rounds; None if there were no runs.

    `ips_median` is the reference's own median images/s; `ips_compared` is that divided by
    `divisor` (the figure the JAX number is compared with).
    """
    if not runs:
        return None
    good = [r for r in runs if "error" not in r]
    errors = [r["error"] for r in runs if "error" in r]
    if not good:
        return {"errors": errors, "log_tail": runs[-1].get("log_tail", "")}
    times = [t for r in good for t in r["times_s"]]
    items = good[0]["items_per_rep"]
    median = statistics.median(times)
    firsts = [r.get("first_step_s", r.get("first_run_s")) for r in good]
    return {
        "times_s": times,
        "reps": len(times),
        "items_per_rep": items,
        "ips_median": items / median,
        "ips_min": items / max(times),
        "ips_max": items / min(times),
        "divisor": divisor,
        "ips_compared": items / median / divisor,
        "first_call_s": firsts,
        "peak_rss_mib": max(r["peak_rss_mib"] for r in good),
        "torch": good[0].get("torch"),
        "threads": good[0].get("threads"),
        "errors": errors,
        "runs": [{k: v for k, v in r.items() if k != "times_s"} for r in good],
    }


def ratios(row: dict) -> dict:
    """JAX images/s over PyTorch images/s per layout (> 1: JAX faster)."""
    out = {}
    for layout in LAYOUTS:
        peer = row["torch"].get(layout)
        if peer and "ips_compared" in peer:
            out[layout] = row["jax"]["ips_median"] / peer["ips_compared"]
    return out


def _ips(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _torch_cell(peer: dict | None, dagger: str) -> str:
    if peer is None:
        return "–"
    if "ips_compared" not in peer:
        return "failed"
    return _ips(peer["ips_compared"]) + dagger


def _row(row: dict) -> str:
    jax_, peers = row["jax"], row["torch"]
    dagger = " †" if row["torch_divisor"] != 1 else ""
    r = row.get("ratio", {})
    ratio = " / ".join(f"{r[k]:.2f}" if k in r else "–" for k in LAYOUTS)
    rss = [f"{jax_['peak_rss_mib']:,.0f}"]
    for layout in LAYOUTS:
        peer = peers.get(layout)
        rss.append(f"{peer['peak_rss_mib']:,.0f}" if peer and "peak_rss_mib" in peer else "–")
    pct = jax_["pct_of_matmul_peak"]
    cells = [
        row["label"] + dagger,
        str(row["batch"]),
        _ips(jax_["ips_median"]),
        _torch_cell(peers.get("nchw"), dagger),
        _torch_cell(peers.get("channels_last"), dagger),
        ratio,
        f"{jax_['compile_s']:.1f}",
        f"{jax_['gflops']:.1f}",
        f"{pct:.1f} %" if pct is not None else "–",
        " / ".join(rss),
    ]
    return "| " + " | ".join(cells) + " |"


def markdown(result: dict) -> str:
    """The run as markdown: machine, the table, notes on reading it, and the spread."""
    m, cfg, mm = result["machine"], result["config"], result["matmul_peak"]
    torch_v = result.get("torch_version") or "not run"
    lines = [
        f"# advjax speed benchmark, {m['timestamp']}",
        "",
        f"`{result['command']}` · profile {result['profile']} · git {m['git']['commit']}"
        + (" (dirty)" if m["git"]["dirty"] else ""),
        "",
        f"Machine: {m['cpu_model']}, {m['usable_cores']} usable cores ({m['cpu_count']} online), "
        f"{m['memory_gib']} GiB, {m['platform']}; load average at start "
        f"{m['load_average_start']}, at end {result.get('load_average_end')}.",
        f"Versions: jax {m['versions']['jax']}, jaxlib {m['versions']['jaxlib']}, flax "
        f"{m['versions']['flax']}, optax {m['versions']['optax']}, torch {torch_v}; "
        f"XLA_FLAGS={m['xla_flags']!r}.",
        f"float32 matmul peak ({mm['start']['size']}^2 `jnp.dot`, median GFLOP/s): "
        f"{mm['peak_gflops']:.1f} (start {mm['start']['gflops_median']:.1f}, end "
        f"{mm['end']['gflops_median']:.1f}; the higher is the peak).",
        f"Sizes: {cfg['reps']} reps per framework over {cfg['rounds']} round(s), train "
        f"{cfg['train_steps']} steps of {cfg['train_batch']} per rep, attacks and inference on "
        f"{cfg['n_eval']} images in batches of {cfg['eval_batch']}, PGD {cfg['pgd_steps']} steps, "
        f"eps 8/255.",
        "",
    ]
    if result.get("torch_note"):
        lines += [f"**PyTorch not run:** {result['torch_note']}", ""]
    lines += [
        "| workload | batch | JAX img/s | PyTorch NCHW img/s | PyTorch channels_last img/s "
        "| JAX/PyTorch (NCHW / channels_last) | JAX compile s | JAX GFLOP/s | % of matmul peak "
        "| peak RSS MiB (JAX / NCHW / channels_last) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(_row(row) for row in result["rows"]),
        "",
        "img/s: median over repetitions (training: clean images per second). Ratio > 1: JAX "
        "faster. † The PyTorch reference has no restarts: its figure is its 1-restart PGD "
        "images/s ÷ 4 (four times its time), the JAX figure runs 4 vmapped restarts.",
        "Compile s: JAX first call minus a steady call. GFLOP/s: analytic MFLOP per image "
        "(forward 58.9, train step 175, PGD-20 2,416; FGSM 3 x 58.9; FGSM training "
        "2 x 58.9 + 2 x 175 per clean image; 4 restarts 4 x 2,416) x images/s. Peak RSS: "
        "JAX process high-water mark during the workload (reset before each; includes the "
        "process baseline); PyTorch: the whole subprocess's ru_maxrss, torch import included.",
        "",
        "## Spread (img/s, min–max over repetitions)",
        "",
        "| workload | JAX | PyTorch NCHW | PyTorch channels_last |",
        "|---|---|---|---|",
    ]
    for row in result["rows"]:
        j = row["jax"]
        cells = [f"{_ips(j['ips_min'])}–{_ips(j['ips_max'])} ({j['reps']})"]
        for layout in LAYOUTS:
            p = row["torch"].get(layout)
            if p and "ips_min" in p:
                d = p["divisor"]
                cells.append(f"{_ips(p['ips_min'] / d)}–{_ips(p['ips_max'] / d)} ({p['reps']})")
            else:
                cells.append("–")
        lines.append(f"| {row['label']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and `os.replace`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_outputs(result: dict, out_dir: str) -> tuple[str, str]:
    """`<out_dir>/speed.json` (every repetition) and `<out_dir>/speed.md` (the table)."""
    json_path = os.path.join(out_dir, "speed.json")
    md_path = os.path.join(out_dir, "speed.md")
    write_atomic(json_path, json.dumps(result, indent=1) + "\n")
    write_atomic(md_path, markdown(result))
    return json_path, md_path


def write_report(out_dir, name: str, result: dict, text: str) -> None:
    """`<out_dir>/<name>.json` (the result, indented) and `<out_dir>/<name>.md` (its report),
    each written atomically; the report is printed."""
    write_atomic(os.path.join(out_dir, f"{name}.json"), json.dumps(result, indent=2) + "\n")
    write_atomic(os.path.join(out_dir, f"{name}.md"), text)
    print(text)
