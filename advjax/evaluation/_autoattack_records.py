"""AutoAttack into an append-only record log: one record per case and member as soon as the
member's outcome for the case is final, so a run killed at any moment resumes where it
stopped, without duplicates or lost cases, and gives the numbers of an uninterrupted run.

Each member writes its own records (attack = the member's name); `AUTOATTACK` records, one
per case, are derived from them: the first member that broke the case, else the last one
that ran, with the queries of every member that ran.

The fast version writes the same way, phase by phase: APGD-CE and MALT on every case; the
probe's members on its sample under their own names ("fab-t (probe)", "square (probe)");
the escalation's members on every case left robust. Each phase's cases and the decision to
escalate are read back from the records (the sample from the key), so a resumed run takes
the path an uninterrupted one takes.
"""

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from advjax.data import EvalCases
from advjax.evaluation._attack_spec import AttackSpec
from advjax.evaluation._autoattack import (
    FAST,
    PROBE_CASES,
    VERSIONS,
    attack_members,
    clean_predictions,
    perturbation_sizes,
    probe_name,
    probe_sample,
    probe_verdict,
    resolve_members,
)
from advjax.evaluation._autoattack_checks import check_eps_argument, probe_checks
from advjax.evaluation._campaign import check_record_hashes
from advjax.evaluation._keys import key_root, root_key
from advjax.evaluation._model import Model
from advjax.evaluation._processes import gather_from_every_process
from advjax.evaluation._sanity import Check
from advjax.evaluation._threat_model import ThreatModel
from advjax.records import ROBUST_STATUSES, CaseRecord, RecordLog, classify_status

AUTOATTACK = "autoattack"


def member_hash(member: AttackSpec, norm: str) -> str:
    """The attack config hash of a member's records."""
    text = json.dumps({**member.member_fields(), "norm": norm}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def autoattack_hash(members: Sequence[AttackSpec], norm: str) -> str:
    """The attack config hash of the derived `AUTOATTACK` records: that of the member list."""
    return hashlib.sha256(",".join(member_hash(m, norm) for m in members).encode()).hexdigest()[:16]


def fast_hash(norm: str, probe_cases: int = PROBE_CASES) -> str:
    """The attack config hash of the fast version's `AUTOATTACK` records: its three member
    lists and the probe's sample size."""
    lists = [",".join(member_hash(m, norm) for m in group) for group in FAST]
    return hashlib.sha256(f"fast:{probe_cases}:{';'.join(lists)}".encode()).hexdigest()[:16]


def schedule_members(version: str, members: Sequence[AttackSpec] | None, norm: str) -> tuple:
    """Every member a run may use, for its threat model's declared budget: the version's (or
    the custom) list; for the fast version, its always, probe and escalation lists (a
    sampled case may meet all three)."""
    if version == "fast" and members is None:
        every = FAST.always + FAST.probe + FAST.escalation
        for m in every:
            m.info.check_norm(norm)
        return every
    return resolve_members(version, members, norm)


def autoattack_threat_model(eps: float, members: Sequence[AttackSpec], norm: str) -> ThreatModel:
    """The threat model an AutoAttack run declares: white-box, one eps, the members' budget.

    The declared queries bound every case's total: each run of a gradient member at
    max(2 steps + 1, its own `queries_per_run`) (FAB's cost, which bounds a deterministic
    APGD run; the form keeps the digests of committed records), each run of a score-based
    member at its budget.
    """
    steps = max(m.member_fields()["steps"] for m in members)
    queries = sum(
        m.steps * m.restarts
        if m.info.kind == "score"
        else max(2 * m.steps + 1, m.queries_per_run) * len(m.runs())
        for m in members
    )
    return ThreatModel(eps=(float(eps),), steps=steps, restarts=max(m.restarts for m in members),
                       norm=norm, queries=queries)  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoAttackConfig:
    """One AutoAttack evaluation's settings, checked when made, before any work.

    Attributes:
      eps: the budget, in the norm's units (L-inf: [0, 1]).
      norm: "linf" or "l2"; a member whose attack does not declare it is refused.
      version: "standard", "plus", "rand" or "fast" (`VERSIONS`, `FAST`); ignored for the
        member list when `members` is given (the run is then "custom").
      members: a custom member list, in order (`AttackSpec`s or attack names at AutoAttack's
        default budgets).
      batch_size: cases per compiled batch.
    """

    eps: float
    norm: str = "linf"
    version: str = "standard"
    members: tuple[AttackSpec, ...] | None = None
    batch_size: int = 256

    def __post_init__(self):
        check_eps_argument(self.eps, self.norm)
        object.__setattr__(self, "eps", float(self.eps))
        if self.version not in (*VERSIONS, "fast"):
            raise ValueError(f"version={self.version!r} must be one of {(*VERSIONS, 'fast')}")
        if self.members is not None:
            members = tuple(AttackSpec(m) if isinstance(m, str) else m for m in self.members)
            object.__setattr__(self, "members", members)
        size = self.batch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"batch_size={size!r} must be an integer >= 1")
        self.scheduled  # refuses an empty list, a method twice, an undeclared norm

    @property
    def fast(self) -> bool:
        """The fast version's phases (no custom member list)."""
        return self.version == "fast" and self.members is None

    @property
    def custom(self) -> bool:
        return self.members is not None

    @property
    def scheduled(self) -> tuple[AttackSpec, ...]:
        """Every member the run may use (`schedule_members`)."""
        return schedule_members(self.version, self.members, self.norm)

    @property
    def first(self) -> tuple[AttackSpec, ...]:
        """The members run on every case: the fast version's first phase, else all."""
        return FAST.always if self.fast else self.scheduled

    @property
    def threat_model(self) -> ThreatModel:
        return autoattack_threat_model(self.eps, self.scheduled, self.norm)

    @property
    def label(self) -> str:
        """The version the summary names: the version, or "custom"."""
        return "custom" if self.custom else self.version


