"""Gradient-based one-word substitution attacks on seq2seq models (Michel et al. 2019, Sec. 4).

The adversarial loss of a source x and reference y is, under teacher forcing,

    L_adv(x, y) = sum_t log(1 - p(y_t | x, y_<t))        (per example; to be MAXIMISED)

computed stably as logsumexp over the wrong tokens minus logsumexp over all tokens.
Replacing source word i by w changes it, to first order around the source embeddings e,
by (e_w - e_{x_i}) . grad_{e_i} L_adv: one backward pass and one (B, S, E) x (E, V)
product score every (position, replacement) pair. The `top_k` best pairs are then
re-scored exactly (one batched forward pass) and the best is returned. Settings:

- "unconstrained": any word of the source vocabulary;
- "knn": one of the 10 nearest neighbours of the original word (cosine similarity of
  the model's source embeddings, `knn_table`);
- "charswap": the word becomes out-of-vocabulary (<unk> for a word-level model); the
  surface string is made by `advjax_text.translate` outside this module.

Attacks take `logits_fn(src_emb, src_mask, tgt_in) -> logits`, so any model that maps
source embeddings to teacher-forced logits works (`model_logits_fn` builds it for the
LSTM and the Transformer, whose table is `params["src_embedding"]`). Pure and jittable; no I/O.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from advjax.types import Array, ArrayLike
from advjax_text.tokenize import PAD, UNK

SETTINGS = ("unconstrained", "knn", "charswap")
SeqLogitsFn = Callable[[Array, Array, Array], Array]


def model_logits_fn(model, params) -> SeqLogitsFn:
    """The attacks' `logits_fn` for a Flax seq2seq module (`LSTMSeq2Seq`,
    `TransformerSeq2Seq`: anything with `logits_from_embeddings`) at `params`, no dropout."""

    def logits_fn(src_emb: Array, src_mask: Array, tgt_in: Array) -> Array:
        return model.apply(
            {"params": params}, src_emb, src_mask, tgt_in, method="logits_from_embeddings"
        )

    return logits_fn


def adversarial_loss(logits: ArrayLike, tgt_out: ArrayLike) -> Array:
    """Per-example sum over non-PAD steps of log(1 - p(correct token)); <= 0, maximised.

    Args:
      logits: (B, T, V) teacher-forced logits.
      tgt_out: (B, T) correct next tokens, PAD where there is none.

    Returns:
      (B,) losses.
    """
    logits, tgt_out = jnp.asarray(logits), jnp.asarray(tgt_out)
    onehot = jax.nn.one_hot(tgt_out, logits.shape[-1], dtype=bool)
    log_wrong = jax.nn.logsumexp(jnp.where(onehot, -jnp.inf, logits), axis=-1)
    log_all = jax.nn.logsumexp(logits, axis=-1)
    return jnp.sum(jnp.where(tgt_out != PAD, log_wrong - log_all, 0.0), axis=-1)


def loss_and_embedding_grad(
    logits_fn: SeqLogitsFn, embedding: Array, src: Array, tgt_in: Array, tgt_out: Array
) -> tuple[Array, Array]:
    """(B,) adversarial losses and their gradients (B, S, E) w.r.t. the source embeddings."""
    src_mask = src != PAD

    def total(emb):
        loss = adversarial_loss(logits_fn(emb, src_mask, tgt_in), tgt_out)
        return loss.sum(), loss

    grad, loss = jax.grad(total, has_aux=True)(jnp.take(embedding, src, axis=0))
    return loss, grad


def first_order_scores(grad: ArrayLike, embedding: ArrayLike, src: ArrayLike) -> Array:
    """Predicted loss change (e_w - e_{x_i}) . g_i for every position i and word w: (B, S, V)."""
    grad, embedding, src = jnp.asarray(grad), jnp.asarray(embedding), jnp.asarray(src)
    gain = jnp.einsum("bse,ve->bsv", grad, embedding)
    current = jnp.einsum("bse,bse->bs", grad, jnp.take(embedding, src, axis=0))
    return gain - current[..., None]


def knn_table(embedding: ArrayLike, word_mask: ArrayLike, *, k: int = 10) -> Array:
    """(V, k) ids of each token's k nearest words by cosine similarity (itself excluded).

    Only tokens with `word_mask` True are neighbours. Raises ValueError if k is too large.
    """
    embedding, word_mask = jnp.asarray(embedding), jnp.asarray(word_mask, bool)
    if not 1 <= k < int(word_mask.sum()):
        raise ValueError(f"{k=} must be in [1, number of words {int(word_mask.sum())})")
    unit = embedding / jnp.maximum(jnp.linalg.norm(embedding, axis=-1, keepdims=True), 1e-12)
    sim = unit @ unit.T
    v = embedding.shape[0]
    sim = jnp.where(word_mask[None, :] & ~jnp.eye(v, dtype=bool), sim, -jnp.inf)
    return jax.lax.top_k(sim, k)[1].astype(jnp.int32)


class OneWordAttack(NamedTuple):
    """Result of a one-word substitution attack on a batch."""

    adv_src: Array  # (B, S) perturbed source ids
    position: Array  # (B,) substituted position (-1 when no candidate existed)
    replacement: Array  # (B,) new id at that position
    first_order: Array  # (B,) first-order predicted loss change of the chosen pair
    loss: Array  # (B,) exact adversarial loss at adv_src
    clean_loss: Array  # (B,) adversarial loss at the original source


def candidate_scores(
    scores: Array, src: Array, *, setting: str, word_mask: Array, knn: Array | None
) -> tuple[Array, Array]:
    """(B, S, K) candidate ids and their scores, -inf where not allowed."""
    b, s, v = scores.shape
    position_ok = jnp.take(word_mask, src) & (src != PAD)
    if setting == "unconstrained":
        ids = jnp.broadcast_to(jnp.arange(v, dtype=jnp.int32), (b, s, v))
        ok = word_mask[None, None, :] & (ids != src[..., None])
    elif setting == "knn":
        if knn is None:
            raise ValueError("setting='knn' needs a knn table")
        ids = jnp.take(knn, src, axis=0)
        ok = jnp.take(word_mask, ids) & (ids != src[..., None])
    elif setting == "charswap":
        ids = jnp.full((b, s, 1), UNK, jnp.int32)
        ok = jnp.ones((b, s, 1), bool)
    else:
        raise ValueError(f"setting={setting!r} must be one of {SETTINGS}")
    picked = jnp.take_along_axis(scores, ids, axis=-1)
    return ids, jnp.where(ok & position_ok[..., None], picked, -jnp.inf)


def one_word_attack(
    logits_fn: SeqLogitsFn,
    embedding: ArrayLike,
    src: ArrayLike,
    tgt_in: ArrayLike,
    tgt_out: ArrayLike,
    *,
    setting: str,
    word_mask: ArrayLike,
    knn: ArrayLike | None = None,
    top_k: int = 5,
) -> OneWordAttack:
    """Substitute one source word to maximise the adversarial loss (Michel et al. 2019).

    Args:
      logits_fn: (src_emb (B, S, E), src_mask (B, S), tgt_in (B, T)) -> logits (B, T, V').
      embedding: (V, E) source embedding matrix the model looks ids up in.
      src: (B, S) source ids (PAD = 0); tgt_in / tgt_out: teacher-forcing input and
        reference next tokens (B, T).
      setting: "unconstrained", "knn" or "charswap" (see the module docstring).
      word_mask: (V,) True for tokens that may be attacked and used as replacements
        (words: no specials, no punctuation).
      knn: (V, k) neighbour table (`knn_table`), required for "knn".
      top_k: candidates re-scored exactly (>= 1).

    Returns:
      `OneWordAttack`; rows without any allowed candidate are left unchanged (position -1).

    Raises:
      ValueError: unknown setting, top_k < 1, or a missing knn table.

    Example:
      >>> out = one_word_attack(fn, emb, src, tgt_in, tgt_out, setting="knn",
      ...                       word_mask=mask, knn=knn_table(emb, mask))
    """
    return one_word_attacks(
        logits_fn, embedding, src, tgt_in, tgt_out, settings=(setting,), word_mask=word_mask,
        knn=knn, top_k=top_k,
    )[setting]  # fmt: skip


def one_word_attacks(
    logits_fn: SeqLogitsFn,
    embedding: ArrayLike,
    src: ArrayLike,
    tgt_in: ArrayLike,
    tgt_out: ArrayLike,
    *,
    settings: tuple[str, ...] = SETTINGS,
    word_mask: ArrayLike,
    knn: ArrayLike | None = None,
    top_k: int = 5,
) -> dict[str, OneWordAttack]:
    """`one_word_attack` for several settings sharing one gradient pass: {setting: result}."""
    for setting in settings:
        if setting not in SETTINGS:
            raise ValueError(f"setting={setting!r} must be one of {SETTINGS}")
    if "knn" in settings and knn is None:
        raise ValueError("setting='knn' needs a knn table")
    if top_k < 1:
        raise ValueError(f"{top_k=} must be >= 1")
    embedding, src = jnp.asarray(embedding), jnp.asarray(src)
    tgt_in, tgt_out = jnp.asarray(tgt_in), jnp.asarray(tgt_out)
    word_mask = jnp.asarray(word_mask, bool)
    clean_loss, grad = loss_and_embedding_grad(logits_fn, embedding, src, tgt_in, tgt_out)
    scores = first_order_scores(grad, embedding, src)
    tops = []
    for setting in settings:
        ids, cand = candidate_scores(
            scores, src, setting=setting, word_mask=word_mask,
            knn=None if knn is None else jnp.asarray(knn),
        )  # fmt: skip
        tops.append(_top_candidates(src, ids, cand, top_k))
    # one forward pass re-scores the candidates of every setting exactly
    flat = jnp.concatenate([t[0].reshape(-1, src.shape[1]) for t in tops])
    reps = flat.shape[0] // src.shape[0]
    logits = logits_fn(jnp.take(embedding, flat, axis=0), flat != PAD, jnp.tile(tgt_in, (reps, 1)))
    exact_all = adversarial_loss(logits, jnp.tile(tgt_out, (reps, 1)))
    out, offset = {}, 0
    for setting, (cands, pos, new, best, valid) in zip(settings, tops):
        n = cands.shape[0] * cands.shape[1]
        exact = exact_all[offset : offset + n].reshape(cands.shape[0], cands.shape[1]).T
        offset += n
        out[setting] = _pick(src, cands, pos, new, best, valid, exact, clean_loss)
    return out


def _top_candidates(src, ids, scores, top_k):
    """The top_k first-order candidates: perturbed sources (top_k, B, S), positions,
    replacement ids, scores and validity (B, top_k)."""
    b, s, k = ids.shape
    top_k = min(top_k, s * k)
    best, flat = jax.lax.top_k(scores.reshape(b, s * k), top_k)  # (B, top_k)
    pos, new = flat // k, jnp.take_along_axis(ids.reshape(b, s * k), flat, axis=1)
    valid = jnp.isfinite(best)
    rows = jnp.arange(s)[None, None, :] == pos[..., None]  # (B, top_k, S)
    cands = jnp.where(rows & valid[..., None], new[..., None], src[:, None, :])
    return cands.swapaxes(0, 1), pos, new, best, valid


def _pick(src, cands, pos, new, best, valid, exact, clean_loss):
    """Keep, per example, the valid candidate with the largest exact adversarial loss."""
    exact = jnp.where(valid, exact, -jnp.inf)
    choice = jnp.argmax(exact, axis=1)
    found = valid.any(axis=1)
    pick = lambda a: jnp.take_along_axis(a, choice[:, None], axis=1)[:, 0]  # noqa: E731
    adv = jnp.take_along_axis(cands.swapaxes(0, 1), choice[:, None, None], axis=1)[:, 0]
    return OneWordAttack(
        adv_src=jnp.where(found[:, None], adv, src),
        position=jnp.where(found, pick(pos), -1).astype(jnp.int32),
        replacement=jnp.where(found, pick(new), -1).astype(jnp.int32),
        first_order=jnp.where(found, pick(best), 0.0),
        loss=jnp.where(found, pick(exact), clean_loss),
        clean_loss=clean_loss,
    )
