"""Attack sanity checks: catch broken or masked gradients before trusting a robustness number.

Each check returns a `Check(name, passed, evidence)` whose evidence states the numbers it
compared. Most take group summaries from `advjax.evaluation`; the two that need the model
(zero input-gradients, transfer attack) take a precomputed number. `run_checks` runs all
that apply to a run. Pure: no I/O.

Reference: Carlini et al., "On Evaluating Adversarial Robustness", 2019; Athalye, Carlini
& Wagner, "Obfuscated Gradients Give a False Sense of Security", ICML 2018.
"""

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

from advjax.evaluation._metrics import format_rate
from advjax.evaluation._threat_model import format_eps


class Check(NamedTuple):
    """One sanity check: its name, whether it passed, and the numbers behind the verdict."""

    name: str
    passed: bool
    evidence: str


def _value(r: dict | float) -> float:
    return float(r["value"]) if isinstance(r, dict) else float(r)


def _text(r: dict | float) -> str:
    return format_rate(r) if isinstance(r, dict) else f"{100 * float(r):.1f} %"


def _where(group: dict) -> str:
    return f"{group['model']}/{group['attack']}"


def check_eps_zero(group: dict) -> Check:
    """At eps 0 the robust accuracy equals the clean accuracy (same count, same total).

    Raises:
      ValueError: the group's eps is not 0.
    """
    if group["eps"] != 0:
        raise ValueError(f"check_eps_zero needs the eps=0 group, got eps={group['eps']!r}")
    clean, robust = group["clean_accuracy"], group["robust_accuracy"]
    passed = clean["count"] == robust["count"] and clean["total"] == robust["total"]
    return Check(
        f"eps0_equals_clean[{_where(group)}]",
        passed,
        f"eps 0: robust {format_rate(robust)} vs clean {format_rate(clean)}",
    )


MONOTONE_TOL = 1e-12
"""Rise allowed by the monotone checks: float rounding only."""


def check_monotone_eps(groups: Sequence[dict], *, tol: float = MONOTONE_TOL) -> Check:
    """Robust accuracy does not increase with eps, for groups of one (model, attack).

    `tol` is the rise allowed between neighbouring eps values: ~0 for a white-box
    attack; a transfer attack's larger-eps perturbation is a different one, not a
    superset, so a rise of a few cases there is noise, not a broken attack.

    Raises:
      ValueError: fewer than one group, or groups of several (model, attack).
    """
    where = {_where(g) for g in groups}
    if len(where) != 1:
        raise ValueError(f"need the groups of exactly one model/attack, got {sorted(where)}")
    ordered = sorted(groups, key=lambda g: g["eps"])
    values = [g["robust_accuracy"]["value"] for g in ordered]
    bad = [
        f"{format_eps(a['eps'])} -> {format_eps(b['eps'])}"
        for a, b, va, vb in zip(ordered, ordered[1:], values, values[1:])
        if not vb <= va + tol
    ]
    cases = {g["case_set"] for g in ordered if "case_set" in g}
    if len(cases) > 1:
        bad.append("the eps groups cover different case sets")
    steps = ", ".join(
        f"{format_eps(g['eps'])}: {format_rate(g['robust_accuracy'])}" for g in ordered
    )
    evidence = f"robust accuracy by eps: {steps}" + (
        f"; increases at {', '.join(bad)}" if bad else ""
    )
    if tol >= 1e-6:
        evidence += f" (allowed rise {100 * tol:.1f} points)"
    return Check(f"monotone_in_eps[{next(iter(where))}]", not bad, evidence)


def check_monotone_curve(curve: Sequence[dict | float], *, what: str, where: str = "") -> Check:
    """A budget curve (robust accuracy vs steps or restarts) never increases."""
    values = [_value(r) for r in curve]
    bad = [i for i in range(1, len(values)) if not values[i] <= values[i - 1] + 1e-12]
    start = 0 if what == "steps" else 1
    ends = f"{what} {start}: {_text(curve[0])}"
    if len(curve) > 1:
        ends += f", {what} {start + len(curve) - 1}: {_text(curve[-1])}"
    evidence = ends + (f"; increases at {what} {[i + start for i in bad]}" if bad else "")
    return Check(f"monotone_in_{what}" + (f"[{where}]" if where else ""), not bad, evidence)