class _Run(NamedTuple):
    """What every phase and record of one `run_autoattack` call shares."""

    log: RecordLog
    logits_fn: Callable
    x: np.ndarray
    y: np.ndarray
    ids: np.ndarray
    pos: np.ndarray
    clean: np.ndarray
    config: AutoAttackConfig
    tm: ThreatModel
    key: jax.Array
    root: int
    model: str
    model_hash: str
    random_model: bool
    mesh: Any
    on_run: Callable | None
    on_batch: Callable | None


def _start_members(log: RecordLog, model: str, names, eps: float, case_ids) -> np.ndarray:
    """Per case the first member it still needs (of the members whose records are named
    `names`), from the records already in the log."""
    status = {}
    for r in log.read():
        if r.model == model and r.eps == eps:
            status[(r.attack, r.case_id)] = r.status
    start = np.zeros(len(case_ids), np.int64)
    for i, case in enumerate(int(c) for c in case_ids):
        for m, name in enumerate(names):
            s = status.get((name, case))
            if s is None:
                break
            start[i] = m + 1 if s in ROBUST_STATUSES else len(names)
            if s not in ROBUST_STATUSES:
                break
    return start


def run_autoattack(
    log: RecordLog,
    model: Model,
    cases: EvalCases,
    config: AutoAttackConfig,
    *,
    key: jax.Array,
    mesh=None,
    on_run=None,
    on_batch=None,
) -> list[CaseRecord]:
    """AutoAttack every case not already decided in `log`; return the derived records.

    `model` is the attacked model (`Model`: name, logits function, hash); `cases` holds x, y
    and optionally the case ids and positions (default 0 .. n-1). Case i
    draws from fold_in(key, positions[i]), as `autoattack` does for position i of its x, so a
    resumed run equals an uninterrupted one, and a share of the cases (one process's,
    `advjax.data.share_positions`) given with its positions gives every case the records it
    gets among all of them; under `jax.distributed` the fast version's processes exchange
    between its phases what its probe and escalation need (every process must then call
    it). Each record's key path starts with the key as one integer (`key_root`: the seed of
    `jax.random.key(seed)`). `on_run` and `on_batch` report progress after each run and each
    batch (see `attack_members`).

    Raises:
      ValueError: `log` holds records of `model` made with another model hash, or of a
        member (or of `AUTOATTACK`) with another attack-config or threat-model hash
        (`check_record_hashes`); nothing is appended then.
    """
    model, logits_fn, model_hash = model
    members, norm, eps = config.first, config.norm, config.eps
    random_model = config.version == "rand" or any(m.eot > 1 for m in members)
    x, y = np.asarray(cases.x, np.float32), np.asarray(cases.y)
    ids = np.arange(len(y)) if cases.case_ids is None else np.asarray(cases.case_ids)
    pos = np.arange(len(y)) if cases.positions is None else np.asarray(cases.positions, np.int64)
    if len(ids) != len(y) or len(pos) != len(y):
        raise ValueError(f"case_ids and positions must give one entry per case: {len(y)} cases, "
                         f"{len(ids)} ids, {len(pos)} positions")  # fmt: skip
    tm = config.threat_model
    attack_hashes = {m.name: member_hash(m, norm) for m in members}
    if config.fast:
        attack_hashes |= {m.name: member_hash(m, norm) for m in FAST.escalation}
        attack_hashes |= {probe_name(m): member_hash(m, norm) for m in FAST.probe}
    attack_hashes[AUTOATTACK] = fast_hash(norm) if config.fast else autoattack_hash(members, norm)
    check_record_hashes(
        log,
        model=model,
        model_hash=model_hash,
        attack_hashes=attack_hashes,
        threat_model_hash=tm.digest(),
    )
    root = key_root(key)
    key = root_key(root)
    clean = clean_predictions(logits_fn, x, key, config.batch_size, random_model, pos)
    run = _Run(log, logits_fn, x, y, ids, pos, clean, config, tm, key, root, model, model_hash,
               random_model, mesh, on_run, on_batch)  # fmt: skip
    first = members[0]
    wrong = [
        i for i in np.flatnonzero(clean != y) if (model, first.name, eps, int(ids[i])) not in log
    ]
    log.append([_record(run, first, i, x[i], loss=0.0, queries=0, number=-1,
                        adv_pred=int(clean[i])) for i in wrong])  # fmt: skip
    attacked = np.flatnonzero(clean == y)
    _run_phase(run, members, [m.name for m in members], attacked)
    if not config.fast:
        chain, counted = members, ()
    else:
        chain = _fast_phases(run)
        counted = [probe_name(m) for m in FAST.probe]
    derived = autoattack_records(
        log.read(), chain, model=model, eps=eps, case_ids=ids, norm=norm,
        digest=attack_hashes[AUTOATTACK], counted=counted,
    )  # fmt: skip
    log.append(derived, skip_existing=True)
    return derived


