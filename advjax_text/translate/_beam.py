"""Beam search for the seq2seq models (LSTM or Transformer), pure and jittable.

Hypotheses are scored with the length normalisation of Wu et al. (2016, Eq. 14):

    score(Y) = log P(Y | X) / lp(Y),   lp(Y) = ((5 + |Y|) / 6) ** alpha,

where |Y| counts the output tokens up to and including the first <eos> (all of them
when there is none). alpha = 0 is the plain summed log-probability; alpha = 1 is close
to the average log-probability. The coverage penalty of Wu et al. is not used.

Search: `beam_size` hypotheses per sentence, all in one fixed-size (B, k, max_len + 1)
buffer. At each step every live hypothesis is extended by every token, a finished one
only by PAD at no cost (so it keeps its score and stays in the beam), and the k best
candidates by normalised score survive. After `max_len` steps (or once every hypothesis
has ended) the best normalised score wins. Ranking live and finished hypotheses by the same normalised score makes beam size 1
exactly greedy decoding (all live candidates then share one length) and makes the search
exhaustive when k >= V ** (max_len - 1). The decoder is recomputed over the whole prefix
buffer at each step (no cache): correct first, and cheap at Multi30k lengths.

Reference: Y. Wu et al. 2016, "Google's Neural Machine Translation System", Sec. 7.
"""

from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from advjax.types import Array, ArrayLike
from advjax_text.tokenize import BOS, EOS, PAD

NextLogitsFn = Callable[[Array, Array], Array]
"""(tgt_in (N, max_len), t) -> logits (N, V) of the token after position t."""


class BeamResult(NamedTuple):
    """The best hypothesis of each sentence."""

    tokens: Array  # (B, max_len) ids, PAD after the first <eos>
    score: Array  # (B,) normalised log-probability (see the module docstring)


def length_penalty(length: ArrayLike, alpha: float) -> Array:
    """Wu et al. (2016) length penalty ((5 + length) / 6) ** alpha."""
    return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def sequence_scores(logits: ArrayLike, tokens: ArrayLike, *, alpha: float) -> Array:
    """Normalised log-probabilities (B,) of output `tokens` (B, T) under teacher-forced
    `logits` (B, T, V) (computed with target input [<bos>, tokens[:-1]]).

    Only tokens up to and including the first <eos> count, as in `beam_search`.
    """
    logits, tokens = jnp.asarray(logits), jnp.asarray(tokens)
    logp = jax.nn.log_softmax(logits, axis=-1)
    token_logp = jnp.take_along_axis(logp, tokens[..., None], axis=-1)[..., 0]
    eos_before = jnp.cumsum(tokens == EOS, axis=1) - (tokens == EOS)
    scored = eos_before == 0
    total = jnp.sum(jnp.where(scored, token_logp, 0.0), axis=1)
    return total / length_penalty(jnp.sum(scored, axis=1), alpha)


def beam_search(
    next_logits: NextLogitsFn,
    batch: int,
    *,
    beam_size: int,
    max_len: int,
    alpha: float = 0.6,
) -> BeamResult:
    """Beam search for `batch` sentences whose rows are tiled `beam_size` times.

    Args:
      next_logits: maps target input ids (batch * beam_size, max_len) and a step t to the
        logits (batch * beam_size, V) of the token after position t; row r belongs to
        sentence r // beam_size (the source memory is tiled that way by the caller).
      batch: number of sentences B.
      beam_size: hypotheses kept per sentence (>= 1); 1 is greedy decoding.
      max_len: output tokens per hypothesis.
      alpha: length-normalisation exponent (>= 0), see the module docstring.

    Returns:
      `BeamResult` with (B, max_len) tokens and (B,) scores.

    Raises:
      ValueError: beam_size < 1, max_len < 1 or alpha < 0.

    Example:
      >>> out = beam_search(fn, 8, beam_size=4, max_len=32, alpha=0.6)
    """
    if beam_size < 1 or max_len < 1:
        raise ValueError(f"{beam_size=} and {max_len=} must be >= 1")
    if alpha < 0:
        raise ValueError(f"{alpha=} must be >= 0")
    b, k = batch, beam_size
    seq = jnp.full((b, k, max_len + 1), PAD, jnp.int32).at[:, :, 0].set(BOS)
    logp = jnp.full((b, k), -jnp.inf).at[:, 0].set(0.0)  # one live hypothesis at first
    done = jnp.zeros((b, k), bool)
    length = jnp.zeros((b, k), jnp.int32)

    def step(state):
        t, seq, logp, done, length = state
        logits = next_logits(seq[:, :, :max_len].reshape(b * k, max_len), t)
        v = logits.shape[-1]
        token_logp = jax.nn.log_softmax(logits, axis=-1).reshape(b, k, v)
        pad_only = jnp.where(jnp.arange(v) == PAD, 0.0, -jnp.inf)[None, None, :]
        token_logp = jnp.where(done[..., None], pad_only, token_logp)
        cand = logp[..., None] + token_logp  # (B, k, V)
        cand_len = jnp.where(done, length, length + 1)
        norm = cand / length_penalty(cand_len, alpha)[..., None]
        _, flat = jax.lax.top_k(norm.reshape(b, k * v), k)  # (B, k)
        parent, token = flat // v, (flat % v).astype(jnp.int32)
        take = lambda a: jnp.take_along_axis(a, parent, axis=1)  # noqa: E731
        seq = jnp.take_along_axis(seq, parent[..., None], axis=1)
        seq = jax.lax.dynamic_update_index_in_dim(seq, token, t + 1, axis=2)
        logp = jnp.take_along_axis(cand.reshape(b, k * v), flat, axis=1)
        return t + 1, seq, logp, take(done) | (token == EOS), take(cand_len)

    def running(state):  # once every hypothesis has ended, further steps only add PAD
        return (state[0] < max_len) & ~jnp.all(state[3])

    init = (jnp.int32(0), seq, logp, done, length)
    _, seq, logp, _, length = jax.lax.while_loop(running, step, init)
    final = logp / length_penalty(length, alpha)
    best = jnp.argmax(final, axis=1)
    tokens = jnp.take_along_axis(seq, best[:, None, None], axis=1)[:, 0, 1:]
    return BeamResult(tokens, jnp.take_along_axis(final, best[:, None], axis=1)[:, 0])


def beam_decode(
    model: nn.Module,
    params,
    src: ArrayLike,
    *,
    beam_size: int,
    max_len: int,
    alpha: float = 0.6,
) -> BeamResult:
    """Beam-search translations of (B, S) source ids (PAD = 0) with any model exposing
    `embed_src`, `encode` and `next_logits` (`LSTMSeq2Seq`, `TransformerSeq2Seq`)."""
    src = jnp.asarray(src)
    mask = src != PAD

    def run(mdl):
        memory = mdl.encode(mdl.embed_src(src), mask)
        tile = lambda a: jnp.repeat(a, beam_size, axis=0)  # noqa: E731
        memory, tiled_mask = jax.tree.map(tile, memory), tile(mask)
        return beam_search(
            lambda tgt_in, t: mdl.next_logits(memory, tiled_mask, tgt_in, t),
            src.shape[0], beam_size=beam_size, max_len=max_len, alpha=alpha,
        )  # fmt: skip

    return nn.apply(run, model)({"params": params})
