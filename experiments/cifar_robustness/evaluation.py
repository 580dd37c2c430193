"""The study's evaluation: threat model, attack campaign into records, aggregates, checks, gate.

Order of work, per run: declare the threat model (printed first, stored with the run);
attack every model into the append-only `records.jsonl.gz` (resumable); compute every
number from the records alone; run the sanity checks; write `summary.json`; apply the
declared release policy (`policy.json`) to it.
"""

import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import Partial

from advjax.attacks import attack_loss
from advjax.data import EvalCases
from advjax.evaluation import (
    AttackSpec,
    Check,
    Model,
    ThreatModel,
    aggregate_records,
    decide,
    find_group,
    format_eps,
    run_attack,
    run_checks,
    run_summary,
)
from advjax.evaluation import _metrics as metrics
from advjax.evaluation.checks import zero_gradient_fraction
from advjax.evaluation.gate import format_decision, load_policy
from advjax.records import CaseRecord, RecordLog, atomic_write_json, atomic_write_npz
from advjax_train import load_logits_fn
from experiments.cifar_robustness.config import StudyConfig
from experiments.cifar_robustness.replay_evidence import replay_examples

ATTACK_SECONDS_FILE = "attack_seconds.json"
"""Wall seconds of attack compute per model and attack, summed over the invocations that
wrote its records (a resumed run adds its part; a run that reuses every record adds 0)."""
RECORDS_FILE, SUMMARY_FILE, POLICY_FILE, GATE_FILE = (
    "records.jsonl.gz",
    "summary.json",
    "policy.json",
    "gate.txt",
)


def study_threat_model(config: StudyConfig) -> ThreatModel:
    """The study's declared threat model: white-box L-inf in pixel space, every eps it runs."""
    eps = sorted({*config.eps_list, *config.budget_eps, config.large_eps})
    return ThreatModel(
        eps=tuple(eps),
        steps=max(config.pgd_steps, config.budget_steps),
        restarts=max(config.pgd_restarts, config.budget_restarts),
    )


def attack_specs(config: StudyConfig, model: str | None = None) -> list[AttackSpec]:
    """FGSM; PGD (the protocol, plus a large-eps probe); a long PGD for budget curves;
    PGD transferred from `model`'s transfer source (`StudyConfig.transfer_source`), where it
    has one. Without `model`: the transfer attack of every source of the run."""
    specs = [
        AttackSpec(
            name="fgsm", method="fgsm", eps=config.eps_list, batch_size=config.attack_batch_size
        ),
        AttackSpec(
            name="pgd",
            method="pgd",
            eps=(*config.eps_list, config.large_eps),
            steps=config.pgd_steps,
            restarts=config.pgd_restarts,
            step_fraction=config.pgd_step_fraction,
            batch_size=config.attack_batch_size,
        ),
        AttackSpec(
            name="pgd_budget",
            method="pgd",
            eps=config.budget_eps,
            steps=config.budget_steps,
            restarts=config.budget_restarts,
            step_fraction=config.pgd_step_fraction,
            batch_size=config.budget_batch_size,
        ),
    ]
    targets = [m.name for m in config.models] if model is None else [model]
    sources = sorted({s for s in map(config.transfer_source, targets) if s is not None})
    for source in sources:
        specs.append(
            AttackSpec(
                name="transfer_pgd",
                method="pgd",
                eps=tuple(e for e in config.eps_list if e > 0),
                steps=config.pgd_steps,
                step_fraction=config.pgd_step_fraction,
                batch_size=config.attack_batch_size,
                source=source,
            )
        )
    return specs


def spec_cases(config: StudyConfig, spec: AttackSpec, y: np.ndarray) -> np.ndarray:
    """The evaluation cases (indices into `y`) that `spec` attacks: every case, but for the
    budget curves the first `config.budget_cases / 10` of each class (in order; every case of
    a class that has fewer)."""
    if spec.name != "pgd_budget" or config.budget_cases is None:
        return np.arange(len(y))
    per_class = config.budget_cases // 10
    picked = [np.flatnonzero(y == c)[:per_class] for c in np.unique(y)]
    return np.sort(np.concatenate(picked))


@jax.jit
def _input_gradient(logits_fn, x, y):
    """The input gradient of the summed cross-entropy (logits_fn: an `eval_logits_fn`)."""
    return jax.grad(lambda z: attack_loss("ce")(logits_fn(z), y).sum())(x)


