"""Models of one architecture share the evaluation layer's compiled programs.

`eval_logits_fn` returns a `jax.tree_util.Partial` whose leaves are the variables, and the
jitted evaluation programs take it as an argument: a second model with other weights
reuses the first one's program (no new trace, no new compile), and the results are those
of a logits function that closes over its weights.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax._jit_argument import as_jit_argument
from advjax.evaluation import AttackSpec
from advjax.evaluation._autoattack import _clean_program, clean_predictions
from advjax.evaluation._batch import _attack_program
from advjax.evaluation._early_stop import _search_program
from advjax.evaluation.engine import make_attack_fn, make_program
from advjax_train import eval_logits_fn


class TinyNet(nn.Module):
    """A dense classifier on (B, 4, 4, 3) inputs with the CompactCNN call signature."""

    @nn.compact
    def __call__(self, x, train: bool):
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


def _models(n: int):
    x = jnp.zeros((1, 4, 4, 3))
    return [(TinyNet(), TinyNet().init(jax.random.key(seed), x, train=False)) for seed in range(n)]


def _closure(model, variables):
    return lambda x: model.apply(variables, x, train=False)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.uniform(size=(8, 4, 4, 3)), jnp.float32)
    y = jnp.asarray(rng.integers(0, 10, size=8), jnp.int32)
    return x, y


PGD3 = AttackSpec(name="pgd", method="pgd", eps=(8 / 255,), steps=3)


def test_pgd_attack_fn_compiles_once_for_two_models_and_matches_closures(batch):
    """make_attack_fn: a second model adds no entry to the program's cache, and each
    model's adversarial inputs equal those of a closure over its weights."""
    x, y = batch
    key, eps = jax.random.key(1), jnp.float32(8 / 255)
    outputs, sizes = [], []
    for model, variables in _models(2):
        attack = make_attack_fn(eval_logits_fn(model, variables), PGD3)
        outputs.append(attack(x, y, eps, key))
        sizes.append(_attack_program._cache_size())
    assert sizes[1] == sizes[0]
    for (model, variables), got in zip(_models(2), outputs):
        closed = make_attack_fn(_closure(model, variables), PGD3)
        want = closed(x, y, eps, key)
        np.testing.assert_allclose(got[0], want[0], atol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[2], want[2])
    # each closure is a function of its own: one program each
    assert _attack_program._cache_size() == sizes[0] + 2


def test_campaign_program_is_shared_between_models(batch):
    """make_program: the search piece of a second model of the same architecture and spec
    hits the first one's compiled program."""
    x, y = batch
    spec = AttackSpec(name="fgsm", method="fgsm", eps=(8 / 255,))
    keys = jax.random.split(jax.random.key(2), len(y))
    sizes = []
    for model, variables in _models(3):
        program = make_program(eval_logits_fn(model, variables), spec)
        program.search(x, y, jnp.float32(8 / 255), keys, 0)
        sizes.append(_search_program._cache_size())
    assert sizes[1] == sizes[0] and sizes[2] == sizes[0]


def test_clean_predictions_are_shared_and_equal_argmax(batch):
    """clean_predictions: one program for every model; predictions are the argmax."""
    x, _ = batch
    sizes = []
    for model, variables in _models(2):
        fn = eval_logits_fn(model, variables)
        got = clean_predictions(fn, x, jax.random.key(0), 4, False)
        np.testing.assert_array_equal(got, np.argmax(fn(x), -1))
        sizes.append(_clean_program._cache_size())
    assert sizes[0] == sizes[1]


def test_as_jit_argument_wraps_callables_and_rejects_others():
    """Any callable becomes a leafless Partial (None and Partials pass through); a
    non-callable logits_fn is refused by name."""
    fn = as_jit_argument(jnp.tanh)
    assert isinstance(fn, jax.tree_util.Partial) and jax.tree_util.tree_leaves(fn) == []
    assert as_jit_argument(fn) is fn and as_jit_argument(None) is None
    with pytest.raises(TypeError, match="logits_fn must be callable"):
        as_jit_argument(np.zeros(3))
