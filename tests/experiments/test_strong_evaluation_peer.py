"""The strong evaluation shows the PyTorch peer's AutoAttack beside its own numbers, only for
models the peer attacked with the very checkpoint the records were made with."""

import json
import types

import numpy as np

from benchmarks.autoattack_peer import REPO
from benchmarks.autoattack_peer_study import agreement, from_benchmark
from experiments.cifar_robustness.strong_evaluation import peer_cells


def _entry(model_hash, count=30, total=100, same=98):
    return {
        "model_hash": model_hash,
        "robust": {"count": count, "total": total},
        "agreement": {"same_verdict": same},
    }


def test_peer_cell_needs_the_records_checkpoint_and_says_how_many_verdicts_agree():
    records = [types.SimpleNamespace(model="a", model_hash="h1"),
               types.SimpleNamespace(model="b", model_hash="h2")]  # fmt: skip
    peer = {"models": {"a": _entry("h1"), "b": _entry("old")}}
    cells = peer_cells(peer, records, ["a", "b", "c"])
    assert cells == {"a": "30.0 % (30/100, 95 % CI 21.9-39.6); same verdict on 98/100"}
    assert peer_cells(None, records, ["a"]) == {}


def test_agreement_counts_every_case_once():
    advjax = np.array([1, 1, 0, 0, 1], bool)
    torch = np.array([1, 0, 1, 0, 1], bool)
    counts = agreement(advjax, torch)
    assert counts == {"both_robust": 2, "advjax_only_robust": 1, "torch_only_robust": 1,
                      "same_verdict": 3}  # fmt: skip
    assert counts["same_verdict"] + counts["advjax_only_robust"] + counts["torch_only_robust"] == 5


def _benchmark(tmp_path, **changes):
    bench = {
        "command": "python -m benchmarks.autoattack_peer --n 4",
        "model": "pgd_continue2_silu",
        "n": 4,
        "load_start": [0.1, 0.1, 0.1],
        "load_end": [2.0, 2.0, 2.0],
        "machine": {"git_revision": "HEAD"},
        "torch": {
            "after": {"apgd-ce": 3, "apgd-t": 2, "fab-t": 2, "square": 2},
            "member_seconds": {"apgd-ce": 1.0, "apgd-t": 2.0, "fab-t": 3.0, "square": 4.0},
            "seconds": 10.0,
            "max_logit_difference": 1e-6,
            "versions": {"torch": "2.13.0", "torchattacks": "3.5.1"},
        },
        "robust_torch": [1, 0, 1, 0],
    } | changes
    path = tmp_path / "autoattack_peer.json"
    path.write_text(json.dumps(bench))
    return path


def test_a_benchmark_run_stands_in_only_for_its_own_model_study_and_images(tmp_path):
    study = REPO / "results" / "cifar10" / "research"
    path = _benchmark(tmp_path)
    peer = from_benchmark(path, "pgd_continue2_silu", study, 4)
    assert peer["robust"] == [1, 0, 1, 0] and peer["seconds"] == 10.0
    assert [m["member"] for m in peer["members"]] == ["apgd-ce", "apgd-t", "fab-t", "square"]
    assert "autoattack_peer --n 4" in peer["source"]
    assert from_benchmark(path, "fgsm_rs_full", study, 4) is None
    assert from_benchmark(path, "pgd_continue2_silu", study, 1000) is None
    assert (
        from_benchmark(path, "pgd_continue2_silu", REPO / "results" / "cifar10" / "default", 4)
        is None
    )
    other = _benchmark(tmp_path, command="python -m benchmarks.autoattack_peer --study results")
    assert from_benchmark(other, "pgd_continue2_silu", study, 4) is None
