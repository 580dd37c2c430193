"""The `archs` field (`--set archs=...`) of experiments.seq2seq_robustness: the default study stays LSTM-only,
the Transformer spec is the one the stored fr-en Transformer was trained with (so the study
reuses it instead of retraining), and `--set archs=transformer` trains, attacks and reports a tiny
Transformer end to end on real Multi30k."""

import json
import os
from pathlib import Path

import pytest

from advjax.records import read_lines
from advjax_text.data import TEXT_DIR_ENV

STORED = Path(__file__).parents[2] / "results/seq2seq/models/transformer_word_fr-en/config.json"


def test_default_config_is_lstm_only_and_lstm_names_are_unchanged():
    """Without archs set, the study builds exactly the LSTM specs it built before the option."""
    from experiments.seq2seq_robustness.config import Config, profile
    from experiments.seq2seq_robustness.main import main

    config = profile("default")
    assert config.archs == ("lstm",)
    spec = config.spec("lstm", "de", "bpe")
    assert spec.arch == "lstm" and spec.name == "lstm_bpe_de-en"
    assert spec.train.learning_rate == 2e-3 and spec.dropout_rate == 0.2
    assert config.spec("transformer", "fr", "word").name == "transformer_word_fr-en"
    with pytest.raises(ValueError, match="archs=\\('gru',\\)"):
        Config(archs=("gru",))
    with pytest.raises(ValueError, match="archs=\\(\\)"):
        Config(archs=())
    with pytest.raises(ValueError, match="transformer.arch='lstm'"):
        Config(transformer=config.model)
    with pytest.raises(ValueError, match="arch='gru'"):
        config.spec("gru", "fr", "word")
    with pytest.raises(ValueError, match="archs"):
        main(["--set", "archs=gru"])


def test_transformer_spec_matches_the_stored_model():
    """The default Transformer spec stores exactly the spec in the trained model's config.json,
    which is the condition under which `train_or_load` reuses the folder."""
    from experiments.seq2seq_robustness.config import profile
    from experiments.seq2seq_robustness.models import stored_spec

    if not STORED.exists():
        pytest.skip(f"{STORED} is not present")
    spec = profile("default").spec("transformer", "fr", "word")
    assert stored_spec(spec) == json.loads(STORED.read_text())["spec"]


@pytest.mark.slow
def test_quick_profile_attacks_a_transformer(tmp_path):
    """`--set archs=transformer` on the quick profile trains a tiny Transformer, attacks it with
    the three settings and writes records that keep each setting's constraint (~13 s; slow,
    like the LSTM quick-profile run)."""
    if not os.environ.get(TEXT_DIR_ENV):
        pytest.skip(f"{TEXT_DIR_ENV} is not set: the end-to-end run needs the Multi30k files")
    from experiments.seq2seq_robustness.main import main

    results = main(["--profile", "quick", "--set", "archs=transformer", "--out", str(tmp_path)])
    assert list(results["models"]) == ["transformer_word_fr-en"]
    assert results["config"]["archs"] == ["transformer"]
    stored = json.loads((tmp_path / "models/transformer_word_fr-en/config.json").read_text())
    assert stored["spec"]["arch"] == "transformer"
    assert stored["model_config"]["num_encoder_layers"] == 1
    assert stored["model_config"]["model_dim"] == 32
    records = [json.loads(line) for line in read_lines(tmp_path / "records.jsonl.gz")]
    assert {r["model"] for r in records} == {"transformer_word_fr-en"}
    assert {r["attack"] for r in records} == {"unconstrained", "knn", "charswap"}
    assert all(r["status"] in ("success", "failed", "no_candidate") for r in records)
    assert "## transformer_word_fr-en" in (tmp_path / "tables.md").read_text()
    assert results["models"]["transformer_word_fr-en"]["attacks"]["knn"]["chrf"]["n"] == 10
