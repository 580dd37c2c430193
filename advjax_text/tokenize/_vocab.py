"""Whitespace tokenizer and the token vocabulary of the classifier and translation models.

One `Vocab` serves both: the classifier reserves <pad> and <unk>, translation also <bos> and
<eos>. Both layouts put PAD at 0 and UNK at 1, so padding and unknown-word handling agree.

The tokenizer lowercases and splits on whitespace (Python's ``str.split``), nothing more:
SST-2 is already tokenised, and a character edit (homoglyph, zero-width character, an
inserted space) therefore reaches the model as an unknown word or as two words, which is
what the character-level attacks probe. Pure: no I/O.
"""

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

PAD, UNK, BOS, EOS = 0, 1, 2, 3
CLASSIFIER_SPECIALS = ("<pad>", "<unk>")
TRANSLATION_SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
_LAYOUTS = (CLASSIFIER_SPECIALS, TRANSLATION_SPECIALS)


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
    """An immutable token <-> id map whose first ids are `specials`; unknown tokens map to `UNK`.

    Attributes:
      tokens: the token of each id, starting with `specials`.
      specials: `CLASSIFIER_SPECIALS` or `TRANSLATION_SPECIALS` (the default).
    """

    tokens: tuple[str, ...]
    specials: tuple[str, ...] = TRANSLATION_SPECIALS

    def __post_init__(self):
        if self.specials not in _LAYOUTS:
            raise ValueError(f"specials must be one of {_LAYOUTS}, got {self.specials}")
        n = len(self.specials)
        if self.tokens[:n] != self.specials:
            raise ValueError(f"a vocabulary must start with {self.specials}, got {self.tokens[:n]}")
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("vocabulary tokens must be distinct")
        object.__setattr__(self, "_index", {t: i for i, t in enumerate(self.tokens)})

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        """Whether `token` is a vocabulary word (specials are not)."""
        return self._index.get(token, -1) >= len(self.specials)

    def id(self, token: str) -> int:
        """The id of `token`, `UNK` when it is not in the vocabulary."""
        return self._index.get(token, UNK)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """The id of each token (`UNK` for unknown ones)."""
        return [self._index.get(t, UNK) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first <eos>, without <pad>/<bos> (translation layout only).

        Raises:
          ValueError: the vocabulary has no <bos>/<eos>.
        """
        if self.specials != TRANSLATION_SPECIALS:
            raise ValueError("decode needs the translation layout (<bos>, <eos>)")
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append(self.tokens[i])
        return out

    def encode_texts(self, texts: Sequence[str], *, max_len: int) -> np.ndarray:
        """(len(texts), max_len) int32 ids of the tokenized texts, truncated, `PAD` after the end.

        Raises:
          ValueError: max_len < 1.
        """
        if max_len < 1:
            raise ValueError(f"max_len={max_len} must be >= 1")
        out = np.full((len(texts), max_len), PAD, np.int32)
        for row, text in enumerate(texts):
            ids = self.ids(tokenize(text)[:max_len])
            out[row, : len(ids)] = ids
        return out


def build_vocab(
    token_lists: Iterable[Sequence[str]],
    *,
    specials: tuple[str, ...] = TRANSLATION_SPECIALS,
    min_count: int = 1,
    max_size: int | None = None,
) -> Vocab:
    """The tokens seen at least `min_count` times, most frequent first (ties alphabetical).

    Args:
      token_lists: tokenized sentences (for raw text, ``map(tokenize, texts)``).
      specials: the layout, see `Vocab`; special strings in the data are not ranked.
      max_size: the most ids, specials included.

    Raises:
      ValueError: min_count < 1, or max_size leaves no room for a token.
    """
    if min_count < 1:
        raise ValueError(f"min_count={min_count} must be >= 1")
    specials = tuple(specials)
    if max_size is not None and max_size < len(specials) + 1:
        raise ValueError(f"max_size={max_size} must be >= {len(specials) + 1}")
    counts = Counter(t for tokens in token_lists for t in tokens)
    ranked = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
    ranked = [t for t in ranked if t not in specials]
    if max_size is not None:
        ranked = ranked[: max_size - len(specials)]
    return Vocab(specials + tuple(ranked), specials)
