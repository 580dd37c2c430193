"""Host-side helpers that turn attack results (ids) into perturbed source sentences.

Word-level models only see ids, so the surface form of a CharSwap substitution (which the
model sees as <unk>) is made here with `advjax_text.translate`; for the other settings the
new word is the vocabulary entry. Pure functions on token lists.
"""

from collections.abc import Sequence

import numpy as np

from advjax_text.tokenize import Vocab
from advjax_text.translate._charswap import charswap


def word_mask(vocab: Vocab) -> np.ndarray:
    """(V,) True for alphabetic vocabulary words (no specials, digits or punctuation)."""
    return np.array([i >= len(vocab.specials) and t.isalpha() for i, t in enumerate(vocab.tokens)])


def substitute(tokens: Sequence[str], position: int, new: str) -> list[str]:
    """`tokens` with the token at `position` replaced by `new`.

    Raises:
      ValueError: position out of range, or `new` equals the old token or is empty.
    """
    if not 0 <= position < len(tokens):
        raise ValueError(f"position={position} outside a {len(tokens)}-token sentence")
    if not new or new == tokens[position]:
        raise ValueError(
            f"replacement {new!r} must be non-empty and differ from {tokens[position]!r}"
        )
    return [*tokens[:position], new, *tokens[position + 1 :]]


def perturbed_words(
    tokens: Sequence[str], position: int, replacement: int, vocab: Vocab, *, setting: str
) -> list[str]:
    """The perturbed word sentence for a word-level attack result (position -1: unchanged).

    For "charswap" the word at `position` gets its first out-of-vocabulary CharSwap
    variant; otherwise it becomes `vocab.tokens[replacement]`.
    """
    if position < 0:
        return list(tokens)
    if setting == "charswap":
        return substitute(tokens, position, charswap(tokens[position], vocab.__contains__))
    return substitute(tokens, position, vocab.tokens[replacement])


def changed_positions(a: Sequence[str], b: Sequence[str]) -> list[int]:
    """Positions where two equal-length token lists differ.

    Raises:
      ValueError: the lengths differ.
    """
    if len(a) != len(b):
        raise ValueError(f"token lists differ in length: {len(a)} vs {len(b)}")
    return [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
