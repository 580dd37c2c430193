"""An AutoAttack-style ensemble: attacks in sequence, each only on the cases still robust.

The first member attacks every case; each later member attacks only the cases that every
earlier member left robust, so a case's outcome is decided by the first member that
breaks it (the per-case worst case). Members write their own records; `ensemble_records`
derives one record per case for the ensemble from them, and cumulative robust accuracy
after each member is read off the member groups.

Reference: Croce & Hein, "Reliable evaluation of adversarial robustness with an ensemble
of diverse parameter-free attacks", ICML 2020.
"""

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from advjax.evaluation._attack_spec import AttackSpec
from advjax.evaluation._campaign import run_attack
from advjax.evaluation._records import ROBUST_STATUSES, CaseRecord
from advjax.io._record_log import RecordLog

ENSEMBLE = "ensemble"


def ensemble_hash(members: Sequence[AttackSpec]) -> str:
    """Hash of the member list, in order (the ensemble records' attack config hash)."""
    joined = ",".join(f"{m.name}:{m.config_hash()}" for m in members)
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def run_ensemble(
    log: RecordLog, members: Sequence[AttackSpec], *, eps: float, x, y, case_ids, **run_kwargs
) -> list[CaseRecord]:
    """Run the members in order at one eps, each on the cases still robust; return the
    ensemble's derived records (one per case). `run_kwargs` go to `run_attack` (threat
    model, model name and hash, logits_fn, root_path, ...).

    Raises:
      ValueError: no members, or two with one name.
    """
    if not members or len({m.name for m in members}) != len(members):
        raise ValueError(f"need distinct member names, got {[m.name for m in members]}")
    x, y, ids = np.asarray(x), np.asarray(y), np.asarray(case_ids)
    model = run_kwargs["model"]
    position = {int(c): i for i, c in enumerate(ids)}
    todo = np.arange(len(ids))
    for member in members:
        member = dataclasses.replace(member, eps=(eps,))
        if len(todo):
            run_attack(log, spec=member, x=x[todo], y=y[todo], case_ids=ids[todo], **run_kwargs)
        decided = {r.case_id: r for r in _group(log, model, member.name, eps)}
        todo = np.array(
            [position[c] for c in ids[todo] if decided[int(c)].status in ROBUST_STATUSES], int
        )
    return ensemble_records(log.read(), members, model=model, eps=eps, case_ids=ids)


def _group(log: RecordLog, model: str, attack: str, eps: float) -> list[CaseRecord]:
    return [r for r in log.read() if (r.model, r.attack, r.eps) == (model, attack, eps)]


def ensemble_records(
    records: Sequence[CaseRecord],
    members: Sequence[AttackSpec],
    *,
    model: str,
    eps: float,
    case_ids,
) -> list[CaseRecord]:
    """One ensemble record per case: the deciding member's record (the first that broke it,
    else the last that ran), renamed, with the queries of every member that ran.

    Raises:
      ValueError: a case has no record of the first member, or a later member ran on a
        case an earlier one had already decided.
    """
    by_member = {
        m.name: {
            r.case_id: r for r in records if (r.model, r.attack, r.eps) == (model, m.name, eps)
        }
        for m in members
    }
    digest = ensemble_hash(members)
    out = []
    for case in (int(c) for c in case_ids):
        chain = [by_member[m.name][case] for m in members if case in by_member[m.name]]
        if not chain or chain[0].attack != members[0].name:
            raise ValueError(f"case {case}: no record of the first member {members[0].name!r}")
        if any(r.status not in ROBUST_STATUSES for r in chain[:-1]):
            raise ValueError(f"case {case}: a member ran after the case was decided")
        last = chain[-1]
        out.append(
            dataclasses.replace(
                last,
                attack=ENSEMBLE,
                attack_config_hash=digest,
                queries=sum(r.queries for r in chain),
            )
        )
    return out
