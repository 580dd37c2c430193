"""CharSwap (Michel et al., NAACL 2019): a character edit that makes a word out-of-vocabulary.

Swap two adjacent internal characters (never the first or the last) so that the word leaves
the vocabulary; when no swap does (too short a word, or every swap is a known word), repeat
its last character until the word is unknown. Pure string functions: the vocabulary is a
predicate, so word-level and subword models can share them.
"""

from typing import Callable

MAX_REPEATS = 32


def internal_swaps(word: str) -> list[str]:
    """Every distinct word made by swapping two adjacent internal characters of ``word``.

    Internal means neither the first nor the last character moves, so words of fewer than
    four characters have none. Swaps of two equal characters are skipped (no change).
    """
    if not isinstance(word, str):
        raise TypeError(f"word must be a str; got {type(word).__name__}")
    out: list[str] = []
    for i in range(1, len(word) - 2):
        a, b = word[i], word[i + 1]
        if a != b:
            swapped = word[:i] + b + a + word[i + 2 :]
            if swapped not in out:
                out.append(swapped)
    return out


def charswap_candidates(word: str, in_vocab: Callable[[str], bool]) -> list[str]:
    """The out-of-vocabulary CharSwap variants of ``word``, in left-to-right swap order.

    Falls back to one candidate made by repeating the last character until the word is
    unknown when no internal swap leaves the vocabulary.

    Raises:
        ValueError: an empty word, or one still in the vocabulary after ``MAX_REPEATS``
            repeats of its last character.
    """
    if not word:
        raise ValueError("cannot CharSwap an empty word")
    swaps = [w for w in internal_swaps(word) if not in_vocab(w)]
    if swaps:
        return swaps
    candidate = word
    for _ in range(MAX_REPEATS):
        candidate += word[-1]
        if not in_vocab(candidate):
            return [candidate]
    raise ValueError(f"{word!r} stays in the vocabulary after {MAX_REPEATS} repeats")


def charswap(word: str, in_vocab: Callable[[str], bool], index: int = 0) -> str:
    """One CharSwap variant of ``word`` (the ``index``-th candidate, wrapping around).

    Example:
        >>> charswap("house", {"house", "hosue"}.__contains__)
        'huose'
    """
    candidates = charswap_candidates(word, in_vocab)
    return candidates[index % len(candidates)]
