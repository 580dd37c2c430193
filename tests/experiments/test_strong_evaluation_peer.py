"""The strong evaluation shows the PyTorch peer's AutoAttack beside its own numbers, only for
models the peer attacked with the very checkpoint the records were made with."""

import types

import numpy as np

from benchmarks.autoattack_peer_study import agreement
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
