"""The PyTorch AutoAttack peer on every model of a study's strong evaluation:
`python -m benchmarks.autoattack_peer_study --study results/cifar10/default [--models standard ...]`.

For each model the strong evaluation attacked (`<study>/strong_evaluation/records.jsonl.gz`),
torchattacks' standard members (`benchmarks/torch_autoattack.py`: APGD-CE, APGD-T, FAB-T
with 9 targets and 100 iterations, Square with 5,000 queries, each member on the cases
still robust) attack the same weights, exported to the peer's PyTorch `Net`, on the same
images. advjax's side is the committed records, not a new run; the report per model is the
peer's robust accuracy with its interval, its count after each member, and the per-case
agreement with advjax's AutoAttack. Written, one model at a time, to
`<study>/strong_evaluation/peer_torchattacks.json`, which the strong evaluation's table
shows beside its own numbers; a model already there with the same checkpoint and records is
not attacked again, and `--from-benchmark benchmarks/results/autoattack_peer.json` takes the
model that benchmark attacked from its run (the same checkpoint of the same study, the same
images) instead of attacking it again. Timings are the peer's own, on whatever else the
machine was running (the load averages are stored): the speed comparison is
`benchmarks.autoattack_peer`. The strong evaluation's folder is locked while this runs.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

from advjax import backend
from benchmarks.autoattack_peer import DEFAULT_STUDY, REPO, run_peer
from experiments.cifar_robustness.strong_evaluation import PEER_FILE


def advjax_robust(records, model: str, n: int) -> tuple[np.ndarray, str]:
    """advjax's per-case AutoAttack verdict (robust or not) on cases 0..n-1, and the
    model hash the records were made with."""
    from advjax.evaluation import (
        AUTOATTACK,
    )
    from advjax.records import ROBUST_STATUSES

    mine = [r for r in records if r.model == model and r.attack == AUTOATTACK]
    if sorted(r.case_id for r in mine) != list(range(n)):
        raise SystemExit(f"{model}: the strong evaluation's records do not hold cases 0..{n - 1}")
    robust = np.zeros(n, bool)
    for r in mine:
        robust[r.case_id] = r.status in ROBUST_STATUSES
    return robust, mine[0].model_hash


def agreement(advjax: np.ndarray, torch: np.ndarray) -> dict:
    return {
        "both_robust": int((advjax & torch).sum()),
        "advjax_only_robust": int((advjax & ~torch).sum()),
        "torch_only_robust": int((~advjax & torch).sum()),
        "same_verdict": int((advjax == torch).sum()),
    }


def _committed_at(path: Path, revision: str) -> bool:
    """Whether `revision` held a file of `path`'s name and bytes (wherever results/ kept it)."""
    blob = subprocess.run(
        ["git", "hash-object", str(path)], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = subprocess.run(
        ["git", "ls-tree", "-r", revision, "--", "results"], cwd=REPO, capture_output=True,
        text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    return any(line.split()[2] == blob and line.endswith("/" + path.name) for line in tree if line)


def from_benchmark(path: Path, name: str, study_dir: Path, n: int) -> dict | None:
    """The peer's run on `name` inside `benchmarks.autoattack_peer` (`path`, its JSON), when
    that run attacked the same checkpoint of the same study on the same first `n` images;
    None when it attacked another model or another number of images."""
    bench = json.loads(path.read_text())
    if bench["model"] != name or bench["n"] != n:
        return None
    words = shlex.split(bench["command"])
    study = REPO / words[words.index("--study") + 1] if "--study" in words else DEFAULT_STUDY
    if study.resolve() != study_dir.resolve():
        return None
    checkpoint = study_dir / "checkpoints" / f"{name}.msgpack"
    revision = bench["machine"]["git_revision"]
    if not _committed_at(checkpoint, revision):
        raise SystemExit(f"{checkpoint} changed since the benchmark's revision {revision[:10]}")
    torch = bench["torch"]
    return {
        "robust": bench["robust_torch"],
        "members": [
            {"member": m, "robust": torch["after"][m], "seconds": torch["member_seconds"][m]}
            for m in torch["after"]
        ],
        "seconds": torch["seconds"],
        "load_average": {"start": bench["load_start"], "end": bench["load_end"]},
        "max_logit_difference": torch["max_logit_difference"],
        "torch": torch["versions"]["torch"],
        "torchattacks": torch["versions"]["torchattacks"],
        "environment": bench["machine"],
        "source": f"{path.name}: {bench['command']}",
    }


def attack(args: argparse.Namespace, checkpoint: Path, x: np.ndarray, y: np.ndarray) -> dict:
    """torchattacks' standard AutoAttack on the checkpoint's weights, timed here."""
    from advjax.io import environment, load_checkpoint
    from advjax_train import CompactCNN, eval_logits_fn

    model, variables = load_checkpoint(checkpoint, CompactCNN)
    logits_fn = jax.jit(eval_logits_fn(model, variables))
    logits = np.concatenate([np.asarray(logits_fn(x[i : i + 250])) for i in range(0, len(y), 250)])
    load_start, started = list(os.getloadavg()), time.perf_counter()
    peer = run_peer(args.torch_python, model, variables, x, y, logits, threads=args.threads)
    return peer | {
        "seconds": time.perf_counter() - started,
        "load_average": {"start": load_start, "end": list(os.getloadavg())},
        "environment": environment(),
    }


def main(argv=None) -> dict:
    backend.configure()  # advjax's XLA CPU settings, before any JAX work
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--study", default="results/cifar10/default", help="a study run with strong_evaluation/"
    )
    p.add_argument("--models", nargs="+", default=None, help="default: every model evaluated")
    p.add_argument("--torch-python", default=str(REPO / ".torchvenv" / "bin" / "python"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data-dir", default=None)
    p.add_argument(
        "--from-benchmark",
        type=Path,
        default=None,
        help="take the model `benchmarks.autoattack_peer` attacked from its JSON instead of "
        "attacking it again (the same checkpoint and images are checked)",
    )
    args = p.parse_args(argv)
    study_dir = Path(args.study)
    folder = study_dir / "strong_evaluation"
    from advjax.io import OutputLock

    with OutputLock(folder):  # the strong evaluation's folder: one writer at a time
        return compare(args, argv, study_dir, folder)


def compare(args: argparse.Namespace, argv, study_dir: Path, folder: Path) -> dict:
    """Attack (or take from the benchmark) every model not yet in the peer file; the file."""
    from advjax.data import load_cifar10
    from advjax.evaluation.stats import format_rate, rate
    from advjax.records import atomic_write_json, read_records, record_file
    from advjax_train import to_float

    study = json.loads((study_dir / "results.json").read_text())
    records = read_records(record_file(folder))
    names = args.models or sorted({r.model for r in records})
    index = np.asarray(study["data"]["eval_indices"])
    data = load_cifar10(args.data_dir, splits=("test",))
    x, y = np.asarray(to_float(data.test_images[index])), data.test_labels[index]
    path = folder / PEER_FILE
    report = json.loads(path.read_text()) if path.exists() else {"models": {}}
    report["command"] = "python -m benchmarks.autoattack_peer_study " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    for name in names:
        robust_a, model_hash = advjax_robust(records, name, len(y))
        kept = report["models"].get(name)
        if kept and kept["model_hash"] == model_hash:
            print(f"[peer] {name}: kept ({kept['robust_text']})")
            continue
        reused = args.from_benchmark and from_benchmark(
            args.from_benchmark, name, study_dir, len(y)
        )
        if reused is None:
            print(f"[peer] {name}: torchattacks on {len(y):,} cases", flush=True)
            peer = attack(args, study_dir / "checkpoints" / f"{name}.msgpack", x, y)
        else:
            print(f"[peer] {name}: from {reused['source']}", flush=True)
            peer = reused
        robust_t = np.asarray(peer["robust"], bool)
        r = rate(int(robust_t.sum()), len(y))
        report["models"][name] = {
            "model_hash": model_hash,
            "robust": r,
            "robust_text": format_rate(r),
            "advjax_robust": int(robust_a.sum()),
            "agreement": agreement(robust_a, robust_t),
            "after": {row["member"]: row["robust"] for row in peer["members"]},
            "member_seconds": {
                row["member"]: row["seconds"] for row in peer["members"] if row["member"] != "clean"
            },
            "seconds": peer["seconds"],
            "load_average": peer["load_average"],
            "max_logit_difference": peer["max_logit_difference"],
            "versions": {"torch": peer["torch"], "torchattacks": peer["torchattacks"]},
            "robust_torch": robust_t.astype(int).tolist(),
            "environment": peer["environment"],
        } | ({"source": reused["source"]} if reused else {})
        atomic_write_json(path, report)
        print(f"[peer] {name}: {report['models'][name]['robust_text']}; advjax "
              f"{int(robust_a.sum())}; {report['models'][name]['agreement']}", flush=True)  # fmt: skip
    atomic_write_json(path, report)
    return report


if __name__ == "__main__":
    main()
