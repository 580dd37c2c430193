"""Multi30k loading, vocabularies, batching and BPE: the properties the models rely on."""

import os

import numpy as np
import pytest

from advjax_text.data import TEXT_DIR_ENV, load_lines, load_parallel, resolve_multi30k_dir, tokenize
from advjax_text.tokenize import (
    BOS,
    EOS,
    PAD,
    UNK,
    Vocab,
    build_vocab,
    learn_bpe,
    merge_pieces,
    word_counts,
)
from advjax_text.translate import batches


def test_tokenize_lowercases_and_splits_punctuation():
    assert tokenize("Two young, White males.") == ["two", "young", ",", "white", "males", "."]
    assert tokenize("L'homme") == ["l", "'", "homme"]


def test_missing_text_dir_is_a_clear_error(monkeypatch):
    monkeypatch.delenv(TEXT_DIR_ENV, raising=False)
    with pytest.raises(ValueError, match=TEXT_DIR_ENV):
        resolve_multi30k_dir(None)
    with pytest.raises(ValueError, match="split"):
        load_lines("/nonexistent", "dev", "en")


def test_vocab_keeps_frequent_tokens_and_maps_the_rest_to_unk():
    vocab = build_vocab([["a", "b", "a"], ["a", "c", "b"]], min_count=2)
    assert vocab.tokens[4:] == ("a", "b") and "c" not in vocab and "a" in vocab
    assert vocab.ids(["a", "c"]) == [4, UNK]
    assert vocab.decode([BOS, 4, 5, EOS, 4]) == ["a", "b"]
    with pytest.raises(ValueError):
        Vocab(("a",))


def test_batches_cover_every_pair_once_with_few_shapes():
    rng = np.random.default_rng(0)
    src = [list(rng.integers(4, 50, size=n)) for n in rng.integers(1, 40, size=101)]
    tgt = [list(rng.integers(4, 50, size=n)) for n in rng.integers(1, 40, size=101)]
    out = batches(src, tgt, batch_size=16, rng=np.random.default_rng(1))
    shapes = {(s.shape, ti.shape) for s, ti, _ in out}
    assert len(shapes) <= 4 and all(s.shape[0] == 16 for s, _, _ in out)
    real_rows = sum(int((to != PAD).any(axis=1).sum()) for _, _, to in out)
    assert real_rows == 101
    for s, tin, tout in out:  # teacher forcing: the input is the output shifted right
        rows = (tout != PAD).any(axis=1)
        assert (tin[rows, 0] == BOS).all()
        np.testing.assert_array_equal(
            tin[rows, 1:][tout[rows, :-1] != EOS], tout[rows, :-1][tout[rows, :-1] != EOS]
        )


def test_bpe_round_trips_and_merges_frequent_pairs():
    sentences = [["lower", "lowest", "newer"], ["lower", "newest", "widest"]] * 5
    bpe = learn_bpe(word_counts(sentences), num_merges=20)
    for s in sentences + [["unseen", "xyz"]]:
        assert merge_pieces(bpe.segment(s)) == s
    assert bpe.segment(["lower"]) == ["lower"]  # frequent enough to become one piece
    assert learn_bpe(word_counts(sentences), num_merges=20).merges == bpe.merges  # deterministic


def test_bpe_rejects_bad_arguments():
    with pytest.raises(ValueError):
        learn_bpe({"a": 1}, num_merges=-1)
    with pytest.raises(ValueError):
        learn_bpe({"": 3}, num_merges=1)


def test_multi30k_fr_en_validation_size_and_pinned_vocabulary():
    """The validation split holds Multi30k's 1,014 pairs (the dataset's published size); the
    English training vocabulary at min_count=2 (5,894 words plus the 4 special tokens) is a
    regression pin of advjax's own count, guarding tokenisation and `build_vocab`."""
    if not os.environ.get(TEXT_DIR_ENV):
        pytest.skip(f"{TEXT_DIR_ENV} is not set")
    data = load_parallel(None, "val", "fr", "en")
    assert len(data.src) == len(data.tgt) == 1014
    assert len(build_vocab(load_parallel(None, "train", "fr", "en").tgt, min_count=2)) - 4 == 5894
