"""The study's replay evidence: re-run a group's first cases alone from their key paths and
check that every record makes the decision the stored one made (`replay_reproduces_records`).
"""

import jax.numpy as jnp
import numpy as np

from advjax.attacks import attack_loss
from advjax.evaluation import Check, format_eps
from advjax.evaluation.engine import ListLog, attack_group, make_program


def replay_examples(records: dict, *, threat_model, spec, model, mhash, logits_fn, x, y, ids, eps):
    """Re-run the first cases of one group alone; return (x_adv, replayed records, check).

    The replayed records must agree with the stored ones (`replay_check`); the adversarial inputs
    are kept for the report's example figure.
    """
    kept: dict[int, np.ndarray] = {}

    replayed: list = []
    attack_group(
        ListLog(replayed),
        make_program(logits_fn, spec),
        threat_model=threat_model,
        spec=spec,
        attack_hash=spec.config_hash(),
        model=model,
        model_hash=mhash,
        x=x,
        y=y,
        case_ids=ids,
        eps=eps,
        group_path=records[int(ids[0])].key_path[:-1],
        on_x_adv=kept.update,
    )
    order = [r.case_id for r in replayed]
    labels = dict(zip(np.asarray(ids).tolist(), np.asarray(y).tolist(), strict=True))
    margins = logit_margins(
        logits_fn(jnp.asarray(np.stack([kept[i] for i in order]))),
        np.array([labels[i] for i in order]),
    )
    check = replay_check(
        replayed,
        [records[r.case_id] for r in replayed],
        f"{model}/{spec.name} eps {format_eps(eps)}",
        margins,
    )
    return np.stack([kept[int(i)] for i in ids]), replayed, check


MEASURED_FIELDS = ("final_loss", "linf", "l2")
"""Fields measured in floats: on another CPU, XLA's kernels round differently in the last bits,
and over PGD's steps that can move an iterate (a pixel's gradient sign flips near zero)
without changing any decision; the replay check reports them and gates on the rest."""


TIE_TOLERANCE = 1e-3
"""A replayed case lies on the decision boundary, where the last float bits decide, when its
true-class logit is within this fraction of its logit range of the largest other logit."""


def logit_margins(logits, labels) -> np.ndarray:
    """Per case (true-class logit - largest other logit) / (largest - smallest logit): minus
    `advjax.attacks.attack_loss("margin")`, in units of the case's logit range."""
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    spread = jnp.maximum(logits.max(axis=1) - logits.min(axis=1), 1e-12)
    return np.asarray(-attack_loss("margin")(logits, labels) / spread)


def replay_check(replayed, stored, where: str, margins=None) -> Check:
    """`replay_reproduces_records[where]`: every replayed record equals its stored one in
    every decision (predictions, status, break step and restart, queries, provenance), from
    which every number of the run is computed, or differs only at a tie: `margins` (per
    replayed record, `logit_margins` at its returned input) within `TIE_TOLERANCE` of zero,
    where another CPU's rounding can put a PGD iterate on either side of the boundary. The
    evidence counts the bit-identical records (all of them on the machine that wrote them),
    the ties and the largest relative difference in the loss and the perturbation norms."""
    agree, identical, ties, worst = 0, 0, [], 0.0
    margins = [None] * len(stored) if margins is None else list(margins)
    for new, old, margin in zip(replayed, stored, margins, strict=True):
        a, b = new.to_dict(), old.to_dict()
        identical += a == b
        same = all(a[k] == b[k] for k in a if k not in MEASURED_FIELDS)
        agree += same
        if not same and margin is not None and abs(margin) <= TIE_TOLERANCE:
            ties.append(margin)
        worst = max([worst] + [abs(a[k] - b[k]) / max(abs(b[k]), 1e-12) for k in MEASURED_FIELDS
                               if np.isfinite(a[k]) and np.isfinite(b[k])])  # fmt: skip
    n = len(stored)
    tie_text = ""
    if ties:
        tie_text = (
            f", {len(ties)} other(s) differ at a tie (true-class margin "
            + ", ".join(f"{m:+.1e}" for m in ties)
            + f" of the logit range, tolerance {TIE_TOLERANCE:g})"
        )
    return Check(
        f"replay_reproduces_records[{where}]",
        agree + len(ties) == n,
        f"{agree} of {n} records re-run alone from their key paths make every decision the "
        f"stored one made{tie_text}, {identical} of {n} bit-identical; largest relative "
        f"difference in loss and norms {worst:.1e}",
    )
