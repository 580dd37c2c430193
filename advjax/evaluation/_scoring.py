"""Scoring an attack's output arrays into per-case records (pure; numpy on the host).

The bridge between a batched attack (`advjax.evaluation`, `advjax.evaluation`) and
the record log (`advjax.evaluation`): perturbation sizes, validity, status and first-break
tracking per case, with the provenance hashes every record carries.
"""

from collections.abc import Sequence

import numpy as np

from advjax.evaluation._threat_model import ThreatModel
from advjax.records import CaseRecord, classify_status


def records_from_arrays(
    *,
    threat_model: ThreatModel,
    eps: float,
    model: str,
    model_hash: str,
    attack: str,
    attack_config_hash: str,
    case_ids: Sequence[int],
    labels: Sequence[int],
    clean_pred: Sequence[int],
    adv_pred: Sequence[int],
    loss: Sequence[float],
    x: np.ndarray,
    x_adv: np.ndarray,
    queries: int | Sequence[int],
    broken_step: np.ndarray | None = None,
    budget_capped: Sequence[bool] | None = None,
    key_path_prefix: Sequence[int | str] = (),
) -> list[CaseRecord]:
    """Records for one batch of cases from an attack's arrays (pure; numpy on host).

    Args:
      threat_model: gives the hash, norm, tolerance and pixel range for `classify_status`.
      eps, model, model_hash, attack, attack_config_hash: shared by the batch.
      case_ids, labels, clean_pred, adv_pred, loss: per case, shape (n,).
      x, x_adv: clean and adversarial inputs, shape (n, ...).
      queries: per case, or one int for all.
      broken_step: optional (restarts, n) first-break steps, -1 = never (as
        `advjax.attacks.pgd` returns); None for attacks without tracking.
      budget_capped: optional per-case flags (see `classify_status`).
      key_path_prefix: the fold_in path down to the batch; each record gets prefix + [case_id].

    Returns:
      One `CaseRecord` per case, in order.

    Raises:
      ValueError: shapes disagree.
    """
    x, x_adv = np.asarray(x, np.float64), np.asarray(x_adv, np.float64)
    n = len(case_ids)
    per_case = [np.asarray(a).reshape(-1) for a in (case_ids, labels, clean_pred, adv_pred, loss)]
    queries = np.broadcast_to(np.asarray(queries), (n,))
    capped = np.zeros(n, bool) if budget_capped is None else np.asarray(budget_capped, bool)
    if (
        x.shape != x_adv.shape
        or x.shape[:1] != (n,)
        or any(a.shape != (n,) for a in per_case)
        or capped.shape != (n,)
    ):
        raise ValueError(
            f"need n={n} cases in every array, got {x.shape=} {x_adv.shape=} "
            f"{[a.shape for a in per_case]} {capped.shape=}"
        )
    if broken_step is not None:
        broken_step = np.asarray(broken_step)
        if broken_step.ndim != 2 or broken_step.shape[1] != n:
            raise ValueError(
                f"broken_step must have shape (restarts, {n}), got {broken_step.shape}"
            )
    delta = (x_adv - x).reshape(n, -1)
    linf = np.abs(delta).max(axis=1, initial=0.0)
    l2 = np.sqrt((delta * delta).sum(axis=1))
    flat = x_adv.reshape(n, -1)
    x_min, x_max = flat.min(axis=1, initial=np.inf), flat.max(axis=1, initial=-np.inf)
    ids, y, clean, adv, losses = per_case
    records = []
    for i in range(n):
        by_restart = None
        if broken_step is not None:
            by_restart = tuple(None if s < 0 else int(s) for s in broken_step[:, i])
        broke = [r for r, s in enumerate(by_restart or ()) if s is not None]
        status = classify_status(
            bool(clean[i] == y[i]),
            bool(adv[i] == y[i]),
            linf=float(linf[i]),
            eps=eps,
            x_min=float(x_min[i]),
            x_max=float(x_max[i]),
            tol=threat_model.tolerance,
            budget_capped=bool(capped[i]),
            pixel_range=threat_model.pixel_range,
            l2=float(l2[i]),
            norm=threat_model.norm,
        )
        records.append(
            CaseRecord(
                case_id=int(ids[i]),
                true_class=int(y[i]),
                clean_pred=int(clean[i]),
                adv_pred=int(adv[i]),
                final_loss=float(losses[i]),
                linf=float(linf[i]),
                l2=float(l2[i]),
                first_break_step=min(by_restart[r] for r in broke) if broke else None,
                first_break_restart=broke[0] if broke else None,
                queries=int(queries[i]),
                status=status,
                model=model,
                model_hash=model_hash,
                attack=attack,
                attack_config_hash=attack_config_hash,
                threat_model_hash=threat_model.digest(),
                eps=float(eps),
                key_path=(*key_path_prefix, int(ids[i])),
                break_steps_by_restart=by_restart,
            )
        )
    return records
