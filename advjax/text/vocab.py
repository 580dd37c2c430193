"""Whitespace tokenizer and word vocabulary of the sentence classifier.

The tokenizer lowercases and splits on whitespace (Python's ``str.split``), nothing more:
SST-2 is already tokenised, and a character edit (homoglyph, zero-width character, an
inserted space) therefore reaches the model as an unknown word or as two words, which is
what the character-level attacks probe. Pure: no I/O.
"""

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

PAD, UNK = 0, 1
SPECIALS = ("<pad>", "<unk>")


def tokenize(text: str) -> list[str]:
    """Lowercased whitespace tokens of `text`.

    Example:
      >>> tokenize("A  Charming journey .")
      ['a', 'charming', 'journey', '.']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return text.lower().split()


@dataclasses.dataclass(frozen=True)
class Vocab:
    """Words by id (0 = padding, 1 = unknown) and the reverse map."""

    words: tuple[str, ...]

    def __post_init__(self):
        if self.words[:2] != SPECIALS:
            raise ValueError(f"a vocabulary starts with {SPECIALS}, got {self.words[:2]}")
        if len(set(self.words)) != len(self.words):
            raise ValueError("a vocabulary lists a word twice")
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._index and word not in SPECIALS

    def id(self, word: str) -> int:
        """The id of `word`, `UNK` when it is not in the vocabulary."""
        return self._index.get(word, UNK)

    def encode(self, texts: Sequence[str], *, max_len: int) -> np.ndarray:
        """(len(texts), max_len) int32 ids, tokens past `max_len` dropped, `PAD` after the end.

        Raises:
          ValueError: max_len < 1.
        """
        if max_len < 1:
            raise ValueError(f"max_len={max_len} must be >= 1")
        out = np.full((len(texts), max_len), PAD, np.int32)
        for row, text in enumerate(texts):
            ids = [self.id(t) for t in tokenize(text)[:max_len]]
            out[row, : len(ids)] = ids
        return out


def build_vocab(texts: Iterable[str], *, min_count: int = 1, max_size: int | None = None) -> Vocab:
    """The words of `texts` seen at least `min_count` times, most frequent first (ties: a-z).

    Raises:
      ValueError: min_count < 1 or max_size < 3.
    """
    if min_count < 1:
        raise ValueError(f"min_count={min_count} must be >= 1")
    if max_size is not None and max_size < len(SPECIALS) + 1:
        raise ValueError(f"max_size={max_size} must be >= {len(SPECIALS) + 1}")
    counts = Counter(t for text in texts for t in tokenize(text))
    ranked = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    ranked = [w for w in ranked if w not in SPECIALS]
    if max_size is not None:
        ranked = ranked[: max_size - len(SPECIALS)]
    return Vocab(SPECIALS + tuple(ranked))