def check_pgd_not_weaker_than_fgsm(
    strong: Sequence[dict], weak: Sequence[dict], *, tol: float = 0.0
) -> Check:
    """At every eps both were run at, the iterative attack leaves no more robust accuracy.

    Args:
      strong: groups of the iterative attack (PGD) for one model.
      weak: groups of the single-step attack (FGSM) for the same model.
      tol: allowed excess of the strong attack's robust accuracy.
    """
    by_eps = {g["eps"]: g for g in weak}
    pairs = [
        (s, by_eps[s["eps"]]) for s in sorted(strong, key=lambda g: g["eps"]) if s["eps"] in by_eps
    ]
    name = f"pgd_not_weaker_than_fgsm[{_where(strong[0]) if strong else '?'}]"
    if not pairs:
        return Check(name, False, "no eps at which both attacks were run")
    parts, bad = [], []
    for s, w in pairs:
        sv, wv = s["robust_accuracy"]["value"], w["robust_accuracy"]["value"]
        parts.append(
            f"{format_eps(s['eps'])}: {s['attack']} {100 * sv:.1f} % "
            f"vs {w['attack']} {100 * wv:.1f} %"
        )
        if not sv <= wv + tol:
            bad.append(format_eps(s["eps"]))
    evidence = "; ".join(parts) + (f"; weaker at eps {', '.join(bad)}" if bad else "")
    return Check(name, not bad, evidence)


def check_perturbations(groups: Sequence[dict], *, tol: float = 1e-6, norm: str = "linf") -> Check:
    """Every perturbation is finite, within eps + tol, and no case is invalid (pixel range)."""
    bad, largest = [], 0.0
    size_key = "max_linf" if norm == "linf" else "max_l2"
    for g in groups:
        size, non_finite = g["perturbation"][size_key], g["perturbation"]["non_finite"]
        largest = max(largest, (size or 0.0) - g["eps"])
        if non_finite or g["invalid"] or (size is not None and size > g["eps"] + tol):
            shown = "none" if size is None else f"{size:.6g}"
            bad.append(
                f"{_where(g)} eps {format_eps(g['eps'])}: max {norm} {shown}, "
                f"{non_finite} non-finite, {g['invalid']} invalid"
            )
    cases = sum(g["cases"] for g in groups)
    evidence = (
        f"{cases:,} cases in {len(groups)} groups; largest {norm} - eps: {largest:.3g} "
        f"(tolerance {tol:g})"
    )
    return Check(
        "perturbations_within_threat_model",
        not bad,
        evidence + (": " + "; ".join(bad) if bad else ""),
    )


def check_finite_loss(groups: Sequence[dict]) -> Check:
    """No record has a NaN or infinite final loss."""
    bad = [
        f"{_where(g)} eps {format_eps(g['eps'])}: {g['loss']['non_finite']}"
        for g in groups
        if g["loss"]["non_finite"]
    ]
    total = sum(g["loss"]["non_finite"] for g in groups)
    cases = sum(g["cases"] for g in groups)
    evidence = f"{total:,} of {cases:,} final losses are NaN/inf" + (
        f" ({'; '.join(bad)})" if bad else ""
    )
    return Check("finite_loss", not bad, evidence)


def zero_gradient_fraction(grad: ArrayLike, *, atol: float = 0.0) -> float:
    """Share of examples whose whole input gradient is zero (|g| <= atol everywhere).

    Args:
      grad: per-example input gradients, shape (n, ...), e.g. at the attack's start point.
      atol: magnitude counted as zero.

    Raises:
      ValueError: grad has no example axis or no examples.
    """
    grad = np.asarray(grad)
    if grad.ndim < 1 or grad.shape[0] == 0:
        raise ValueError(
            f"grad must have a leading example axis with >= 1 example, got {grad.shape=}"
        )
    flat = np.abs(grad.reshape(grad.shape[0], -1))
    return float(np.mean(np.all(flat <= atol, axis=1)))


