"""AutoAttack for any JAX model: APGD-CE, APGD-T, FAB-T and Square in sequence, each member
only on the cases every earlier member left robust.

The per-case worst case decides: a case is broken by the first member (and within it the
first run: restart or target) that misclassifies it inside the eps-ball, and a broken case
leaves the batch at once, so the cost follows the robust cases, not the total. Every case
draws its randomness from its own key, `fold_in(key, position)`, then the member's method,
then the run, so its outcome does not depend on which other cases share its batch: a run
can be split, resumed or sharded over devices and give the same numbers.

Each member runs as a stage of the engine (`advjax.evaluation._engine`): its runs (targets and
restarts) in compiled batches over the cases still robust, broken cases leaving the batch
between runs. A run is one jitted program per member (target and restart are traced),
applied to padded batches whose size follows the number of cases left, so few shapes compile
and little work is padding.

The fast version spends fewer model passes for the standard version's verdicts. On every
case: APGD-CE, then MALT (APGD-T toward the 3 classes a linear estimate puts nearest,
instead of the 9 highest-ranked logits). Then a probe for gradient masking: FAB-T and
Square, the members that see past a masked gradient, on a random sample of the cases still
robust. If the probe breaks any case, or a model check fails (all-zero input gradients,
probabilities for logits), the evaluation escalates: the standard version's remaining
members (APGD-T with 9 targets, FAB-T, Square) run on every case still robust, so the
verdicts are at least the standard version's. What the probe guarantees: a model on which
FAB-T or Square breaks a share r of the cases the white-box members leave robust escalates
unless none of the m sampled cases is among them, which happens with probability at most
(1 - r)^m (0.034 for r = 10 % and the default m = 32; 0.38 for r = 3 %). Without
escalation, fast may still hold a case robust that the standard version breaks with
APGD-T's 4th to 9th target class, or with FAB-T or Square outside the sample.

References: Croce & Hein, "Reliable evaluation of adversarial robustness with an ensemble
of diverse parameter-free attacks", ICML 2020 (the versions and member settings of
fra31/auto-attack); Melamed, Yehudai & Vardi, NeurIPS 2024 (MALT); Liu et al., CVPR 2022
(A3: spend passes where they can matter).
"""

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax._jit_argument import as_jit_argument
from advjax.attacks import ATTACKS, attack_loss, perturbation_norm
from advjax.evaluation._attack_spec import AttackSpec
from advjax.evaluation._autoattack_checks import probe_checks, run_checks, validate_inputs
from advjax.evaluation._engine import Outcome, RunResult, attack_stages, padded_batches
from advjax.evaluation._metrics import rate
from advjax.evaluation._sanity import Check

JUDGE_DRAWS = 20  # a random model's verdict: the mean logits over this many fresh draws


def eot_logits(logits_fn, keys: jax.Array, draws: int, offset: int = 0):
    """A deterministic stand-in for a random `logits_fn(x, key)`: per case i, the mean
    logits over `draws` draws with keys fold_in(keys[i], offset + d), each case on its own
    (so the draws of a case do not depend on the rest of its batch)."""

    def one_case(z, k):
        ks = jax.vmap(lambda d: jax.random.fold_in(k, offset + d))(jnp.arange(draws))
        return jnp.mean(jax.vmap(lambda kd: logits_fn(z[None], kd)[0])(ks), axis=0)

    return lambda z: jax.vmap(one_case)(z, keys)


