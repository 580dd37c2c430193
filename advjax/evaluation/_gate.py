"""Release gate: allow or hold a model from thresholds declared before the results were seen.

Usage::

    python -m advjax.gate --policy policy.json --run summary.json [--baseline base.json]

prints ALLOW, HOLD or ROLLBACK followed by every rule with its verdict and numbers, and
exits 0 for allow, 1 for hold, 3 for rollback (`Decision.exit_code`), 2 for a missing or
unreadable file, a malformed policy or a run summary that does not follow
`advjax.evaluation.run_summary`'s schema.

Policy file (JSON object; every key optional, at least one rule required)::

    {
      "models": ["fgsm_matched"],
          # models the gate applies to; default every model in the run
      "robust_accuracy_lower_bound": {"pgd": {"8/255": 0.25}, "fgsm": {"8/255": 0.27}},
          # attack -> eps -> threshold: for each gated model the lower end of the Wilson
          # 95 % interval of robust accuracy must be >= threshold. eps keys are "k/255"
          # or decimals ("0.0314"); a (model, attack, eps) missing from the run holds.
      "max_clean_regression": 0.02,
          # baseline clean accuracy - run clean accuracy <= this, per gated model
          # (point estimates); needs --baseline, and the model in it, else hold
      "require_sanity": true,
          # every sanity check in the run passed (and there is at least one)
      "min_valid_share": 0.99,
          # in every group of a gated model, (cases - invalid) / cases >= this
      "worst_class_floor": 0.05,
          # at every declared (attack, eps) of robust_accuracy_lower_bound (or, without
          # one, every eps > 0), the worst class's robust accuracy (point estimate) >= this
      "rollback_below": {"baseline_model": "fgsm_reference", "robust": {"pgd": ["8/255"]}}
          # ROLLBACK when a gated model is worse than the baseline model beyond both
          # intervals: the upper end of its Wilson 95 % interval below the baseline's lower
          # end, on clean accuracy and at each listed (attack, eps). The baseline model is
          # looked up in the run, else in --baseline; "clean": false skips clean accuracy
    }

A failed rollback condition makes the verdict ROLLBACK (the candidate is measurably worse
than what it would replace); any other failed condition makes it HOLD.

Thresholds are fractions in [0, 1].
"""

import hashlib
import json
from pathlib import Path
from typing import Any, NamedTuple

from advjax.evaluation._aggregate import find_group
from advjax.evaluation._threat_model import format_eps, parse_eps

RULES = (
    "robust_accuracy_lower_bound",
    "max_clean_regression",
    "require_sanity",
    "min_valid_share",
    "worst_class_floor",
    "rollback_below",
)
EXIT_CODES = {"ALLOW": 0, "HOLD": 1, "ROLLBACK": 3}
"""The gate commands' exit status per verdict (2 is bad input)."""


class PolicyError(ValueError):
    """A policy file that is missing, not JSON, or not of the documented schema."""


class Reason(NamedTuple):
    """One rule applied to one model / operating point."""

    rule: str
    passed: bool
    detail: str


class Decision(NamedTuple):
    """The gate's decision: allow only if every reason passed (and there is one); a failed
    `rollback_below` reason makes it a rollback."""

    allow: bool
    reasons: list[Reason]

    @property
    def verdict(self) -> str:
        """'ALLOW', 'HOLD' or 'ROLLBACK'."""
        if any(r.rule == "rollback_below" and not r.passed for r in self.reasons):
            return "ROLLBACK"
        return "ALLOW" if self.allow else "HOLD"

    @property
    def exit_code(self) -> int:
        """The gate commands' exit status: 0 allow, 1 hold, 3 rollback (2 is bad input)."""
        return EXIT_CODES[self.verdict]


def _fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise PolicyError(f"{name}={value!r} must be a number in [0, 1]")
    return float(value)


