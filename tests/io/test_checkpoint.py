"""Checkpoint integrity: a sealed digest checked on every read, variables checked at load."""

import gzip
import hashlib
import json
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest
from flax import serialization

from advjax.io import CheckpointError, load_checkpoint, model_hash, read_checkpoint, save_checkpoint
from advjax.io._checkpoint import seal_checkpoint
from advjax.records import record_file
from advjax_train import CompactCNN, load_logits_fn

RESULTS = Path(__file__).resolve().parents[2] / "results"
READERS = {
    "read_checkpoint": read_checkpoint,
    "load_checkpoint": lambda path: load_checkpoint(path, CompactCNN),
    "model_hash": model_hash,
    "load_logits_fn": load_logits_fn,
}


@pytest.fixture(scope="module")
def model_and_variables():
    """A CompactCNN and random variables of its shapes (from jax.eval_shape: nothing compiled)."""
    model = CompactCNN(num_classes=7, dropout_rate=0.25)
    shapes = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False)
    )
    rng = np.random.default_rng(0)
    variables = jax.tree.map(lambda s: rng.standard_normal(s.shape).astype(s.dtype), shapes)
    return model, variables


def _content_sha256(raw: bytes) -> str:
    """SHA-256 of the msgpack serialisation of a file's map without its digest."""
    payload = serialization.msgpack_restore(raw)
    payload.pop("sha256", None)
    return hashlib.sha256(serialization.msgpack_serialize(payload)).hexdigest()


@pytest.mark.parametrize("reader", READERS)
def test_a_checkpoint_with_one_changed_byte_raises_checkpoint_error_naming_both_hashes(
    tmp_path, model_and_variables, reader
):
    """One flipped bit in the weights is refused by every reader, the message naming the
    file, the stored digest and the one computed from the changed contents."""
    model, variables = model_and_variables
    path = save_checkpoint(tmp_path / "ckpt.msgpack", model, variables)
    raw = bytearray(path.read_bytes())
    stored = serialization.msgpack_restore(bytes(raw))["sha256"]
    assert READERS[reader](path) is not None
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    computed = _content_sha256(bytes(raw))
    assert computed != stored
    with pytest.raises(CheckpointError) as info:
        READERS[reader](path)
    assert str(path) in str(info.value)
    assert stored in str(info.value) and computed in str(info.value)


def test_any_changed_byte_or_a_changed_digest_is_refused(tmp_path, model_and_variables):
    """A flip anywhere (header, metadata, digest, weights) or an appended byte raises
    CheckpointError naming the file; none loads silently."""
    model, variables = model_and_variables
    good = save_checkpoint(tmp_path / "good.msgpack", model, variables, {"epoch": 3}).read_bytes()
    digest_at = good.index(b"sha256") + 8
    positions = [0, 5, digest_at, *range(100, len(good), len(good) // 13), len(good) - 1]
    for n, position in enumerate(positions):
        bad = bytearray(good)
        bad[position] ^= 0x10
        path = tmp_path / f"bad{n}.msgpack"
        path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError, match=path.name):
            load_checkpoint(path, CompactCNN)
    (tmp_path / "long.msgpack").write_bytes(good + b"\x00")
    with pytest.raises(CheckpointError, match="long.msgpack"):
        model_hash(tmp_path / "long.msgpack")


def test_a_checkpoint_without_its_digest_is_refused(tmp_path, model_and_variables):
    """A v1 file without "sha256" is refused by every reader, the message saying so and
    naming seal_checkpoint; sealing it keeps its weights and makes its model_hash the
    hash of the file as it was; sealing again changes nothing."""
    model, variables = model_and_variables
    sealed = save_checkpoint(tmp_path / "sealed.msgpack", model, variables)
    unsealed = tmp_path / "unsealed.msgpack"
    unsealed.write_bytes(serialization.msgpack_serialize(read_checkpoint(sealed)))
    for reader in READERS.values():
        with pytest.raises(CheckpointError, match="unsealed.msgpack carries no sha256 digest"):
            reader(unsealed)
    with pytest.raises(CheckpointError, match="seal_checkpoint"):
        read_checkpoint(unsealed)
    before = hashlib.sha256(unsealed.read_bytes()).hexdigest()[:16]
    assert seal_checkpoint(unsealed) == before == model_hash(unsealed) == model_hash(sealed)
    assert unsealed.read_bytes() == sealed.read_bytes()
    assert seal_checkpoint(unsealed) == before
    assert unsealed.read_bytes() == sealed.read_bytes()


def test_sealing_refuses_a_corrupt_or_non_canonical_file(tmp_path, model_and_variables):
    """seal_checkpoint does not vouch for a sealed file that fails its digest, nor re-encode
    an unsealed file whose bytes are not the canonical encoding (its hash would change)."""
    model, variables = model_and_variables
    path = save_checkpoint(tmp_path / "ckpt.msgpack", model, variables)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="stored sha256"):
        seal_checkpoint(path)
    payload = read_checkpoint(save_checkpoint(tmp_path / "ok.msgpack", model, variables))
    loose = tmp_path / "loose.msgpack"
    canonical = serialization.msgpack_serialize(payload)
    reordered = msgpack.packb(dict(reversed(list(msgpack.unpackb(canonical).items()))))
    assert reordered != canonical
    loose.write_bytes(reordered)
    with pytest.raises(CheckpointError, match="canonical"):
        seal_checkpoint(loose)