def make_run(logits_fn, member, *, norm: str, random_model: bool) -> Callable:
    """The jitted run `(x, y, eps, keys, target, restart) -> (x_adv, pred, loss, queries)`.

    `keys` are the cases' member keys; target and restart are traced, so one program
    serves every run of the member. `loss` is the true-class cross-entropy at x_adv, by
    which the worst case of a robust case is chosen across members. The logits function
    is an argument of the program, so models of one architecture share it.
    """
    return functools.partial(_run_program, member, norm, random_model, as_jit_argument(logits_fn))


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _run_program(member, norm, random_model, logits_fn, x, y, eps, keys, target, restart):
    run_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, 1000 * target + restart)
    if random_model:
        # EOT: the attack ascends the mean over `eot` draws; the verdict takes fresh draws
        craft = eot_logits(logits_fn, run_keys, member.eot)
        judge = eot_logits(logits_fn, run_keys, JUDGE_DRAWS, offset=member.eot)
    else:
        craft = judge = logits_fn
    info = ATTACKS[member.method]
    r = info.run(
        craft, x, y, eps, keys=run_keys, restart=0, target=target, norm=norm,
        steps=member.steps,
        options={"p_init": member.p_init, "targets": member.targets, "loss": "ce",
                 "step_fraction": 0.25},
    )  # fmt: skip
    x_adv, spent = r.x_adv, r.queries * member.eot
    logits = judge(x_adv)
    queries = jnp.broadcast_to(jnp.asarray(spent, jnp.int32), y.shape)
    return x_adv, jnp.argmax(logits, axis=-1), attack_loss("ce")(logits, y), queries


PADDING_SLACK = 0.125
"""Extra padded work a member accepts to reuse a batch shape it has already compiled
rather than compile a new one (a new shape of an attack's program costs seconds on a CPU
and tens of seconds on an accelerator; each run shrinks the cases left a little)."""