def _fast_phases(run: _Run) -> tuple:
    """The fast version's probe and escalation after APGD-CE and MALT (`FastMembers`), on
    this process's share of the cases, its decisions those of one process on all of them:
    the processes exchange the positions they left robust (the probe's sample is drawn from
    all of them), what the probe broke and which model checks failed on their first cases
    (any process's failure escalates); the members whose verdicts count."""
    log, model, eps, key = run.log, run.model, run.config.eps, run.key
    x, y, ids, pos = run.x, run.y, run.ids, run.pos
    checks = model_checks_on_every_process(probe_checks(run.logits_fn, x, y, random_model=False))
    failed = [c.name for c in checks if not c.passed]
    here = set(ids.tolist())

    def records():
        return [r for r in log.read() if (r.model, r.eps) == (model, eps) and r.case_id in here]

    local = broken_by_member(records(), FAST.always, ids)
    left = np.sort(gather_from_every_process(pos[local == -1]))
    sample = probe_sample(key, left)
    _run_phase(run, FAST.probe, [probe_name(m) for m in FAST.probe],
               np.flatnonzero(np.isin(pos, sample)))  # fmt: skip
    probes = {probe_name(m) for m in FAST.probe}
    broke = len({r.case_id for r in records() if r.attack in probes and r.status == "success"})
    broke = int(gather_from_every_process([broke]).sum())
    escalate, _, _ = probe_verdict(broke, len(sample), len(left), failed)
    ran = bool({m.name for m in FAST.escalation} & {r.attack for r in records()})
    if escalate:
        _run_phase(run, FAST.escalation, [m.name for m in FAST.escalation],
                   np.flatnonzero(local == -1))  # fmt: skip
    escalated = bool(gather_from_every_process([escalate or ran]).any())
    return FAST.always + FAST.escalation if escalated else FAST.always


