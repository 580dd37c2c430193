"""A pre-LayerNorm Transformer encoder-decoder (Vaswani et al. 2017) in Flax Linen.

The model exposes the same methods as `advjax_text.translate.LSTMSeq2Seq`, so training,
translation, beam search and the embedding-space attacks work with either:

- `embed_src(src)` is a plain lookup in the `src_embedding` table. Scaling by
  sqrt(model_dim) and the sinusoidal positions are added inside `encode`, so the attacks
  (which look ids up in `params["src_embedding"]` themselves) take gradients with respect
  to exactly what `embed_src` returns, one vector per token;
- `logits_from_embeddings(src_emb, src_mask, tgt_in)` gives teacher-forced logits;
- `encode` / `next_logits` split the model for step-by-step decoding;
- `greedy` decodes in one `lax.while_loop` (stopping once every sentence has ended),
  recomputing the decoder over the whole fixed-size prefix buffer at each step: quadratic
  in the length but simple, and affordable at Multi30k lengths (<= 32 tokens).

Pre-LN layers (Xiong et al. 2020) train without a learning-rate warm-up. Source padding
is masked in encoder self-attention and in cross-attention; decoder self-attention is
causal only (target padding only ever follows the last real token, which causality
already hides). Dropout on embeddings, attention weights and every residual branch. No I/O.
"""

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from advjax.types import Array, ArrayLike
from advjax_text.tokenize import BOS, EOS, PAD


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """Model sizes; `src_vocab` / `tgt_vocab` include the 4 special tokens; `max_len`
    bounds the source and target lengths (sinusoidal positions are computed up to it)."""

    src_vocab: int
    tgt_vocab: int
    model_dim: int = 256
    num_heads: int = 4
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    ff_dim: int = 1024
    dropout_rate: float = 0.1
    max_len: int = 128

    def __post_init__(self):
        for name in ("src_vocab", "tgt_vocab"):
            if getattr(self, name) < 5:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 5 (4 specials + 1)")
        for name in ("model_dim", "num_heads", "num_encoder_layers", "num_decoder_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")
        if self.ff_dim < 1 or self.max_len < 1:
            raise ValueError(f"ff_dim={self.ff_dim} and max_len={self.max_len} must be >= 1")
        if self.model_dim % self.num_heads:
            raise ValueError(f"model_dim={self.model_dim} must be divisible by {self.num_heads=}")
        if not 0 <= self.dropout_rate < 1:
            raise ValueError(f"dropout_rate={self.dropout_rate} must be in [0, 1)")


