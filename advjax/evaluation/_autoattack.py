"""AutoAttack for any JAX model: APGD-CE, APGD-T, FAB-T and Square in sequence, each member
only on the cases every earlier member left robust.

The per-case worst case decides: a case is broken by the first member (and within it the
first run: restart or target) that misclassifies it inside the eps-ball, and a broken case
leaves the batch at once, so the cost follows the robust cases, not the total. Every case
draws its randomness from its own key, `fold_in(key, position)`, then the member's method,
then the run, so its outcome does not depend on which other cases share its batch: a run
can be split, resumed or sharded over devices and give the same numbers.

Reference: Croce & Hein, "Reliable evaluation of adversarial robustness with an ensemble
of diverse parameter-free attacks", ICML 2020 (the versions and member settings of
fra31/auto-attack).
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attacks._apgd import apgd, apgd_with_loss
from advjax.attacks._fab import fab
from advjax.attacks._losses import per_example_cross_entropy, per_example_targeted_dlr
from advjax.attacks._norms import perturbation_norm
from advjax.attacks._square import square_linf
from advjax.evaluation._autoattack_checks import run_checks, validate_inputs
from advjax.evaluation._metrics import rate
from advjax.evaluation._sanity import Check

METHODS = ("apgd-ce", "apgd-dlr", "apgd-t", "fab", "fab-t", "square")
JUDGE_DRAWS = 20  # a random model's verdict: the mean logits over this many fresh draws


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of the ensemble and its budget.

    Attributes:
      method: one of `METHODS`.
      restarts: random restarts (per target for the targeted members).
      steps: iterations per run (APGD, FAB).
      targets: target classes of APGD-T / FAB-T (ranks 2 .. targets + 1 of the clean logits).
      queries: model queries per restart of Square.
      eot: gradient draws averaged per step (expectation over transformation), for a random
        `logits_fn(x, key)`; 1 for a deterministic model.
    """

    method: str
    restarts: int = 1
    steps: int = 100
    targets: int = 9
    queries: int = 5000
    eot: int = 1

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"member method={self.method!r} must be one of {METHODS}")
        for name in ("restarts", "steps", "targets", "queries", "eot"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"member {name}={value!r} must be an integer >= 1")
        if self.eot > 1 and not self.method.startswith("apgd"):
            raise ValueError(f"eot={self.eot} is supported by the APGD members only")

    @property
    def name(self) -> str:
        return self.method + ("-eot" if self.eot > 1 else "")

    @property
    def stream(self) -> int:
        """The member's key stream: fold_in(case key, stream), from its method alone, so a
        member run alone draws what it draws inside any ensemble."""
        return METHODS.index(self.method)

    def runs(self) -> list[tuple[int, int]]:
        """(target, restart) of every run, in order (target 0 for untargeted members)."""
        targets = self.targets if self.method in ("apgd-t", "fab-t") else 1
        return [(t, r) for t in range(targets) for r in range(self.restarts)]


VERSIONS: dict[str, tuple[Member, ...]] = {
    "standard": (Member("apgd-ce"), Member("apgd-t"), Member("fab-t"), Member("square")),
    "plus": (
        Member("apgd-ce", restarts=5),
        Member("apgd-dlr", restarts=5),
        Member("fab", restarts=5),
        Member("square"),
        Member("apgd-t"),
        Member("fab-t"),
    ),
    "rand": (Member("apgd-ce", eot=20), Member("apgd-dlr", eot=20)),
}


