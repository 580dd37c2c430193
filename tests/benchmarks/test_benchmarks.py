"""Checks of the benchmark's bookkeeping (FLOP model, summaries, table, files); no timings asserted.

Part of the default test suite.
"""

import json
import os

import pytest

from benchmarks import report
from benchmarks.config import PROFILES, WORKLOADS, BenchConfig
from benchmarks.torch_peer import reference_args


def test_flop_model_matches_peer_readme():
    """PGD-20 and the train step reproduce the README's analytic costs; derived ones as stated."""
    by_key = {s.key: s for s in WORKLOADS}
    assert by_key["pgd"].mflop_per_image(20) == pytest.approx(2416.0)
    assert by_key["pgd4"].mflop_per_image(20) == pytest.approx(4 * 2416.0)
    assert by_key["train"].mflop_per_image(20) == pytest.approx(175.0)
    assert by_key["fgsm"].mflop_per_image(20) == pytest.approx(3 * 58.9)
    assert by_key["fgsm_at"].mflop_per_image(20) == pytest.approx(2 * 58.9 + 2 * 175.0)
    assert by_key["infer"].mflop_per_image(20) == pytest.approx(58.9)


def test_config_rejects_bad_sizes():
    """Non-positive sizes and a ragged last eval batch raise ValueError naming the field."""
    with pytest.raises(ValueError, match="reps"):
        BenchConfig(reps=0)
    with pytest.raises(ValueError, match="n_eval"):
        BenchConfig(n_eval=1000, eval_batch=300)
    assert PROFILES["quick"].reps_per_round >= 1


def test_reference_args_use_the_same_sizes():
    """The torch subprocess gets the JAX workload's batch, steps and image count."""
    config = PROFILES["quick"]
    train = reference_args("train", 2, config)
    assert train[train.index("--steps") + 1] == str(config.train_steps)
    pgd = reference_args("pgd", 2, config)
    assert pgd[pgd.index("--n_eval") + 1] == str(config.n_eval)
    assert pgd[pgd.index("--batch") + 1] == str(config.eval_batch)


def _fake_result() -> dict:
    jax_row = report.summarize_jax(
        [1.0, 2.0, 3.0],
        10.0,
        images_per_rep=100,
        calls_per_rep=1,
        mflop_per_image=58.9,
        peak_gflops=100.0,
        peak_rss_mib=500.0,
    )
    torch_run = {
        "times_s": [2.0, 2.0],
        "items_per_rep": 100,
        "first_run_s": 3.0,
        "peak_rss_mib": 400.0,
        "torch": "2.13.0",
    }
    peers = {"nchw": report.merge_torch([torch_run], 4), "channels_last": None}
    row = {
        "key": "pgd4",
        "label": "PGD",
        "batch": 50,
        "torch_divisor": 4,
        "jax": jax_row,
        "torch": peers,
    }
    row["ratio"] = report.ratios(row)
    peak = {"size": 8, "gflops_median": 100.0}
    machine = {
        "timestamp": "t",
        "git": {"commit": "abc", "dirty": False},
        "cpu_model": "cpu",
        "usable_cores": 2,
        "cpu_count": 2,
        "memory_gib": 1,
        "platform": "p",
        "load_average_start": None,
        "xla_flags": "",
        "versions": {k: "0" for k in ("jax", "jaxlib", "flax", "optax")},
    }
    return {
        "command": "c",
        "profile": "quick",
        "machine": machine,
        "rows": [row],
        "config": {
            "reps": 3,
            "rounds": 1,
            "train_steps": 1,
            "train_batch": 1,
            "n_eval": 100,
            "eval_batch": 50,
            "pgd_steps": 20,
        },
        "matmul_peak": {"peak_gflops": 100.0, "start": peak, "end": peak},
    }


def test_summaries_ratio_and_table(tmp_path):
    """Medians, the ÷4 peer figure, the JAX/PyTorch ratio and both output files."""
    result = _fake_result()
    row = result["rows"][0]
    assert row["jax"]["ips_median"] == pytest.approx(50.0)
    assert row["jax"]["compile_s"] == pytest.approx(8.0)
    assert row["torch"]["nchw"]["ips_compared"] == pytest.approx(12.5)
    assert row["ratio"] == {"nchw": pytest.approx(4.0)}
    json_path, md_path = report.write_outputs(result, str(tmp_path))
    assert json.load(open(json_path))["rows"][0]["key"] == "pgd4"
    text = open(md_path).read()
    assert "| PGD † | 50 | 50.0 | 12.5 † | – | 4.00 / – |" in text
    assert sorted(os.listdir(tmp_path)) == ["speed.json", "speed.md"]


@pytest.mark.slow
def test_attack_strategies_compare_equal_decisions_on_a_linear_model():
    """Early stop vs every step, and vmapped vs looped restarts and eps, decide every case
    alike (the benchmark reports it; here on a tiny linear model, no timing asserted)."""
    import jax.numpy as jnp
    import numpy as np
    from conftest import make_linear_batch, make_linear_logits_fn

    from benchmarks.attack_strategies import early_stop_row, eps_row, markdown, restarts_row

    logits_fn = make_linear_logits_fn()
    x, _ = make_linear_batch(n=40)
    y = np.array(jnp.argmax(logits_fn(jnp.asarray(x)), -1))
    y[:5] = (y[:5] + 1) % 10
    rows = [
        early_stop_row(logits_fn, jnp.asarray(x), y, 0.02, 6, 2, 16, 1),
        restarts_row(logits_fn, jnp.asarray(x), y, 0.02, 4, 1),
        eps_row(logits_fn, jnp.asarray(x), y, [0.01, 0.03], 4, 1),
    ]
    assert all(r["same_decisions"] for r in rows)
    assert 0 < rows[0]["robust"] < 35
    machine = {"cpu_model": "cpu", "usable_cores": 2, "git": {"commit": "abc", "dirty": False}}
    text = markdown(
        {
            "command": "c",
            "model": "m",
            "cases": 40,
            "rows": rows,
            "machine": machine,
            "load_start": None,
            "load_end": None,
            "peak_rss_mib": 1.0,
            "note": "n",
        }
    )
    assert text.count("| yes |") == 3
