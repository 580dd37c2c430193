"""`--dry-run`: the campaign's size in gradient queries and its wall time, before running it."""

import time

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attacks import ATTACKS
from advjax.evaluation import AttackSpec, format_eps
from advjax.evaluation.engine import make_program
from advjax_train import CompactCNN, eval_logits_fn
from experiments.cifar_robustness.config import StudyConfig
from experiments.cifar_robustness.evaluation import attack_specs, spec_cases, study_threat_model


def campaign_rows(config: StudyConfig) -> list[dict]:
    """Per attack: cases x models x eps x restarts x steps = worst-case gradient queries."""
    rows = []
    for spec in attack_specs(config):
        cases = len(spec_cases(config, spec, np.arange(config.eval_size) % 10))
        models = sum(
            spec.source is None or config.transfer_source(m.name) == spec.source
            for m in config.models
        )
        rows.append(
            {
                "attack": spec.name if spec.source is None else f"{spec.name}<-{spec.source}",
                "cases": cases,
                "models": models,
                "eps": len(spec.eps),
                "restarts": spec.restarts,
                "steps": spec.steps,
                "queries": cases * models * len(spec.eps) * spec.max_queries(),
                "batch_size": spec.batch_size,
            }
        )
    return rows


def seconds_per_query(batch_size: int, steps: int = 4, repeats: int = 2) -> float:
    """Wall seconds per (image x gradient query) of PGD on the study's CNN, measured here."""
    model = CompactCNN()
    x = jax.random.uniform(jax.random.key(0), (batch_size, 32, 32, 3))
    variables = model.init(jax.random.key(1), x[:1], train=False)
    spec = AttackSpec(
        name="calibration", method="pgd", eps=(8 / 255,), steps=steps, batch_size=batch_size
    )
    program = make_program(eval_logits_fn(model, variables), spec)
    y = jnp.zeros(batch_size, jnp.int32)
    eps = jnp.float32(8 / 255)
    state = ATTACKS["pgd"].rule.start(x, eps, jax.random.key(2))
    jax.block_until_ready(program.steps(state, x, y, eps, 0, steps))  # compile
    started = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(program.steps(state, x, y, eps, 0, steps))
    return (time.perf_counter() - started) / (repeats * batch_size * steps)


def dry_run(config: StudyConfig, log=print) -> dict:
    """Print the threat model and the campaign estimate; return it (nothing is attacked)."""
    log(study_threat_model(config).describe())
    rows = campaign_rows(config)
    per_query = seconds_per_query(config.attack_batch_size)
    log(
        f"calibration: {1e3 * per_query:.3f} ms per image-query (PGD, batch "
        f"{config.attack_batch_size}, this machine)"
    )
    log(f"{'attack':<26} cases x models x eps x restarts x steps = gradient queries  ~ wall time")
    total = 0
    for row in rows:
        seconds = row["queries"] * per_query
        row["seconds_upper_bound"] = seconds
        total += row["queries"]
        log(
            f"{row['attack']:<26} {row['cases']:>5,} x {row['models']} x {row['eps']} x "
            f"{row['restarts']:>2} x {row['steps']:>3} = {row['queries']:>12,}  ~ "
            f"{seconds / 60:6.1f} min"
        )
    log(
        f"total {total:,} queries, at most ~{total * per_query / 60:.0f} min of attacks (restarts "
        "stop early on broken cases, so PGD restarts usually cost far less); eps: "
        + ", ".join(format_eps(e) for e in study_threat_model(config).eps)
    )
    return {
        "rows": rows,
        "seconds_per_query": per_query,
        "total_queries": total,
        "seconds_upper_bound": total * per_query,
    }
