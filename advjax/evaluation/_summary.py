"""A run's summary file: threat model, aggregates and sanity checks in one JSON document.

The release gate (`advjax.gate`) reads this file, never the raw records, so the decision
follows from numbers that were themselves computed from the records. Schema
(`SCHEMA` = "advjax.run_summary/1")::

    {
      "schema": "advjax.run_summary/1",
      "threat_model": {...},              # advjax.evaluation.ThreatModel.to_dict()
      "threat_model_hash": "16 hex",      # its digest(); every aggregate repeats it
      "models": {"<model>": {"clean_accuracy": rate}},
      "aggregates": [group, ...],         # advjax.evaluation.stats.summarise_group() dicts
      "checks": [{"name": str, "passed": bool, "evidence": str}, ...],
      "sanity_passed": bool,              # every check passed (and there is at least one)
      "extra": {...}                      # free-form provenance (command, git revision, ...)
    }

where a rate is {"value": float, "count": int, "total": int, "ci95": [low, high]}
(`advjax.evaluation.stats.rate`; value is NaN when total is 0).
"""

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from advjax.evaluation._sanity import Check
from advjax.evaluation._threat_model import ThreatModel

SCHEMA = "advjax.run_summary/1"


class SummaryError(ValueError):
    """A run summary that is missing, unreadable or does not follow the schema."""


def run_summary(
    aggregates: Sequence[dict],
    checks: Sequence[Check | Mapping[str, Any]],
    threat_model: ThreatModel,
    *,
    extra: Mapping[str, Any] | None = None,
) -> dict:
    """The summary document (pure); see the module docstring for the schema.

    Raises:
      TypeError: threat_model is not a ThreatModel.
      ValueError: an aggregate names another threat model, or one model's groups over all
        its cases disagree on its clean accuracy (groups over fewer cases, such as later
        members of an ensemble, are not compared).
    """
    if not isinstance(threat_model, ThreatModel):
        raise TypeError(f"threat_model={threat_model!r} must be a ThreatModel")
    digest = threat_model.digest()
    models: dict[str, dict] = {}
    for group in aggregates:
        if group["threat_model_hash"] != digest:
            raise ValueError(
                f"aggregate {group['model']}/{group['attack']} eps {group['eps']} has "
                f"threat_model_hash={group['threat_model_hash']!r}, the run's is {digest!r}"
            )
    for group in sorted(aggregates, key=lambda g: -g["cases"]):
        clean = group["clean_accuracy"]
        known = models.setdefault(group["model"], {"clean_accuracy": clean})["clean_accuracy"]
        if group["cases"] < known["total"]:
            continue  # a group over part of the cases (e.g. a later ensemble member)
        if (known["count"], known["total"]) != (clean["count"], clean["total"]):
            raise ValueError(
                f"model {group['model']!r}: clean accuracy {clean['count']}/{clean['total']} in "
                f"{group['attack']} eps {group['eps']} vs {known['count']}/{known['total']} "
                "elsewhere"
            )
    checks = [
        {"name": c["name"], "passed": bool(c["passed"]), "evidence": c["evidence"]}
        if isinstance(c, Mapping)
        else Check(*c)._asdict()
        for c in checks
    ]
    return {
        "schema": SCHEMA,
        "threat_model": threat_model.to_dict(),
        "threat_model_hash": digest,
        "models": models,
        "aggregates": list(aggregates),
        "checks": checks,
        "sanity_passed": bool(checks) and all(c["passed"] for c in checks),
        "extra": dict(extra or {}),
    }


def _rate_ok(r: Any) -> bool:
    return (
        isinstance(r, dict)
        and isinstance(r.get("value"), (int, float))
        and isinstance(r.get("count"), int)
        and isinstance(r.get("total"), int)
        and isinstance(r.get("ci95"), list)
        and len(r["ci95"]) == 2
    )


def validate_run_summary(summary: Any, source: str = "run summary") -> dict:
    """Check a loaded summary against the schema; return it.

    Raises:
      SummaryError: the first problem found, naming `source` and the field.
    """

    def fail(message: str):
        raise SummaryError(f"{source}: {message}")

    if not isinstance(summary, dict):
        fail(f"must be a JSON object, got {type(summary).__name__}")
    if summary.get("schema") != SCHEMA:
        fail(f"schema={summary.get('schema')!r}, expected {SCHEMA!r}")
    for key, kind in (
        ("threat_model", dict),
        ("models", dict),
        ("aggregates", list),
        ("checks", list),
    ):
        if not isinstance(summary.get(key), kind):
            fail(f"field {key!r} must be a JSON {'object' if kind is dict else 'array'}")
    try:
        digest = ThreatModel.from_dict(summary["threat_model"]).digest()
    except (ValueError, TypeError) as error:
        fail(f"threat_model is not valid: {error}")
    if summary.get("threat_model_hash") != digest:
        fail(
            f"threat_model_hash={summary.get('threat_model_hash')!r} does not match its "
            f"threat_model (digest {digest!r})"
        )
    for name, model in summary["models"].items():
        if not isinstance(model, dict) or not _rate_ok(model.get("clean_accuracy")):
            fail(f"models[{name!r}] must hold a clean_accuracy rate")
    for i, group in enumerate(summary["aggregates"]):
        where = f"aggregates[{i}]"
        if not isinstance(group, dict):
            fail(f"{where} must be an object")
        if not (isinstance(group.get("model"), str) and isinstance(group.get("attack"), str)):
            fail(f"{where} needs string 'model' and 'attack'")
        if not isinstance(group.get("eps"), (int, float)) or isinstance(group.get("eps"), bool):
            fail(f"{where}.eps={group.get('eps')!r} must be a number")
        for key in ("clean_accuracy", "robust_accuracy", "valid_share"):
            if not _rate_ok(group.get(key)):
                fail(f"{where}.{key} must be a rate {{value, count, total, ci95}}")
        worst = group.get("worst_class")
        if worst is not None and not (
            isinstance(worst, dict) and _rate_ok(worst.get("robust_accuracy"))
        ):
            fail(f"{where}.worst_class must be null or {{class, robust_accuracy}}")
        if group.get("threat_model_hash") != digest:
            fail(
                f"{where}.threat_model_hash={group.get('threat_model_hash')!r} is not the "
                f"run's {digest!r}"
            )
    for i, check in enumerate(summary["checks"]):
        if not (
            isinstance(check, dict)
            and isinstance(check.get("name"), str)
            and isinstance(check.get("passed"), bool)
            and isinstance(check.get("evidence"), str)
        ):
            fail(f"checks[{i}] must be {{name: str, passed: bool, evidence: str}}")
    return summary


def read_run_summary(path: str | os.PathLike) -> dict:
    """Load and validate a run summary.

    Raises:
      SummaryError: missing or unreadable file, invalid JSON, or schema violations; the
        message names the file.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SummaryError(f"{path}: no such run summary file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SummaryError(f"{path}: cannot read: {error}") from error
    try:
        summary = json.loads(text)
    except json.JSONDecodeError as error:
        raise SummaryError(f"{path}:{error.lineno}: not valid JSON: {error.msg}") from error
    return validate_run_summary(summary, str(path))