def start_point_zero_gradients(logits_fn, x, y, batch_size: int = 250) -> float:
    """Share of cases whose input gradient of the loss is exactly zero at the clean input."""
    fn = logits_fn if isinstance(logits_fn, Partial) else Partial(logits_fn)
    grads = [
        np.asarray(
            _input_gradient(
                fn, jnp.asarray(x[i : i + batch_size]), jnp.asarray(y[i : i + batch_size])
            )
        )
        for i in range(0, len(y), batch_size)
    ]
    return zero_gradient_fraction(np.concatenate(grads))


def evaluate_model(
    config,
    spec,
    ckpt,
    x,
    y,
    log: RecordLog,
    threat_model,
    sources: dict,
    out: Path,
    show_progress,
    log_line,
) -> dict:
    """Attack one model with every spec into `log`; return its extra evidence.

    `sources`: transfer source name -> (logits_fn, model hash), the checkpoints of this run.
    """
    logits_fn, mhash = load_logits_fn(ckpt)
    ids = np.arange(len(y))
    times_path = out / ATTACK_SECONDS_FILE
    times = json.loads(times_path.read_text()) if times_path.exists() else {}
    mine = times.setdefault(spec.name, {})
    for attack in attack_specs(config, spec.name):
        source = Model(attack.source, *sources[attack.source]) if attack.source else None
        cases = spec_cases(config, attack, y)
        started = time.perf_counter()
        written = run_attack(
            log,
            Model(spec.name, logits_fn, mhash),
            EvalCases(x[cases], y[cases], ids[cases]),
            attack,
            threat_model=threat_model,
            key=jax.random.key(config.seed),
            source=source,
            show_progress=show_progress,
            log_line=log_line,
        )
        if written:  # compute spent on new records adds to what earlier invocations spent
            mine[attack.name] = mine.get(attack.name, 0.0) + time.perf_counter() - started
            atomic_write_json(times_path, times)
    seconds = sum(mine.values())
    pgd = attack_specs(config)[1]
    top = max(config.eps_list)
    k = min(config.saved_examples, len(y))
    stored = {
        r.case_id: r
        for r in log.read()
        if (r.model, r.attack, r.eps) == (spec.name, "pgd", top) and r.case_id < k
    }
    x_adv, replayed, replay_check = replay_examples(
        stored,
        threat_model=threat_model,
        spec=pgd,
        model=spec.name,
        mhash=mhash,
        logits_fn=logits_fn,
        x=x[:k],
        y=y[:k],
        ids=ids[:k],
        eps=top,
    )
    atomic_write_npz(
        out / "examples" / f"{spec.name}.npz",
        x_clean=x[:k],
        labels=y[:k],
        clean_pred=np.array([r.clean_pred for r in replayed]),
        x_adv=x_adv,
        adv_pred=np.array([r.adv_pred for r in replayed]),
        eps=np.array(top),
    )
    fraction = start_point_zero_gradients(logits_fn, x, y)
    return {
        "model_hash": mhash,
        "attack_seconds": seconds,
        "zero_gradient_fraction": fraction,
        "replay_check": replay_check._asdict(),
        "transfer_source": config.transfer_source(spec.name),
    }


def eps_label(eps: float) -> str:
    """eps in pixel units as its /255 numerator, e.g. 8/255 -> '8'."""
    return f"{eps * 255:g}"


def study_aggregates(config: StudyConfig, records, num_classes: int) -> list[dict]:
    """Every group summary of the run, from its records alone."""
    return aggregate_records(
        records,
        num_classes=num_classes,
        steps={"fgsm": 1, "pgd": config.pgd_steps, "pgd_budget": config.budget_steps},
        restarts={"fgsm": 1, "pgd": config.pgd_restarts, "pgd_budget": config.budget_restarts},
    )


def _arrays(records: list[CaseRecord]):
    ordered = sorted(records, key=lambda r: r.case_id)
    return (
        np.array([r.true_class for r in ordered]),
        np.array([r.clean_pred for r in ordered]),
        np.array([r.adv_pred for r in ordered]),
    )