def sinusoidal_positions(length: int, dim: int) -> Array:
    """(length, dim) sin/cos position encodings (Vaswani et al. 2017, Sec. 3.5)."""
    pos = jnp.arange(length, dtype=jnp.float32)[:, None]
    freq = jnp.exp(-math.log(10000.0) * jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    angles = pos * freq[None, :]
    out = jnp.zeros((length, dim), jnp.float32)
    out = out.at[:, 0::2].set(jnp.sin(angles))
    return out.at[:, 1::2].set(jnp.cos(angles[:, : dim // 2]))


class _FeedForward(nn.Module):
    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array, *, train: bool) -> Array:
        cfg = self.config
        h = nn.relu(nn.Dense(cfg.ff_dim, kernel_init=nn.initializers.xavier_uniform())(x))
        h = nn.Dropout(cfg.dropout_rate)(h, deterministic=not train)
        return nn.Dense(cfg.model_dim, kernel_init=nn.initializers.xavier_uniform())(h)


def _attention(cfg: TransformerConfig, name: str) -> nn.MultiHeadDotProductAttention:
    return nn.MultiHeadDotProductAttention(
        num_heads=cfg.num_heads, qkv_features=cfg.model_dim, dropout_rate=cfg.dropout_rate,
        kernel_init=nn.initializers.xavier_uniform(), name=name,
    )  # fmt: skip


class EncoderLayer(nn.Module):
    """x + SelfAttn(LN(x)), then x + FF(LN(x)); `mask` (B, 1, S, S) hides source padding."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x: Array, mask: Array, *, train: bool) -> Array:
        drop = nn.Dropout(self.config.dropout_rate)
        h = nn.LayerNorm()(x)
        x = x + drop(_attention(self.config, "self_attn")(h, h, mask=mask, deterministic=not train),
                     deterministic=not train)  # fmt: skip
        h = _FeedForward(self.config)(nn.LayerNorm()(x), train=train)
        return x + drop(h, deterministic=not train)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder memory, feed-forward (pre-LN)."""

    config: TransformerConfig

    @nn.compact
    def __call__(
        self, y: Array, memory: Array, self_mask: Array, cross_mask: Array, *, train: bool
    ) -> Array:
        drop = nn.Dropout(self.config.dropout_rate)
        h = nn.LayerNorm()(y)
        h = _attention(self.config, "self_attn")(h, h, mask=self_mask, deterministic=not train)
        y = y + drop(h, deterministic=not train)
        h = nn.LayerNorm()(y)
        h = _attention(self.config, "cross_attn")(
            h, memory, mask=cross_mask, deterministic=not train
        )
        y = y + drop(h, deterministic=not train)
        h = _FeedForward(self.config)(nn.LayerNorm()(y), train=train)
        return y + drop(h, deterministic=not train)


class TransformerSeq2Seq(nn.Module):
    """Word- or subword-level Transformer translation model (same methods as LSTMSeq2Seq)."""

    config: TransformerConfig

    def setup(self):
        cfg = self.config
        emb_init = nn.initializers.normal(stddev=cfg.model_dim**-0.5)
        self.src_embedding = self.param("src_embedding", emb_init, (cfg.src_vocab, cfg.model_dim))
        self.tgt_embed = nn.Embed(cfg.tgt_vocab, cfg.model_dim, embedding_init=emb_init)
        self.encoder = [EncoderLayer(cfg) for _ in range(cfg.num_encoder_layers)]
        self.decoder = [DecoderLayer(cfg) for _ in range(cfg.num_decoder_layers)]
        self.enc_norm = nn.LayerNorm()
        self.dec_norm = nn.LayerNorm()
        self.out = nn.Dense(cfg.tgt_vocab)
        self.drop = nn.Dropout(cfg.dropout_rate)

    def _inputs(self, emb: Array, *, train: bool) -> Array:
        """Scaled embeddings plus positions, with dropout; checks the length bound."""
        length, dim = emb.shape[1], self.config.model_dim
        if length > self.config.max_len:
            raise ValueError(f"sequence length {length} exceeds max_len={self.config.max_len}")
        x = emb * math.sqrt(dim) + sinusoidal_positions(length, dim)[None]
        return self.drop(x, deterministic=not train)

    def embed_src(self, src: Array) -> Array:
        """(B, S) source ids -> (B, S, D) embeddings (a plain table lookup)."""
        return jnp.take(self.src_embedding, src, axis=0)

    def encode(self, src_emb: Array, src_mask: Array, *, train: bool = False) -> Array:
        """Encoder memory (B, S, D) from source embeddings and the (B, S) source mask."""
        x = self._inputs(src_emb, train=train)
        mask = nn.make_attention_mask(src_mask, src_mask)
        for layer in self.encoder:
            x = layer(x, mask, train=train)
        return self.enc_norm(x)

    def decoder_states(
        self, memory: Array, src_mask: Array, tgt_in: Array, *, train: bool = False
    ) -> Array:
        """Final decoder states (B, T, D) for target input ids under a causal mask."""
        y = self._inputs(self.tgt_embed(tgt_in), train=train)
        self_mask = nn.make_causal_mask(tgt_in)
        cross_mask = nn.make_attention_mask(jnp.ones(tgt_in.shape, bool), src_mask)
        for layer in self.decoder:
            y = layer(y, memory, self_mask, cross_mask, train=train)
        return self.dec_norm(y)

    def logits_from_embeddings(
        self, src_emb: Array, src_mask: Array, tgt_in: Array, *, train: bool = False
    ) -> Array:
        """Teacher-forced logits (B, T, V) from source embeddings and target input ids."""
        memory = self.encode(src_emb, src_mask, train=train)
        return self.out(self.decoder_states(memory, src_mask, tgt_in, train=train))

    def __call__(self, src: Array, tgt_in: Array, *, train: bool = False) -> Array:
        """Teacher-forced logits (B, T, V) from source ids (PAD = 0) and target input ids."""
        return self.logits_from_embeddings(self.embed_src(src), src != PAD, tgt_in, train=train)

    def next_logits(self, memory: Array, src_mask: Array, tgt_in: Array, t: ArrayLike) -> Array:
        """Logits (B, V) of the token after position `t` of `tgt_in` (later entries ignored)."""
        h = self.decoder_states(memory, src_mask, tgt_in)
        return self.out(jax.lax.dynamic_index_in_dim(h, t, axis=1, keepdims=False))

    def greedy(self, src_emb: Array, src_mask: Array, max_len: int) -> Array:
        """Greedy decoding: (B, max_len) output ids, PAD after the first <eos>."""
        memory = self.encode(src_emb, src_mask)
        b = src_emb.shape[0]
        seq = jnp.full((b, max_len + 1), PAD, jnp.int32).at[:, 0].set(BOS)

        def step(state):
            t, seq, done = state
            token = jnp.argmax(self.next_logits(memory, src_mask, seq[:, :max_len], t), -1)
            token = jnp.where(done, PAD, token).astype(jnp.int32)
            seq = jax.lax.dynamic_update_index_in_dim(seq, token, t + 1, axis=1)
            return t + 1, seq, done | (token == EOS)

        def running(state):  # the remaining steps would only write PAD
            t, _, done = state
            return (t < max_len) & ~jnp.all(done)

        init = (jnp.int32(0), seq, jnp.zeros((b,), bool))
        return jax.lax.while_loop(running, step, init)[1][:, 1:]
