"""Resumable training (advjax_train: FitProgress, save_fit_progress, load_fit_progress,
read_fit_history and
fit's `on_epoch` / `resume`): a run stopped after an epoch and resumed from its file ends with
exactly the weights, history and selection of the uninterrupted run."""

import chex
import jax
import pytest

from advjax_train import (
    FitProgress,
    SentinelConfig,
    TrainConfig,
    create_train_state,
    fit,
    load_fit_progress,
    read_fit_history,
    save_fit_progress,
)
from tests.train.test_ema import _data


class _Stop(Exception):
    pass


def _stop_after(epochs: int, path, tag: str):
    def on_epoch(progress: FitProgress) -> None:
        save_fit_progress(path, progress, tag=tag)
        if progress.epoch == epochs:
            raise _Stop

    return on_epoch


def _template(config: TrainConfig, n: int) -> object:
    return create_train_state(jax.random.key(0), config, config.epochs * (n // config.batch_size))


@pytest.mark.parametrize(
    "config, sentinel",
    [
        (TrainConfig(epochs=3, batch_size=32, ema_decay=0.9), None),
        pytest.param(
            TrainConfig(mode="fgsm", epochs=3, batch_size=32, adv_eps=8 / 255),
            SentinelConfig(
                probe_size=32, steps=2, val_size=32, batch_size=32, select_by="val_pgd_accuracy"
            ),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["averaged_weights", "fgsm_with_sentinel"],
)
def test_a_run_resumed_after_an_epoch_equals_the_uninterrupted_run(tmp_path, config, sentinel):
    train, val = _data(96), _data(32, seed=1)
    whole = fit(config, train, val, show_progress=False, log=lambda _: None, sentinel=sentinel)
    path = tmp_path / "run.progress"
    with pytest.raises(_Stop):
        fit(config, train, val, show_progress=False, log=lambda _: None, sentinel=sentinel,
            on_epoch=_stop_after(1, path, "run"))  # fmt: skip
    progress = load_fit_progress(path, _template(config, 96), tag="run")
    assert progress.epoch == 1 and len(progress.history) == 1
    resumed = fit(config, train, val, show_progress=False, log=lambda _: None,
                  sentinel=sentinel, resume=progress)  # fmt: skip
    chex.assert_trees_all_equal(
        jax.device_get(resumed.state.params), jax.device_get(whole.state.params)
    )
    chex.assert_trees_all_equal(
        jax.device_get(resumed.state.batch_stats), jax.device_get(whole.state.batch_stats)
    )
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in resumed.history]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in whole.history]
    assert (resumed.best_epoch, resumed.best_val_accuracy) == (
        whole.best_epoch,
        whole.best_val_accuracy,
    )


def test_the_saved_progress_restores_every_part_of_the_loop_state(tmp_path):
    config = TrainConfig(epochs=2, batch_size=32, ema_decay=0.9)
    seen = []
    fit(config, _data(64), _data(32, seed=1), show_progress=False, log=lambda _: None,
        on_epoch=seen.append)  # fmt: skip
    last = seen[-1]
    save_fit_progress(tmp_path / "p", last, tag="t")
    loaded = load_fit_progress(tmp_path / "p", _template(config, 64), tag="t")
    assert loaded.epoch == 2 == last.epoch
    for part in ("params", "batch_stats", "opt_state"):
        chex.assert_trees_all_equal(
            jax.device_get(getattr(loaded.state, part)), jax.device_get(getattr(last.state, part))
        )
    assert int(loaded.state.step) == int(last.state.step) == 4
    chex.assert_trees_all_equal(jax.device_get(loaded.ema), jax.device_get(last.ema))
    assert loaded.history == last.history
    for got, want in ((loaded.kept, last.kept), (loaded.live_kept, last.live_kept)):
        chex.assert_trees_all_equal(jax.device_get(got.weights), jax.device_get(want.weights))
        assert (got.epoch, got.accuracy, got.score) == (want.epoch, want.accuracy, want.score)
        assert got.epoch in (1, 2)


def test_progress_of_another_run_or_model_is_refused(tmp_path):
    config = TrainConfig(epochs=1, batch_size=32)
    seen = []
    fit(config, _data(32), _data(32, seed=1), show_progress=False, log=lambda _: None,
        on_epoch=seen.append)  # fmt: skip
    path = save_fit_progress(tmp_path / "p", seen[0], tag="run-a")
    assert load_fit_progress(tmp_path / "absent", _template(config, 32), tag="run-a") is None
    with pytest.raises(ValueError, match="another run"):
        load_fit_progress(path, _template(config, 32), tag="run-b")
    wide = TrainConfig(epochs=1, batch_size=32, width=2)
    with pytest.raises(ValueError, match=r"params has leaf \[.+\] of shape \(.+\) where"):
        load_fit_progress(path, _template(wide, 32), tag="run-a")
    (tmp_path / "junk").write_bytes(b"\x00not msgpack")
    with pytest.raises(ValueError, match="unreadable"):
        load_fit_progress(tmp_path / "junk", _template(config, 32), tag="run-a")


def test_the_history_of_a_stopped_run_reads_without_its_model(tmp_path):
    config = TrainConfig(epochs=3, batch_size=32, ema_decay=0.9)
    seen = []
    path = tmp_path / "p"

    def keep(progress: FitProgress) -> None:
        seen.append(progress)
        _stop_after(2, path, "t")(progress)

    with pytest.raises(_Stop):
        fit(config, _data(64), _data(32, seed=1), show_progress=False, log=lambda _: None,
            on_epoch=keep)  # fmt: skip
    history = read_fit_history(path)
    assert [h["epoch"] for h in history] == [1, 2]
    assert history == seen[-1].history and "val_accuracy" in history[0]
    with pytest.raises(FileNotFoundError, match="absent"):
        read_fit_history(tmp_path / "absent")
    (tmp_path / "junk").write_bytes(b"\x00not msgpack")
    with pytest.raises(ValueError, match="unreadable"):
        read_fit_history(tmp_path / "junk")


@pytest.mark.slow
def test_resuming_averaged_progress_without_averaging_is_refused():
    config = TrainConfig(epochs=2, batch_size=32, ema_decay=0.9)
    seen = []
    fit(config, _data(32), _data(32, seed=1), show_progress=False, log=lambda _: None,
        on_epoch=seen.append)  # fmt: skip
    plain = TrainConfig(epochs=2, batch_size=32)
    with pytest.raises(ValueError, match="ema_decay"):
        fit(plain, _data(32), _data(32, seed=1), show_progress=False, log=lambda _: None,
            resume=seen[0])  # fmt: skip
