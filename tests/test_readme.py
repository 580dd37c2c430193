"""The README's library examples run as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import jaxlib
import numpy as np
import pytest

from advjax.backend._flags import MEASURED_JAXLIB

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
GUIDE_BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "guide.md").read_text(), re.S)


CHECK_ATTACK_EXAMPLE = """
import os
import numpy as np
from advjax.backend._flags import CPU_FLAGS
print(all(flag in os.environ.get("XLA_FLAGS", "") for flag in CPU_FLAGS))
for adv in (x_fgsm, x_pgd, apgd_t.x_adv):
    delta = np.abs(np.asarray(adv) - np.asarray(x))
    print(bool(delta.max() <= 8 / 255 + 1e-6), bool((np.asarray(adv) >= 0).all() and (np.asarray(adv) <= 1).all()))
"""


def test_the_attack_example_runs_fast_as_written():
    """Copied into a fresh interpreter as a user would, the library example starts JAX with
    advjax's CPU flags (no slow-path warning) and its attacks stay in the eps-ball and [0, 1]."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "ADVJAX_XLA_DEFAULTS")}
    done = subprocess.run(
        [sys.executable, "-c", BLOCKS[0] + CHECK_ATTACK_EXAMPLE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    lines = done.stdout.strip().splitlines()
    if jaxlib.__version__ in MEASURED_JAXLIB:
        assert lines[-4] == "True", done.stdout
    assert lines[-3:] == ["True True"] * 3, done.stdout
    assert "advjax:" not in done.stderr, done.stderr


@pytest.mark.slow
def test_the_autoattack_example_runs_on_a_flax_linen_model():
    namespace: dict = {}
    exec(compile(BLOCKS[1], "README.md", "exec"), namespace)  # noqa: S102
    result = namespace["result"]
    assert result.robust_accuracy[-1]["total"] == 32
    assert all(passed for _, passed in [(c.name, c.passed) for c in result.checks])


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ADVJAX_DATA_DIR"), reason="needs ADVJAX_DATA_DIR")
def test_the_checkpoint_example_loads_the_trained_model(monkeypatch):
    """The example's `logits_fn` is the trained checkpoint's: on its 250 test images it is
    right far above chance (the research model's clean accuracy is about 70 %; random or
    misloaded weights give about 10 %)."""
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile("import advjax\n" + GUIDE_BLOCKS[0], "docs/guide.md", "exec"), namespace)  # noqa: S102
    logits = np.asarray(namespace["logits_fn"](namespace["x"]))
    labels = namespace["data"].test_labels[:250]
    assert logits.shape == (250, 10)
    assert (logits.argmax(-1) == labels).mean() >= 0.5


ADD_ATTACK = next(b for b in BLOCKS if "gradient_attack(" in b)


def test_the_added_attack_example_is_the_module_the_library_runs():
    """The README's add-an-attack block is `advjax/attacks/_mi_fgsm.py` as it stands (tested in
    tests/attacks/test_mi_fgsm.py), registered by its one registry line and nothing else:
    no other library module names it."""
    module = ROOT / "advjax" / "attacks" / "_mi_fgsm.py"
    assert ADD_ATTACK == module.read_text()
    naming = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "advjax").rglob("*.py")
        if "mi_fgsm" in path.read_text() and path != module
    )
    assert naming == ["advjax/attacks/_registry.py"]
    registry = (ROOT / "advjax" / "attacks" / "_registry.py").read_text()
    assert [line for line in registry.splitlines() if "mi_fgsm" in line] == [
        "from advjax.attacks import _apgd, _fab, _fmn, _malt, _mi_fgsm, _pgd, _square_l2",
        "    _mi_fgsm.MI_FGSM,",
    ]


def test_the_front_page_stays_a_front_page():
    """At most 150 lines, with the two quick-start commands (install and run the main job,
    install and run the tests) and links into docs/ for the rest."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    quick = re.search(r"## Quick start.*?```bash\n(.*?)```", text, re.S).group(1)
    commands = [line for line in quick.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert "experiments.cifar_robustness" in commands[0] and "pytest" in commands[1]
    assert all(c.startswith("pip install -e") for c in commands)
