"""One-word attacks on subword (BPE) models: first-order word scores (Michel et al. 2019).

A word (a space-separated token of the original sentence) spans the pieces
``a .. a + k - 1`` of the segmented source; replacing it by a word ``w`` whose segmentation
has ``m`` pieces ``q_1 .. q_m`` is scored, to first order around the source piece
embeddings ``e`` with gradients ``g`` of the adversarial loss (`seq2seq_attack`), by

- ``m == k``: the exact first-order change ``sum_j (e_{q_j} - e_{x_{a+j}}) . g_{a+j}``;
- ``m != k``: the sentence length changes, so no Taylor expansion exists; we use the
  directional derivative towards a surrogate that keeps the length: every one of the
  word's ``k`` slots moves to the mean piece embedding ``mean_j e_{q_j}`` of the new word,
  ``sum_s (mean_j e_{q_j} - e_{x_s}) . g_s`` over the word's slots ``s``.

Both share the baseline term ``sum_s e_{x_s} . g_s``, so scores of either kind rank
together; they coincide when ``k == m == 1``. They only choose which candidates to
re-score: the `top_k` best are then re-scored exactly on their re-segmented ids (any
length) and the best exact loss wins. The same rule scores every setting:
"unconstrained" and "knn" candidates are words of the training data's word vocabulary
(segmented by the model's BPE; kNN = nearest words by cosine similarity of their mean
piece embeddings, `subword_knn`), "charswap" candidates are the CharSwap variants of the
word (`advjax_text.translate`, out of the *word* vocabulary), re-segmented.

Pure functions: host-side helpers on token lists and numpy arrays, jittable scorers on
arrays. No I/O.
"""

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax.types import Array, ArrayLike
from advjax_text.tokenize import BPE, PAD, Vocab
from advjax_text.translate._attack import (
    SETTINGS,
    SeqLogitsFn,
    adversarial_loss,
    loss_and_embedding_grad,
)


class SubwordTable(NamedTuple):
    """Words as padded piece ids: ``pieces`` (N, P) int32 (PAD after the end), ``lengths`` (N,)."""

    pieces: np.ndarray
    lengths: np.ndarray


def piece_table(
    bpe: BPE, vocab: Vocab, words: Sequence[str], *, width: int | None = None
) -> SubwordTable:
    """The piece ids of each word (its BPE segmentation encoded by the model's vocabulary).

    Args:
      width: P, the padded piece count (default: the longest segmentation, at least 1).

    Raises:
      ValueError: a word segments into more than `width` pieces.
    """
    ids = [vocab.ids(bpe.segment_word(w)) for w in words]
    longest = max((len(i) for i in ids), default=1)
    width = longest if width is None else width
    if longest > width:
        raise ValueError(f"a word has {longest} pieces, more than {width=}")
    pieces = np.full((len(words), max(width, 1)), PAD, np.int32)
    for row, i in enumerate(ids):
        pieces[row, : len(i)] = i
    return SubwordTable(pieces, np.array([len(i) for i in ids], np.int32))


def fit_words(bpe: BPE, words: Sequence[str], max_pieces: int) -> list[str]:
    """The longest prefix of `words` whose segmentation has at most `max_pieces` pieces."""
    total = 0
    for n, w in enumerate(words):
        total += len(bpe.segment_word(w))
        if total > max_pieces:
            return list(words[:n])
    return list(words)


