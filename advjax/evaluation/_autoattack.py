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
import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from advjax._jit_argument import as_jit_argument
from advjax.attacks import ATTACKS, perturbation_norm
from advjax.evaluation._autoattack_checks import run_checks, validate_inputs
from advjax.evaluation._autoattack_fast import FastMembers, run_fast
from advjax.evaluation._autoattack_stages import JUDGE_DRAWS, attack_members, eot_logits
from advjax.evaluation._metrics import rate
from advjax.evaluation._sanity import Check

METHODS = tuple(ATTACKS)
"""The methods a member can run: every attack of `advjax.attacks.ATTACKS`."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of the ensemble and its budget.

    Attributes:
      method: an attack of `advjax.attacks.ATTACKS` (AutoAttack's: "apgd-ce", "apgd-dlr",
        "apgd-t", "fab", "fab-t", "square").
      restarts: random restarts (per target for the targeted members).
      steps: iterations per run of a gradient attack.
      targets: target classes of a targeted member (ranks 2 .. targets + 1 of the clean
        logits).
      queries: model queries per restart of a score-based member (Square, L-inf or L2).
      p_init: Square's initial share of pixels in a square (AutoAttack's 0.8).
      eot: gradient draws averaged per step (expectation over transformation), for a random
        `logits_fn(x, key)`; 1 for a deterministic model.
    """

    method: str
    restarts: int = 1
    steps: int = 100
    targets: int = 9
    queries: int = 5000
    p_init: float = 0.8
    eot: int = 1

    def __post_init__(self):
        if self.method not in ATTACKS:
            raise ValueError(f"member method={self.method!r} must be one of {METHODS}")
        for name in ("restarts", "steps", "targets", "queries", "eot"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"member {name}={value!r} must be an integer >= 1")
        if not 0 < self.p_init <= 1:
            raise ValueError(f"member p_init={self.p_init!r} must be in (0, 1]")
        if self.eot > 1 and self.info.kind != "gradient":
            raise ValueError(f"eot={self.eot} is for gradient members, not {self.method!r}")

    @property
    def info(self):
        """The method's registry entry (`advjax.attacks.Attack`)."""
        return ATTACKS[self.method]

    @property
    def name(self) -> str:
        return self.method + ("-eot" if self.eot > 1 else "")

    @property
    def stream(self) -> int:
        """The member's key stream: fold_in(case key, stream), its method's fixed stream in
        the registry, so a member run alone draws what it draws inside any ensemble."""
        return self.info.stream

    @property
    def run_steps(self) -> int:
        """The steps one run takes: `queries` for a score-based member, else `steps`."""
        return self.queries if self.info.kind == "score" else self.steps

    @property
    def queries_per_run(self) -> int:
        """Model queries one run spends on a case at most (the registry's count, e.g. APGD
        steps + 1 gradients, FAB 2 steps + 1, Square its budget), times `eot` draws. The
        records' per-case queries are counted the same way."""
        return self.info.queries(self.run_steps) * self.eot

    def passes(self, queries: int, classes: int) -> dict:
        """{"member", "forward", "backward"}: the model passes `queries` (the member's, on
        all cases together) stand for: a gradient member's queries are whole runs
        (`queries_per_run` each, the registry's passes per run times `eot` draws), a
        score-based member's one forward pass each."""
        if self.info.kind == "score":
            return {"member": self.name, "forward": queries, "backward": 0}
        runs = queries // self.queries_per_run
        forward, backward = self.info.passes(self.run_steps, classes)
        return {
            "member": self.name,
            "forward": runs * forward * self.eot,
            "backward": runs * backward * self.eot,
        }

    def runs(self) -> list[tuple[int, int]]:
        """(target, restart) of every run, in order (target 0 for untargeted members)."""
        targets = self.targets if self.info.targeted else 1
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
FAST = FastMembers(
    always=(Member("apgd-ce"), Member("malt", targets=3)),
    probe=(Member("fab-t"), Member("square")),
    escalation=(Member("apgd-t"), Member("fab-t"), Member("square")),
)
"""The fast version's members (`advjax.evaluation._autoattack_fast`): on every case, on a
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
    members: tuple[Member, ...]
    robust_accuracy: tuple[dict, ...]
    checks: tuple[Check, ...]
    passes: tuple[dict, ...]
    schedule: str = ""


def resolve_members(version: str, members: Sequence[Member] | None, norm: str) -> tuple:
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
