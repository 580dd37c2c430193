"""Every public attack checks its concrete inputs before any work, naming the argument and
the expected range, and keeps working on traced values under the caller's `jit`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax.attacks import apgd, apgd_targeted, fab, fgsm, pgd
from advjax.attacks._square import square_linf

W = jax.random.normal(jax.random.key(0), (4 * 4 * 3, 10)) * 0.1


def logits_fn(x):
    return x.reshape(x.shape[0], -1) @ W


X = np.asarray(jax.random.uniform(jax.random.key(1), (6, 4, 4, 3)))
Y = np.asarray(jnp.argmax(logits_fn(X), -1))
KEY = jax.random.key(2)
ATTACKS = {
    "fgsm": lambda x, y, key: fgsm(logits_fn, x, y, 0.03).x_adv,
    "pgd": lambda x, y, key: pgd(logits_fn, x, y, 0.03, key=key, steps=2).x_adv,
    "apgd": lambda x, y, key: apgd(logits_fn, x, y, 0.03, key=key, steps=2),
    "apgd_targeted": lambda x, y, key: apgd_targeted(logits_fn, x, y, 0.03, key=key, steps=2),
    "square_linf": lambda x, y, key: square_linf(logits_fn, x, y, 0.03, key=key, queries=3),
    "fab": lambda x, y, key: fab(logits_fn, x, y, 0.03, key=key, steps=2, targets=1),
}


@pytest.mark.parametrize("name", ATTACKS)
def test_pixels_on_a_0_to_255_scale_are_refused(name):
    with pytest.raises(ValueError, match=r"x must lie in \[0, 1\]"):
        ATTACKS[name](X * 255, Y, KEY)


@pytest.mark.parametrize("name", ATTACKS)
def test_labels_outside_the_logits_classes_are_refused(name):
    with pytest.raises(ValueError, match=r"y must lie in \[0, 10\)"):
        ATTACKS[name](X, Y + 10, KEY)
    with pytest.raises(ValueError, match="y must"):
        ATTACKS[name](X, Y - 20, KEY)


@pytest.mark.parametrize("name", [n for n in ATTACKS if n != "fgsm"])
def test_an_integer_key_is_refused_with_a_clear_message(name):
    with pytest.raises(TypeError, match="key"):
        ATTACKS[name](X, Y, 0)


@pytest.mark.parametrize("name", ATTACKS)
def test_traced_inputs_still_work_under_jit(name):
    """Values cannot be checked while traced: the attack runs, and stays in the ball."""
    x_adv = jax.jit(lambda x, y: _adv(ATTACKS[name](x, y, KEY)))(X, Y)
    assert np.abs(np.asarray(x_adv) - X).max() <= 0.03 + 1e-6


def _adv(result):
    return result if isinstance(result, jax.Array) else result.x_adv


@pytest.mark.parametrize("name", ATTACKS)
def test_nan_logits_are_refused_instead_of_returning_nan_or_the_random_start(name, monkeypatch):
    original = logits_fn
    broken = lambda z: original(z) * jnp.nan  # noqa: E731
    monkeypatch.setitem(globals(), "logits_fn", broken)
    with pytest.raises(ValueError, match="NaN or infinite logits"):
        ATTACKS[name](X, Y, KEY)
