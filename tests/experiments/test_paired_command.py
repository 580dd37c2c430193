"""The paired command pairs models case by case across record files, writes its table, and
refuses pairs it cannot match (no records, two checkpoints under one name, other cases)."""

import json

import pytest
from conftest import case_record

from advjax.records import RecordLog
from experiments import paired


def _write(folder, model, statuses, *, attack="pgd", model_hash="mh", eps=8 / 255):
    folder.mkdir(parents=True, exist_ok=True)
    records = [
        case_record(i, status=s, model=model, attack=attack, model_hash=model_hash, eps=eps)
        for i, s in enumerate(statuses)
    ]
    RecordLog(folder / "records.jsonl.gz").append(records)


def test_models_of_two_runs_pair_case_by_case(tmp_path):
    _write(tmp_path / "run_a", "lever", ["failed", "failed", "failed", "success"])
    _write(tmp_path / "run_a", "lever", ["success"] * 4, eps=2 / 255)
    _write(tmp_path / "run_b", "base", ["failed", "success", "success", "success"])
    out = tmp_path / "out"
    result = paired.main(["--records", str(tmp_path / "run_a"), "--records",
                          str(tmp_path / "run_b" / "records.jsonl.gz"), "--pair", "lever",
                          "base", "--attack", "pgd", "--eps", "8/255", "--out", str(out)])  # fmt: skip
    (row,) = result["pairs"]
    assert (row["a_model"], row["b_model"], row["cases"]) == ("lever", "base", 4)
    assert (row["only_a"], row["only_b"], row["a"]["count"], row["b"]["count"]) == (2, 0, 3, 1)
    assert row["p_value"] == pytest.approx(0.5)
    assert json.loads((out / "pgd_eps8.json").read_text())["pairs"][0]["only_a"] == 2
    assert "| `lever` | `base` | 4 |" in (out / "pgd_eps8.md").read_text()


def test_default_output_is_beside_the_first_records(tmp_path):
    _write(tmp_path / "run", "a", ["failed"] * 3)
    _write(tmp_path / "run", "b", ["success"] * 3)
    paired.main(["--records", str(tmp_path / "run"), "--pair", "a", "b", "--attack", "pgd",
                 "--eps", "8/255"])  # fmt: skip
    written = json.loads((tmp_path / "run" / "paired" / "pgd_eps8.json").read_text())
    (row,) = written["pairs"]  # a robust on all 3 cases, b on none: 3 discordant, p = 2 / 8
    assert (row["only_a"], row["only_b"], row["cases"]) == (3, 0, 3)
    assert row["p_value"] == pytest.approx(0.25)
    assert "| `a` | `b` | 3 |" in (tmp_path / "run" / "paired" / "pgd_eps8.md").read_text()


def test_pairs_that_cannot_be_matched_are_refused(tmp_path):
    _write(tmp_path / "one", "a", ["failed"] * 3)
    _write(tmp_path / "one", "b", ["failed"] * 2)
    _write(tmp_path / "two", "a", ["failed"] * 3, model_hash="other")
    args = ["--attack", "pgd", "--eps", "8/255", "--out", str(tmp_path / "o")]
    with pytest.raises(ValueError, match="--pair a: the --records hold 2 different checkpoints"):
        paired.main(["--records", str(tmp_path / "one"), "--records", str(tmp_path / "two"),
                     "--pair", "a", "b", *args])  # fmt: skip
    with pytest.raises(ValueError, match="--pair c: no pgd records at eps 8/255"):
        paired.main(["--records", str(tmp_path / "one"), "--pair", "a", "c", *args])
    with pytest.raises(ValueError, match="--pair a b: records_a and records_b must cover"):
        paired.main(["--records", str(tmp_path / "one"), "--pair", "a", "b", *args])
    with pytest.raises(FileNotFoundError, match="--records .*missing"):
        paired.main(["--records", str(tmp_path / "missing"), "--pair", "a", "b", *args])
