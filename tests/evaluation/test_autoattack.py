"""`advjax.evaluation.autoattack`: AutoAttack on any JAX model, with early stop and named checks."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import advjax
from advjax.evaluation import AttackSpec, autoattack

EPS = 0.02
SHAPE = (4, 4, 3)
FAST = dict(steps=10)  # small budgets: the properties, not the strength
QUERIES = 200  # Square's budget


def _small(method: str) -> int:
    return QUERIES if method == "square" else FAST["steps"]


def _mlp(seed=0, hidden=32, classes=10):
    k1, k2 = jax.random.split(jax.random.key(seed))
    d = int(np.prod(SHAPE))
    w1 = jax.random.normal(k1, (d, hidden)) * 3.0 / np.sqrt(d)
    w2 = jax.random.normal(k2, (hidden, classes)) / np.sqrt(hidden)
    return lambda z: jnp.tanh(z.reshape(z.shape[0], -1) @ w1 - 1.5) @ w2


def _cases(logits_fn, n=24, seed=1, wrong=2):
    x = jax.random.uniform(jax.random.key(seed), (n, *SHAPE))
    y = np.array(jnp.argmax(logits_fn(x), -1))
    y[:wrong] = (y[:wrong] + 1) % 10  # a few cases misclassified on the clean input
    return np.asarray(x), y


def _members(*methods, targets=3):
    return [AttackSpec(m, targets=targets, steps=_small(m)) for m in methods]


STANDARD = ("apgd-ce", "apgd-t", "fab-t", "square")


@pytest.fixture(scope="module")
def model():
    logits_fn = _mlp()
    x, y = _cases(logits_fn)
    return logits_fn, x, y


@pytest.fixture(scope="module")
def standard(model):
    logits_fn, x, y = model
    return autoattack(
        logits_fn, x, y, EPS, key=jax.random.key(3), members=_members(*STANDARD), batch_size=8
    )


def test_model_passes_count_each_run_on_the_cases_it_attacked(model, standard):
    """Per member, forward and backward passes: a gradient member's whole run (APGD: steps + 1
    of each, APGD-T one forward more; FAB-T: 2 steps + 1 forward, steps backward) times the
    cases each of its runs attacked (each run attacks the cases the run before it left
    robust: read off the progress callback); a score-based member one forward pass per
    query it spent, no backward pass."""
    logits_fn, x, y = model
    runs = []
    r = autoattack(logits_fn, x, y, EPS, key=jax.random.key(3), members=_members(*STANDARD),
                   batch_size=8, checks=False,
                   on_run=lambda m, t, k, left: runs.append((m.name, left)))  # fmt: skip
    cases, before = dict.fromkeys(STANDARD, 0), int(r.clean_correct.sum())
    for name, left in runs:
        cases[name] += before
        before = left
    passes = {p["member"]: (p["forward"], p["backward"]) for p in r.passes}
    steps = FAST["steps"]
    assert passes["apgd-ce"] == (cases["apgd-ce"] * (steps + 1),) * 2
    assert passes["apgd-t"] == (cases["apgd-t"] * (steps + 2), cases["apgd-t"] * (steps + 1))
    assert passes["fab-t"] == (cases["fab-t"] * (2 * steps + 1), cases["fab-t"] * steps)
    alone = autoattack(logits_fn, x, y, EPS, key=jax.random.key(3), members=_members("square"),
                       checks=False)  # fmt: skip
    assert alone.passes[0]["forward"] == int(alone.queries.sum()) > 0
    assert alone.passes[0]["backward"] == 0
    assert r.passes == standard.passes, "the count does not depend on the checks or callbacks"


def test_result_holds_every_case_and_member(model, standard):
    logits_fn, x, y = model
    r = standard
    assert r.x_adv.shape == x.shape and r.robust.shape == y.shape
    assert [m.method for m in r.members] == list(STANDARD)
    assert [row["member"] for row in r.robust_accuracy] == ["clean", *STANDARD]
    np.testing.assert_array_equal(r.clean_correct, np.asarray(jnp.argmax(logits_fn(x), -1)) == y)
    assert set(np.unique(r.broken_by)) <= {-2, -1, 0, 1, 2, 3}
    assert (r.broken_by[~r.clean_correct] == -2).all()
    assert r.robust_accuracy[-1]["count"] == int(r.robust.sum())
    counts = [row["count"] for row in r.robust_accuracy]
    assert counts == sorted(counts, reverse=True), "cumulative robust accuracy never rises"
    lo, hi = r.robust_accuracy[-1]["ci95"]
    assert lo <= r.robust.mean() <= hi


def test_perturbations_stay_in_the_ball_and_in_the_unit_box(model, standard):
    _, x, _ = model
    delta = np.abs(standard.x_adv - x).reshape(len(x), -1).max(axis=1)
    assert delta.max() <= EPS + 1e-6
    assert standard.x_adv.min() >= 0 and standard.x_adv.max() <= 1
    np.testing.assert_array_equal(
        standard.x_adv[~standard.clean_correct], x[~standard.clean_correct]
    )


def test_broken_cases_are_misclassified_at_their_worst_case_input(model, standard):
    logits_fn, _, y = model
    pred = np.asarray(jnp.argmax(logits_fn(jnp.asarray(standard.x_adv)), -1))
    broken = standard.broken_by >= 0
    assert broken.any()
    assert (pred[broken] != y[broken]).all()
    assert (pred[standard.robust] == y[standard.robust]).all()


def test_named_checks_pass_on_a_plain_model(standard):
    names = {c.name: c.passed for c in standard.checks}
    assert names == {
        "model_randomness": True,
        "outputs_are_logits": True,
        "zero_input_gradients": True,
        "perturbations_in_ball_and_box": True,
        "black_box_not_stronger": True,
        "eps_zero_equals_clean": True,
    }


@pytest.mark.parametrize("method", STANDARD)
def test_the_ensemble_is_never_weaker_than_any_member_alone(model, standard, method):
    """A member draws the same randomness alone as inside the ensemble, so every case it
    breaks alone the ensemble breaks too."""
    logits_fn, x, y = model
    alone = autoattack(
        logits_fn, x, y, EPS, key=jax.random.key(3), members=_members(method), batch_size=8,
        checks=False,
    )  # fmt: skip
    assert not (alone.broken_by >= 0)[standard.robust].any()


def test_same_key_same_numbers_whatever_the_batch_size(model, standard):
    logits_fn, x, y = model
    again = autoattack(
        logits_fn, x, y, EPS, key=jax.random.key(3), members=_members(*STANDARD), batch_size=5,
        checks=False,
    )  # fmt: skip
    np.testing.assert_array_equal(again.broken_by, standard.broken_by)
    np.testing.assert_array_equal(again.queries, standard.queries)
    np.testing.assert_array_equal(again.x_adv, standard.x_adv)


def test_early_stop_spends_queries_on_robust_cases_only(standard):
    """A case broken by APGD-CE costs one run; a robust case pays for every member."""
    by_apgd = standard.broken_by == 0
    robust = standard.robust
    assert by_apgd.any() and robust.any()
    assert (standard.queries[by_apgd] == 11).all()
    assert (standard.queries[robust] > 11 * 3).all()
    assert (standard.queries[~standard.clean_correct] == 0).all()


def test_eps_zero_leaves_every_case_as_clean(model):
    logits_fn, x, y = model
    r = autoattack(logits_fn, x, y, 0.0, key=jax.random.key(0), members=_members(*STANDARD))
    np.testing.assert_array_equal(r.robust, r.clean_correct)
    np.testing.assert_array_equal(r.x_adv, x)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda x, y: (x * 255, y), "x must lie in \\[0, 1\\].*0..255"),
        (lambda x, y: (x, y + 10), "y must lie in \\[0, 10\\)"),
        (lambda x, y: (x[:, 0], y[:3]), "same n"),
        (lambda x, y: (x.astype(np.int32), y), "floating point"),
    ],
)
def test_bad_inputs_are_refused_before_any_work(model, change, message):
    logits_fn, x, y = model
    x, y = change(x, y)
    with pytest.raises((ValueError, TypeError), match=message):
        autoattack(logits_fn, x, y, EPS, key=jax.random.key(0))


def test_bad_budgets_keys_versions_and_nan_logits_are_refused(model):
    logits_fn, x, y = model
    with pytest.raises(ValueError, match="eps=2"):
        autoattack(logits_fn, x, y, 2.0, key=jax.random.key(0))
    with pytest.raises(TypeError, match="key"):
        autoattack(logits_fn, x, y, EPS, key=0)
    with pytest.raises(ValueError, match="version"):
        autoattack(logits_fn, x, y, EPS, key=jax.random.key(0), version="strongest")
    with pytest.raises(ValueError, match="NaN"):
        autoattack(lambda z: logits_fn(z) * jnp.nan, x, y, EPS, key=jax.random.key(0))
    with pytest.raises(ValueError, match="method"):
        AttackSpec("cw")


@pytest.mark.slow
def test_probabilities_and_masked_gradients_fail_their_checks(model):
    logits_fn, x, y = model
    softmax = lambda z: jax.nn.softmax(logits_fn(z))  # noqa: E731
    r = autoattack(softmax, x, y, EPS, key=jax.random.key(0), members=_members("apgd-ce"))
    assert {c.name: c.passed for c in r.checks}["outputs_are_logits"] is False
    flat = lambda z: logits_fn(jnp.round(z * 4) / 4)  # noqa: E731  (zero gradient everywhere)
    r = autoattack(flat, x, y, EPS, key=jax.random.key(0), members=_members("apgd-ce", "square"))
    names = {c.name: c.passed for c in r.checks}
    assert names["zero_input_gradients"] is False


def _noisy(logits_fn, sigma=0.08):
    """A randomised defense: Gaussian noise on the input, a fresh draw per call."""
    return lambda z, key: logits_fn(jnp.clip(z + sigma * jax.random.normal(key, z.shape), 0, 1))


def test_rand_version_on_a_random_model_is_stronger_than_one_fixed_draw(model):
    """EOT over 20 draws breaks more cases than attacking one draw per run, both judged by
    the same verdict (the mean over 20 fresh draws)."""
    logits_fn, x, y = model
    random_fn = _noisy(logits_fn)
    rand = autoattack(
        random_fn, x, y, 0.04, key=jax.random.key(0),
        members=[AttackSpec("apgd-ce", steps=20, eot=20)], checks=False,
    )  # fmt: skip
    single = autoattack(
        random_fn, x, y, 0.04, key=jax.random.key(0),
        members=[AttackSpec("apgd-ce", steps=20, eot=1)], checks=False, version="rand",
    )  # fmt: skip
    assert rand.robust.sum() < single.robust.sum()
    # a robust case spent every run's budget: (steps + 1) gradients of `eot` draws each
    assert (rand.queries[rand.robust] == 21 * 20).all()
    assert (single.queries[single.robust] == 21).all()


@pytest.mark.parametrize(
    "members",
    [
        [
            AttackSpec(m, steps=_small(m), targets=3)
            for m in ("apgd-ce", "apgd-t", "fab-t", "square")
        ],
        pytest.param(
            [AttackSpec("apgd-ce", steps=5, eot=4), AttackSpec("apgd-dlr", steps=5, eot=4)],
            marks=pytest.mark.slow,
        ),
    ],
    ids=["standard", "eot"],
)
def test_every_case_spends_at_most_the_declared_query_budget(model, members):
    """The per-case queries the result reports never exceed the budget the run's threat
    model declares (`AutoAttackConfig.threat_model`), with or without EOT."""
    logits_fn, x, y = model
    fn = _noisy(logits_fn) if members[0].eot > 1 else logits_fn
    r = autoattack(fn, x, y, EPS, key=jax.random.key(0), members=members, checks=False)
    declared = advjax.evaluation.AutoAttackConfig(eps=EPS, members=members).threat_model.queries
    per_case = sum(m.queries_per_run * len(m.runs()) for m in members)
    assert r.queries.max() <= per_case <= declared
    assert r.queries[r.robust].min() >= min(m.queries_per_run for m in members)


def test_a_random_model_fails_the_randomness_check_of_a_deterministic_version(model):
    """A model that draws new noise on every call, given to the standard version, is
    flagged: two identical calls differ."""
    logits_fn, x, y = model
    random_fn, calls = _noisy(logits_fn), itertools.count()
    stateful = lambda z: random_fn(z, jax.random.key(next(calls)))  # noqa: E731
    r = autoattack(stateful, x, y, EPS, key=jax.random.key(0), members=_members("apgd-ce"))
    check = {c.name: c for c in r.checks}["model_randomness"]
    assert check.passed is False and "version='rand'" in check.evidence


def _assert_sound(run, logits_fn, x, y, eps):
    """A model of another library under `autoattack`: every x_adv in the eps-ball and [0, 1];
    the model itself, called here, misclassifies every broken case's x_adv and classifies
    every robust case's correctly; robust <= clean; a second call gives the same outcome."""
    r = run()
    delta = np.abs(np.asarray(r.x_adv, np.float64) - np.asarray(x, np.float64))
    assert delta.max() <= eps + 1e-6 and r.x_adv.min() >= 0.0 and r.x_adv.max() <= 1.0
    pred = np.asarray(jnp.argmax(logits_fn(jnp.asarray(r.x_adv)), -1))
    assert (pred[r.broken_by >= 0] != y[r.broken_by >= 0]).all()
    assert (pred[r.robust] == y[r.robust]).all()
    assert r.robust.sum() <= r.clean_correct.sum() and not (r.robust & ~r.clean_correct).any()
    again = run()
    np.testing.assert_array_equal(again.broken_by, r.broken_by)
    np.testing.assert_array_equal(again.x_adv, r.x_adv)
    return r


