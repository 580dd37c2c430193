"""Training the word-CNN on token ids: the epoch loop, prediction, and the neighbour table
of the substitution-augmentation defense. No file I/O; logging goes through `log`.
"""

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax.training import train_state
from jax.typing import ArrayLike

from advjax_text.classify._model import ClassifierConfig, create_train_state, eval_step, train_step
from advjax_text.tokenize import UNK, Vocab


class NeighborTable(NamedTuple):
    """(V, K) neighbour ids per vocabulary id and (V,) how many of them are real."""

    table: np.ndarray
    counts: np.ndarray


def neighbor_table(
    vocab: Vocab,
    neighbors: Mapping[str, tuple[str, ...]],
    antonyms: frozenset[tuple[str, str]],
    *,
    stopwords: frozenset[str] = frozenset(),
    max_neighbors: int = 8,
) -> NeighborTable:
    """Valid substitutions by id: counter-fitted neighbours, no antonym, no stopword source.

    A neighbour outside the vocabulary maps to `UNK` (what the model would see); duplicate
    ids are dropped. Words without a valid neighbour get count 0 and are never replaced.
    """
    if max_neighbors < 1:
        raise ValueError(f"max_neighbors={max_neighbors} must be >= 1")
    table = np.zeros((len(vocab), max_neighbors), np.int32)
    counts = np.zeros((len(vocab),), np.int32)
    for i, word in enumerate(vocab.tokens):
        if word in stopwords or i <= UNK:
            continue
        ids: list[int] = []
        for n in neighbors.get(word, ()):
            if (word, n) in antonyms or n == word:
                continue
            j = vocab.id(n)
            if j not in ids and j != i:
                ids.append(j)
        ids = ids[:max_neighbors]
        table[i, : len(ids)] = ids
        counts[i] = len(ids)
    return NeighborTable(table, counts)


def predict_logits(
    state: train_state.TrainState, tokens: ArrayLike, *, batch_size: int = 256
) -> np.ndarray:
    """(N, C) logits of `tokens` (N, L), in batches padded to `batch_size` (one compile)."""
    tokens = np.asarray(tokens, np.int32)
    out = []
    for start in range(0, len(tokens), batch_size):
        chunk = tokens[start : start + batch_size]
        padded = np.zeros((batch_size, tokens.shape[1]), np.int32)
        padded[: len(chunk)] = chunk
        out.append(np.asarray(eval_step(state, jnp.asarray(padded)))[: len(chunk)])
    return np.concatenate(out) if out else np.zeros((0, 2), np.float32)


def train_classifier(
    config: ClassifierConfig,
    tokens: ArrayLike,
    labels: ArrayLike,
    *,
    key: jax.Array,
    vocab_size: int,
    table: NeighborTable | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[train_state.TrainState, list[dict]]:
    """Train `config.epochs` epochs of shuffled mini-batches (the last partial one dropped).

    Args:
      config: hyper-parameters; augment_rate > 0 needs `table`.
      tokens, labels: (N, L) int32 ids and (N,) int labels.
      key: root key; init = fold_in(key, 0), epoch e shuffle = fold_in(key, 1 + e),
        step keys (dropout, augmentation) = fold_in(fold_in(key, 10_000), step).
      vocab_size: rows of the embedding.
      table: neighbour table for the augmentation defense.
      log: called with one line per epoch.

    Returns:
      (final state, per-epoch {"epoch", "loss", "accuracy"}).

    Raises:
      ValueError: mismatched shapes, or augment_rate > 0 without a table.
    """
    tokens, labels = np.asarray(tokens, np.int32), np.asarray(labels, np.int32)
    if tokens.ndim != 2 or labels.shape != (len(tokens),):
        raise ValueError(f"need tokens (N, L) and labels (N,), got {tokens.shape} {labels.shape}")
    if config.augment_rate > 0 and table is None:
        raise ValueError(f"augment_rate={config.augment_rate} needs a neighbour table")
    if table is None:
        table = NeighborTable(
            np.zeros((vocab_size, 1), np.int32), np.zeros((vocab_size,), np.int32)
        )
    tab, cnt = jnp.asarray(table.table), jnp.asarray(table.counts)
    rate = jnp.float32(config.augment_rate)
    state = create_train_state(jax.random.fold_in(key, 0), config, vocab_size)
    step_key = jax.random.fold_in(key, 10_000)
    n_batches = len(tokens) // config.batch_size
    if n_batches < 1:
        raise ValueError(f"{len(tokens)} training sentences < batch_size={config.batch_size}")
    history = []
    for epoch in range(config.epochs):
        order = np.asarray(jax.random.permutation(jax.random.fold_in(key, 1 + epoch), len(tokens)))
        losses, accs = [], []
        for b in range(n_batches):
            idx = order[b * config.batch_size : (b + 1) * config.batch_size]
            state, metrics = train_step(
                state, jnp.asarray(tokens[idx]), jnp.asarray(labels[idx]), step_key, tab, cnt, rate
            )
            losses.append(metrics["loss"])
            accs.append(metrics["accuracy"])
        row = {
            "epoch": epoch + 1,
            "loss": float(np.mean(jax.device_get(losses))),
            "accuracy": float(np.mean(jax.device_get(accs))),
        }
        history.append(row)
        log(f"epoch {row['epoch']}: train loss {row['loss']:.4f}, accuracy {row['accuracy']:.4f}")
    return state, history
