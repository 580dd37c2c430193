"""Lever curves set each lever's own training log beside the baseline's, epoch by epoch,
whether the lever's training finished (a checkpoint) or not (a progress file)."""

import json

import jax
import numpy as np
import pytest

from advjax.io import save_checkpoint
from advjax_train import CompactCNN, SentinelConfig, TrainConfig, fit
from tests.train.test_ema import _data
from tests.train.test_resume import _Stop, _stop_after
from tools import lever_curves

# A tool's test (tools/) that trains small models: outside the default run.
pytestmark = pytest.mark.slow


def _history(val_pgd, fitted):
    return [{"epoch": i + 1, "val_pgd_accuracy": v, "train_adv_accuracy": f, "val_accuracy": 0.5}
            for i, (v, f) in enumerate(zip(val_pgd, fitted))]  # fmt: skip


def _checkpoint(path, history, **metadata):
    model = CompactCNN()
    variables = model.init(jax.random.key(0), np.zeros((1, 32, 32, 3), np.float32), False)
    meta = {"train_config": {"epochs": len(history)}, "history": history, **metadata}
    return save_checkpoint(path, model, variables, meta)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A levers folder: one finished training (and its live twin), one stopped after epoch
    1 of its profile's 40 by the real loop, the baseline's copy and a standard training (a
    reused surrogate, which has no curves to compare)."""
    root = tmp_path_factory.mktemp("levers")
    base = _checkpoint(root / "baseline.msgpack", _history([0.30, 0.35, 0.40], [0.3, 0.4, 0.45]))
    run = root / "levers"
    (run / "checkpoints").mkdir(parents=True)
    _checkpoint(run / "checkpoints" / "pgd_silu_scratch_flip_ema.msgpack",
                _history([0.33, 0.36, 0.37], [0.35, 0.50, 0.55]))  # fmt: skip
    _checkpoint(run / "checkpoints" / "pgd_silu_scratch_flip.msgpack",
                _history([0.1, 0.1, 0.1], [0.1, 0.1, 0.1]), trained_by="pgd_silu_scratch_flip_ema")  # fmt: skip
    _checkpoint(run / "checkpoints" / "baseline.msgpack", _history([0.3], [0.3]))
    _checkpoint(run / "checkpoints" / "surrogate.msgpack", [{"epoch": 1, "val_accuracy": 0.6}])
    progress = run / "training_progress" / "pgd_silu_scratch_batch64_ema.msgpack"
    with pytest.raises(_Stop):
        fit(TrainConfig(mode="pgd", adv_steps=1, epochs=2, batch_size=32, ema_decay=0.9),
            _data(32), _data(32, seed=1), show_progress=False, log=lambda _: None,
            sentinel=SentinelConfig(probe_size=32, steps=1, val_size=32, batch_size=32,
                                    select_by="val_pgd_accuracy"),
            on_epoch=_stop_after(1, progress, "t"))  # fmt: skip
    return run, base


def test_each_training_is_compared_epoch_by_epoch_with_the_baseline(run, tmp_path):
    folder, base = run
    out = tmp_path / "out"
    result = lever_curves.main(["--run", str(folder), "--baseline", str(base), "--out", str(out)])
    assert sorted(result["levers"]) == ["pgd_silu_scratch_batch64_ema", "pgd_silu_scratch_flip_ema"]
    flip = result["levers"]["pgd_silu_scratch_flip_ema"]
    assert flip["finished"] and flip["epochs"] == 3
    assert [r["val_pgd_accuracy"] for r in flip["rows"]] == [
        {"lever": 0.33, "baseline": 0.30}, {"lever": 0.36, "baseline": 0.35},
        {"lever": 0.37, "baseline": 0.40},
    ]  # fmt: skip
    assert flip["summary"]["best_lever"] == {"value": 0.37, "epoch": 3}
    assert flip["summary"]["last_gap"] == pytest.approx(-0.03)
    stopped = result["levers"]["pgd_silu_scratch_batch64_ema"]
    assert not stopped["finished"] and stopped["epochs"] == 40 and len(stopped["rows"]) == 1
    first = stopped["rows"][0]
    assert first["val_pgd_accuracy"]["baseline"] == 0.30
    assert (
        0 <= first["val_pgd_accuracy"]["lever"] <= 1
        and 0 <= first["train_adv_accuracy"]["lever"] <= 1
    )
    assert (
        json.loads((out / "lever_curves.json").read_text())["levers"].keys()
        == result["levers"].keys()
    )
    assert "| 3 | 37.0 | 40.0 | 55.0 | 45.0 |" in (out / "lever_curves.md").read_text()
    assert (out / "lever_curves.png").stat().st_size > 0


def test_a_model_with_neither_checkpoint_nor_progress_is_named(run, tmp_path):
    folder, base = run
    with pytest.raises(FileNotFoundError, match="--models pgd_silu_scratch_batch64:"):
        lever_curves.main(["--run", str(folder), "--baseline", str(base), "--out",
                           str(tmp_path / "o"), "--models", "pgd_silu_scratch_batch64"])  # fmt: skip
