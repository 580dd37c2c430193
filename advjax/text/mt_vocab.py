"""Token vocabularies and padded, length-bucketed batches for translation models.

Ids 0-3 are reserved: <pad>, <unk>, <bos>, <eos>. Pure functions and numpy arrays only.
"""

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")


@dataclasses.dataclass(frozen=True)
class Vocab:
    """An immutable token <-> id map; unknown tokens map to `UNK`."""

    itos: tuple[str, ...]

    def __post_init__(self):
        if self.itos[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {self.itos[:4]}")
        if len(set(self.itos)) != len(self.itos):
            raise ValueError("vocabulary tokens must be distinct")
        object.__setattr__(self, "_stoi", {t: i for i, t in enumerate(self.itos)})

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self._stoi and self._stoi[token] >= len(SPECIALS)

    def index(self, token: str) -> int:
        """The id of `token`, `UNK` if unknown."""
        return self._stoi.get(token, UNK)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self._stoi.get(t, UNK) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first <eos>, without <pad>/<bos>."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append(self.itos[i])
        return out


def build_vocab(
    sentences: Iterable[Sequence[str]], *, min_count: int = 2, max_size: int | None = None
) -> Vocab:
    """Tokens seen at least `min_count` times, most frequent first (ties alphabetical).

    Raises:
      ValueError: min_count < 1.
    """
    if min_count < 1:
        raise ValueError(f"{min_count=} must be >= 1")
    counts = Counter(t for s in sentences for t in s)
    kept = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
    if max_size is not None:
        kept = kept[: max(0, max_size - len(SPECIALS))]
    return Vocab(SPECIALS + tuple(t for t in kept if t not in SPECIALS))


def pad_batch(
    seqs: Sequence[Sequence[int]], length: int, *, bos: bool = False, eos: bool = False
) -> np.ndarray:
    """int32 (B, length) array of the id sequences, truncated, optionally framed, padded with PAD."""
    out = np.full((len(seqs), length), PAD, np.int32)
    for row, s in enumerate(seqs):
        s = (
            ([BOS] if bos else [])
            + list(s)[: length - int(bos) - int(eos)]
            + ([EOS] if eos else [])
        )
        out[row, : len(s)] = s
    return out


def bucket_length(n: int, *, step: int = 8, max_len: int = 32) -> int:
    """The padded length for a sequence of n ids: n rounded up to a multiple of step, capped."""
    return min(max_len, max(step, -(-n // step) * step))


def batches(
    src: Sequence[Sequence[int]],
    tgt: Sequence[Sequence[int]],
    *,
    batch_size: int,
    rng: np.random.Generator | None = None,
    step: int = 16,
    max_len: int = 32,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Length-bucketed batches (src, tgt_in, tgt_out) with few distinct shapes.

    Every batch has exactly `batch_size` rows (short ones are filled with all-PAD rows,
    which carry no loss), so a jitted step compiles once per (source, target) bucket.

    Source is padded to its bucket (no <bos>/<eos>); the target input starts with <bos> and
    the output ends with <eos>. Shuffled within and across buckets when `rng` is given.
    """
    if batch_size < 1:
        raise ValueError(f"{batch_size=} must be >= 1")
    order = np.arange(len(src))
    if rng is not None:
        order = rng.permutation(order)
    keyed: dict[tuple[int, int], list[int]] = {}
    for i in order:
        key = (
            bucket_length(len(src[i]), step=step, max_len=max_len),
            bucket_length(len(tgt[i]) + 1, step=step, max_len=max_len),
        )
        keyed.setdefault(key, []).append(int(i))
    out = []
    for (ls, lt), idx in sorted(keyed.items()):
        for start in range(0, len(idx), batch_size):
            chunk = idx[start : start + batch_size]
            fill = batch_size - len(chunk)
            s = pad_batch([src[i] for i in chunk] + [[]] * fill, ls)
            tin = pad_batch([tgt[i] for i in chunk], lt, bos=True)
            tout = pad_batch([tgt[i] for i in chunk], lt, eos=True)
            tin = np.concatenate([tin, np.zeros((fill, lt), np.int32)])
            tout = np.concatenate([tout, np.zeros((fill, lt), np.int32)])
            out.append((s, tin, tout))
    if rng is not None:
        out = [out[i] for i in rng.permutation(len(out))]
    return out
