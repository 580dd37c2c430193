"""ThreatModel: validation, JSON round trip, a stable digest, the printed description, and
`require_threat_model` refusing to start without one."""

import dataclasses
import hashlib
import json

import pytest

from advjax.evaluation import ThreatModel, format_eps
from advjax.evaluation._threat_model import UNTARGETED, require_threat_model


def make(**overrides) -> ThreatModel:
    fields = dict(eps=(0.0, 2 / 255, 8 / 255), steps=20, restarts=2)
    fields.update(overrides)
    return ThreatModel(**fields)


def test_defaults_declare_the_study_threat_model():
    """Unset fields default to white-box L-inf in [0, 1], tolerance 1e-6, untargeted success."""
    tm = make()
    assert (tm.knowledge, tm.norm, tm.pixel_range, tm.tolerance) == (
        "white-box",
        "linf",
        (0.0, 1.0),
        1e-6,
    )
    assert tm.success_condition == UNTARGETED
    assert tm.queries is None


def test_to_dict_from_dict_round_trips_through_json():
    """from_dict(json(to_dict(tm))) == tm, for white-box and black-box threat models."""
    for tm in (make(), make(knowledge="scores", queries=5000, norm="l2", eps=(0.5,))):
        assert ThreatModel.from_dict(json.loads(json.dumps(tm.to_dict()))) == tm


def test_digest_is_sha256_of_canonical_json_and_changes_with_the_budget():
    """digest() is the first 16 hex digits of the SHA-256 of sorted-key compact JSON; lists
    and tuples give the same digest; a different eps gives a different one."""
    tm = make()
    canonical = json.dumps(tm.to_dict(), sort_keys=True, separators=(",", ":"))
    assert tm.digest() == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert make(eps=[0.0, 2 / 255, 8 / 255]).digest() == tm.digest()
    assert make(eps=(0.0, 4 / 255)).digest() != tm.digest()
    assert make(steps=21).digest() != tm.digest()


def test_threat_model_is_frozen():
    """Fields cannot be reassigned after construction."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        make().steps = 3


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(knowledge="grey-box"), "knowledge='grey-box'"),
        (dict(norm="l1"), "norm='l1'"),
        (dict(eps=()), "eps=()"),
        (dict(eps=(0.1, 0.1)), "twice"),
        (dict(eps=(-0.1,)), "-0.1"),
        (dict(eps=(1.5,)), "1.5"),
        (dict(eps=(float("nan"),)), "nan"),
        (dict(norm="l2", eps=(float("inf"),)), "inf"),
        (dict(eps="8/255"), "eps='8/255'"),
        (dict(steps=-1), "steps=-1"),
        (dict(steps=2.5), "steps=2.5"),
        (dict(restarts=0), "restarts=0"),
        (dict(queries=0), "queries=0"),
        (dict(knowledge="labels"), "query"),
        (dict(pixel_range=(1.0, 0.0)), "pixel_range=(1.0, 0.0)"),
        (dict(tolerance=-1e-6), "tolerance=-1e-06"),
        (dict(success_condition="targeted"), "success_condition='targeted'"),
        (dict(protected_asset=" "), "protected_asset=' '"),
    ],
)
def test_bad_fields_raise_value_error_naming_the_value(overrides, fragment):
    """Each invalid field raises ValueError whose message contains the offending value."""
    with pytest.raises(ValueError, match=None) as info:
        make(**overrides)
    assert fragment in str(info.value)


def test_from_dict_rejects_unknown_and_missing_fields():
    """Unknown keys and missing required keys are errors, not silently ignored."""
    d = make().to_dict()
    with pytest.raises(ValueError, match="unknown threat model fields"):
        ThreatModel.from_dict({**d, "epsilon": 1})
    d.pop("steps")
    with pytest.raises(ValueError, match="missing required fields \\['steps'\\]"):
        ThreatModel.from_dict(d)
    with pytest.raises(ValueError, match="JSON object"):
        ThreatModel.from_dict([1, 2])


def test_describe_states_every_part_of_the_threat_model():
    """The printed header names the hash, asset, knowledge, budget, range, validity, success."""
    tm = make(knowledge="scores", queries=1000)
    text = tm.describe()
    for fragment in (
        tm.digest(),
        "protected asset",
        "score-based",
        "L-inf",
        "0, 2/255, 8/255",
        "20 steps x 2 restart(s)",
        "1,000",
        "[0, 1]",
        "tolerance 1e-06",
        UNTARGETED,
    ):
        assert fragment in text, fragment
    assert len(text.splitlines()) >= 6


def test_format_eps_uses_255ths_when_exact():
    assert (format_eps(8 / 255), format_eps(0.0), format_eps(0.1)) == ("8/255", "0", "0.1")


def test_require_threat_model_refuses_to_start_without_one():
    """None -> ValueError ('refuses to start'); another type -> TypeError; a ThreatModel
    passes through unchanged."""
    with pytest.raises(ValueError, match="refuses to start"):
        require_threat_model(None)
    with pytest.raises(TypeError, match="ThreatModel"):
        require_threat_model(make().to_dict())
    tm = make()
    assert require_threat_model(tm) is tm
