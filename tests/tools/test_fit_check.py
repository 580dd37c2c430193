"""The fit check measures the training loop's own validation attack on any image set."""

import jax
import numpy as np
import pytest

from advjax.io import save_checkpoint
from advjax_train import CompactCNN
from tools.fit_check import fit_of, parse_args

# A tool's test (tools/) that trains small models: outside the default run.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = CompactCNN(activation="silu")
    variables = model.init(jax.random.key(0), np.zeros((1, 32, 32, 3), np.float32), False)
    return save_checkpoint(tmp_path_factory.mktemp("fit") / "m.msgpack", model, variables)


def _images(seed: int, n: int = 24):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)


def test_eps_zero_keeps_clean_accuracy_and_equal_sets_give_equal_numbers(checkpoint):
    """At eps 0 the attack changes nothing; the same images under two names get the same
    numbers (one key for every set), and a stronger budget never raises PGD accuracy."""
    images, labels = _images(1)
    sets = {"a": (images, labels), "b": (images, labels)}
    zero = fit_of(checkpoint, sets, eps=0.0, steps=3, key=jax.random.key(0))
    assert zero["a"] == zero["b"]
    assert zero["a"]["pgd_accuracy"] == zero["a"]["clean_accuracy"]
    strong = fit_of(checkpoint, {"a": (images, labels)}, eps=16 / 255, steps=3,
                    key=jax.random.key(0))  # fmt: skip
    assert strong["a"]["clean_accuracy"] == zero["a"]["clean_accuracy"]
    assert strong["a"]["pgd_accuracy"] <= zero["a"]["pgd_accuracy"]


@pytest.mark.parametrize("argv", [["--n", "0"], ["--steps", "0"], ["--eps", "8"]])
def test_bad_arguments_are_refused_naming_the_flag(argv, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert argv[0] in capsys.readouterr().err