def model_checks_on_every_process(checks: Sequence[Check]) -> list[Check]:
    """`checks`, each passed only where it passed on every process (each ran it on the first
    cases of its own share); the same checks in one process."""
    count = jax.process_count()
    if count == 1:
        return list(checks)
    passed = gather_from_every_process([c.passed for c in checks]).reshape(count, len(checks))
    out = []
    for j, c in enumerate(checks):
        failing = [int(i) for i in np.flatnonzero(passed[:, j] == 0)]
        where = (f"failed on the first cases of process(es) {', '.join(map(str, failing))} of {count}"
                 if failing else f"passed on the first cases of each of the {count} processes")  # fmt: skip
        out.append(Check(c.name, not failing, f"{c.evidence}; {where}"))
    return out


def _run_phase(run: _Run, members, names, positions) -> None:
    """`members` on the cases at `positions`, each from the first member its records (named
    `names`) still lack; every member's final outcome for a case appended as it comes."""
    if not len(positions):
        return
    log, model, eps = run.log, run.model, run.config.eps
    start = _start_members(log, model, names, eps, run.ids[positions])

    def on_decided(d):
        records = []
        for p in d.positions:
            i = int(positions[p])
            if (model, names[d.stage], eps, int(run.ids[i])) in log:
                continue
            records.append(_record(
                run, members[d.stage], i, d.stage_x[p], loss=float(d.stage_loss[p]),
                queries=int(d.queries[p]), number=d.run, adv_pred=int(d.adv_pred[p]),
                attack=names[d.stage],
            ))  # fmt: skip
        log.append(records)

    attack_members(
        run.logits_fn, run.x[positions], run.y[positions], eps, key=run.key, members=members,
        norm=run.config.norm, batch_size=run.config.batch_size, random_model=run.random_model,
        start_member=start, case_index=run.pos[positions], mesh=run.mesh, on_decided=on_decided,
        on_run=run.on_run, on_batch=run.on_batch,
    )  # fmt: skip


def fast_outcome(records, *, model: str, eps: float, key, failed) -> dict:
    """Where a fast run stands, read from its records of every case: `left` (the positions,
    the second element of the records' key paths, that APGD-CE and MALT left robust), the
    probe's `sample` of them, how many the probe broke, whether to escalate, the members
    whose verdicts count, every stage that ran as (member, record name) in order, the
    schedule's account and the `masking_probe` check. Needs every case's APGD-CE and MALT
    records."""
    mine = [r for r in records if r.model == model and r.eps == eps]
    position = {r.case_id: int(r.key_path[1]) for r in mine}
    ids = np.array(sorted(position, key=position.get), np.int64)
    positions = np.array([position[int(c)] for c in ids], np.int64)
    left = positions[broken_by_member(mine, FAST.always, ids) == -1]
    sample = probe_sample(key, left)
    probes = {probe_name(m) for m in FAST.probe}
    broke = len({r.case_id for r in mine if r.attack in probes and r.status == "success"})
    escalate, schedule, check = probe_verdict(broke, len(sample), len(left), failed)
    escalated = escalate or bool({m.name for m in FAST.escalation} & {r.attack for r in mine})
    stages = [(m, m.name) for m in FAST.always] + [(m, probe_name(m)) for m in FAST.probe]
    stages += [(m, m.name) for m in FAST.escalation] if escalated else []
    return {
        "left": left, "sample": sample, "broke": broke, "failed": failed,
        "escalate": escalate, "schedule": schedule, "check": check,
        "members": FAST.always + FAST.escalation if escalated else FAST.always,
        "stages": stages,
    }  # fmt: skip


