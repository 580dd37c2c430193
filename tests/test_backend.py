"""advjax.backend: which XLA flags advjax sets, and when it must leave XLA_FLAGS alone."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jaxlib
import pytest

from advjax import backend
from advjax.backend import _flags

FLAG = _flags.CPU_FLAGS[0]
FLAG_NAME = FLAG.split("=")[0]
MEASURED = _flags.MEASURED_JAXLIB[0]


def test_flags_added_when_absent():
    """On a measured jaxlib with no user flags, every CPU flag is added."""
    assert _flags.flags_to_add("", MEASURED) == _flags.CPU_FLAGS
    assert _flags.flags_to_add("--xla_force_host_platform_device_count=4", MEASURED) == (
        _flags.CPU_FLAGS
    )


def test_user_setting_of_the_same_flag_wins():
    """A flag the user already set (any value) is never added again; the others still are."""
    added = _flags.flags_to_add(f"{FLAG_NAME}=individual_convolution", MEASURED)
    assert added == _flags.CPU_FLAGS[1:]
    every = " ".join(f.split("=")[0] + "=x" for f in _flags.CPU_FLAGS)
    assert _flags.flags_to_add(every, MEASURED) == ()


def test_opt_out_and_unmeasured_jaxlib_add_nothing():
    """ADVJAX_XLA_DEFAULTS=0, or a jaxlib the flag was not measured on (an unknown flag
    aborts XLA), add nothing."""
    assert _flags.flags_to_add("", MEASURED, opt_out="0") == ()
    assert _flags.flags_to_add("", "0.0.1") == ()


def test_configure_after_backend_start_warns_and_changes_nothing():
    """Once JAX runs a computation its flags are fixed: configure warns, leaves env as is."""
    jnp.zeros(1).block_until_ready()
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    if jaxlib.__version__ not in _flags.MEASURED_JAXLIB:
        pytest.skip("unmeasured jaxlib: nothing to add")
    with pytest.warns(UserWarning, match="before advjax.backend.configure"):
        assert backend.configure(env) == ()
    assert env == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def _flags_in_fresh_process(extra_env: dict, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", _flags.OPT_OUT_VARIABLE)}
    env.update(extra_env)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


CONFIGURE = (
    "import os, advjax.backend; advjax.backend.configure(); print(os.environ.get('XLA_FLAGS', ''))"
)


@pytest.mark.skipif(
    jaxlib.__version__ not in _flags.MEASURED_JAXLIB, reason="flag not measured on this jaxlib"
)
def test_configure_sets_the_flags_unless_opted_out():
    """`advjax.backend.configure()` in a fresh process sets the flags; ADVJAX_XLA_DEFAULTS=0
    keeps XLA_FLAGS as it was."""
    assert _flags_in_fresh_process({}, CONFIGURE) == " ".join(_flags.CPU_FLAGS)
    assert _flags_in_fresh_process({_flags.OPT_OUT_VARIABLE: "0"}, CONFIGURE) == ""
    assert jax.default_backend()  # this process runs either way


def test_importing_advjax_sets_nothing_and_starts_no_backend():
    """Importing the library and every entry point changes no XLA flag and starts no JAX
    backend, so the entry points' `configure()` still takes effect."""
    code = (
        "import os, advjax, advjax_text.translate, advjax_text.classify, "
        "experiments.cifar_robustness.main, experiments.text_robustness.main, "
        "experiments.seq2seq_robustness.main, benchmarks.run; "
        "from jax._src import xla_bridge; "
        "print(os.environ.get('XLA_FLAGS', ''), xla_bridge.backends_are_initialized())"
    )
    assert _flags_in_fresh_process({}, code) == "False"


ATTACK_TWICE = (
    "import warnings, jax, jax.numpy as jnp, advjax{configure}\n"
    "warnings.simplefilter('always')\n"
    "w = jnp.ones((12, 3)) * 0.1\n"
    "f = lambda x: x.reshape(x.shape[0], -1) @ w\n"
    "x = jnp.full((2, 2, 2, 3), 0.5); y = jnp.array([0, 1])\n"
    "with warnings.catch_warnings(record=True) as caught:\n"
    "    warnings.simplefilter('always')\n"
    "    advjax.attacks.fgsm(f, x, y, 0.03).x_adv; advjax.attacks.pgd(f, x, y, 0.03, key=jax.random.key(0), steps=2).x_adv\n"
    "print(sum('without advjax' in str(c.message) for c in caught))"
)


@pytest.mark.skipif(
    jaxlib.__version__ not in _flags.MEASURED_JAXLIB, reason="flags not measured on this jaxlib"
)
def test_attacks_warn_once_when_the_flags_are_missing():
    """Two attacks in a process that never called configure(): one warning naming the call;
    none after configure(), none with ADVJAX_XLA_DEFAULTS=0 (XLA's defaults on purpose)."""
    unconfigured = ATTACK_TWICE.format(configure="")
    configured = ATTACK_TWICE.format(configure="; advjax.backend.configure()")
    assert _flags_in_fresh_process({}, unconfigured) == "1"
    assert _flags_in_fresh_process({}, configured) == "0"
    assert _flags_in_fresh_process({_flags.OPT_OUT_VARIABLE: "0"}, unconfigured) == "0"
