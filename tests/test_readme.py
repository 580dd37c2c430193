"""The README's library examples run as written."""

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_attack_example_runs_on_a_plain_jnp_model():
    exec(compile(BLOCKS[0], "README.md", "exec"), {})  # noqa: S102


@pytest.mark.slow
def test_the_autoattack_example_runs_on_a_flax_linen_model():
    namespace: dict = {}
    exec(compile(BLOCKS[2], "README.md", "exec"), namespace)  # noqa: S102
    result = namespace["result"]
    assert result.robust_accuracy[-1]["total"] == 32
    assert all(passed for _, passed in [(c.name, c.passed) for c in result.checks])


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ADVJAX_DATA_DIR"), reason="needs ADVJAX_DATA_DIR")
def test_the_checkpoint_example_runs(monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile("import advjax\n" + BLOCKS[1], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["logits_fn"](namespace["x"][:4]).shape == (4, 10)
