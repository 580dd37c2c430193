"""Padded, length-bucketed id batches for the translation models.

Ids follow the translation layout of `advjax_text.tokenize` (<pad>, <unk>, <bos>, <eos>).
Pure functions and numpy arrays only.
"""

from collections.abc import Sequence

import numpy as np

from advjax_text.tokenize import BOS, EOS, PAD


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
