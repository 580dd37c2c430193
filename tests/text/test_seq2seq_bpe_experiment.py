"""End-to-end: the quick profile of experiments.seq2seq_robustness with `--units bpe` trains a
tiny fr->en LSTM on BPE pieces of real Multi30k, attacks it with the three settings and writes
records and tables; every record keeps its setting's constraint (one word changed, CharSwap
word out of the training word vocabulary, the model's ids = the re-segmented sentence)."""

import json
import os

import pytest

from advjax.records import read_lines
from advjax_text.data import TEXT_DIR_ENV
from advjax_text.translate import changed_positions


@pytest.mark.slow
def test_quick_profile_bpe_end_to_end(tmp_path):
    if not os.environ.get(TEXT_DIR_ENV):
        pytest.skip(f"{TEXT_DIR_ENV} is not set: the end-to-end run needs the Multi30k files")
    from experiments.seq2seq_robustness.bpe_attacks import training_word_vocab
    from experiments.seq2seq_robustness.config import profile
    from experiments.seq2seq_robustness.main import main

    results = main(["--profile", "quick", "--set", "units=bpe", "--out", str(tmp_path)])
    records = [json.loads(line) for line in read_lines(tmp_path / "records.jsonl.gz")]
    (name,) = results["models"]
    assert name == "lstm_bpe_fr-en" and {r["model"] for r in records} == {name}
    assert {r["attack"] for r in records} == {"unconstrained", "knn", "charswap"}
    words = training_word_vocab(profile("quick").model, os.environ[TEXT_DIR_ENV])
    for r in records:
        assert r["status"] in ("success", "failed", "no_candidate"), r  # never "invalid"
        if r["status"] == "no_candidate":
            continue
        assert changed_positions(r["src"].split(), r["adv_src"].split()) == [r["position"]]
        assert "".join(p.removesuffix("@@") for p in r["new_pieces"]) == r["new_word"]
        if r["attack"] == "charswap":
            assert r["new_word"] not in words
    assert results["models"][name]["attacks"]["charswap"]["chrf"]["n"] == 10
    assert "| charswap |" in (tmp_path / "tables.md").read_text()
