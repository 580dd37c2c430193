"""End to end on real data: the quick profile writes every output, the records obey the
declared budgets, and the release gate reads its summary (skipped without the data)."""

import json
import os

import pytest

from advjax.evaluation.summary import read_run_summary
from advjax.gate import main as gate_main
from advjax.records import read_lines
from advjax_text import TextCaseRecord
from advjax_text.data import TEXT_DIR_ENV


@pytest.mark.skipif(
    not os.environ.get(TEXT_DIR_ENV), reason=f"{TEXT_DIR_ENV} is not set (real text data)"
)
@pytest.mark.slow
def test_quick_profile_end_to_end(tmp_path):
    from experiments.text_robustness.main import main

    results = main(
        ["--profile", "quick", "--out", str(tmp_path), "--no-progress", "--set", "eval_size=16"]
    )
    for name in (
        "records.jsonl.gz",
        "results.json",
        "tables.md",
        "budget_curves.png",
        "summary.json",
        "gate.txt",
        "provenance.json",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    records = [
        TextCaseRecord.from_dict(json.loads(line))
        for line in read_lines(tmp_path / "records.jsonl.gz")
    ]
    assert len(records) == 2 * 2 * 16
    assert all(r.queries <= r.max_queries for r in records)
    assert all(r.changed_words <= r.max_changes for r in records if r.status != "invalid")
    assert results["models"]["standard"]["clean"]["sst2_dev"]["value"] > 0.7
    assert read_run_summary(tmp_path / "summary.json")["sanity_passed"]
    code = gate_main(
        [
            "--policy",
            "experiments/text_robustness/policy.json",
            "--run",
            str(tmp_path / "summary.json"),
        ]
    )
    assert code in (0, 1)
