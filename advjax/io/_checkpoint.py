"""Checkpoints as msgpack (no pickle): model hyper-parameters plus variables, bit-exact, sealed.

File format (advjax-checkpoint-v1): one msgpack map with the sections "format", "model",
"variables" and "metadata", plus "sha256", the hex SHA-256 of the msgpack serialisation of
the map without "sha256" (keys in sorted order, as `flax.serialization.msgpack_serialize`
writes them). Every read recomputes that digest and also checks that the file is exactly
the serialisation of what it holds, so any changed byte is refused. The digest's first 16
hex digits are the checkpoint's `model_hash`, the one every per-case record carries.
"""

import dataclasses
import hashlib
import inspect
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization, traverse_util

from advjax.records import atomic_write_bytes

CHECKPOINT_FORMAT = "advjax-checkpoint-v1"
DIGEST_KEY = "sha256"
SECTIONS = ("model", "variables", "metadata")
INPUT_SHAPE = (1, 32, 32, 3)
"""The input `load_checkpoint` initialises the model with (abstractly) to get its variable
tree, unless it is given another."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt, unsealed or of an unknown format."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seal(path: Path, payload: Mapping[str, Any]) -> bytes:
    """The file bytes of `payload` (no digest) with its digest added.

    Raises CheckpointError when the payload does not serialise reproducibly (a read would
    then refuse the file), e.g. metadata holding objects msgpack cannot store as they are.
    """
    body = serialization.msgpack_serialize(dict(payload))
    restored = serialization.msgpack_restore(body)
    if serialization.msgpack_serialize(restored) != body:
        raise CheckpointError(
            f"checkpoint {path}: its contents do not serialise reproducibly "
            "(use str, int, float, bool, None, lists, dicts and numpy arrays in metadata)"
        )
    return serialization.msgpack_serialize({**restored, DIGEST_KEY: _sha256(body)})


def _parse(path: Path) -> tuple[bytes, dict[str, Any]]:
    """(file bytes, decoded map) of a checkpoint whose format and sections are valid."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    raw = path.read_bytes()
    try:
        payload = serialization.msgpack_restore(raw)
    except Exception as e:
        raise CheckpointError(f"checkpoint {path} is corrupt: {e}") from e
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint {path} is not in the {CHECKPOINT_FORMAT} format")
    for section in SECTIONS:
        if not isinstance(payload.get(section), dict):
            raise CheckpointError(f"checkpoint {path} has no valid {section!r} section")
    return raw, payload


def _verified(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """(payload without its digest, digest) of a checkpoint whose digest checks out."""
    path = Path(path)
    raw, payload = _parse(path)
    stored = payload.pop(DIGEST_KEY, None)
    if stored is None:
        raise CheckpointError(
            f"checkpoint {path} carries no {DIGEST_KEY} digest, so its integrity cannot be "
            f"checked; if it is the file you expect, add one with "
            f"advjax.io.seal_checkpoint({str(path)!r})"
        )
    body = serialization.msgpack_serialize(payload)
    computed = _sha256(body)
    if stored != computed:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: stored {DIGEST_KEY} {stored}, computed {computed}"
        )
    expected = serialization.msgpack_serialize({**payload, DIGEST_KEY: stored})
    if raw != expected:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: its bytes (sha256 {_sha256(raw)}) are not the "
            f"encoding of its contents (sha256 {_sha256(expected)})"
        )
    return payload, computed


def model_fields(model) -> dict[str, Any]:
    """The hyper-parameters a checkpoint stores to rebuild `model` as `type(model)(**fields)`:
    `model.checkpoint_fields()` where the model defines it, else its dataclass fields (a Flax
    module's, without `parent` and `name`)."""
    if hasattr(model, "checkpoint_fields"):
        return dict(model.checkpoint_fields())
    if not dataclasses.is_dataclass(model):
        raise CheckpointError(
            f"model {type(model).__name__} is not a dataclass (a Flax module) and has no "
            "checkpoint_fields(): its checkpoint could not name how to rebuild it"
        )
    return {
        f.name: getattr(model, f.name)
        for f in dataclasses.fields(model)
        if f.init and f.name not in ("parent", "name")
    }


