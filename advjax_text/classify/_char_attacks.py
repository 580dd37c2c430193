"""Character-level edits that probe the tokenizer, as a second, held-out attack family.

Per word, the candidate edits are drawn from four families:

- ``charswap``: CharSwap of Michel et al. (NAACL 2019, `advjax_text.translate`), adjacent
  internal swap that leaves the (attacker's) vocabulary;
- ``homoglyph``: one Latin letter replaced by its Cyrillic look-alike (a -> а, e -> е, ...);
- ``zero_width``: a zero-width space (U+200B) inserted inside the word;
- ``spacing``: a space inserted inside the word (one word becomes two).

The same greedy black-box search as the word attack (`clf_greedy.greedy_attack`) picks
among them; a case's candidate subset is drawn with its own key, so any case replays.
"""

from collections.abc import Callable, Sequence

import jax
import numpy as np

from advjax_text.classify._greedy import GreedyResult, greedy_attack
from advjax_text.classify._textfooler import STOPWORDS
from advjax_text.translate import charswap_candidates

FAMILIES = ("charswap", "homoglyph", "zero_width", "spacing")
HOMOGLYPHS = {"a": "а", "c": "с", "e": "е", "i": "і", "o": "о", "p": "р", "x": "х", "y": "у"}
ZERO_WIDTH = "\u200b"


def char_edits(
    word: str, family: str, in_vocab: Callable[[str], bool] = lambda _: False
) -> list[str]:
    """Every edit of `word` of one family, left to right (empty for words under 2 letters).

    Raises:
      ValueError: unknown family.

    Example:
      >>> char_edits("bad", "spacing")
      ['b ad', 'ba d']
    """
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} must be one of {FAMILIES}")
    if len(word) < 2 or not word.isalpha():
        return []
    if family == "charswap":
        return charswap_candidates(word, in_vocab)
    if family == "homoglyph":
        return [
            word[:i] + HOMOGLYPHS[c] + word[i + 1 :] for i, c in enumerate(word) if c in HOMOGLYPHS
        ]
    mark = ZERO_WIDTH if family == "zero_width" else " "
    return [word[:i] + mark + word[i:] for i in range(1, len(word))]


def char_candidates(
    word: str,
    *,
    key: jax.Array,
    families: Sequence[str] = FAMILIES,
    in_vocab: Callable[[str], bool] = lambda _: False,
    max_candidates: int = 8,
    stopwords: frozenset[str] = STOPWORDS,
) -> list[str]:
    """Up to `max_candidates` edits of `word` from `families`, a seeded draw without repeats."""
    if max_candidates < 1:
        raise ValueError(f"max_candidates={max_candidates} must be >= 1")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise ValueError(f"families={tuple(families)!r} must be a non-empty subset of {FAMILIES}")
    if word.lower() in stopwords:
        return []
    pool = list(dict.fromkeys(e for f in families for e in char_edits(word, f, in_vocab)))
    if len(pool) <= max_candidates:
        return pool
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)))  # cheaper than a jax op
    order = rng.permutation(len(pool))[:max_candidates]
    return [pool[i] for i in sorted(order)]


def char_attack(
    logits_fn: Callable[[Sequence[str]], np.ndarray],
    sentence: str,
    label: int,
    *,
    key: jax.Array,
    max_queries: int,
    max_share: float,
    families: Sequence[str] = FAMILIES,
    in_vocab: Callable[[str], bool] = lambda _: False,
    max_candidates: int = 8,
    stopwords: frozenset[str] = STOPWORDS,
) -> GreedyResult:
    """Greedy black-box character-edit attack on one sentence (see the module docstring).

    Args:
      logits_fn: sentences -> (B, C) logits; every sentence is a query.
      sentence, label: the case.
      key: this case's key; word i draws its candidates with fold_in(key, i).
      max_queries, max_share: the declared budgets (see `greedy_attack`).
      families: edit families to draw from.
      in_vocab: the attacker's vocabulary, for CharSwap (a generic word list, not the model's).
      max_candidates: candidates per word.

    Returns:
      The search's `GreedyResult`.
    """
    words = sentence.split()
    candidates = [
        char_candidates(
            w,
            key=jax.random.fold_in(key, i),
            families=families,
            in_vocab=in_vocab,
            max_candidates=max_candidates,
            stopwords=stopwords,
        )
        for i, w in enumerate(words)
    ]
    return greedy_attack(
        logits_fn, words, label, candidates, max_queries=max_queries, max_share=max_share
    )
