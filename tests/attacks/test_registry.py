"""The attack registry (`advjax.attacks.ATTACKS`): every declared attack, run as the runners
run it, keeps the threat model's promises; key streams are fixed by name."""

import dataclasses
import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from advjax.attacks import ATTACKS, Attack, get_attack, perturbation_norm
from advjax.attacks._attack import STREAMS, stream_of
from advjax.attacks._registry import registry
from advjax.evaluation import AttackSpec, autoattack
from tests.conftest import make_linear_batch, make_linear_logits_fn

EPS = {"linf": 8 / 255, "l2": 0.5}
STEPS = {"gradient": 10, "score": 80}
OPTIONS = {"loss": "ce", "p_init": 0.3, "step_fraction": 0.25, "targets": 2}
CASES = [(name, norm) for name, info in ATTACKS.items() for norm in info.norms]


def test_autoattack_streams_are_the_ones_the_committed_records_were_drawn_from():
    """Regression pin: committed AutoAttack records hold keys fold_in(case key, stream);
    renumbering a member would silently change every one of its draws."""
    pinned = {"apgd-ce": 0, "apgd-dlr": 1, "apgd-t": 2, "fab": 3, "fab-t": 4, "square": 5}
    assert {name: ATTACKS[name].stream for name in pinned} == pinned
    assert {name: AttackSpec(name).stream for name in pinned} == pinned


def test_names_and_streams_are_unique_and_a_second_declaration_is_refused():
    streams = [info.stream for info in ATTACKS.values()]
    assert len(set(streams)) == len(streams)
    info = ATTACKS["pgd"]
    with pytest.raises(ValueError, match="names declared twice"):
        registry(info, info)
    copy = dataclasses.replace(info, name="pgd-copy")
    assert copy.stream != info.stream
    object.__setattr__(copy, "stream", info.stream)
    with pytest.raises(ValueError, match="streams declared twice"):
        registry(info, copy)


def test_a_new_attack_takes_its_stream_from_its_name_and_never_a_committed_one():
    """Streams of attacks without committed records come from the name's SHA-256 (pinned:
    records made today replay tomorrow), above every hand-numbered stream."""
    assert stream_of("mi-fgsm") == ATTACKS["mi-fgsm"].stream == 770761198
    assert stream_of("mi-fgsm") == stream_of("mi-fgsm") != stream_of("mi-fgsm2")
    for name in ("a", "rfgsm", "sparse-rs", "x" * 50):
        assert 2**20 <= stream_of(name) < 2**31
    assert {name: stream_of(name) for name in STREAMS} == STREAMS


def test_one_spelling_underscored_names_and_unknown_attacks_are_refused():
    with pytest.raises(ValueError, match="words joined by '-'"):
        dataclasses.replace(ATTACKS["pgd"], name="pgd_copy")
    with pytest.raises(ValueError, match="unknown attack 'apgd_ce'.*apgd-ce"):
        get_attack("apgd_ce")
    with pytest.raises(ValueError, match="unknown attack method 'pgd_t'"):
        AttackSpec(name="x", method="pgd_t", eps=(0.1,))


def test_every_entry_is_an_attack_info_with_a_cost_for_its_steps():
    for info in ATTACKS.values():
        assert isinstance(info, Attack) and info.reference
        forward, backward = info.passes(10, 10)
        assert forward >= 1 and backward >= (1 if info.kind == "gradient" else 0)
        assert info.queries(10) >= 1


LOGITS_FN = make_linear_logits_fn()


@functools.cache
def _program(name, norm):
    info = ATTACKS[name]

    @jax.jit
    def run(x, y, keys, eps):
        return info.run(LOGITS_FN, x, y, eps, keys=keys, restart=0, target=1, norm=norm,
                        steps=info.steps or STEPS[info.kind], options=OPTIONS)  # fmt: skip

    return run


def _run(name, norm, eps):
    x, _ = make_linear_batch(n=12)
    y = jnp.argmax(LOGITS_FN(x), -1).astype(jnp.int32)  # every case clean-correct
    keys = jax.vmap(jax.random.fold_in, (None, 0))(jax.random.key(0), jnp.arange(12))
    r = _program(name, norm)(jnp.asarray(x), y, keys, jnp.float32(eps))
    return ATTACKS[name], LOGITS_FN, x, y, r