class Decided(NamedTuple):
    """Cases whose outcome under member `member` became final; the arrays are over every
    case (index them with `positions`): `queries` spent by this member, `run` the index of
    the breaking run (-1 for cases it left robust)."""

    member: int
    positions: np.ndarray
    broken: bool
    adv_pred: np.ndarray
    x_adv: np.ndarray
    loss: np.ndarray
    queries: np.ndarray
    run: int


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
    """

    x_adv: np.ndarray
    clean_correct: np.ndarray
    robust: np.ndarray
    broken_by: np.ndarray
    queries: np.ndarray
    members: tuple[Member, ...]
    robust_accuracy: tuple[dict, ...]
    checks: tuple[Check, ...]


def resolve_members(version: str, members: Sequence[Member] | None, norm: str) -> tuple:
    """The member list of a version (or the custom list); Square needs norm="linf"."""
    if members is None:
        if version not in VERSIONS:
            raise ValueError(
                f"version={version!r} must be one of {tuple(VERSIONS)} or pass members"
            )
        members = VERSIONS[version]
        if norm == "l2":
            members = tuple(m for m in members if m.method != "square")
    members = tuple(members)
    if not members:
        raise ValueError("members must name at least one member")
    methods = [m.method for m in members]
    if len(set(methods)) != len(methods):
        raise ValueError(f"members must use distinct methods, got {methods}")
    if norm == "l2" and any(m.method == "square" for m in members):
        raise ValueError("Square is implemented for norm='linf' only")
    return members


def eot_logits(logits_fn, keys: jax.Array, draws: int, offset: int = 0):
    """A deterministic stand-in for a random `logits_fn(x, key)`: per case i, the mean
    logits over `draws` draws with keys fold_in(keys[i], offset + d), each case on its own
    (so the draws of a case do not depend on the rest of its batch)."""

    def one_case(z, k):
        ks = jax.vmap(lambda d: jax.random.fold_in(k, offset + d))(jnp.arange(draws))
        return jnp.mean(jax.vmap(lambda kd: logits_fn(z[None], kd)[0])(ks), axis=0)

    return lambda z: jax.vmap(one_case)(z, keys)


def make_run(logits_fn, member: Member, *, norm: str, random_model: bool) -> Callable:
    """The jitted run `(x, y, eps, keys, target, restart) -> (x_adv, pred, loss, queries)`.

    `keys` are the cases' member keys; target and restart are traced, so one program
    serves every run of the member. `loss` is the true-class cross-entropy at x_adv, by
    which the worst case of a robust case is chosen across members.
    """
    method = member.method

    def run(x, y, eps, keys, target, restart):
        run_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, 1000 * target + restart)
        if random_model:
            # EOT: the attack ascends the mean over `eot` draws; the verdict takes fresh draws
            craft = eot_logits(logits_fn, run_keys, member.eot)
            judge = eot_logits(logits_fn, run_keys, JUDGE_DRAWS, offset=member.eot)
        else:
            craft = judge = logits_fn
        common = dict(steps=member.steps, norm=norm, key=run_keys)
        if method in ("apgd-ce", "apgd-dlr"):
            x_adv = apgd(craft, x, y, eps, loss=method.removeprefix("apgd-"), **common).x_adv
            spent = member.steps + 1
        elif method == "apgd-t":
            ranked = jnp.argsort(craft(x), axis=-1, descending=True)
            goal = jnp.take_along_axis(ranked, jnp.full((len(y), 1), target + 1), axis=1)[:, 0]
            loss_fn = lambda logits, labels: per_example_targeted_dlr(logits, labels, goal)  # noqa: E731
            x_adv = apgd_with_loss(craft, loss_fn, x, y, eps, **common).x_adv
            spent = member.steps + 1
        elif method in ("fab", "fab-t"):
            targeted = method == "fab-t"
            x_adv = fab(
                craft, x, y, eps, key=run_keys, norm=norm, targeted=targeted,
                n_target_classes=1, first_target=target if targeted else 0,
                steps=member.steps, restarts=1, eps_init=eps,
            ).x_adv  # fmt: skip
            spent = 2 * member.steps + 1
        else:
            r = square_linf(craft, x, y, eps, key=run_keys, queries=member.queries)
            x_adv, spent = r.x_adv, r.queries_used
        logits = judge(x_adv)
        queries = jnp.broadcast_to(jnp.asarray(spent, jnp.int32), y.shape)
        return x_adv, jnp.argmax(logits, axis=-1), per_example_cross_entropy(logits, y), queries

    return jax.jit(run)


def _padded(index: np.ndarray, size: int):
    """Chunks of `index`, each padded with its first entry to `size` (one compiled shape)."""
    for start in range(0, len(index), size):
        part = index[start : start + size]
        yield part, np.concatenate([part, np.full(size - len(part), part[0], part.dtype)])


def _batch_for(cases: int, batch_size: int, devices: int) -> int:
    """The compiled batch for `cases` still to attack: at most `batch_size`, split evenly
    over the fewest batches and rounded up to a multiple of 32 (a power of two below 32),
    so padding stays small and few shapes compile; a multiple of the devices."""
    batches = -(-cases // batch_size)
    even = -(-cases // batches)
    size = 1 << max(even - 1, 0).bit_length() if even < 32 else min(batch_size, -(-even // 32) * 32)
    return -(-size // devices) * devices


def _placer(mesh, axis: str):
    if mesh is None:
        return lambda a: a
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))
    return lambda a: jax.device_put(a, sharding)


def attack_members(
    logits_fn,
    x: np.ndarray,
    y: np.ndarray,
    eps: float,
    *,
    key: jax.Array,
    members: Sequence[Member],
    norm: str,
    batch_size: int,
    random_model: bool = False,
    start_member: np.ndarray | None = None,
    mesh=None,
    mesh_axis: str = "data",
    on_decided: Callable | None = None,
    on_run: Callable | None = None,
) -> dict:
    """The engine of `autoattack`: run `members` in order on the cases still robust.

    `start_member[i]` is the first member case i still needs (`len(members)`: decided, never
    attacked); a resumed evaluation passes what its records already hold. A member's
    outcome for a case is final when a run breaks it (reported at once) or after its last
    run: `on_decided(Decided(...))` receives each such group of positions.
    Returns host arrays: x_adv, broken_by (-1 none), queries (all members), loss, adv_pred.
    """
    n = len(y)
    place = _placer(mesh, mesh_axis)
    if mesh is not None and batch_size % mesh.shape[mesh_axis]:
        raise ValueError(f"{batch_size=} must be a multiple of the {mesh.shape[mesh_axis]} devices")
    devices = 1 if mesh is None else mesh.shape[mesh_axis]
    case_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(n))
    x_adv = np.array(x, np.float32, copy=True)
    best_loss = np.full(n, -np.inf, np.float32)
    broken_by = np.full(n, -1, np.int32)
    adv_pred = np.asarray(y).copy()
    queries = np.zeros(n, np.int64)
    start = np.zeros(n, np.int64) if start_member is None else np.asarray(start_member)
    report = on_decided or (lambda *args: None)
    for m, member in enumerate(members):
        todo = np.flatnonzero((start <= m) & (broken_by < 0))
        if not len(todo):
            continue
        run = make_run(logits_fn, member, norm=norm, random_model=random_model)
        keys = jax.vmap(jax.random.fold_in, (0, None))(case_keys, member.stream)
        spent = np.zeros(n, np.int64)
        for number, (target, restart) in enumerate(member.runs()):
            for part, index in _padded(todo, _batch_for(len(todo), batch_size, devices)):
                out = run(
                    place(jnp.asarray(x[index])), place(jnp.asarray(y[index])),
                    jnp.float32(eps), place(keys[index]), jnp.int32(target), jnp.int32(restart),
                )  # fmt: skip
                adv, pred, loss, cost = (np.asarray(a)[: len(part)] for a in out)
                hit = pred != y[part]
                adv_pred[part[hit | (broken_by[part] < 0)]] = pred[hit | (broken_by[part] < 0)]
                spent[part] += cost
                take = hit | (loss > best_loss[part])
                x_adv[part[take]], best_loss[part[take]] = adv[take], loss[take]
                broken_by[part[hit]] = m
                if hit.any():
                    report(Decided(m, part[hit], True, adv_pred, x_adv, best_loss, spent, number))
            todo = todo[broken_by[todo] < 0]
            if on_run is not None:
                on_run(member, target, restart, len(todo))
            if not len(todo):
                break
        queries += spent
        if len(todo):
            report(Decided(m, todo, False, adv_pred, x_adv, best_loss, spent, -1))
    return {
        "x_adv": x_adv,
        "broken_by": broken_by,
        "queries": queries,
        "loss": best_loss,
        "adv_pred": adv_pred,
    }


def clean_predictions(logits_fn, x, key, batch_size: int, random_model: bool) -> np.ndarray:
    """Predicted classes on the clean inputs (random model: the mean over 20 draws per case)."""
    if random_model:
        case_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(len(x)))
        fn = jax.jit(
            lambda z, k: jnp.argmax(eot_logits(logits_fn, k, JUDGE_DRAWS, offset=1_000_000)(z), -1)
        )
    else:
        fn = jax.jit(lambda z, k: jnp.argmax(logits_fn(z), -1))
        case_keys = jnp.zeros(len(x))
    return np.concatenate(
        [np.asarray(fn(x[i : i + batch_size], case_keys[i : i + batch_size]))
         for i in range(0, len(x), batch_size)]
    )  # fmt: skip


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
    members: Sequence[Member] | None = None,
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
      norm: "linf" or "l2" (Square runs for "linf" only).
      version: "standard" (APGD-CE, APGD-T, FAB-T, Square), "plus" (with restarts and the
        untargeted APGD-DLR and FAB) or "rand" (APGD-CE, APGD-DLR with 20-draw EOT, for a
        random `logits_fn(x, key)`; a case's verdict is the mean of 20 fresh draws).
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
      >>> result = advjax.autoattack(logits_fn, x, y, 8 / 255, key=jax.random.key(0))
      >>> result.robust.mean(), result.robust_accuracy[-1]["ci95"]
    """
    random_model = version == "rand" or any(m.eot > 1 for m in (members or ()))
    members = resolve_members(version, members, norm)
    x, y = validate_inputs(logits_fn, x, y, eps, norm=norm, key=key, random_model=random_model)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{batch_size=} must be an integer >= 1")
    clean_correct = clean_predictions(logits_fn, x, key, batch_size, random_model) == y
    start = np.where(clean_correct, 0, len(members))
    out = attack_members(
        logits_fn, x, y, eps, key=key, members=members, norm=norm, batch_size=batch_size,
        random_model=random_model, start_member=start, mesh=mesh, mesh_axis=mesh_axis,
        on_run=on_run,
    )  # fmt: skip
    broken_by = np.where(clean_correct, out["broken_by"], -2)
    robust = clean_correct & (broken_by == -1)
    found = tuple(
        run_checks(logits_fn, x, y, eps, out["x_adv"], broken_by, members, norm=norm,
                   random_model=random_model)
    ) if checks else ()  # fmt: skip
    if checks:
        found += (eps_zero_check(logits_fn, x, y, clean_correct, members, norm, key, random_model),)
    return AutoAttackResult(
        x_adv=out["x_adv"],
        clean_correct=clean_correct,
        robust=robust,
        broken_by=broken_by,
        queries=out["queries"],
        members=members,
        robust_accuracy=cumulative_accuracy(clean_correct, broken_by, members),
        checks=found,
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
    moved = float(np.abs(out["x_adv"] - x[cases]).max())
    broken = int(np.sum(out["broken_by"] >= 0))
    return Check(
        "eps_zero_equals_clean",
        broken == 0 and moved == 0.0,
        f"every member at eps = 0 on {len(cases)} clean-correct cases: {broken} broken, "
        f"largest change {moved:.3g}",
    )


def perturbation_sizes(x, x_adv, norm: str) -> np.ndarray:
    """Per case size of x_adv - x in the threat model's norm."""
    return np.asarray(perturbation_norm(jnp.asarray(x_adv) - jnp.asarray(x), norm))
