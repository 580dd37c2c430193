"""Data loaders find the folder only through the flag or $ADVJAX_TEXT_DIR and name the
missing or malformed file; the tokenizer, vocabulary, word-CNN steps and the augmentation
behave as documented (tiny synthetic data, no real files)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax_text.classify import (
    ClassifierConfig,
    make_model,
    make_text_logits_fn,
    neighbor_table,
    params_digest,
    predict_logits,
    substitute_tokens,
    train_classifier,
)
from advjax_text.data import (
    TEXT_DIR_ENV,
    TextDataError,
    load_advglue_sst2,
    load_antonyms,
    load_neighbors,
    load_sst2,
    resolve_text_dir,
)
from advjax_text.tokenize import (
    CLASSIFIER_SPECIALS,
    PAD,
    TRANSLATION_SPECIALS,
    UNK,
    Vocab,
    build_vocab,
    tokenize,
)
from experiments.text_robustness.config import profile


def clf_vocab(texts, **kwargs):
    """The classifier's vocabulary of raw texts, as experiments/text_pipeline.py builds it."""
    return build_vocab(map(tokenize, texts), specials=CLASSIFIER_SPECIALS, **kwargs)


def write_tree(root, dev="sentence\tlabel\na good film \t1\na bad film \t0\n"):
    (root / "glue_sst2").mkdir(parents=True)
    (root / "glue_sst2" / "dev.tsv").write_text(dev)
    (root / "advglue").mkdir()
    (root / "advglue" / "dev.json").write_text(
        json.dumps({"sst2": [{"idx": 0, "sentence": "x y", "label": 1}]})
    )
    syn = root / "synonyms" / "counter_fitting_linguistic_constraints"
    syn.mkdir(parents=True)
    (root / "synonyms" / "counterfitted_neighbors.json").write_text(
        json.dumps({"Good": ["nice", "good"]})
    )
    (syn / "ppdb_antonyms.txt").write_text("good bad\n")
    (syn / "wordnet_antonyms.txt").write_text("\n")
    return root


def test_folder_comes_from_flag_or_env(tmp_path, monkeypatch):
    monkeypatch.delenv(TEXT_DIR_ENV, raising=False)
    with pytest.raises(TextDataError, match="--text-dir"):
        resolve_text_dir()
    with pytest.raises(TextDataError, match="does not exist"):
        resolve_text_dir(tmp_path / "nope")
    write_tree(tmp_path)
    monkeypatch.setenv(TEXT_DIR_ENV, str(tmp_path))
    dev = load_sst2(split="dev")
    assert dev.sentences == ["a good film", "a bad film"] and dev.labels == [1, 0]
    assert load_advglue_sst2().labels == [1]
    assert load_neighbors() == {"good": ("nice",)}
    assert load_antonyms() == frozenset({("good", "bad"), ("bad", "good")})


def test_missing_and_corrupt_files_name_the_file(tmp_path):
    write_tree(tmp_path, dev="sentence\tlabel\na good film\t7\n")
    with pytest.raises(TextDataError, match=r"dev.tsv:2: label '7'"):
        load_sst2(tmp_path, "dev")
    with pytest.raises(TextDataError, match="train.tsv: no such file"):
        load_sst2(tmp_path, "train")
    with pytest.raises(ValueError, match="split"):
        load_sst2(tmp_path, "test")
    (tmp_path / "advglue" / "dev.json").write_text("{not json")
    with pytest.raises(TextDataError, match="dev.json:1: not valid JSON"):
        load_advglue_sst2(tmp_path)
    (tmp_path / "glue_sst2" / "dev.tsv").write_text("text\tlabel\nx\t1\n")
    with pytest.raises(TextDataError, match="header"):
        load_sst2(tmp_path, "dev")