def _batch_for(cases: int, batch_size: int, devices: int, compiled=()) -> int:
    """The compiled batch for `cases` still to attack: at most `batch_size`, split evenly
    over the fewest batches and rounded up to a multiple of 32 (a power of two below 32),
    so padding stays small; a multiple of the devices. A size in `compiled` is reused when
    its padded work is within `PADDING_SLACK` of the new size's, so a member's runs share
    few shapes."""
    batches = -(-cases // batch_size)
    even = -(-cases // batches)
    size = 1 << max(even - 1, 0).bit_length() if even < 32 else min(batch_size, -(-even // 32) * 32)
    size = -(-size // devices) * devices
    work = lambda s: -(-cases // s) * s  # noqa: E731
    reusable = [s for s in compiled if work(s) <= work(size) * (1 + PADDING_SLACK)]
    return min(reusable, key=lambda s: (work(s), s)) if reusable else size


def _placer(mesh, axis: str):
    """Put a batch's cases on the mesh's devices along `axis`. The mesh is used with Auto
    axes (the compiler propagates shardings through the attacks' loops), whatever axis
    types it was made with."""
    if mesh is None:
        return lambda a: a
    auto = (jax.sharding.AxisType.Auto,) * len(mesh.axis_names)
    mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names, axis_types=auto)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))
    return lambda a: jax.device_put(a, sharding)


class _MemberStage:
    """A member as a stage of the engine: its runs (target, restart) in batches whose shape
    follows the cases left (`_batch_for`), on the mesh's devices when given."""

    def __init__(self, member, run, keys, x, y, eps, *, batch_size, devices, place, on_batch):
        self.member, self.runs, self.shapes = member, member.runs(), set()
        self._run, self._keys, self._x, self._y, self._eps = run, keys, x, y, eps
        self._batch_size, self._devices, self._place = batch_size, devices, place
        self._on_batch = on_batch

    def run_cases(self, todo, run, number):
        target, restart = run
        size = _batch_for(len(todo), self._batch_size, self._devices, self.shapes)
        self.shapes.add(size)
        done, place = 0, self._place
        for part, index in padded_batches(todo, size):
            out = self._run(
                place(jnp.asarray(self._x[index])), place(jnp.asarray(self._y[index])),
                jnp.float32(self._eps), place(self._keys[index]), jnp.int32(target),
                jnp.int32(restart),
            )  # fmt: skip
            adv, pred, loss, cost = (np.asarray(a)[: len(part)] for a in out)
            done += len(part)
            if self._on_batch is not None:
                self._on_batch(self.member, target, restart, done, len(todo))
            never = np.full(len(part), -1, np.int32)
            yield part, RunResult(adv, pred, loss, pred != self._y[part], never, cost,
                                  np.zeros(len(part), bool))  # fmt: skip


def attack_members(
    logits_fn,
    x: np.ndarray,
    y: np.ndarray,
    eps: float,
    *,
    key: jax.Array,
    members: Sequence,
    norm: str,
    batch_size: int,
    random_model: bool = False,
    start_member: np.ndarray | None = None,
    case_index: np.ndarray | None = None,
    mesh=None,
    mesh_axis: str = "data",
    on_decided: Callable | None = None,
    on_run: Callable | None = None,
    on_batch: Callable | None = None,
) -> Outcome:
    """AutoAttack on the engine (`attack_stages`): `members` in order on the cases still robust.

    `start_member[i]` is the first member case i still needs (`len(members)`: decided, never
    attacked); a resumed evaluation passes what its records already hold. A member's
    outcome for a case is final when a run breaks it (reported at once) or after its last
    run: `on_decided(Final(...))` receives each such group of positions, batch by batch, so
    a member interrupted in its last run keeps the batches that run finished.
    `on_run(member, target, restart, still_robust)` follows each run and
    `on_batch(member, target, restart, cases_done, cases_in_run)` each batch (progress).
    Returns the engine's `Outcome` (host arrays): x_adv, loss, broken_by (-1 none),
    adv_pred, queries (all members), stage_queries (per member, all cases together).
    """
    n = len(y)
    place = _placer(mesh, mesh_axis)
    if mesh is not None and batch_size % mesh.shape[mesh_axis]:
        raise ValueError(f"{batch_size=} must be a multiple of the {mesh.shape[mesh_axis]} devices")
    devices = 1 if mesh is None else mesh.shape[mesh_axis]
    index = jnp.arange(n) if case_index is None else jnp.asarray(case_index)
    case_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, index)
    stages = [
        _MemberStage(
            member,
            make_run(logits_fn, member, norm=norm, random_model=random_model),
            jax.vmap(jax.random.fold_in, (0, None))(case_keys, member.stream),
            x,
            y,
            eps,
            batch_size=batch_size,
            devices=devices,
            place=place,
            on_batch=on_batch,
        )
        for member in members
    ]

    def after_run(s, number, left):
        if on_run is not None:
            target, restart = stages[s].runs[number]
            on_run(members[s], target, restart, left)

    return attack_stages(stages, x, y, start_stage=start_member, on_final=on_decided,
                         on_run=after_run)  # fmt: skip


PROBE_CASES = 32
"""Robust cases the masking probe samples (FAB-T and Square on each)."""
PROBE_STREAM = 1_000_003
"""The probe sample's key stream: fold_in(key, PROBE_STREAM) draws it."""
QUOTED_RATE = 0.1
"""The masking rate whose chance of going unseen the probe's check quotes."""


class FastMembers(NamedTuple):
    """The fast version's member lists: on every case, on the probe's sample of the cases
    left robust, and on every case left robust once the probe or a check escalates."""

    always: tuple
    probe: tuple
    escalation: tuple


def undetected_probability(rate: float, sample: int) -> float:
    """Probability that a probe of `sample` cases misses every case of a masking rate `rate`."""
    return float((1 - rate) ** sample)


def probe_sample(key, left: np.ndarray, cases: int = PROBE_CASES) -> np.ndarray:
    """The probe's sample: `cases` of the positions `left` (the cases APGD-CE and MALT left
    robust), drawn from fold_in(key, PROBE_STREAM), sorted."""
    if not len(left):
        return left
    draw = jax.random.permutation(jax.random.fold_in(key, PROBE_STREAM), len(left))
    return np.sort(left[np.asarray(draw)[:cases]])


def probe_verdict(broke: int, sample: int, left: int, failed) -> tuple[bool, str, Check]:
    """(escalate, the schedule's one-line account, the `masking_probe` check) of a probe
    that broke `broke` of `sample` cases drawn from `left`, with the model checks `failed`."""
    escalate = broke > 0 or bool(failed)
    why = (f"the probe broke {broke} of {sample}" if broke else "") + (
        (" and " if broke else "") + "checks failed: " + ", ".join(failed) if failed else "")  # fmt: skip
    schedule = (
        f"fast, escalated ({why}): APGD-T (9 targets), FAB-T and Square on all {left} "
        "cases APGD-CE and MALT left robust"
        if escalate
        else f"fast: FAB-T and Square broke none of {sample} sampled of the {left} "
        "cases APGD-CE and MALT left robust; the checks pass"
    )
    check = Check(
        "masking_probe",
        broke == 0,
        f"FAB-T and Square on {sample} of the {left} cases APGD-CE and MALT left "
        f"robust broke {broke}" + ("; escalated to the standard members" if escalate else "")
        + f"; a masking rate of {QUOTED_RATE:.0%} goes unseen with probability "
        f"{undetected_probability(QUOTED_RATE, sample):.2g}",
    )  # fmt: skip
    return escalate, schedule, check


def run_fast(logits_fn, x, y, eps, *, key, norm, batch_size, clean_correct, schedule,
             mesh=None, mesh_axis="data", on_run=None, probe_cases=PROBE_CASES):  # fmt: skip
    """The fast schedule (`FastMembers`) on cases x, y: a dict of the combined outcome
    (x_adv, broken_by, queries, the members whose verdicts count, `spent`: the (member,
    queries, label) of every stage run, the probe's `Check` and the schedule's one-line
    account, and the model checks it ran, which decide the escalation with the probe)."""
    always, probe, escalation = schedule
    common = dict(key=key, norm=norm, batch_size=batch_size, mesh=mesh, mesh_axis=mesh_axis,
                  on_run=on_run)  # fmt: skip
    out = attack_members(logits_fn, x, y, eps, members=always,
                         start_member=np.where(clean_correct, 0, len(always)), **common)  # fmt: skip
    x_adv, loss = np.array(out.x_adv), np.array(out.loss)
    broken_by, queries = np.array(out.broken_by), np.array(out.queries)
    spent = [(m, q, m.name) for m, q in zip(always, out.stage_queries)]
    left = np.flatnonzero(clean_correct & (broken_by == -1))
    sample = probe_sample(key, left, probe_cases)
    broke = 0
    if len(sample):
        seen = attack_members(logits_fn, x[sample], y[sample], eps, members=probe,
                              case_index=sample, **common)  # fmt: skip
        broke = int(np.sum(seen.broken_by >= 0))
        queries[sample] += seen.queries
        spent += [(m, q, probe_name(m)) for m, q in zip(probe, seen.stage_queries)]
    model_checks = probe_checks(logits_fn, x, y, random_model=False)
    failed = [c.name for c in model_checks if not c.passed]
    escalate, account, check = probe_verdict(broke, len(sample), len(left), failed)
    members = always
    if escalate and len(left):
        rest = attack_members(logits_fn, x[left], y[left], eps, members=escalation,
                              case_index=left, **common)  # fmt: skip
        members = always + escalation
        hit = rest.broken_by >= 0
        broken_by[left] = np.where(hit, rest.broken_by + len(always), -1)
        better = hit | (rest.loss > loss[left])
        x_adv[left] = np.where(better.reshape((-1,) + (1,) * (x.ndim - 1)), rest.x_adv, x_adv[left])
        queries[left] += rest.queries
        spent += [(m, q, m.name) for m, q in zip(escalation, rest.stage_queries)]
    return {
        "x_adv": x_adv, "broken_by": broken_by, "queries": queries, "members": members,
        "spent": spent, "check": check, "schedule": account, "model_checks": model_checks,
    }  # fmt: skip


def probe_name(member) -> str:
    """The label of a probe member's passes and records: e.g. "fab-t (probe)"."""
    return f"{member.name} (probe)"


VERSIONS: dict[str, tuple[AttackSpec, ...]] = {
    "standard": (
        AttackSpec("apgd-ce"),
        AttackSpec("apgd-t"),
        AttackSpec("fab-t"),
        AttackSpec("square"),
    ),
    "plus": (
        AttackSpec("apgd-ce", restarts=5),
        AttackSpec("apgd-dlr", restarts=5),
        AttackSpec("fab", restarts=5),
        AttackSpec("square"),
        AttackSpec("apgd-t"),
        AttackSpec("fab-t"),
    ),
    "rand": (AttackSpec("apgd-ce", eot=20), AttackSpec("apgd-dlr", eot=20)),
}
FAST = FastMembers(
    always=(AttackSpec("apgd-ce"), AttackSpec("malt", targets=3)),
    probe=(AttackSpec("fab-t"), AttackSpec("square")),
    escalation=(AttackSpec("apgd-t"), AttackSpec("fab-t"), AttackSpec("square")),
)
"""The fast version's members (the fast version, above): on every case, on a
sample of the cases left robust, and on every case left robust once the probe or a check
says the gradients may be masked."""


class AutoAttackResult(NamedTuple):
    """Per case and per member outcome of `autoattack`.

    Attributes:
      x_adv: per case the worst-case input found: the first breaking member's point, else
        the highest cross-entropy point over every member that ran.
      clean_correct: bool (n,): classified correctly on the clean input.
      robust: bool (n,): clean-correct and no member broke it.
      broken_by: int (n,): index of the member that broke the case; -1 robust, -2 wrong
        on the clean input (never attacked).
      queries: int (n,): model evaluations spent on the case, every member together.
      members: the members, in order.
      robust_accuracy: per member, cumulative after it: {"member", "value", "count",
        "total", "ci95"} (Wilson 95 %), preceded by the clean accuracy.
      checks: named sanity checks (`Check`), for a gate to require.
      passes: per member, the model passes it spent on the cases (padding aside):
        {"member", "forward", "backward"}; they compare across hardware (Liu et al.'s A3
        counts the same). The fast version's probe members appear as "fab-t (probe)" etc.
      schedule: which members ran on which cases, and why (the fast version says whether
        it escalated).
    """

    x_adv: np.ndarray
    clean_correct: np.ndarray
    robust: np.ndarray
    broken_by: np.ndarray
    queries: np.ndarray
    members: tuple[AttackSpec, ...]
    robust_accuracy: tuple[dict, ...]
    checks: tuple[Check, ...]
    passes: tuple[dict, ...]
    schedule: str = ""


def resolve_members(version: str, members: Sequence[AttackSpec] | None, norm: str) -> tuple:
    """The member list of a version (or the custom list), the same for norm="linf" and "l2"
    (Square runs as `square_linf` or `square_l2`); a member whose attack does not declare
    `norm` is refused."""
    if members is None:
        if version == "fast":
            raise ValueError("version='fast' has no single member list (its lists: "
                             "advjax.evaluation._autoattack.FAST)")  # fmt: skip
        if version not in VERSIONS:
            raise ValueError(
                f"version={version!r} must be one of {tuple(VERSIONS)} or pass members"
            )
        members = VERSIONS[version]
    members = tuple(members)
    if not members:
        raise ValueError("members must name at least one member")
    methods = [m.method for m in members]
    if len(set(methods)) != len(methods):
        raise ValueError(f"members must use distinct methods, got {methods}")
    for m in members:
        m.info.check_norm(norm)
        if m.eps or m.source is not None:
            raise ValueError(f"member {m.name!r} runs at the evaluation's eps on its model: "
                             "leave eps and source unset")  # fmt: skip
    return members


def clean_predictions(
    logits_fn, x, key, batch_size: int, random_model: bool, positions=None
) -> np.ndarray:
    """Predicted classes on the clean inputs (random model: the mean over 20 draws per case,
    case i's from fold_in(key, positions[i]); default positions 0 .. n-1)."""
    if random_model:
        index = jnp.arange(len(x)) if positions is None else jnp.asarray(positions)
        case_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, index)
    else:
        case_keys = jnp.zeros(len(x))
    fn = functools.partial(_clean_program, random_model, as_jit_argument(logits_fn))
    return np.concatenate(
        [np.asarray(fn(x[i : i + batch_size], case_keys[i : i + batch_size]))
         for i in range(0, len(x), batch_size)]
    )  # fmt: skip


@functools.partial(jax.jit, static_argnums=0)
def _clean_program(random_model: bool, logits_fn, z, keys):
    if random_model:
        return jnp.argmax(eot_logits(logits_fn, keys, JUDGE_DRAWS, offset=1_000_000)(z), -1)
    return jnp.argmax(logits_fn(z), -1)


def cumulative_accuracy(clean_correct: np.ndarray, broken_by: np.ndarray, members) -> tuple:
    """Clean accuracy, then robust accuracy after each member: `rate` dicts (value, count,
    total, ci95: the Wilson 95 % interval) with the member's name."""
    rows = [{"member": "clean", **rate(int(clean_correct.sum()), len(clean_correct))}]
    for m, member in enumerate(members):
        alive = clean_correct & ((broken_by < 0) | (broken_by > m))
        rows.append({"member": member.name, **rate(int(alive.sum()), len(clean_correct))})
    return tuple(rows)


def autoattack(
    logits_fn,
    x,
    y,
    eps: float,
    *,
    key: jax.Array,
    norm: str = "linf",
    version: str = "standard",
    members: Sequence[AttackSpec] | None = None,
    batch_size: int = 256,
    mesh=None,
    mesh_axis: str = "data",
    checks: bool = True,
    on_run: Callable | None = None,
) -> AutoAttackResult:
    """AutoAttack (Croce & Hein 2020) on any JAX model, with early stop and named checks.

    Args:
      logits_fn: a function from a batch of inputs in [0, 1] to logits, e.g. a plain `jnp`
        function with its weights closed over, `functools.partial(model.apply, variables)`
        for Flax Linen, an NNX module, an Equinox or Haiku model. For `version="rand"` it
        takes `(x, key)` and may be random.
      x: float inputs in [0, 1], leading axis the cases.
      y: integer labels in [0, classes).
      eps: the budget in input units: in [0, 1] for "linf", finite >= 0 for "l2".
      key: a PRNG key; case i uses fold_in(key, i), so same key, same numbers.
      norm: "linf" or "l2" (every member runs in both; Square as `square_linf` or
        `square_l2`).
      version: "standard" (APGD-CE, APGD-T, FAB-T, Square), "plus" (with restarts and the
        untargeted APGD-DLR and FAB), "rand" (APGD-CE, APGD-DLR with 20-draw EOT, for a
        random `logits_fn(x, key)`; a case's verdict is the mean of 20 fresh draws) or
        "fast" (APGD-CE and MALT, then a gradient-masking probe that escalates to the
        standard members; docs/evaluation.md, section 6, says when it may differ from
        "standard" and what its probe guarantees).
      members: a custom member list (overrides `version`).
      batch_size: cases per compiled batch (a multiple of the mesh's devices).
      mesh: a `jax.sharding.Mesh` to shard each batch's cases over (data parallel).
      checks: run the named sanity checks (a few extra queries).
      on_run: optional `(member, target, restart, still_robust)` progress callback.

    Returns:
      An `AutoAttackResult`.

    Raises:
      ValueError / TypeError: inputs outside [0, 1], labels outside the logits' classes,
        NaN logits, wrong shapes or dtypes, eps out of range, unknown version or member;
        all before any attack runs.

    Example:
      >>> result = advjax.evaluation.autoattack(logits_fn, x, y, 8 / 255, key=jax.random.key(0))
      >>> result.robust.mean(), result.robust_accuracy[-1]["ci95"]
    """
    fast = version == "fast" and members is None
    random_model = version == "rand" or any(m.eot > 1 for m in (members or ()))
    if not fast:
        members = resolve_members(version, members, norm)
    x, y, classes = validate_inputs(
        logits_fn, x, y, eps, norm=norm, key=key, random_model=random_model
    )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{batch_size=} must be an integer >= 1")
    clean_correct = clean_predictions(logits_fn, x, key, batch_size, random_model) == y
    if fast:
        out = run_fast(
            logits_fn, x, y, eps, key=key, norm=norm, batch_size=batch_size,
            clean_correct=clean_correct, schedule=FAST, mesh=mesh, mesh_axis=mesh_axis, on_run=on_run,
        )  # fmt: skip
        members, x_adv, broken_by = out["members"], out["x_adv"], out["broken_by"]
        queries, schedule, extra = out["queries"], out["schedule"], (out["check"],)
        passes = tuple({**m.passes(q, classes), "member": label} for m, q, label in out["spent"])
    else:
        start = np.where(clean_correct, 0, len(members))
        out = attack_members(
            logits_fn, x, y, eps, key=key, members=members, norm=norm, batch_size=batch_size,
            random_model=random_model, start_member=start, mesh=mesh, mesh_axis=mesh_axis,
            on_run=on_run,
        )  # fmt: skip
        x_adv, broken_by, queries, extra = out.x_adv, out.broken_by, out.queries, ()
        schedule = f"{version if version in VERSIONS else 'custom'}: " + ", ".join(
            m.name for m in members) + ", each on every case still robust"  # fmt: skip
        passes = tuple(m.passes(q, classes) for m, q in zip(members, out.stage_queries))
    broken_by = np.where(clean_correct, broken_by, -2)
    robust = clean_correct & (broken_by == -1)
    found = tuple(
        run_checks(logits_fn, x, y, eps, x_adv, broken_by, members, norm=norm,
                   random_model=random_model, model_checks=out["model_checks"] if fast else None)
    ) if checks else ()  # fmt: skip
    if checks:
        found += extra
        found += (eps_zero_check(logits_fn, x, y, clean_correct, members, norm, key, random_model),)
    return AutoAttackResult(
        x_adv=x_adv,
        clean_correct=clean_correct,
        robust=robust,
        broken_by=broken_by,
        queries=queries,
        members=members,
        robust_accuracy=cumulative_accuracy(clean_correct, broken_by, members),
        checks=found,
        passes=passes,
        schedule=schedule,
    )


def eps_zero_check(logits_fn, x, y, clean_correct, members, norm, key, random_model) -> Check:
    """At eps = 0 every member must return the clean inputs and break nothing."""
    cases = np.flatnonzero(clean_correct)[:4]
    if not len(cases):
        return Check("eps_zero_equals_clean", True, "no clean-correct case to probe")
    out = attack_members(
        logits_fn, x[cases], y[cases], 0.0, key=key, members=members, norm=norm,
        batch_size=len(cases), random_model=random_model,
    )  # fmt: skip
    moved = float(np.abs(out.x_adv - x[cases]).max())
    broken = int(np.sum(out.broken_by >= 0))
    return Check(
        "eps_zero_equals_clean",
        broken == 0 and moved == 0.0,
        f"every member at eps = 0 on {len(cases)} clean-correct cases: {broken} broken, "
        f"largest change {moved:.3g}",
    )


def perturbation_sizes(x, x_adv, norm: str) -> np.ndarray:
    """Per case size of x_adv - x in the threat model's norm."""
    return np.asarray(perturbation_norm(jnp.asarray(x_adv) - jnp.asarray(x), norm))