def model_results(config: StudyConfig, groups, records, model: str, num_classes: int) -> dict:
    """One model's numbers for results.json and the report, all from its records."""
    by_group: dict = {}
    for r in records:
        if r.model == model:
            by_group.setdefault((r.attack, r.eps), []).append(r)
    first = find_group(groups, model=model, attack="pgd", eps=config.eps_list[0])
    out = {
        "clean_accuracy": first["clean_accuracy"],
        "attacks": {},
        "per_class": {"clean": [row["clean_accuracy"] for row in first["per_class"]]},
        "worst_class": {},
        "confusion": {},
        "budget_curves": {},
        "transfer": {},
        "status_counts": {},
    }
    y, clean, _ = _arrays(by_group[("pgd", config.eps_list[0])])
    out["confusion"]["clean"] = metrics.confusion_matrix(y, clean, num_classes).tolist()
    for attack in ("fgsm", "pgd"):
        out["attacks"][attack] = {}
        for eps in config.eps_list:
            g = find_group(groups, model=model, attack=attack, eps=eps)
            label = f"{attack}_{eps_label(eps)}"
            out["attacks"][attack][eps_label(eps)] = {
                k: g[k] for k in ("clean_accuracy", "robust_accuracy", "attack_success_rate")
            }
            out["per_class"][label] = [row["robust_accuracy"] for row in g["per_class"]]
            out["worst_class"][label] = g["worst_class"]
            out["status_counts"][label] = g["status_counts"]
            if eps == max(config.eps_list):
                _, _, adv = _arrays(by_group[(attack, eps)])
                out["confusion"][label] = metrics.confusion_matrix(y, adv, num_classes).tolist()
    for eps in config.budget_eps:
        g = find_group(groups, model=model, attack="pgd_budget", eps=eps)
        out["budget_curves"][eps_label(eps)] = g["budget_curves"] | {
            "robust_accuracy": g["robust_accuracy"]
        }
    for g in groups:
        if g["model"] == model and g["attack"] == "transfer_pgd":
            out["transfer"][eps_label(g["eps"])] = g["robust_accuracy"]
    large = find_group(groups, model=model, attack="pgd", eps=config.large_eps)
    out["large_eps_robust_accuracy"] = large["robust_accuracy"] if large else None
    return out


TRANSFER_EPS_RISE_ALLOWED = 0.01
"""Transfer robust accuracy may rise by up to 1 point (10 of 1,000) from one eps to the
next: the surrogate's perturbation at a larger eps is a new one, not a superset."""


def study_checks(config: StudyConfig, groups, extras: dict, threat_model) -> list[Check]:
    """Every sanity check of the run (see `advjax.evaluation`), with the replay checks."""
    transfer = {}
    for g in groups:
        if g["attack"] == "transfer_pgd":
            white = find_group(groups, model=g["model"], attack="pgd", eps=g["eps"])
            if white is not None:
                where = f"{g['model']} eps {format_eps(g['eps'])}"
                transfer[where] = (g["robust_accuracy"], white["robust_accuracy"])
    checks = run_checks(
        groups,
        large_eps=config.large_eps,
        tol=threat_model.tolerance,
        norm=threat_model.norm,
        zero_gradient_fractions={m: e["zero_gradient_fraction"] for m, e in extras.items()},
        transfer_robust=transfer,
        eps_rise_allowed={"transfer_pgd": TRANSFER_EPS_RISE_ALLOWED},
    )
    checks += [Check(**e["replay_check"]) for _, e in sorted(extras.items())]
    return checks


def release_decision(summary: dict, policy_path: Path, out: Path, log_line) -> dict:
    """Apply the declared policy to the run summary; write gate.txt; return the decision."""
    policy, policy_hash = load_policy(policy_path)
    decision = decide(policy, summary)
    text = format_decision(decision)
    (out / GATE_FILE).write_text(text + f"\n  policy {policy_path.name} (sha256 {policy_hash})\n")
    log_line(text.splitlines()[0])
    return {
        "allow": decision.allow,
        "verdict": decision.verdict,
        "policy": policy,
        "policy_sha256": policy_hash,
        "reasons": [r._asdict() for r in decision.reasons],
    }


def summarise_run(config, records, extras, threat_model, num_classes, provenance) -> dict:
    """Aggregates, checks and the run summary document (advjax.evaluation schema)."""
    groups = study_aggregates(config, records, num_classes)
    checks = study_checks(config, groups, extras, threat_model)
    return run_summary(groups, checks, threat_model, extra=provenance)