def save_checkpoint(
    path: str | os.PathLike,
    model,
    variables: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write `model`'s name and hyper-parameters (`model_fields`) and `variables` to `path`
    atomically, with a digest.

    `metadata` (JSON-like: str, int, float, lists and dicts of them) is stored beside the
    weights, e.g. the epoch and validation accuracy of the checkpoint.

    Raises:
      CheckpointError: `metadata` or the model's fields do not serialise reproducibly.
    """
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model": {"name": type(model).__name__, **model_fields(model)},
        "variables": jax.tree.map(np.asarray, serialization.to_state_dict(dict(variables))),
        "metadata": dict(metadata or {}),
    }
    return atomic_write_bytes(path, _seal(Path(path), payload))


def seal_checkpoint(path: str | os.PathLike) -> str:
    """Add the digest to a checkpoint file that has none; return its `model_hash`.

    The model hash is then the first 16 hex digits of the SHA-256 of the file as it was,
    so records made with the unsealed file keep matching it. Seal only a file you trust:
    the digest vouches for whatever the file holds now. A file already sealed is verified
    and left as it is.

    Raises:
      CheckpointError: the file is missing, corrupt or foreign, its stored digest does not
        match, or its bytes are not the canonical encoding of its contents (its hash would
        change).

    Example:
      >>> seal_checkpoint("old_run/checkpoints/standard.msgpack")
      '7355343f62c492ed'
    """
    path = Path(path)
    raw, payload = _parse(path)
    if DIGEST_KEY in payload:
        return _verified(path)[1][:16]
    if serialization.msgpack_serialize(payload) != raw:
        raise CheckpointError(
            f"checkpoint {path} is not the canonical encoding of its contents: sealing it "
            "would change its model hash"
        )
    atomic_write_bytes(path, _seal(path, payload))
    return _sha256(raw)[:16]


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The verified checkpoint payload (format, model, variables, metadata).

    Raises:
      CheckpointError: the file is missing, corrupt, foreign or carries no digest, or its
        digest differs from the one computed from its contents (both are named).
    """
    return _verified(path)[0]


def _model_from_spec(path: Path, spec: Mapping[str, Any], model_class: Callable):
    """`model_class(**fields)`, the model a checkpoint's model section names."""
    name = getattr(model_class, "__name__", None)
    if spec.get("name") != name:
        raise CheckpointError(
            f"checkpoint {path} holds a {spec.get('name')!r} model, not a {name!r}"
        )
    fields = {k: v for k, v in spec.items() if k != "name"}
    try:
        return model_class(**fields)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path} has an invalid model section: {e}") from e


def _describe(leaf: Any) -> str:
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    return f"{type(leaf).__name__}" if shape is None or dtype is None else f"{shape} {dtype}"


def _check_variables(path: Path, model, variables: Mapping[str, Any], input_shape) -> None:
    """Raise CheckpointError unless `variables` has exactly the model's variable tree.

    The model's tree comes from `jax.eval_shape` of `model.init` on an `input_shape` input
    (in eval mode where the model takes `train`), so nothing is computed; every missing,
    extra, mis-shaped or mis-typed variable is named with both shapes and dtypes.
    """
    mode = {"train": False} if "train" in inspect.signature(model.__call__).parameters else {}
    shapes = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros(input_shape, jnp.float32), **mode)
    )
    want = traverse_util.flatten_dict(dict(shapes), sep="/")
    got = traverse_util.flatten_dict(dict(variables), sep="/")
    problems = [f"variable {n} ({_describe(want[n])}) is missing" for n in want if n not in got]
    problems += [f"variable {n} ({_describe(got[n])}) is extra" for n in got if n not in want]
    problems += [
        f"variable {n} is {_describe(got[n])}, the model's is {_describe(want[n])}"
        for n in want
        if n in got and _describe(got[n]) != _describe(want[n])
    ]
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise CheckpointError(
            f"checkpoint {path} does not fit its model: {'; '.join(problems[:5])}{more}"
        )


def _load(path, model_class, input_shape) -> tuple[Any, dict[str, Any], str]:
    """(model, variables, digest) of a verified checkpoint whose variables fit its model."""
    payload, digest = _verified(path)
    model = _model_from_spec(Path(path), payload["model"], model_class)
    _check_variables(Path(path), model, payload["variables"], input_shape)
    return model, jax.tree.map(jnp.asarray, payload["variables"]), digest


def load_checkpoint(
    path: str | os.PathLike, model_class: Callable, *, input_shape=INPUT_SHAPE
) -> tuple[Any, dict[str, Any]]:
    """`(model, variables)` written by `save_checkpoint`, bit-identical; the model is
    `model_class(**fields)`, the class the checkpoint names (its hash: `model_hash`).

    Raises:
      CheckpointError: the file does not verify (see `read_checkpoint`), it names another
        model or an invalid model section, or its variables do not fit the model's own tree
        (each offending variable path is named with both shapes and dtypes).

    Example:
      >>> from advjax_train import CompactCNN, eval_logits_fn
      >>> model, variables = load_checkpoint("results/.../standard.msgpack", CompactCNN)
      >>> logits_fn = eval_logits_fn(model, variables)
    """
    model, variables, _ = _load(path, model_class, input_shape)
    return model, variables


def model_hash(path: str | os.PathLike) -> str:
    """First 16 hex digits of a checkpoint's verified digest: the records' model_hash.

    Raises:
      CheckpointError: as `read_checkpoint`.
    """
    return _verified(path)[1][:16]
