"""A word-CNN sentence classifier (Kim 2014, "CNN-rand": embeddings learned here) and its
pure, jitted train / eval steps, plus the black-box logits function the attacks query.

Reference: Y. Kim, "Convolutional Neural Networks for Sentence Classification", EMNLP 2014.
"""

import dataclasses
import hashlib
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.typing import ArrayLike

from advjax_text.tokenize import PAD, Vocab

BATCH_BUCKETS = (8, 16, 32, 64, 128, 256)
"""Batch sizes the attack-facing logits function pads to (one compile per bucket)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClassifierConfig:
    """Every hyper-parameter of the classifier and its training.

    Attributes:
      embed_dim, filters, widths: embedding size, filters per width, convolution widths.
      dropout_rate: on the pooled features, training only.
      learning_rate, weight_decay, batch_size, epochs: AdamW training.
      max_len: tokens kept per sentence (train and test).
      min_count: a training word enters the vocabulary when seen this often.
      augment_rate: share of tokens replaced by a random valid neighbour per training
        batch (0: standard training; > 0: the substitution-augmentation defense).
      train_size: use only the first `train_size` training sentences of a seeded
        permutation (None: all).
    """

    embed_dim: int = 64
    filters: int = 64
    widths: tuple[int, ...] = (3, 4, 5)
    dropout_rate: float = 0.5
    learning_rate: float = 2e-3
    weight_decay: float = 1e-4
    batch_size: int = 128
    epochs: int = 2
    max_len: int = 64
    min_count: int = 1
    augment_rate: float = 0.0
    train_size: int | None = None

    def __post_init__(self):
        for name in ("embed_dim", "filters", "batch_size", "epochs", "max_len", "min_count"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be an integer >= 1")
        if not self.widths or any(w < 1 for w in self.widths):
            raise ValueError(f"widths={self.widths!r} must be a non-empty tuple of ints >= 1")
        for name in ("dropout_rate", "augment_rate"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be in [0, 1)")
        if self.train_size is not None and self.train_size < self.batch_size:
            raise ValueError(f"train_size={self.train_size} must be >= batch_size")


class WordCNN(nn.Module):
    """Embedding -> parallel 1-D convolutions -> ReLU -> masked max-pool -> dropout -> dense.

    Input: (B, L) int32 token ids (`PAD` = 0 is masked out); output: (B, num_classes) logits.
    """

    vocab_size: int
    embed_dim: int = 64
    filters: int = 64
    widths: tuple[int, ...] = (3, 4, 5)
    num_classes: int = 2
    dropout_rate: float = 0.5

    @nn.compact
    def __call__(self, tokens: jax.Array, *, train: bool = False) -> jax.Array:
        mask = (tokens != PAD).astype(jnp.float32)[..., None]
        x = nn.Embed(self.vocab_size, self.embed_dim)(tokens) * mask
        pooled = []
        for width in self.widths:
            h = nn.relu(nn.Conv(self.filters, (width,), padding="SAME")(x)) * mask
            pooled.append(h.max(axis=1))  # ReLU >= 0, so masked positions never win
        features = nn.Dropout(self.dropout_rate, deterministic=not train)(
            jnp.concatenate(pooled, axis=-1)
        )
        return nn.Dense(self.num_classes)(features)


def make_model(config: ClassifierConfig, vocab_size: int) -> WordCNN:
    """The `WordCNN` of `config` for a vocabulary of `vocab_size` ids."""
    return WordCNN(
        vocab_size=vocab_size,
        embed_dim=config.embed_dim,
        filters=config.filters,
        widths=tuple(config.widths),
        dropout_rate=config.dropout_rate,
    )


def create_train_state(
    key: jax.Array, config: ClassifierConfig, vocab_size: int
) -> train_state.TrainState:
    """Initial parameters and AdamW optimiser state."""
    model = make_model(config, vocab_size)
    params = model.init(key, jnp.zeros((1, config.max_len), jnp.int32))["params"]
    tx = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def substitute_tokens(
    key: jax.Array, tokens: ArrayLike, table: ArrayLike, counts: ArrayLike, *, rate: float
) -> jax.Array:
    """Replace each token, with probability `rate`, by a uniformly drawn valid neighbour.

    Args:
      key: PRNG key.
      tokens: (B, L) int32 ids.
      table: (V, K) int32 neighbour ids per vocabulary id (see `clf_augment.neighbor_table`).
      counts: (V,) int32, how many of a row's K entries are real (0: never replaced).
      rate: replacement probability per token.

    Returns:
      (B, L) int32 ids.
    """
    tokens, table, counts = jnp.asarray(tokens), jnp.asarray(table), jnp.asarray(counts)
    k_pick, k_which = jax.random.split(key)
    n = counts[tokens]
    pick = (jax.random.uniform(k_pick, tokens.shape) < rate) & (n > 0)
    which = jnp.floor(jax.random.uniform(k_which, tokens.shape) * jnp.maximum(n, 1))
    which = which.astype(jnp.int32)
    return jnp.where(pick, table[tokens, which], tokens)


@jax.jit
def train_step(
    state: train_state.TrainState,
    tokens: jax.Array,
    labels: jax.Array,
    key: jax.Array,
    table: jax.Array,
    counts: jax.Array,
    rate: jax.Array,
) -> tuple[train_state.TrainState, dict]:
    """One AdamW step on mean cross-entropy; substitution augmentation when rate > 0."""
    k_aug, k_drop = jax.random.split(jax.random.fold_in(key, state.step))
    tokens = substitute_tokens(k_aug, tokens, table, counts, rate=rate)

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, tokens, train=True, rngs={"dropout": k_drop})
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss, logits

    (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    accuracy = (logits.argmax(-1) == labels).mean()
    return state.apply_gradients(grads=grads), {"loss": loss, "accuracy": accuracy}


@jax.jit
def eval_step(state: train_state.TrainState, tokens: jax.Array) -> jax.Array:
    """Logits in evaluation mode (no dropout)."""
    return state.apply_fn({"params": state.params}, tokens, train=False)


def params_digest(params) -> str:
    """16 hex digits of the SHA-256 of every parameter's bytes: the model version."""
    h = hashlib.sha256()
    for path, leaf in sorted(
        jax.tree_util.tree_flatten_with_path(params)[0], key=lambda kv: jax.tree_util.keystr(kv[0])
    ):
        h.update(jax.tree_util.keystr(path).encode())
        h.update(np.asarray(leaf).tobytes())
    return h.hexdigest()[:16]


