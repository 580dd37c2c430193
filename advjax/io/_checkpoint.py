"""Checkpoints as msgpack (no pickle): model hyper-parameters plus variables, bit-exact."""

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from advjax.io._atomic import atomic_write_bytes
from advjax.model._cnn import CompactCNN

CHECKPOINT_FORMAT = "advjax-checkpoint-v1"


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt or of an unknown format."""


def save_checkpoint(
    path: str | os.PathLike,
    model: CompactCNN,
    variables: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write `model`'s hyper-parameters and `variables` to `path` atomically.

    `metadata` (JSON-like: str, int, float, lists and dicts of them) is stored beside the
    weights, e.g. the epoch and validation accuracy of the checkpoint.
    """
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model": {
            "name": type(model).__name__,
            "num_classes": model.num_classes,
            "dropout_rate": model.dropout_rate,
            "activation": model.activation,
        },
        "variables": jax.tree.map(np.asarray, serialization.to_state_dict(dict(variables))),
        "metadata": dict(metadata or {}),
    }
    return atomic_write_bytes(path, serialization.msgpack_serialize(payload))


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The raw checkpoint payload (format, model, variables, metadata)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        payload = serialization.msgpack_restore(path.read_bytes())
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is corrupt: {e}") from e
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} is not in the {CHECKPOINT_FORMAT} format")
    for section in ("model", "variables", "metadata"):
        if not isinstance(payload.get(section), dict):
            raise CheckpointError(f"checkpoint {path} has no valid {section!r} section")
    return payload


def load_checkpoint(path: str | os.PathLike) -> tuple[CompactCNN, dict[str, Any]]:
    """Load `(model, variables)` written by `save_checkpoint`, bit-identical.

    Example:
      >>> model, variables = load_checkpoint("results/checkpoints/standard.msgpack")
      >>> logits_fn = advjax.model.eval_logits_fn(model, variables)
    """
    payload = read_checkpoint(path)
    spec = payload["model"]
    if spec.get("name") != "CompactCNN":
        raise CheckpointError(f"checkpoint {path} holds an unknown model {spec.get('name')!r}")
    try:
        model = CompactCNN(
            num_classes=int(spec["num_classes"]),
            dropout_rate=float(spec["dropout_rate"]),
            activation=str(spec.get("activation", "relu")),  # older checkpoints: ReLU
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} has an invalid model section: {e}") from e
    variables = jax.tree.map(jnp.asarray, payload["variables"])
    return model, variables


def model_hash(path: str | os.PathLike) -> str:
    """First 16 hex digits of the SHA-256 of a checkpoint file (the records' model_hash)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:16]


def load_logits_fn(path: str | os.PathLike):
    """(logits_fn, model_hash) of a checkpoint: the model in eval mode, ready to attack.

    Example:
      >>> logits_fn, digest = load_logits_fn("results/checkpoints/standard.msgpack")
    """
    from advjax.model._cnn import eval_logits_fn

    model, variables = load_checkpoint(path)
    return eval_logits_fn(model, variables), model_hash(path)