def check_zero_gradients(fraction: float, *, threshold: float = 0.5, where: str = "") -> Check:
    """Passes if fewer than `threshold` of the examples have an all-zero input gradient."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction={fraction!r} must be in [0, 1]")
    passed = fraction < threshold
    return Check(
        "zero_input_gradients" + (f"[{where}]" if where else ""),
        passed,
        f"{100 * fraction:.1f} % of examples have an all-zero input gradient at the start "
        f"point (must be < {100 * threshold:.1f} %)",
    )


def check_transfer_not_stronger(
    transfer_robust: dict | float,
    whitebox_robust: dict | float,
    *,
    tol: float = 0.0,
    where: str = "",
) -> Check:
    """A transfer attack from a surrogate leaves at least the white-box robust accuracy.

    A transfer attack stronger than the white-box one means the white-box gradients are
    broken or masked.
    """
    passed = _value(whitebox_robust) <= _value(transfer_robust) + tol
    return Check(
        "transfer_not_stronger_than_whitebox" + (f"[{where}]" if where else ""),
        passed,
        f"white-box robust {_text(whitebox_robust)} vs transfer robust "
        f"{_text(transfer_robust)} (allowed excess {100 * tol:.1f} points)",
    )


def check_large_eps(group: dict, *, threshold: float = 0.05) -> Check:
    """At a large eps (e.g. 64/255) robust accuracy is near zero (<= threshold)."""
    robust = group["robust_accuracy"]
    passed = robust["value"] <= threshold
    return Check(
        f"large_eps_breaks_model[{_where(group)}]",
        passed,
        f"eps {format_eps(group['eps'])}: robust {format_rate(robust)} "
        f"(must be <= {100 * threshold:.1f} %)",
    )


def run_checks(
    groups: Sequence[dict],
    *,
    strong_attack: str = "pgd",
    weak_attack: str = "fgsm",
    large_eps: float | None = 64 / 255,
    large_eps_threshold: float = 0.05,
    tol: float = 1e-6,
    norm: str = "linf",
    zero_gradient_fractions: dict[str, float] | None = None,
    transfer_robust: dict[str, tuple[dict | float, dict | float]] | None = None,
    eps_rise_allowed: dict[str, float] | None = None,
) -> list[Check]:
    """Every check that applies to a run's group summaries.

    Args:
      groups: `advjax.evaluation.aggregate_records` output.
      strong_attack, weak_attack: attack names compared by the PGD-vs-FGSM check.
      large_eps: the eps for the near-zero check, per model/attack with that eps or more;
        a model/strong-attack pair with no such group gets a failing check (the check is
        part of every evaluation); None skips it.
      large_eps_threshold: robust accuracy allowed at large_eps.
      tol, norm: the threat model's tolerance and norm.
      zero_gradient_fractions: model -> `zero_gradient_fraction` at the start point.
      transfer_robust: model -> (transfer robust accuracy, white-box robust accuracy).
      eps_rise_allowed: attack -> rise in robust accuracy allowed between neighbouring
        eps values by the monotone-in-eps check (default ~0; see `check_monotone_eps`).

    Returns:
      The checks, in a stable order.
    """
    checks = [check_perturbations(groups, tol=tol, norm=norm), check_finite_loss(groups)]
    pairs = sorted({(g["model"], g["attack"]) for g in groups})
    for model, attack in pairs:
        members = [g for g in groups if (g["model"], g["attack"]) == (model, attack)]
        checks += [check_eps_zero(g) for g in members if g["eps"] == 0]
        rise = (eps_rise_allowed or {}).get(attack, MONOTONE_TOL)
        checks.append(check_monotone_eps(members, tol=rise))
        for g in members:
            for what in ("steps", "restarts"):
                curve = g["budget_curves"][what]
                if curve and len(curve) > 1:
                    where = f"{model}/{attack} eps {format_eps(g['eps'])}"
                    checks.append(check_monotone_curve(curve, what=what, where=where))
        if attack == weak_attack and (model, strong_attack) in pairs:
            strong = [g for g in groups if (g["model"], g["attack"]) == (model, strong_attack)]
            checks.append(check_pgd_not_weaker_than_fgsm(strong, members))
        if large_eps is not None and attack == strong_attack:
            big = [g for g in members if g["eps"] >= large_eps - 1e-9]
            if big:
                checks.append(
                    check_large_eps(min(big, key=lambda g: g["eps"]), threshold=large_eps_threshold)
                )
            else:
                checks.append(
                    Check(
                        f"large_eps_breaks_model[{model}/{attack}]",
                        False,
                        f"not evaluated: no eps >= {format_eps(large_eps)} in the run",
                    )
                )
    for model, fraction in sorted((zero_gradient_fractions or {}).items()):
        checks.append(check_zero_gradients(fraction, where=model))
    for model, (transfer, whitebox) in sorted((transfer_robust or {}).items()):
        checks.append(check_transfer_not_stronger(transfer, whitebox, where=model))
    if not any(math.isfinite(g["robust_accuracy"]["value"]) for g in groups):
        checks.append(Check("has_results", False, "no group has any valid case"))
    return checks