def _mutations():
    """name -> (change to the variables, text the error must contain)."""
    path = ("params", "Dense_1", "kernel")

    def reshape(v):
        v["params"]["Dense_1"]["kernel"] = np.zeros((128, 8), np.float32)

    def retype(v):
        v["params"]["Dense_1"]["kernel"] = v["params"]["Dense_1"]["kernel"].astype(np.float16)

    def drop(v):
        del v["params"]["Dense_1"]["kernel"]

    def add(v):
        v["params"]["Dense_1"]["scale"] = np.ones((7,), np.float32)

    name = "/".join(path)
    return {
        "shape": (reshape, f"{name} is (128, 8) float32, the model's is (128, 7) float32"),
        "dtype": (retype, f"{name} is (128, 7) float16, the model's is (128, 7) float32"),
        "missing": (drop, f"{name} ((128, 7) float32) is missing"),
        "extra": (add, "params/Dense_1/scale ((7,) float32) is extra"),
    }


@pytest.mark.parametrize("kind", ["shape", "dtype", "missing", "extra"])
def test_variables_that_do_not_fit_the_model_raise_at_load(tmp_path, model_and_variables, kind):
    """A checkpoint whose variables differ from the model's own tree (checked against
    jax.eval_shape of model.init) raises CheckpointError at load, naming the file, the
    variable path and both shapes and dtypes, before any forward pass."""
    model, variables = model_and_variables
    change, expected = _mutations()[kind]
    bad = jax.tree.map(np.array, variables)
    change(bad)
    path = save_checkpoint(tmp_path / f"{kind}.msgpack", model, bad)
    assert read_checkpoint(path)["variables"]["params"]["Dense_1"] is not None
    for load in (READERS["load_checkpoint"], load_logits_fn):
        with pytest.raises(CheckpointError) as info:
            load(path)
        assert f"{kind}.msgpack does not fit its model" in str(info.value)
        assert expected in str(info.value)


def _first_model_hashes(records: Path, models: set[str]) -> dict[str, str]:
    """The model_hash of the first record of each of `models` in a (gzip) record file."""
    first: dict[str, str] = {}
    opener = gzip.open if records.suffix == ".gz" else open
    with opener(records, "rt", encoding="utf-8") as f:
        for line in f:
            head = line[:400]
            name = head.split('"model":"', 1)[1].split('"', 1)[0] if '"model":"' in head else None
            if name in models and name not in first:
                first[name] = json.loads(line)["model_hash"]
                if len(first) == len(models):
                    break
    return first


def test_the_committed_checkpoints_model_hash_equals_the_hash_their_records_carry():
    """Every committed checkpoint (results/**/checkpoints) verifies, and its model_hash is
    the model_hash of its records in the record file beside its folder (the first record
    of each model is compared)."""
    folders = sorted({p.parent for p in RESULTS.glob("**/checkpoints/*.msgpack")})
    checkpoints = [p for folder in folders for p in sorted(folder.glob("*.msgpack"))]
    assert len(checkpoints) >= 13
    compared = 0
    for folder in folders:
        records = record_file(folder.parent)
        models = {p.stem for p in folder.glob("*.msgpack")}
        first = _first_model_hashes(records, models) if records.exists() else {}
        for path in sorted(folder.glob("*.msgpack")):
            digest = model_hash(path)
            if path.stem in first:
                assert digest == first[path.stem], path
                compared += 1
    assert compared >= 12


def test_a_checkpoint_names_its_model_and_loads_with_that_class_only(tmp_path):
    """Any Flax module's checkpoint (its dataclass fields stored) rebuilds it through the class
    the caller gives; a checkpoint of one class asked for as another is one clear error.
    (advjax.io imports no model: the class is the caller's.)"""
    import flax.linen as nn

    class Mlp(nn.Module):
        hidden: int = 8
        classes: int = 3

        @nn.compact
        def __call__(self, x):
            return nn.Dense(self.classes)(nn.relu(nn.Dense(self.hidden)(x.reshape(len(x), -1))))

    model = Mlp(hidden=5)
    variables = model.init(jax.random.key(0), jnp.zeros((1, 4, 4, 3)))
    path = save_checkpoint(tmp_path / "mlp.msgpack", model, variables)
    assert read_checkpoint(path)["model"] == {"name": "Mlp", "hidden": 5, "classes": 3}
    loaded, restored = load_checkpoint(path, Mlp, input_shape=(1, 4, 4, 3))
    assert loaded == model
    chex.assert_trees_all_equal(restored, variables)
    with pytest.raises(CheckpointError, match="holds a 'Mlp' model, not a 'CompactCNN'"):
        load_checkpoint(path, CompactCNN)
    with pytest.raises(CheckpointError, match="does not fit its model"):
        load_checkpoint(path, Mlp, input_shape=(1, 5, 5, 3))