def test_tokenizer_and_vocab():
    assert tokenize("A  Good\u200bfilm .") == ["a", "good\u200bfilm", "."]
    vocab = clf_vocab(["a good film", "a bad film", "a film"], min_count=2)
    assert vocab.tokens == ("<pad>", "<unk>", "a", "film")
    ids = vocab.encode_texts(["a good film", "film"], max_len=4)
    np.testing.assert_array_equal(ids, [[2, UNK, 3, PAD], [3, PAD, PAD, PAD]])
    with pytest.raises(ValueError, match="min_count"):
        build_vocab([], min_count=0)


def test_both_vocab_layouts_share_pad_and_unk_and_reject_a_wrong_prefix():
    """Classifier and translation ids agree on PAD = 0 and UNK = 1, so padding masks and
    unknown words mean the same in both; a token list not led by its specials is refused."""
    for specials in (CLASSIFIER_SPECIALS, TRANSLATION_SPECIALS):
        vocab = build_vocab([["film", "a", "film"]], specials=specials)
        assert vocab.tokens[PAD] == "<pad>" and vocab.tokens[UNK] == "<unk>"
        assert vocab.tokens[len(specials) :] == ("film", "a") and vocab.id("plot") == UNK
        assert not any(s in vocab for s in specials)
        with pytest.raises(ValueError, match="start with"):
            Vocab(("film", *specials), specials)
    with pytest.raises(ValueError, match="start with"):
        Vocab(CLASSIFIER_SPECIALS + ("film",))  # translation layout by default


def test_unknown_attack_and_bad_budgets_in_config_raise():
    with pytest.raises(ValueError, match="unknown attack"):
        profile("quick", attacks=("deepwordbug",))
    with pytest.raises(ValueError, match="max_share"):
        profile("quick", max_share=1.5)
    with pytest.raises(ValueError, match="query cap"):
        profile("quick", max_queries=50)
    with pytest.raises(ValueError, match="profile"):
        profile("huge")


def test_augmentation_replaces_only_with_table_entries():
    vocab = clf_vocab(["good nice fine film the"])
    table = neighbor_table(
        vocab,
        {"good": ("nice", "fine", "bad"), "film": ("movie",)},
        frozenset({("good", "bad")}),
        stopwords=frozenset({"the"}),
    )
    good, film = vocab.id("good"), vocab.id("film")
    assert sorted(table.table[good, : table.counts[good]]) == sorted(
        [vocab.id("nice"), vocab.id("fine")]
    )
    assert list(table.table[film, : table.counts[film]]) == [UNK]  # "movie" is unknown
    tokens = jnp.asarray(vocab.encode_texts(["good film the"] * 64, max_len=4))
    out = np.asarray(
        substitute_tokens(jax.random.key(0), tokens, table.table, table.counts, rate=1.0)
    )
    assert set(out[:, 0]) == {vocab.id("nice"), vocab.id("fine")}
    assert (
        set(out[:, 1]) == {UNK} and set(out[:, 2]) == {vocab.id("the")} and set(out[:, 3]) == {PAD}
    )


def test_word_cnn_learns_a_toy_task_and_oracle_matches_batched_eval():
    texts = ["good fine nice"] * 64 + ["bad dull poor"] * 64
    labels = np.array([1] * 64 + [0] * 64)
    vocab = clf_vocab(texts)
    config = ClassifierConfig(
        embed_dim=8, filters=4, widths=(2,), batch_size=32, epochs=3, max_len=8
    )
    state, history = train_classifier(
        config,
        vocab.encode_texts(texts, max_len=8),
        labels,
        key=jax.random.key(0),
        vocab_size=len(vocab),
    )
    assert history[-1]["loss"] < history[0]["loss"]
    fn = make_text_logits_fn(make_model(config, len(vocab)), state.params, vocab, max_len=8)
    np.testing.assert_allclose(
        fn(texts[:3]),
        predict_logits(state, vocab.encode_texts(texts[:3], max_len=8)),
        rtol=1e-5,
        atol=1e-5,
    )
    assert len(params_digest(state.params)) == 16
    with pytest.raises(TypeError, match="sequence"):
        fn("good")
