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
from collections.abc import Sequence

import jax
import numpy as np

from advjax.evaluation._autoattack import (
    FAST,
    Member,
    clean_predictions,
    perturbation_sizes,
    resolve_members,
)
from advjax.evaluation._autoattack_checks import probe_checks
from advjax.evaluation._autoattack_fast import (
    PROBE_CASES,
    probe_name,
    probe_sample,
    probe_verdict,
)
from advjax.evaluation._autoattack_stages import attack_members
from advjax.evaluation._campaign import check_record_hashes
from advjax.evaluation._keys import key_root, root_key
from advjax.evaluation._processes import gather_from_every_process
from advjax.evaluation._sanity import Check
from advjax.evaluation._threat_model import ThreatModel
from advjax.records import ROBUST_STATUSES, CaseRecord, RecordLog, classify_status

AUTOATTACK = "autoattack"


def member_hash(member: Member, norm: str) -> str:
    """The attack config hash of a member's records."""
    text = json.dumps({**dataclasses.asdict(member), "norm": norm}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def autoattack_hash(members: Sequence[Member], norm: str) -> str:
    """The attack config hash of the derived `AUTOATTACK` records: that of the member list."""
    return hashlib.sha256(",".join(member_hash(m, norm) for m in members).encode()).hexdigest()[:16]


def fast_hash(norm: str, probe_cases: int = PROBE_CASES) -> str:
    """The attack config hash of the fast version's `AUTOATTACK` records: its three member
    lists and the probe's sample size."""
    lists = [",".join(member_hash(m, norm) for m in group) for group in FAST]
    return hashlib.sha256(f"fast:{probe_cases}:{';'.join(lists)}".encode()).hexdigest()[:16]


def schedule_members(version: str, members: Sequence[Member] | None, norm: str) -> tuple:
    """Every member a run may use, for its threat model's declared budget: the version's (or
    the custom) list; for the fast version, its always, probe and escalation lists (a
    sampled case may meet all three)."""
    if version == "fast" and members is None:
        every = FAST.always + FAST.probe + FAST.escalation
        for m in every:
            m.info.check_norm(norm)
        return every
    return resolve_members(version, members, norm)


def autoattack_threat_model(eps: float, members: Sequence[Member], norm: str) -> ThreatModel:
    """The threat model an AutoAttack run declares: white-box, one eps, the members' budget.

    The declared queries bound every case's total: each run of a gradient member at
    max(2 steps + 1, its own `queries_per_run`) (FAB's cost, which bounds a deterministic
    APGD run; the form keeps the digests of committed records), each run of a score-based
    member at its budget.
    """
    steps = max(m.steps for m in members)
    queries = sum(
        m.queries * m.restarts
        if m.info.kind == "score"
        else max(2 * m.steps + 1, m.queries_per_run) * len(m.runs())
        for m in members
    )
    return ThreatModel(eps=(float(eps),), steps=steps, restarts=max(m.restarts for m in members),
                       norm=norm, queries=queries)  # fmt: skip


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
    logits_fn,
    x,
    y,
    eps: float,
    *,
    key: jax.Array,
    model: str,
    model_hash: str,
    case_ids=None,
    positions=None,
    norm: str = "linf",
    version: str = "standard",
    members: Sequence[Member] | None = None,
    batch_size: int = 256,
    mesh=None,
    on_run=None,
    on_batch=None,
) -> list[CaseRecord]:
    """AutoAttack every case not already decided in `log`; return the derived records.

    Case i draws from fold_in(key, positions[i]), as `autoattack` does for position i of its
    x (default positions: 0 .. n-1), so a resumed run equals an uninterrupted one, and a share
    of the cases (one process's, `advjax.data.share_positions`) given with its positions gives
    every case the records it gets among all of them; under `jax.distributed` the fast
    version's processes exchange between its phases what its probe and escalation need
    (every process must then call it). Each record's key path starts with the
    key as one integer (`key_root`: the seed of `jax.random.key(seed)`). `on_run` and
    `on_batch` report progress after each run and each batch (see `attack_members`).

    Raises:
      ValueError: `log` holds records of `model` made with another model hash, or of a
        member (or of `AUTOATTACK`) with another attack-config or threat-model hash
        (`check_record_hashes`); nothing is appended then.
    """
    fast = version == "fast" and members is None
    every = schedule_members(version, members, norm)
    members = FAST.always if fast else every
    random_model = version == "rand" or any(m.eot > 1 for m in members)
    x, y = np.asarray(x, np.float32), np.asarray(y)
    ids = np.arange(len(y)) if case_ids is None else np.asarray(case_ids)
    pos = np.arange(len(y)) if positions is None else np.asarray(positions, np.int64)
    if len(ids) != len(y) or len(pos) != len(y):
        raise ValueError(f"case_ids and positions must give one entry per case: {len(y)} cases, "
                         f"{len(ids)} ids, {len(pos)} positions")  # fmt: skip
    tm = autoattack_threat_model(eps, every, norm)
    attack_hashes = {m.name: member_hash(m, norm) for m in members}
    if fast:
        attack_hashes |= {m.name: member_hash(m, norm) for m in FAST.escalation}
        attack_hashes |= {probe_name(m): member_hash(m, norm) for m in FAST.probe}
    attack_hashes[AUTOATTACK] = fast_hash(norm) if fast else autoattack_hash(members, norm)
    check_record_hashes(
        log,
        model=model,
        model_hash=model_hash,
        attack_hashes=attack_hashes,
        threat_model_hash=tm.digest(),
    )
    root = key_root(key)
    key = root_key(root)
    clean = clean_predictions(logits_fn, x, key, batch_size, random_model, pos)
    first = members[0]
    wrong = [
        i for i in np.flatnonzero(clean != y) if (model, first.name, eps, int(ids[i])) not in log
    ]
    log.append([_record(first, i, ids, y, clean, x[i], x[i], 0.0, 0, -1, eps, tm, norm,
                        (root, int(pos[i])), model, model_hash, adv_pred=int(clean[i]))
                for i in wrong])  # fmt: skip
    common = dict(log=log, logits_fn=logits_fn, x=x, y=y, eps=eps, key=key, ids=ids, pos=pos,
                  clean=clean, tm=tm, norm=norm, root=root, model=model, model_hash=model_hash,
                  batch_size=batch_size, random_model=random_model, mesh=mesh, on_run=on_run,
                  on_batch=on_batch)  # fmt: skip
    attacked = np.flatnonzero(clean == y)
    _run_phase(members, [m.name for m in members], attacked, **common)
    if not fast:
        chain, counted = members, ()
    else:
        chain = _fast_phases(log, logits_fn, common)
        counted = [probe_name(m) for m in FAST.probe]
    derived = autoattack_records(
        log.read(), chain, model=model, eps=eps, case_ids=ids, norm=norm,
        digest=attack_hashes[AUTOATTACK], counted=counted,
    )  # fmt: skip
    log.append(derived, skip_existing=True)
    return derived


