"""Byte-pair encoding (Sennrich, Haddow & Birch, ACL 2016) learned from training data.

A small, dependency-free learner and segmenter in the style of subword-nmt: words are
split into characters with an end-of-word mark, the most frequent adjacent pair is merged
`num_merges` times (ties broken by the pair itself, so learning is deterministic), and a
segmented word marks every piece but its last with ``@@``:

    >>> bpe = learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, num_merges=10)
    >>> bpe.segment(["lowest"])
    ['lo@@', 'w@@', 'est']

Pure functions; `BPE` is immutable apart from a private segmentation cache.
"""

import dataclasses
import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

END = "</w>"
MARK = "@@"


def word_counts(sentences: Iterable[Sequence[str]]) -> Counter:
    """How often each token occurs in tokenised sentences."""
    return Counter(t for s in sentences for t in s)


def _symbols(word: str) -> tuple[str, ...]:
    return tuple(word[:-1]) + (word[-1] + END,)


def learn_bpe(counts: Mapping[str, int], *, num_merges: int, min_frequency: int = 2) -> "BPE":
    """Learn up to `num_merges` merges from word frequencies.

    Args:
      counts: word -> frequency in the training data.
      num_merges: the most merges to learn (fewer when no pair is frequent enough).
      min_frequency: stop when the best pair occurs fewer times.

    Returns:
      A `BPE` holding the merges in the order learned.

    Raises:
      ValueError: num_merges < 0 or min_frequency < 1, or an empty word.
    """
    if num_merges < 0 or min_frequency < 1:
        raise ValueError(f"need {num_merges=} >= 0 and {min_frequency=} >= 1")
    if any(not w for w in counts):
        raise ValueError("cannot learn BPE from an empty word")
    words = [list(_symbols(w)) for w in counts]
    freqs = [int(counts[w]) for w in counts]
    pair_counts: Counter = Counter()
    where: defaultdict = defaultdict(set)
    for i, syms in enumerate(words):
        for pair in zip(syms, syms[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    heap = [(-c, pair) for pair, c in pair_counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges and heap:
        negative, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -negative:
            continue  # stale entry
        if -negative < min_frequency:
            break
        merges.append(pair)
        merged = pair[0] + pair[1]
        touched: set = set()
        for i in list(where[pair]):
            syms = words[i]
            for old in zip(syms, syms[1:]):
                pair_counts[old] -= freqs[i]
                touched.add(old)
            out, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and (syms[j], syms[j + 1]) == pair:
                    out.append(merged)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            words[i] = out
            for new in zip(out, out[1:]):
                pair_counts[new] += freqs[i]
                where[new].add(i)
                touched.add(new)
        for p in touched:
            if pair_counts[p] <= 0:
                pair_counts.pop(p, None)
                where.pop(p, None)
            else:
                heapq.heappush(heap, (-pair_counts[p], p))
    return BPE(tuple(merges))


@dataclasses.dataclass(frozen=True)
class BPE:
    """Learned merges, in order; segments words by applying them by rank."""

    merges: tuple[tuple[str, str], ...]

    def __post_init__(self):
        object.__setattr__(self, "_rank", {pair: r for r, pair in enumerate(self.merges)})
        object.__setattr__(self, "_cache", {})

    def segment_word(self, word: str) -> list[str]:
        """The pieces of one word, every piece but the last ending in ``@@``."""
        if not word:
            raise ValueError("cannot segment an empty word")
        cached = self._cache.get(word)
        if cached is not None:
            return list(cached)
        syms = list(_symbols(word))
        while len(syms) > 1:
            ranked = [
                (self._rank.get(p, len(self._rank)), k) for k, p in enumerate(zip(syms, syms[1:]))
            ]
            best, _ = min(ranked)
            if best == len(self._rank):
                break
            pair = self.merges[best]
            out, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and (syms[j], syms[j + 1]) == pair:
                    out.append(pair[0] + pair[1])
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            syms = out
        pieces = [s + MARK for s in syms[:-1]] + [syms[-1][: -len(END)]]
        if len(self._cache) < 200_000:
            self._cache[word] = tuple(pieces)
        return pieces

    def segment(self, tokens: Sequence[str]) -> list[str]:
        """Segment every word of a tokenised sentence."""
        return [p for t in tokens for p in self.segment_word(t)]


def word_spans(pieces: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) piece indices of each word: a word ends at a piece without ``@@``."""
    spans, start = [], 0
    for k, p in enumerate(pieces):
        if not p.endswith(MARK):
            spans.append((start, k + 1))
            start = k + 1
    if start < len(pieces):
        spans.append((start, len(pieces)))
    return spans


def merge_pieces(pieces: Sequence[str]) -> list[str]:
    """Undo `BPE.segment`: join the pieces of each word.

    Example:
      >>> merge_pieces(["lower@@", "s", "are"])
      ['lowers', 'are']
    """
    return [
        "".join(p[: -len(MARK)] if p.endswith(MARK) else p for p in pieces[a:b])
        for a, b in word_spans(pieces)
    ]
