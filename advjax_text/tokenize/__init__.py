"""Tokenizers: the whitespace vocabulary of both model families and byte-pair encoding."""

from advjax_text.tokenize._bpe import (
    BPE,
    learn_bpe,
    merge_pieces,
    word_counts,
)
from advjax_text.tokenize._vocab import (
    BOS,
    CLASSIFIER_SPECIALS,
    EOS,
    PAD,
    TRANSLATION_SPECIALS,
    UNK,
    Vocab,
    build_vocab,
    tokenize,
)

__all__ = [
    "BOS",
    "BPE",
    "build_vocab",
    "CLASSIFIER_SPECIALS",
    "EOS",
    "learn_bpe",
    "merge_pieces",
    "PAD",
    "tokenize",
    "TRANSLATION_SPECIALS",
    "UNK",
    "Vocab",
    "word_counts",
]