def test_flax_linen_and_nnx_models_work_as_they_are():
    import flax.linen as nn
    from flax import nnx

    class Linen(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.tanh(nn.Dense(32)(x.reshape(x.shape[0], -1))))

    x = np.asarray(jax.random.uniform(jax.random.key(1), (12, *SHAPE)))
    linen = Linen()
    variables = linen.init(jax.random.key(0), jnp.asarray(x))
    linen_fn = functools.partial(linen.apply, variables)
    y = np.asarray(jnp.argmax(linen_fn(x), -1))
    members = _members("apgd-ce", "fab-t")
    r = _assert_sound(
        lambda: autoattack(linen_fn, x, y, 0.1, key=jax.random.key(0), members=members),
        linen_fn, x, y, 0.1,
    )  # fmt: skip
    assert (r.broken_by >= 0).any()

    class NNX(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(int(np.prod(SHAPE)), 32, rngs=rngs)
            self.out = nnx.Linear(32, 10, rngs=rngs)

        def __call__(self, x):
            return self.out(jnp.tanh(self.hidden(x.reshape(x.shape[0], -1))))

    module = NNX(nnx.Rngs(0))
    y = np.asarray(jnp.argmax(module(jnp.asarray(x)), -1))
    r = _assert_sound(
        lambda: autoattack(module, x, y, 0.1, key=jax.random.key(0), members=members),
        module, x, y, 0.1,
    )  # fmt: skip
    assert (r.broken_by >= 0).any()


@pytest.mark.parametrize("library", ["equinox", "haiku"])
def test_equinox_and_haiku_models_work_as_they_are(library):
    x = np.asarray(jax.random.uniform(jax.random.key(1), (8, *SHAPE)))
    if library == "equinox":
        eqx = pytest.importorskip("equinox")
        mlp = eqx.nn.MLP(int(np.prod(SHAPE)), 10, 32, 1, key=jax.random.key(0))
        logits_fn = lambda z: jax.vmap(mlp)(z.reshape(z.shape[0], -1))  # noqa: E731
    else:
        hk = pytest.importorskip("haiku")
        net = hk.without_apply_rng(
            hk.transform(lambda z: hk.nets.MLP([32, 10])(z.reshape(z.shape[0], -1)))
        )
        params = net.init(jax.random.key(0), jnp.asarray(x))
        logits_fn = functools.partial(net.apply, params)
    y = np.asarray(jnp.argmax(logits_fn(jnp.asarray(x)), -1))
    members = _members("apgd-ce")
    r = _assert_sound(
        lambda: autoattack(logits_fn, x, y, 0.1, key=jax.random.key(0), members=members),
        logits_fn, x, y, 0.1,
    )  # fmt: skip
    assert (r.broken_by >= 0).any()


def test_top_level_export():
    assert advjax.evaluation.autoattack is autoattack


@pytest.mark.parametrize("size", ["small", pytest.param("full", marks=pytest.mark.slow)])
def test_cases_sharded_over_4_devices_give_the_one_device_outcome(size):
    """The case batch sharded over a 4-device mesh (simulated CPU devices, in a subprocess)
    gives every case the outcome it gets on one device (small: two members on 16 cases)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip()
    )
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run(
        [sys.executable, "-m", "tests.evaluation.autoattack_sharding_worker",
         *(["small"] if size == "small" else [])], cwd=root, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    assert out["broken_by_equal"] and out["queries_equal"]
    assert out["x_adv_max_difference"] <= 1e-6


@pytest.mark.parametrize("batch_size,devices", [(250, 1), (2500, 1), (1024, 4)])
def test_a_members_shrinking_runs_reuse_a_compiled_batch_shape_within_the_padding_slack(
    batch_size, devices
):
    """As early stop shrinks the cases left run after run, a member keeps the batch shape
    it compiled while the padded work stays within `PADDING_SLACK` of a fresh shape's; each
    batch covers its cases, fits `batch_size` and splits evenly over the devices."""
    from advjax.evaluation._autoattack import PADDING_SLACK, _batch_for

    work = lambda cases, size: -(-cases // size) * size  # noqa: E731
    left = [round(batch_size * 1.5 * 0.985**run) for run in range(40)] + [31, 7, 1]
    shapes, chosen = set(), []
    for cases in left:
        fresh = _batch_for(cases, batch_size, devices)
        size = _batch_for(cases, batch_size, devices, shapes)
        shapes.add(size)
        chosen.append(size)
        assert size <= max(batch_size, fresh) and size % devices == 0
        assert cases <= work(cases, size) <= work(cases, fresh) * (1 + PADDING_SLACK)
    without_reuse = {_batch_for(cases, batch_size, devices) for cases in left}
    assert len(shapes) <= len(without_reuse)
    if batch_size >= 1000:  # where a 1.5 % shrink crosses a multiple of 32 within a run or two
        assert len(shapes) <= len(without_reuse) // 2
        assert chosen[:7] == [chosen[0]] * 7  # seven runs, one shape