def _fast_phases(log, logits_fn, common) -> tuple:
    """The fast version's probe and escalation after APGD-CE and MALT (`FastMembers`), on
    this process's share of the cases, its decisions those of one process on all of them:
    the processes exchange the positions they left robust (the probe's sample is drawn from
    all of them), what the probe broke and which model checks failed on their first cases
    (any process's failure escalates); the members whose verdicts count."""
    model, eps, key = common["model"], common["eps"], common["key"]
    x, y, ids, pos = common["x"], common["y"], common["ids"], common["pos"]
    checks = model_checks_on_every_process(probe_checks(logits_fn, x, y, random_model=False))
    failed = [c.name for c in checks if not c.passed]
    here = set(ids.tolist())

    def records():
        return [r for r in log.read() if (r.model, r.eps) == (model, eps) and r.case_id in here]

    local = broken_by_member(records(), FAST.always, ids)
    left = np.sort(gather_from_every_process(pos[local == -1]))
    sample = probe_sample(key, left)
    _run_phase(FAST.probe, [probe_name(m) for m in FAST.probe], np.flatnonzero(np.isin(pos, sample)),
               **common)  # fmt: skip
    probes = {probe_name(m) for m in FAST.probe}
    broke = len({r.case_id for r in records() if r.attack in probes and r.status == "success"})
    broke = int(gather_from_every_process([broke]).sum())
    escalate, _, _ = probe_verdict(broke, len(sample), len(left), failed)
    ran = bool({m.name for m in FAST.escalation} & {r.attack for r in records()})
    if escalate:
        _run_phase(FAST.escalation, [m.name for m in FAST.escalation], np.flatnonzero(local == -1),
                   **common)  # fmt: skip
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


def _run_phase(members, names, positions, *, log, logits_fn, x, y, eps, key, ids, pos, clean, tm,
               norm, root, model, model_hash, batch_size, random_model, mesh, on_run, on_batch):  # fmt: skip
    """`members` on the cases at `positions`, each from the first member its records (named
    `names`) still lack; every member's final outcome for a case appended as it comes."""
    if not len(positions):
        return
    start = _start_members(log, model, names, eps, ids[positions])

    def on_decided(d):
        records = []
        for p in d.positions:
            i = int(positions[p])
            if (model, names[d.stage], eps, int(ids[i])) in log:
                continue
            records.append(_record(
                members[d.stage], i, ids, y, clean, x[i], d.stage_x[p], float(d.stage_loss[p]),
                int(d.queries[p]), d.run, eps, tm, norm, (root, int(pos[i])), model, model_hash,
                adv_pred=int(d.adv_pred[p]), attack=names[d.stage],
            ))  # fmt: skip
        log.append(records)

    attack_members(
        logits_fn, x[positions], y[positions], eps, key=key, members=members, norm=norm,
        batch_size=batch_size, random_model=random_model, start_member=start,
        case_index=pos[positions], mesh=mesh, on_decided=on_decided, on_run=on_run,
        on_batch=on_batch,
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


def _record(member, i, ids, y, clean, x, x_adv, loss, queries, run, eps, tm, norm, path,
            model, model_hash, *, adv_pred, attack=None) -> CaseRecord:  # fmt: skip
    linf = float(perturbation_sizes(x[None], x_adv[None], "linf")[0])
    l2 = float(perturbation_sizes(x[None], x_adv[None], "l2")[0])
    clean_correct = bool(clean[i] == y[i])
    broken = adv_pred != int(y[i])
    status = classify_status(
        clean_correct, not broken, linf=linf, eps=eps, x_min=float(x_adv.min()),
        x_max=float(x_adv.max()), tol=tm.tolerance, l2=l2, norm=norm,
    )  # fmt: skip
    return CaseRecord(
        case_id=int(ids[i]),
        true_class=int(y[i]),
        clean_pred=int(clean[i]),
        adv_pred=adv_pred,
        final_loss=loss,
        linf=linf,
        l2=l2,
        first_break_step=run if clean_correct and broken else None,
        first_break_restart=run if clean_correct and broken else None,
        queries=queries,
        status=status,
        model=model,
        model_hash=model_hash,
        attack=attack or member.name,
        attack_config_hash=member_hash(member, norm),
        threat_model_hash=tm.digest(),
        eps=float(eps),
        key_path=(*path, member.stream),
    )


def member_passes(records, members, *, model: str, eps: float, classes: int,
                  names=None) -> list[dict]:  # fmt: skip
    """Per member, the model passes its records' queries stand for (`Member.passes`), as
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
