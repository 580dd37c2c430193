"""The README's library examples run as written."""

import os
import re
import subprocess
import sys
from pathlib import Path

import jaxlib
import numpy as np
import pytest

from advjax.backend import MEASURED_JAXLIB

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


CHECK_ATTACK_EXAMPLE = """
import os
import numpy as np
from advjax.backend import CPU_FLAGS
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
    exec(compile(BLOCKS[2], "README.md", "exec"), namespace)  # noqa: S102
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
    exec(compile("import advjax\n" + BLOCKS[1], "README.md", "exec"), namespace)  # noqa: S102
    logits = np.asarray(namespace["logits_fn"](namespace["x"]))
    labels = namespace["data"].test_labels[:250]
    assert logits.shape == (250, 10)
    assert (logits.argmax(-1) == labels).mean() >= 0.5


ADD_ATTACK = next(b for b in BLOCKS if "DECLARED = (" in b)


def test_the_added_attack_example_is_a_working_attack_every_runner_accepts(monkeypatch):
    """The README's R+FGSM module as written: its points stay in the eps-ball and [0, 1]; at
    alpha = 0 it is `advjax.fgsm` (a separate implementation); the registry accepts its
    declaration beside every attack (name and key stream unused); registered, AutoAttack runs
    it as a custom member and counts the passes it declares."""
    import jax
    import jax.numpy as jnp

    import advjax
    from advjax.attacks import ATTACKS
    from advjax.attacks._attack_info import registry
    from advjax.evaluation import Member, autoattack

    module: dict = {}
    exec(compile(ADD_ATTACK, "README.md", "exec"), module)  # noqa: S102
    w = jax.random.normal(jax.random.key(0), (8 * 8 * 3, 4)) * 0.3
    logits_fn = lambda x: x.reshape(x.shape[0], -1) @ w  # noqa: E731
    x = jax.random.uniform(jax.random.key(1), (24, 8, 8, 3))
    y = jnp.argmax(logits_fn(x), -1)
    eps = 8 / 255
    x_adv = np.asarray(module["rfgsm"](logits_fn, x, y, eps, key=jax.random.key(2)))
    assert np.abs(x_adv - np.asarray(x)).max() <= eps + 1e-6
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    plain = module["rfgsm"](logits_fn, x, y, eps, key=jax.random.key(2), alpha=0.0)
    np.testing.assert_allclose(plain, advjax.fgsm(logits_fn, x, y, eps), atol=1e-7)

    (info,) = module["DECLARED"]
    assert "rfgsm" in registry(*ATTACKS.values(), info)
    monkeypatch.setitem(ATTACKS, "rfgsm", info)
    result = autoattack(logits_fn, x, y, eps, key=jax.random.key(3), members=[Member("rfgsm")])
    broken = np.asarray(jnp.argmax(logits_fn(jnp.asarray(result.x_adv)), -1)) != np.asarray(y)
    assert np.array_equal(~result.robust, broken) and broken.any()
    assert result.passes[0]["forward"] == 2 * len(y) and result.passes[0]["backward"] == len(y)