@pytest.mark.parametrize("name,norm", CASES)
def test_every_attack_stays_in_the_ball_and_box_and_its_breaks_are_real(name, norm):
    """The runners' promises, for every declared attack in every norm it declares: the point
    is inside the eps-ball and [0, 1], a case reported broken is misclassified there, and
    no run spends more queries than the registry's count."""
    info, logits_fn, x, y, r = _run(name, norm, EPS[norm])
    size = np.asarray(perturbation_norm(r.x_adv - x, norm))
    assert size.max() <= EPS[norm] * (1 + 1e-5) + 1e-7
    assert float(r.x_adv.min()) >= 0 and float(r.x_adv.max()) <= 1
    broken = np.asarray(r.broken) >= 0
    assert broken.any(), "eps 8/255 (L2 0.5) breaks some cases of the linear model"
    wrong = np.asarray(jnp.argmax(logits_fn(r.x_adv), -1) != y)
    np.testing.assert_array_equal(wrong[broken], True)
    assert int(np.max(r.queries)) <= info.queries(info.steps or STEPS[info.kind])


@pytest.mark.parametrize("name,norm", CASES)
def test_at_eps_zero_every_attack_returns_the_inputs_and_breaks_nothing(name, norm):
    _, _, x, _, r = _run(name, norm, 0.0)
    np.testing.assert_array_equal(np.asarray(r.x_adv), x)
    np.testing.assert_array_equal(np.asarray(r.broken), -1)


def test_adding_a_member_never_changes_another_members_draws():
    """FMN (stream 9) after APGD-CE: APGD-CE's verdicts and points are those it has alone."""
    logits_fn = make_linear_logits_fn()
    x, _ = make_linear_batch(n=16)
    y = np.asarray(jnp.argmax(logits_fn(x), -1)).astype(np.int32)
    key = jax.random.key(7)
    alone = autoattack(logits_fn, x, y, 4 / 255, key=key, members=[AttackSpec("apgd-ce", steps=10)],
                       checks=False)  # fmt: skip
    both = autoattack(logits_fn, x, y, 4 / 255, key=key, checks=False,
                      members=[AttackSpec("apgd-ce", steps=10), AttackSpec("fmn", steps=20)])  # fmt: skip
    first = alone.broken_by == 0
    assert first.any() and (~first).any()
    np.testing.assert_array_equal(both.broken_by == 0, first)
    np.testing.assert_array_equal(both.x_adv[first], alone.x_adv[first])
    assert not (both.robust & ~alone.robust).any(), "a stronger list never leaves more robust"


def test_every_declaration_is_hashable_so_runners_may_key_on_it():
    """An `Attack` (with its step rule, hyper-parameters included) is a frozen, hashable value:
    a jitted program or a cache may take it as a static argument."""
    assert len({attack: name for name, attack in ATTACKS.items()}) == len(ATTACKS)
    assert hash(ATTACKS["mi-fgsm"]) == hash(ATTACKS["mi-fgsm"])


@pytest.mark.parametrize("name,norm", CASES)
def test_every_entry_is_callable_by_name_in_its_norms_and_refuses_the_others(name, norm):
    """`ATTACKS[name](logits_fn, x, y, eps, ...)` runs the attack's own function: its points
    stay in the eps-ball and [0, 1] (pgd-t given its targets; the rest their defaults; FMN, a
    minimum-norm attack, returns its smallest point, which eps bounds only where it dates a
    break inside eps); a norm the attack does not declare is refused before any work."""
    attack = ATTACKS[name]
    x, _ = make_linear_batch(n=6)
    y = jnp.argmax(LOGITS_FN(x), -1).astype(jnp.int32)
    kwargs = {"steps": 3} if name not in ("fgsm", "square") else {}
    if name == "square":
        kwargs = {"queries": 20}
    if "key" in inspect.signature(attack.function).parameters or name in ("pgd-t", "mi-fgsm"):
        kwargs["key"] = jax.random.key(0)
    if name == "pgd-t":
        kwargs["target"] = (y + 1) % 10
    out = attack(LOGITS_FN, x, y, EPS[norm], norm=norm, **kwargs)
    x_adv = np.asarray(getattr(out, "x_adv", out))
    assert x_adv.shape == x.shape and x_adv.min() >= 0 and x_adv.max() <= 1
    size = np.asarray(perturbation_norm(jnp.asarray(x_adv - x), norm))
    bounded = np.asarray(out.first_step) >= 0 if name == "fmn" else np.ones(len(y), bool)
    assert bounded.any()
    assert (size[bounded] <= EPS[norm] * (1 + 1e-5) + 1e-6).all()
    with pytest.raises(ValueError, match=f"attack {name!r} runs under norm"):
        attack(LOGITS_FN, x, y, EPS[norm], norm="l1", **kwargs)
