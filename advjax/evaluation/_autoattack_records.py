"""AutoAttack into an append-only record log: one record per case and member as soon as the
member's outcome for the case is final, so a run killed at any moment resumes where it
stopped, without duplicates or lost cases, and gives the numbers of an uninterrupted run.

Each member writes its own records (attack = the member's name); `AUTOATTACK` records, one
per case, are derived from them: the first member that broke the case, else the last one
that ran, with the queries of every member that ran.
"""

import dataclasses
import hashlib
import json
from collections.abc import Sequence

import jax
import numpy as np

from advjax.evaluation._autoattack import (
    Member,
    clean_predictions,
    perturbation_sizes,
    resolve_members,
)
from advjax.evaluation._autoattack_stages import attack_members
from advjax.evaluation._campaign import check_record_hashes
from advjax.evaluation._threat_model import ThreatModel
from advjax.io._case_record import ROBUST_STATUSES, CaseRecord, classify_status
from advjax.io._record_log import RecordLog

AUTOATTACK = "autoattack"


def member_hash(member: Member, norm: str) -> str:
    """The attack config hash of a member's records."""
    text = json.dumps({**dataclasses.asdict(member), "norm": norm}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def autoattack_hash(members: Sequence[Member], norm: str) -> str:
    """The attack config hash of the derived `AUTOATTACK` records: that of the member list."""
    return hashlib.sha256(",".join(member_hash(m, norm) for m in members).encode()).hexdigest()[:16]


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


def _start_members(log: RecordLog, model: str, members, eps: float, case_ids) -> np.ndarray:
    """Per case the first member it still needs, from the records already in the log."""
    status = {}
    for r in log.read():
        if r.model == model and r.eps == eps:
            status[(r.attack, r.case_id)] = r.status
    start = np.zeros(len(case_ids), np.int64)
    for i, case in enumerate(int(c) for c in case_ids):
        for m, member in enumerate(members):
            s = status.get((member.name, case))
            if s is None:
                break
            start[i] = m + 1 if s in ROBUST_STATUSES else len(members)
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
    seed: int,
    model: str,
    model_hash: str,
    case_ids=None,
    norm: str = "linf",
    version: str = "standard",
    members: Sequence[Member] | None = None,
    batch_size: int = 256,
    mesh=None,
    on_run=None,
    on_batch=None,
) -> list[CaseRecord]:
    """AutoAttack every case not already decided in `log`; return the derived records.

    Case i (position i of x) draws from fold_in(jax.random.key(seed), i), as `autoattack`
    does, so a resumed run equals an uninterrupted one. `on_run` and `on_batch` report
    progress after each run and each batch (see `attack_members`).

    Raises:
      ValueError: `log` holds records of `model` made with another model hash, or of a
        member (or of `AUTOATTACK`) with another attack-config or threat-model hash
        (`check_record_hashes`); nothing is appended then.
    """
    members = resolve_members(version, members, norm)
    random_model = version == "rand" or any(m.eot > 1 for m in members)
    x, y = np.asarray(x, np.float32), np.asarray(y)
    ids = np.arange(len(y)) if case_ids is None else np.asarray(case_ids)
    tm = autoattack_threat_model(eps, members, norm)
    attack_hashes = {m.name: member_hash(m, norm) for m in members}
    attack_hashes[AUTOATTACK] = autoattack_hash(members, norm)
    check_record_hashes(
        log,
        model=model,
        model_hash=model_hash,
        attack_hashes=attack_hashes,
        threat_model_hash=tm.digest(),
    )
    key = jax.random.key(seed)
    clean = clean_predictions(logits_fn, x, key, batch_size, random_model)
    start = _start_members(log, model, members, eps, ids)
    first = members[0]
    wrong = [
        i for i in np.flatnonzero(clean != y) if (model, first.name, eps, int(ids[i])) not in log
    ]
    log.append([_record(first, i, ids, y, clean, x[i], x[i], 0.0, 0, -1, eps, tm, norm,
                        seed, model, model_hash, adv_pred=int(clean[i])) for i in wrong])  # fmt: skip
    start[clean != y] = len(members)

    def on_decided(d):
        member = members[d.stage]
        log.append(
            [
                _record(
                    member,
                    int(i),
                    ids,
                    y,
                    clean,
                    x[i],
                    d.stage_x[i],
                    float(d.stage_loss[i]),
                    int(d.queries[i]),
                    d.run,
                    eps,
                    tm,
                    norm,
                    seed,
                    model,
                    model_hash,
                    adv_pred=int(d.adv_pred[i]),
                )  # fmt: skip
                for i in d.positions
                if (model, member.name, eps, int(ids[i])) not in log
            ]
        )

    attack_members(
        logits_fn, x, y, eps, key=key, members=members, norm=norm, batch_size=batch_size,
        random_model=random_model, start_member=start, mesh=mesh, on_decided=on_decided,
        on_run=on_run, on_batch=on_batch,
    )  # fmt: skip
    derived = autoattack_records(log.read(), members, model=model, eps=eps, case_ids=ids, norm=norm)
    log.append(derived, skip_existing=True)
    return derived


def _record(member, i, ids, y, clean, x, x_adv, loss, queries, run, eps, tm, norm, seed,
            model, model_hash, *, adv_pred) -> CaseRecord:  # fmt: skip
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
        attack=member.name,
        attack_config_hash=member_hash(member, norm),
        threat_model_hash=tm.digest(),
        eps=float(eps),
        key_path=(int(seed), i, member.stream),
    )


def member_passes(records, members, *, model: str, eps: float, classes: int) -> list[dict]:
    """Per member, the model passes its records' queries stand for (`Member.passes`), as
    `autoattack` reports them."""
    return [
        m.passes(
            sum(r.queries for r in records if (r.model, r.attack, r.eps) == (model, m.name, eps)),
            classes,
        )
        for m in members
    ]


def autoattack_records(records, members, *, model: str, eps: float, case_ids, norm: str) -> list:
    """One `AUTOATTACK` record per case: the deciding member's record (the first that broke
    it, else the last that ran), with the queries of every member that ran."""
    by_member = {
        m.name: {r.case_id: r for r in records if (r.model, r.attack, r.eps) == (model, m.name, eps)}
        for m in members
    }  # fmt: skip
    digest = autoattack_hash(members, norm)
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
                queries=sum(r.queries for r in chain),
            )  # fmt: skip
        )
    return out
