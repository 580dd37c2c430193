"""The README's library example as a user copies it, against the PyTorch reference, in one run.

    python -m benchmarks.readme_snippet [--reps 3] [--rounds 2] [--out benchmarks/results]

Each advjax measurement is a fresh interpreter running the README's first Python block
exactly as written (it calls `advjax.backend.configure()` first), then PGD-20 on the study's
CNN through the public API as that block does (`advjax_train.eval_logits_fn`, `jax.jit` of
`advjax.attacks.pgd`, 250 random images, eps 8/255, step 2/255), timed. A second variant drops the
block's `configure()` line, as a user who skips it would, and records the warning advjax
gives. The peer is `../shared/peers/torch_reference.py --workload pgd` (250 images, NCHW and
channels_last, `.torchvenv`). Rounds alternate the three. Writes
`<out>/readme_snippet.{json,md}`. Run it on an otherwise idle machine.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CONFIGURE_LINE = re.compile(r"^advjax\.backend\.configure\(\).*$", re.M)

TIMING = """
import json as _json, time as _time
import advjax_train
from advjax_train import CompactCNN as _CNN
_model = _CNN()
_x = jax.random.uniform(jax.random.key(0), (250, 32, 32, 3))
_vars = _model.init(jax.random.key(1), _x, train=False)
_fn = advjax_train.eval_logits_fn(_model, _vars)
_y = jnp.argmax(_fn(_x), -1)
_attack = jax.jit(lambda a, b, k: advjax.attacks.pgd(_fn, a, b, 8 / 255, key=k, steps=20, step_size=2 / 255).x_adv)
_attack(_x, _y, jax.random.key(2)).block_until_ready()
_times = []
for _ in range({reps}):
    _t = _time.perf_counter()
    _attack(_x, _y, jax.random.key(3)).block_until_ready()
    _times.append(_time.perf_counter() - _t)
print("RESULT " + _json.dumps({{"seconds": _times}}))
"""


def snippet(configure: bool) -> str:
    """The README's first Python block, with or without its configure() line."""
    block = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)[0]
    if not configure:
        block, count = CONFIGURE_LINE.subn("", block)
        if count != 1:
            raise ValueError("the README's library example has no advjax.backend.configure() line")
    return block


def run_advjax(configure: bool, reps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ADVJAX_XLA_DEFAULTS")}
    done = subprocess.run(
        [sys.executable, "-c", snippet(configure) + TIMING.format(reps=reps)],
        env=env, cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT ") :])
    result["warnings"] = [x.strip() for x in done.stderr.splitlines() if "advjax:" in x]
    return result


def run_torch(python: str, reference: str, channels_last: bool, reps: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "torch.json"
        command = [python, reference, "--workload", "pgd", "--batch", "250", "--n_eval", "250",
                   "--reps", str(reps), "--threads", "2", "--out", str(out)]  # fmt: skip
        subprocess.run(command + (["--channels_last"] if channels_last else []), check=True)
        return json.loads(out.read_text())["times_s"]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = p.parse_args(argv)
    from benchmarks.machine import describe_machine, load_average
    from benchmarks.report import write_report
    from benchmarks.torch_peer import default_paths

    python, reference = default_paths(str(REPO))
    started = load_average()
    machine = describe_machine(str(REPO))
    sides = {"as_written": [], "without_configure": [], "torch_nchw": [], "torch_channels_last": []}
    warnings = {}
    for _ in range(args.rounds):
        for name, configure in (("as_written", True), ("without_configure", False)):
            result = run_advjax(configure, args.reps)
            sides[name] += result["seconds"]
            warnings[name] = result["warnings"]
        sides["torch_nchw"] += run_torch(python, reference, False, args.reps)
        sides["torch_channels_last"] += run_torch(python, reference, True, args.reps)
    report = {
        "command": "python -m benchmarks.readme_snippet " + " ".join(argv or sys.argv[1:]),
        "machine": machine,
        "load_average": {"start": started, "end": load_average()},
        "images": 250,
        "seconds": sides,
        "images_per_second": {k: 250 / float(np.median(v)) for k, v in sides.items()},
        "warnings": warnings,
    }
    write_report(args.out, "readme_snippet", report, markdown(report))
    return report


def markdown(r: dict) -> str:
    rate, m = r["images_per_second"], r["machine"]
    best_torch = max(rate["torch_nchw"], rate["torch_channels_last"])
    rows = [
        ("README example as written (calls `configure()`)", "as_written"),
        ("the same without its `configure()` line", "without_configure"),
        ("PyTorch reference, NCHW", "torch_nchw"),
        ("PyTorch reference, channels_last", "torch_channels_last"),
    ]
    lines = [
        "# The README's library example against the PyTorch reference",
        "",
        f"`{r['command'].strip()}` · {m['cpu_model']}, {m['usable_cores']} usable cores · jax "
        f"{m['versions']['jax']} · git {m['git'].get('commit', '')[:10]} · load average "
        f"{r['load_average']['start']} at the start, {r['load_average']['end']} at the end.",
        "",
        "PGD-20 on the study's CNN (random weights), 250 images, one jitted call per repetition, "
        "each advjax side a fresh interpreter running the README block; images/s at the median.",
        "",
        "| side | images/s | / best PyTorch |",
        "|---|---|---|",
    ]
    for label, key in rows:
        lines.append(f"| {label} | {rate[key]:.1f} | {rate[key] / best_torch:.2f}x |")
    told = r["warnings"].get("without_configure") or ["none"]
    lines += ["", f"Warning advjax gave without `configure()`: {told[0]}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