def make_text_logits_fn(
    model: nn.Module, params, vocab: Vocab, *, max_len: int
) -> Callable[[Sequence[str]], np.ndarray]:
    """A black-box scorer: sentences -> (B, C) float32 logits, one jitted call per bucket.

    Batches are padded to the next size in `BATCH_BUCKETS` (larger ones are split), so a
    case's candidate sentences are scored in one compiled call without recompiling.

    Example:
      >>> logits_fn = make_text_logits_fn(model, params, vocab, max_len=64)
      >>> logits_fn(["a charming journey .", "a dull journey ."]).shape
      (2, 2)
    """
    apply = jax.jit(lambda p, t: model.apply({"params": p}, t, train=False))
    top = BATCH_BUCKETS[-1]

    def logits_fn(texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("logits_fn takes a sequence of sentences, not one str")
        outs = []
        for start in range(0, len(texts), top):
            chunk = texts[start : start + top]
            size = next(b for b in BATCH_BUCKETS if b >= len(chunk))
            ids = np.zeros((size, max_len), np.int32)
            ids[: len(chunk)] = vocab.encode_texts(chunk, max_len=max_len)
            outs.append(np.asarray(apply(params, ids))[: len(chunk)])
        return np.concatenate(outs) if outs else np.zeros((0, 2), np.float32)

    return logits_fn
