"""Run keys as the integer that starts every record's key path, and back."""

import zlib

import jax
import numpy as np
import pytest
from conftest import make_linear_batch, make_linear_logits_fn

from advjax.data import EvalCases
from advjax.evaluation import AttackSpec, Model, ThreatModel, replay_record, run_attack
from advjax.evaluation._keys import key_root
from advjax.evaluation.engine import key_from_path
from advjax.records import RecordLog, read_records


def _data(key):
    return np.asarray(jax.random.key_data(key))


@pytest.mark.parametrize("seed", [0, 7, 2**31 - 1, 2**32 - 1])
def test_the_root_of_a_seeded_key_is_its_seed_and_names_the_same_key(seed):
    key = jax.random.key(seed)
    assert key_root(key) == seed
    np.testing.assert_array_equal(_data(key_from_path([seed])), _data(key))
    assert key_root(jax.random.PRNGKey(seed)) == seed


def test_any_key_round_trips_through_its_root_and_folds_like_jax():
    key = jax.random.split(jax.random.key(3), 5)[4]
    root = key_root(key)
    assert root >= 2**32  # not a seed: both words are in use
    expected = jax.random.fold_in(jax.random.fold_in(key, zlib.crc32(b"attack") & 0x7FFFFFFF), 11)
    np.testing.assert_array_equal(_data(key_from_path([root, "attack", 11])), _data(expected))


@pytest.mark.parametrize(
    "bad",
    [0, np.zeros(3, np.uint32), "seed"],
    ids=["int", "three words", "str"],
)
def test_anything_but_one_threefry_key_is_refused_naming_the_key(bad):
    with pytest.raises(TypeError, match="key must be one key"):
        key_root(bad)


def test_a_batch_of_keys_or_another_generator_is_refused():
    with pytest.raises(TypeError, match="key must be one key"):
        key_root(jax.random.split(jax.random.key(0), 2))
    with pytest.raises(TypeError, match="key must be one key"):
        key_root(jax.random.key(0, impl="rbg"))


@pytest.mark.parametrize("root", [-1, 2**64, True, 1.5])
def test_a_path_root_outside_64_bits_is_refused(root):
    with pytest.raises(ValueError, match="key"):
        key_from_path([root, "attack"])


def test_records_of_a_split_key_replay_bit_exactly(tmp_path):
    x, y = make_linear_batch(0, 24)
    logits_fn = make_linear_logits_fn()
    spec = AttackSpec(name="pgd", method="pgd", eps=(8 / 255,), steps=5, restarts=2, batch_size=8)
    tm = ThreatModel(eps=(8 / 255,), steps=5, restarts=2)
    key = jax.random.split(jax.random.key(1))[1]
    log = RecordLog(tmp_path / "records.jsonl")
    run_attack(
        log, Model("m", logits_fn, "h"), EvalCases(x, y), spec, threat_model=tm, key=key,
        show_progress=False, log_line=lambda _: None,
    )  # fmt: skip
    records = read_records(log.path)
    assert {r.key_path[0] for r in records} == {key_root(key)}
    for r in records[:6]:
        again = replay_record(
            r, threat_model=tm, spec=spec, logits_fn=logits_fn, x=x[r.case_id], y=int(y[r.case_id])
        )
        assert again.to_dict() == r.to_dict()