def word_starts(bpe: BPE, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """(first piece index, piece count) of each word in the segmented sentence."""
    lengths = [len(bpe.segment_word(w)) for w in words]
    return [int(s) for s in np.cumsum([0, *lengths[:-1]])] if words else [], lengths


def mean_piece_embeddings(embedding: ArrayLike, pieces: ArrayLike, lengths: ArrayLike) -> Array:
    """(N, E) mean embedding of each word's pieces (padding excluded)."""
    embedding, pieces, lengths = jnp.asarray(embedding), jnp.asarray(pieces), jnp.asarray(lengths)
    keep = jnp.arange(pieces.shape[1])[None, :] < lengths[:, None]
    summed = jnp.einsum("np,npe->ne", keep.astype(embedding.dtype), jnp.take(embedding, pieces, 0))
    return summed / jnp.maximum(lengths, 1)[:, None].astype(embedding.dtype)


def subword_knn(
    embedding: ArrayLike,
    queries: SubwordTable,
    candidates: SubwordTable,
    exclude: ArrayLike,
    *,
    k: int = 10,
) -> Array:
    """(Q, k) indices of the k candidate words nearest each query word.

    Similarity is the cosine of mean piece embeddings (`mean_piece_embeddings`); candidate
    ``exclude[q]`` (the query word itself, -1 if it is not a candidate) is never a neighbour.

    Raises:
      ValueError: k outside [1, number of candidates).
    """
    n = candidates.pieces.shape[0]
    if not 1 <= k < n:
        raise ValueError(f"{k=} must be in [1, number of candidate words {n})")

    def unit(table):
        m = mean_piece_embeddings(embedding, table.pieces, table.lengths)
        return m / jnp.maximum(jnp.linalg.norm(m, axis=-1, keepdims=True), 1e-12)

    sim = unit(queries) @ unit(candidates).T
    sim = jnp.where(jnp.arange(n)[None, :] == jnp.asarray(exclude)[:, None], -jnp.inf, sim)
    return jax.lax.top_k(sim, k)[1].astype(jnp.int32)


class GradientTerms(NamedTuple):
    """Per-batch products the word scores are gathered from."""

    piece_gain: Array  # (B, S, V) g_s . e_v
    span_gain: Array  # (B, W, V) (sum of g over word i's slots) . e_v
    baseline: Array  # (B, W) sum over word i's slots of g_s . e_{x_s}


def gradient_terms(
    grad: ArrayLike, embedding: ArrayLike, src: ArrayLike, starts: ArrayLike, lengths: ArrayLike
) -> GradientTerms:
    """`GradientTerms` from source-piece gradients (B, S, E) and word spans (B, W)."""
    grad, embedding, src = jnp.asarray(grad), jnp.asarray(embedding), jnp.asarray(src)
    starts, lengths = jnp.asarray(starts), jnp.asarray(lengths)
    slots = jnp.arange(src.shape[1])[None, None, :]
    member = ((slots >= starts[..., None]) & (slots < (starts + lengths)[..., None])).astype(
        grad.dtype
    )  # (B, W, S)
    piece_gain = jnp.einsum("bse,ve->bsv", grad, embedding)
    span_gain = jnp.einsum("bws,bse,ve->bwv", member, grad, embedding)
    current = jnp.einsum("bse,bse->bs", grad, jnp.take(embedding, src, axis=0))
    return GradientTerms(piece_gain, span_gain, jnp.einsum("bws,bs->bw", member, current))


def subword_first_order(
    terms: GradientTerms,
    starts: ArrayLike,
    lengths: ArrayLike,
    pieces: ArrayLike,
    piece_lengths: ArrayLike,
) -> Array:
    """First-order scores (B, W, C) of replacing word i by candidate c (module docstring).

    Args:
      terms: `gradient_terms` of the batch.
      starts, lengths: (B, W) first piece and piece count of each word.
      pieces: candidate piece ids, (C, P) shared by every word or (B, W, C, P) per word.
      piece_lengths: their piece counts, (C,) or (B, W, C).
    """
    starts, lengths = jnp.asarray(starts), jnp.asarray(lengths)
    pieces, piece_lengths = jnp.asarray(pieces), jnp.asarray(piece_lengths)
    b, w = starts.shape
    c, p = pieces.shape[-2:]
    pieces = jnp.broadcast_to(pieces, (b, w, c, p))
    piece_lengths = jnp.broadcast_to(piece_lengths, (b, w, c))
    s = terms.piece_gain.shape[1]
    same = jnp.zeros((b, w, c), terms.piece_gain.dtype)
    spread = jnp.zeros((b, w, c), terms.piece_gain.dtype)
    for j in range(p):
        inside = j < piece_lengths
        row = jnp.clip(starts + j, 0, s - 1)[..., None]  # (B, W, 1)
        at_slot = jnp.take_along_axis(terms.piece_gain, row, axis=1)  # (B, W, V)
        same += jnp.where(inside, jnp.take_along_axis(at_slot, pieces[..., j], axis=2), 0.0)
        spread += jnp.where(inside, jnp.take_along_axis(terms.span_gain, pieces[..., j], 2), 0.0)
    mean = spread / jnp.maximum(piece_lengths, 1).astype(spread.dtype)
    gain = jnp.where(piece_lengths == lengths[..., None], same, mean)
    return gain - terms.baseline[..., None]


class SubwordBatch(NamedTuple):
    """A batch of segmented sources, their attackable words and CharSwap variants.

    W words per row (padded); K neighbours; C CharSwap variants of P pieces per word.
    """

    src: Array  # (B, S) piece ids
    tgt_in: Array  # (B, T)
    tgt_out: Array  # (B, T)
    starts: Array  # (B, W) first piece of each word
    lengths: Array  # (B, W) piece count (0: no word)
    position_ok: Array  # (B, W) the word may be attacked
    self_index: Array  # (B, W) the word's index in the candidate words, -1 if absent
    knn: Array  # (B, W, K) candidate-word indices of its nearest neighbours
    swap_pieces: Array  # (B, W, C, P) CharSwap variants' piece ids
    swap_lengths: Array  # (B, W, C) their piece counts (0: no variant)


class TopCandidates(NamedTuple):
    """The `top_k` first-order candidates of one setting (B, top_k each)."""

    score: Array  # predicted loss change (-inf: not a valid candidate)
    position: Array  # word index
    choice: Array  # candidate-word index (unconstrained, knn) or CharSwap variant index


def allowed_scores(
    scores: Array,
    choice: Array,
    new_lengths: Array,
    batch: SubwordBatch,
    *,
    max_pieces: int,
    exclude_self: bool,
) -> Array:
    """`scores` (B, W, C) with -inf where a candidate is not allowed: the position may not
    be attacked, the variant is padding, the candidate is the word itself, or the perturbed
    sentence would exceed `max_pieces` pieces."""
    n_pieces = (batch.src != PAD).sum(axis=1)
    ok = batch.position_ok[..., None] & (new_lengths > 0)
    ok &= n_pieces[:, None, None] - batch.lengths[..., None] + new_lengths <= max_pieces
    if exclude_self:
        ok &= choice != batch.self_index[..., None]
    return jnp.where(ok, scores, -jnp.inf)


def top_candidates(scores: Array, choice: Array, top_k: int) -> TopCandidates:
    """The `top_k` best (position, candidate) pairs of (B, W, C) scores."""
    b, w, c = scores.shape
    best, flat = jax.lax.top_k(scores.reshape(b, w * c), min(top_k, w * c))
    picked = jnp.take_along_axis(choice.reshape(b, w * c), flat, axis=1)
    return TopCandidates(best, (flat // c).astype(jnp.int32), picked.astype(jnp.int32))


def first_order_candidates(
    logits_fn: SeqLogitsFn,
    embedding: ArrayLike,
    batch: SubwordBatch,
    words: SubwordTable,
    *,
    settings: tuple[str, ...] = SETTINGS,
    top_k: int = 5,
    max_pieces: int = 32,
) -> tuple[Array, dict[str, TopCandidates]]:
    """Clean adversarial losses (B,) and each setting's `top_k` first-order candidates.

    One backward pass; every setting is scored from the same gradient.

    Args:
      logits_fn: (src_emb (B, S, E), src_mask (B, S), tgt_in (B, T)) -> logits.
      embedding: (V, E) source piece embeddings.
      batch: `SubwordBatch`.
      words: candidate words of the "unconstrained" and "knn" settings (`piece_table`).
      settings: any of "unconstrained", "knn", "charswap".
      top_k: candidates kept per setting (>= 1).
      max_pieces: the longest perturbed source allowed.

    Raises:
      ValueError: an unknown setting or top_k < 1.
    """
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown or top_k < 1:
        raise ValueError(f"settings {unknown} must be in {SETTINGS} and {top_k=} >= 1")
    embedding = jnp.asarray(embedding)
    clean, grad = loss_and_embedding_grad(
        logits_fn, embedding, batch.src, batch.tgt_in, batch.tgt_out
    )
    terms = gradient_terms(grad, embedding, batch.src, batch.starts, batch.lengths)
    out = {}
    word_lengths = jnp.asarray(words.lengths)
    if "unconstrained" in settings or "knn" in settings:
        every = subword_first_order(terms, batch.starts, batch.lengths, words.pieces, words.lengths)
        ids = jnp.broadcast_to(jnp.arange(every.shape[-1], dtype=jnp.int32), every.shape)
    if "unconstrained" in settings:
        lengths = jnp.broadcast_to(word_lengths, every.shape)
        ok = allowed_scores(every, ids, lengths, batch, max_pieces=max_pieces, exclude_self=True)
        out["unconstrained"] = top_candidates(ok, ids, top_k)
    if "knn" in settings:
        near = jnp.take_along_axis(every, batch.knn, axis=2)
        lengths = jnp.take(word_lengths, batch.knn)
        ok = allowed_scores(
            near, batch.knn, lengths, batch, max_pieces=max_pieces, exclude_self=True
        )
        out["knn"] = top_candidates(ok, batch.knn, top_k)
    if "charswap" in settings:
        swaps = subword_first_order(
            terms, batch.starts, batch.lengths, batch.swap_pieces, batch.swap_lengths
        )
        index = jnp.broadcast_to(jnp.arange(swaps.shape[-1], dtype=jnp.int32), swaps.shape)
        ok = allowed_scores(
            swaps, index, batch.swap_lengths, batch, max_pieces=max_pieces, exclude_self=False
        )
        out["charswap"] = top_candidates(ok, index, top_k)
    return clean, {s: out[s] for s in settings}


def exact_losses(
    logits_fn: SeqLogitsFn, embedding: ArrayLike, src: ArrayLike, tgt_in: ArrayLike,
    tgt_out: ArrayLike,
) -> Array:  # fmt: skip
    """(R,) adversarial losses of padded source piece ids (R, L) under teacher forcing."""
    src = jnp.asarray(src)
    logits = logits_fn(jnp.take(jnp.asarray(embedding), src, axis=0), src != PAD, tgt_in)
    return adversarial_loss(logits, tgt_out)