def parse_policy(policy: Any) -> dict:
    """Validate a loaded policy and normalise it (eps keys to floats).

    Raises:
      PolicyError: not an object, unknown keys, no rule, or a bad value (named).
    """
    if not isinstance(policy, dict):
        raise PolicyError(f"policy must be a JSON object, got {type(policy).__name__}")
    unknown = sorted(set(policy) - set(RULES) - {"models", "description"})
    if unknown:
        raise PolicyError(
            f"unknown policy keys {unknown}; known: {sorted(RULES + ('models', 'description'))}"
        )
    if not set(policy) & set(RULES):
        raise PolicyError(f"policy declares no rule; give at least one of {list(RULES)}")
    out: dict = {}
    if "models" in policy:
        models = policy["models"]
        if (
            not isinstance(models, list)
            or not models
            or not all(isinstance(m, str) for m in models)
        ):
            raise PolicyError(f"models={models!r} must be a non-empty list of model names")
        out["models"] = models
    if "robust_accuracy_lower_bound" in policy:
        bounds = policy["robust_accuracy_lower_bound"]
        if not isinstance(bounds, dict) or not bounds:
            raise PolicyError(
                f"robust_accuracy_lower_bound={bounds!r} must map attack -> eps -> threshold"
            )
        out["robust_accuracy_lower_bound"] = {}
        for attack, per_eps in bounds.items():
            if not isinstance(per_eps, dict) or not per_eps:
                raise PolicyError(
                    f"robust_accuracy_lower_bound[{attack!r}]={per_eps!r} must map eps -> threshold"
                )
            parsed = {}
            for eps, threshold in per_eps.items():
                try:
                    parsed[parse_eps(eps)] = _fraction(
                        f"robust_accuracy_lower_bound[{attack!r}][{eps!r}]", threshold
                    )
                except PolicyError:
                    raise
                except ValueError as error:
                    raise PolicyError(f"robust_accuracy_lower_bound[{attack!r}]: {error}") from None
            out["robust_accuracy_lower_bound"][attack] = parsed
    for name in ("max_clean_regression", "min_valid_share", "worst_class_floor"):
        if name in policy:
            out[name] = _fraction(name, policy[name])
    if "rollback_below" in policy:
        out["rollback_below"] = _parse_rollback(policy["rollback_below"])
    if "require_sanity" in policy:
        if not isinstance(policy["require_sanity"], bool):
            raise PolicyError(f"require_sanity={policy['require_sanity']!r} must be true or false")
        out["require_sanity"] = policy["require_sanity"]
    return out


def _parse_rollback(rule: Any) -> dict:
    if not isinstance(rule, dict) or not isinstance(rule.get("baseline_model"), str):
        raise PolicyError(f"rollback_below={rule!r} must be an object with a baseline_model name")
    unknown = sorted(set(rule) - {"baseline_model", "clean", "robust"})
    if unknown:
        raise PolicyError(f"rollback_below: unknown keys {unknown}; known: baseline_model, "
                          "clean, robust")  # fmt: skip
    clean = rule.get("clean", True)
    if not isinstance(clean, bool):
        raise PolicyError(f"rollback_below.clean={clean!r} must be true or false")
    robust = rule.get("robust", {})
    if not isinstance(robust, dict) or not all(isinstance(v, list) and v for v in robust.values()):
        raise PolicyError(f"rollback_below.robust={robust!r} must map attack -> [eps, ...]")
    try:
        points = [(a, parse_eps(e)) for a, eps in sorted(robust.items()) for e in eps]
    except ValueError as error:
        raise PolicyError(f"rollback_below.robust: {error}") from None
    if not clean and not points:
        raise PolicyError("rollback_below compares nothing: give robust points or clean: true")
    return {"baseline_model": rule["baseline_model"], "clean": clean, "robust": points}


def _rollback_reasons(rule: dict, models: list[str], run: dict, baseline: dict | None):
    """The candidate against the baseline model: worse beyond both intervals rolls back."""
    base_name = rule["baseline_model"]
    source = run if base_name in run["models"] else baseline
    if source is None or base_name not in source["models"]:
        yield Reason("rollback_below", False, f"baseline model {base_name}: not in the run "
                     "nor in --baseline")  # fmt: skip
        return
    for model in (m for m in models if m != base_name or source is not run):
        pairs = []
        if rule["clean"]:
            pairs.append(
                (
                    "clean",
                    run["models"][model]["clean_accuracy"],
                    source["models"][base_name]["clean_accuracy"],
                )  # fmt: skip
            )
        for attack, eps in rule["robust"]:
            got = find_group(run["aggregates"], model=model, attack=attack, eps=eps)
            ref = find_group(source["aggregates"], model=base_name, attack=attack, eps=eps)
            where = f"{attack} eps {format_eps(eps)}"
            if got is None or ref is None:
                yield Reason("rollback_below", True, f"{model} vs {base_name} {where}: "
                             "not evaluated for both, nothing to compare")  # fmt: skip
                continue
            pairs.append((where, got["robust_accuracy"], ref["robust_accuracy"]))
        for where, got, ref in pairs:
            worse = got["ci95"][1] < ref["ci95"][0]
            yield Reason(
                "rollback_below",
                not worse,
                f"{model} {where}: {_pct(got['value'])} (CI up to {_pct(got['ci95'][1])}) vs "
                f"baseline {base_name} {_pct(ref['value'])} (CI from {_pct(ref['ci95'][0])})"
                + (": worse beyond both intervals" if worse else ""),
            )


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _counts(r: dict) -> str:
    return f"({r['count']:,}/{r['total']:,})"


def _at_least(rule: str, where: str, level, floor: float, missing: str, measured) -> Reason:
    """`rule` at `where`: passed when `level` >= `floor`; failed as `missing` where there is
    no measurement (`level` None)."""
    if level is None:
        return Reason(rule, False, f"{where}: {missing}")
    return Reason(rule, level >= floor, f"{where}: {measured} vs required >= {_pct(floor)}")