def _record(run: _Run, member, i, x_adv, *, loss, queries, number, adv_pred, attack=None):
    """Case i's record under `member`: its point x_adv, the loss there, the queries spent,
    the run that broke it (`number`, -1 none) and the prediction there."""
    x, y, eps, norm = run.x[i], run.y[i], run.config.eps, run.config.norm
    linf = float(perturbation_sizes(x[None], x_adv[None], "linf")[0])
    l2 = float(perturbation_sizes(x[None], x_adv[None], "l2")[0])
    clean_correct = bool(run.clean[i] == y)
    broken = adv_pred != int(y)
    status = classify_status(
        clean_correct, not broken, linf=linf, eps=eps, x_min=float(x_adv.min()),
        x_max=float(x_adv.max()), tol=run.tm.tolerance, l2=l2, norm=norm,
    )  # fmt: skip
    return CaseRecord(
        case_id=int(run.ids[i]),
        true_class=int(y),
        clean_pred=int(run.clean[i]),
        adv_pred=adv_pred,
        final_loss=loss,
        linf=linf,
        l2=l2,
        first_break_step=number if clean_correct and broken else None,
        first_break_restart=number if clean_correct and broken else None,
        queries=queries,
        status=status,
        model=run.model,
        model_hash=run.model_hash,
        attack=attack or member.name,
        attack_config_hash=member_hash(member, norm),
        threat_model_hash=run.tm.digest(),
        eps=eps,
        key_path=(run.root, int(run.pos[i]), member.stream),
    )


def member_passes(records, members, *, model: str, eps: float, classes: int,
                  names=None) -> list[dict]:  # fmt: skip
    """Per member, the model passes its records' queries stand for (`AttackSpec.passes`), as
    `autoattack` reports them; `names`: the members' record names where they differ from
    theirs (the fast version's probe)."""
    names = [m.name for m in members] if names is None else names
    return [
        {**m.passes(
            sum(r.queries for r in records if (r.model, r.attack, r.eps) == (model, name, eps)),
            classes,
        ), "member": name}
        for m, name in zip(members, names)
    ]  # fmt: skip


def autoattack_records(records, members, *, model: str, eps: float, case_ids, norm: str,
                       digest: str | None = None, counted=()) -> list:  # fmt: skip
    """One `AUTOATTACK` record per case: the deciding member's record (the first that broke
    it, else the last that ran), with the queries of every member that ran and of the
    records named in `counted` (the fast version's probe); `digest` its attack config hash
    (default: the member list's)."""
    by_member = {
        m.name: {r.case_id: r for r in records if (r.model, r.attack, r.eps) == (model, m.name, eps)}
        for m in members
    }  # fmt: skip
    extra = {}
    for r in records:
        if r.attack in counted and (r.model, r.eps) == (model, eps):
            extra[r.case_id] = extra.get(r.case_id, 0) + r.queries
    digest = autoattack_hash(members, norm) if digest is None else digest
    out = []
    for case in (int(c) for c in case_ids):
        chain = [by_member[m.name][case] for m in members if case in by_member[m.name]]
        if not chain:
            raise ValueError(f"case {case}: no record of any member of {model}")
        last = chain[-1]
        out.append(
            dataclasses.replace(
                last,
                attack=AUTOATTACK,
                attack_config_hash=digest,
                queries=sum(r.queries for r in chain) + extra.get(case, 0),
            )  # fmt: skip
        )
    return out


def broken_by_member(records, members, index) -> np.ndarray:
    """Per case (in `index` order): the position of the member that broke it, -2 where the
    clean input was already wrong, -1 where none did (records of other cases are ignored)."""
    position = {int(c): i for i, c in enumerate(index)}
    out = np.full(len(index), -1, np.int32)
    names = [m.name for m in members]
    for r in records:
        if r.case_id not in position:
            continue
        if r.attack in names and r.status == "success":
            out[position[r.case_id]] = names.index(r.attack)
        elif r.status == "skipped_clean_wrong":
            out[position[r.case_id]] = -2
    return out
