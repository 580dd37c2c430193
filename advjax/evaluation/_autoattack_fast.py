"""AutoAttack's fast version: fewer model passes, the standard version's verdicts.

On every case: APGD-CE, then MALT (APGD-T toward the 3 classes a linear estimate puts
nearest, instead of the 9 highest-ranked logits). Then a probe for gradient masking: FAB-T
and Square, the members that see past a masked gradient, on a random sample of the cases
still robust. If the probe breaks any case, or a model check fails (all-zero input
gradients, probabilities for logits), the evaluation escalates: the standard version's
remaining members (APGD-T with 9 targets, FAB-T, Square) run on every case still robust,
so the verdicts are at least the standard version's.

What the probe guarantees: a model on which FAB-T or Square breaks a share r of the cases
the white-box members leave robust escalates unless none of the m sampled cases is among
them, which happens with probability at most (1 - r)^m (0.034 for r = 10 % and the
default m = 32; 0.38 for r = 3 %).
Without escalation, fast may still hold a case robust that the standard version breaks
with APGD-T's 4th to 9th target class, or with FAB-T or Square outside the sample.

References: Melamed, Yehudai & Vardi, NeurIPS 2024 (MALT); Croce & Hein, ICML 2020
(AutoAttack); Liu et al., CVPR 2022 (A3: spend passes where they can matter).
"""

from typing import NamedTuple

import jax
import numpy as np

from advjax.evaluation._autoattack_checks import probe_checks
from advjax.evaluation._autoattack_stages import attack_members
from advjax.evaluation._sanity import Check

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