def decide(policy: dict, run: dict, baseline: dict | None = None) -> Decision:
    """Apply a parsed policy to a run summary (and a baseline summary); pure.

    Args:
      policy: `parse_policy` output.
      run, baseline: validated run summaries (`advjax.evaluation.summary.read_run_summary`).

    Returns:
      A `Decision` with one `Reason` per rule and gated model / operating point.

    Example:
      >>> decision = decide(parse_policy(json.load(f)), read_run_summary("summary.json"))
    """
    reasons: list[Reason] = []
    groups = run["aggregates"]
    models = policy.get("models") or sorted(run["models"])
    for model in models:
        if model not in run["models"]:
            reasons.append(Reason("model_present", False, f"{model}: not in the run"))
    models = [m for m in models if m in run["models"]]
    bounds = policy.get("robust_accuracy_lower_bound", {})
    points = [
        (attack, eps) for attack, per_eps in sorted(bounds.items()) for eps in sorted(per_eps)
    ]
    for model in models:
        for attack, eps in points:
            group = find_group(groups, model=model, attack=attack, eps=eps)
            r = None if group is None else group["robust_accuracy"]
            reasons.append(_at_least(
                "robust_accuracy_lower_bound", f"{model} {attack} eps {format_eps(eps)}",
                r and r["ci95"][0], bounds[attack][eps], "not evaluated",
                r and f"95 % CI lower bound {_pct(r['ci95'][0])} (robust {_pct(r['value'])} "
                f"{_counts(r)})",
            ))  # fmt: skip
    if "max_clean_regression" in policy:
        limit = policy["max_clean_regression"]
        for model in models:
            run_clean = run["models"][model]["clean_accuracy"]
            if baseline is None or model not in baseline["models"]:
                missing = "no --baseline given" if baseline is None else "model not in the baseline"
                reasons.append(Reason("max_clean_regression", False, f"{model}: {missing}"))
                continue
            base_clean = baseline["models"][model]["clean_accuracy"]
            drop = base_clean["value"] - run_clean["value"]
            reasons.append(
                Reason(
                    "max_clean_regression",
                    drop <= limit + 1e-12,
                    f"{model}: clean {_pct(run_clean['value'])} {_counts(run_clean)} vs baseline "
                    f"{_pct(base_clean['value'])} {_counts(base_clean)}: regression "
                    f"{100 * drop:.1f} points vs allowed <= {100 * limit:.1f}",
                )
            )
    if policy.get("require_sanity"):
        checks = run["checks"]
        if not checks:
            reasons.append(Reason("require_sanity", False, "the run records no sanity check"))
        for check in checks:
            reasons.append(
                Reason("require_sanity", check["passed"], f"{check['name']}: {check['evidence']}")
            )
    if "min_valid_share" in policy:
        floor = policy["min_valid_share"]
        for group in (g for g in groups if g["model"] in models):
            share = group["valid_share"]
            reasons.append(
                Reason(
                    "min_valid_share",
                    share["value"] >= floor,
                    f"{group['model']} {group['attack']} eps {format_eps(group['eps'])}: valid "
                    f"{_pct(share['value'])} {_counts(share)} vs required >= {_pct(floor)}",
                )
            )
    if "worst_class_floor" in policy:
        floor = policy["worst_class_floor"]
        for model in models:
            chosen = (
                [find_group(groups, model=model, attack=a, eps=e) for a, e in points]
                if points
                else [g for g in groups if g["model"] == model and g["eps"] > 0]
            )
            for group in (g for g in chosen if g is not None):
                worst = group["worst_class"]
                r = None if worst is None else worst["robust_accuracy"]
                reasons.append(_at_least(
                    "worst_class_floor", f"{model} {group['attack']} eps {format_eps(group['eps'])}",
                    r and r["value"], floor, "no per-class result",
                    r and f"worst class {worst['class']} robust {_pct(r['value'])} {_counts(r)}",
                ))  # fmt: skip
    if "rollback_below" in policy:
        reasons.extend(_rollback_reasons(policy["rollback_below"], models, run, baseline))
    if not reasons:
        reasons.append(Reason("nothing_checked", False, "no rule applied to any model of the run"))
    return Decision(all(r.passed for r in reasons), reasons)


def format_decision(decision: Decision) -> str:
    """'ALLOW' / 'HOLD' / 'ROLLBACK' headline, then one line per reason."""
    failed = sum(not r.passed for r in decision.reasons)
    head = decision.verdict
    lines = [
        f"{head}: {len(decision.reasons) - failed} of {len(decision.reasons)} conditions passed"
    ]
    lines += [f"  {'pass' if r.passed else 'FAIL'}  {r.rule}: {r.detail}" for r in decision.reasons]
    return "\n".join(lines)


def load_policy(path: str | Path) -> tuple[dict, str]:
    """Read and parse a policy file; returns (policy, sha256 of the file, 16 hex).

    Raises:
      PolicyError: missing, unreadable, not JSON or malformed (the message names the file).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise PolicyError(f"{path}: no such policy file") from None
    except OSError as error:
        raise PolicyError(f"{path}: cannot read: {error}") from error
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PolicyError(f"{path}: not valid JSON: {error}") from error
    try:
        return parse_policy(raw), hashlib.sha256(data).hexdigest()[:16]
    except PolicyError as error:
        raise PolicyError(f"{path}: {error}") from None
