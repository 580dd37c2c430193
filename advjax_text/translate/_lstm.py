"""An LSTM encoder-decoder with attention (Luong et al. 2015) in Flax Linen.

Bidirectional LSTM encoder, LSTM decoder started from the projected mean encoder state,
"general" attention over the encoder states after each decoder step, then
tanh(W [h; context]) -> vocabulary logits. The model is split so that attacks can work
on source *embeddings*: `embed_src` maps ids to vectors and `logits_from_embeddings`
maps (source vectors, source mask, target input ids) to logits under teacher forcing.
Greedy decoding runs as one `lax.scan`; `next_logits` serves beam search. No I/O.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from advjax.types import Array, ArrayLike
from advjax_text.tokenize import BOS, EOS, PAD


@dataclasses.dataclass(frozen=True, kw_only=True)
class LSTMConfig:
    """Model sizes; `src_vocab` / `tgt_vocab` include the 4 special tokens."""

    src_vocab: int
    tgt_vocab: int
    embed_dim: int = 256
    hidden_dim: int = 256
    dropout_rate: float = 0.2

    def __post_init__(self):
        for name in ("src_vocab", "tgt_vocab", "embed_dim", "hidden_dim"):
            if getattr(self, name) < 1 or (name.endswith("vocab") and getattr(self, name) < 5):
                raise ValueError(f"{name}={getattr(self, name)!r} is too small")
        if self.hidden_dim % 2:
            raise ValueError(f"hidden_dim={self.hidden_dim} must be even (two encoder directions)")
        if not 0 <= self.dropout_rate < 1:
            raise ValueError(f"dropout_rate={self.dropout_rate} must be in [0, 1)")


def lstm_scan(
    params: tuple[Array, Array, Array], xs: Array, mask: Array, carry: tuple[Array, Array]
) -> tuple[tuple[Array, Array], Array]:
    """Run an LSTM over (B, T, D) inputs; masked steps (mask False) keep the state.

    Returns the final (h, c) and the (B, T, H) hidden states.
    """
    wx, wh, b = params
    xproj = jnp.einsum("btd,dg->btg", xs, wx) + b[None, None, :]

    def step(state, inputs):
        h, c = state
        xp, m = inputs
        i, f, g, o = jnp.split(xp + h @ wh, 4, axis=-1)
        c_new = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
        m = m[:, None]
        h_new, c_new = jnp.where(m, h_new, h), jnp.where(m, c_new, c)
        return (h_new, c_new), h_new

    carry, hs = jax.lax.scan(step, carry, (xproj.swapaxes(0, 1), mask.T))
    return carry, hs.swapaxes(0, 1)


def _lstm_params(module: nn.Module, name: str, in_dim: int, hidden: int):
    init = nn.initializers.variance_scaling(1.0, "fan_avg", "uniform")
    bias = jnp.zeros((4 * hidden,)).at[hidden : 2 * hidden].set(1.0)  # forget-gate bias 1
    return (
        module.param(f"{name}_wx", init, (in_dim, 4 * hidden)),
        module.param(f"{name}_wh", nn.initializers.orthogonal(), (hidden, 4 * hidden)),
        module.param(f"{name}_b", lambda _k, _s: bias, (4 * hidden,)),
    )


class LSTMSeq2Seq(nn.Module):
    """Word- or subword-level LSTM translation model with attention."""

    config: LSTMConfig

    def setup(self):
        cfg = self.config
        emb_init = nn.initializers.normal(stddev=cfg.embed_dim**-0.5)
        self.src_embedding = self.param("src_embedding", emb_init, (cfg.src_vocab, cfg.embed_dim))
        self.tgt_embed = nn.Embed(cfg.tgt_vocab, cfg.embed_dim, embedding_init=emb_init)
        half = cfg.hidden_dim // 2
        self.enc_fwd = _lstm_params(self, "enc_fwd", cfg.embed_dim, half)
        self.enc_bwd = _lstm_params(self, "enc_bwd", cfg.embed_dim, half)
        self.dec = _lstm_params(self, "dec", cfg.embed_dim, cfg.hidden_dim)
        self.init_proj = nn.Dense(cfg.hidden_dim)
        self.attn = nn.Dense(cfg.hidden_dim, use_bias=False)
        self.combine = nn.Dense(cfg.hidden_dim)
        self.out = nn.Dense(cfg.tgt_vocab)
        self.drop = nn.Dropout(cfg.dropout_rate)

    def embed_src(self, src: Array) -> Array:
        """(B, S) source ids -> (B, S, E) embeddings."""
        return jnp.take(self.src_embedding, src, axis=0)

    def encode(self, src_emb: Array, src_mask: Array, *, train: bool = False):
        """Encoder states (B, S, H) and the decoder's initial (h, c)."""
        x = self.drop(src_emb, deterministic=not train)
        b, half = x.shape[0], self.config.hidden_dim // 2
        zeros = (jnp.zeros((b, half)), jnp.zeros((b, half)))
        _, fwd = lstm_scan(self.enc_fwd, x, src_mask, zeros)
        _, bwd = lstm_scan(self.enc_bwd, x[:, ::-1], src_mask[:, ::-1], zeros)
        enc = jnp.concatenate([fwd, bwd[:, ::-1]], axis=-1) * src_mask[..., None]
        mean = enc.sum(1) / jnp.maximum(src_mask.sum(1, keepdims=True), 1)
        h0 = jnp.tanh(self.init_proj(mean))
        return enc, (h0, jnp.zeros_like(h0))

    def _attend(self, h: Array, enc: Array, src_mask: Array, *, train: bool) -> Array:
        """Decoder states (B, T, H) -> vocabulary logits (B, T, V)."""
        scores = jnp.einsum("bth,bsh->bts", self.attn(h), enc)
        scores = jnp.where(src_mask[:, None, :], scores, -1e9)
        context = jnp.einsum("bts,bsh->bth", jax.nn.softmax(scores, axis=-1), enc)
        combined = jnp.tanh(self.combine(jnp.concatenate([h, context], axis=-1)))
        return self.out(self.drop(combined, deterministic=not train))

    def logits_from_embeddings(
        self, src_emb: Array, src_mask: Array, tgt_in: Array, *, train: bool = False
    ) -> Array:
        """Teacher-forced logits (B, T, V) from source embeddings and target input ids."""
        enc, carry = self.encode(src_emb, src_mask, train=train)
        y = self.drop(self.tgt_embed(tgt_in), deterministic=not train)
        _, h = lstm_scan(self.dec, y, jnp.ones(tgt_in.shape, bool), carry)
        return self._attend(h, enc, src_mask, train=train)

    def __call__(self, src: Array, tgt_in: Array, *, train: bool = False) -> Array:
        """Teacher-forced logits (B, T, V) from source ids (PAD = 0) and target input ids."""
        return self.logits_from_embeddings(self.embed_src(src), src != PAD, tgt_in, train=train)

    def next_logits(self, memory, src_mask: Array, tgt_in: Array, t: ArrayLike) -> Array:
        """Logits (B, V) of the token after position `t` of `tgt_in`, given `memory` =
        `encode(...)`; the decoder re-reads the whole prefix (used by beam search)."""
        enc, carry = memory
        y = self.tgt_embed(tgt_in)
        _, h = lstm_scan(self.dec, y, jnp.ones(tgt_in.shape, bool), carry)
        h_t = jax.lax.dynamic_slice_in_dim(h, t, 1, axis=1)
        return self._attend(h_t, enc, src_mask, train=False)[:, 0]

    def greedy(self, src_emb: Array, src_mask: Array, max_len: int) -> Array:
        """Greedy decoding: (B, max_len) output ids, PAD after the first <eos>."""
        enc, carry = self.encode(src_emb, src_mask)
        b = src_emb.shape[0]

        def step(state, _):
            (h, c), prev, done = state
            y = self.tgt_embed(prev)[:, None]
            (h, c), hs = lstm_scan(self.dec, y, jnp.ones((b, 1), bool), (h, c))
            token = jnp.argmax(self._attend(hs, enc, src_mask, train=False)[:, 0], -1)
            token = jnp.where(done, PAD, token).astype(jnp.int32)
            return ((h, c), token, done | (token == EOS)), token

        init = (carry, jnp.full((b,), BOS, jnp.int32), jnp.zeros((b,), bool))
        _, tokens = jax.lax.scan(step, init, None, length=max_len)
        return tokens.T


def greedy_decode(model: nn.Module, params, src: ArrayLike, *, max_len: int) -> Array:
    """Greedy translations (B, max_len) of (B, S) source ids with any model exposing
    `embed_src` and `greedy` (`LSTMSeq2Seq`, `TransformerSeq2Seq`)."""
    src = jnp.asarray(src)

    def run(mdl):
        return mdl.greedy(mdl.embed_src(src), src != PAD, max_len)

    return nn.apply(run, model)({"params": params})
