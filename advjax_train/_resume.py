"""Where a `fit` run stands after an epoch, and that state on disk, so training resumes.

Every random choice of an epoch derives from the run's key and the epoch's index, so a run
resumed from the state after epoch k continues exactly as the uninterrupted run would have
(bit for bit on the same machine).

File format (advjax-fit-progress-v1): one msgpack map with "format", "tag" (the caller's
identity of the run: a resume is refused when it differs), "epoch", "state" (the train
state's step, parameters, optimiser state and batch statistics), "ema", the kept epochs'
weights ("kept", "live_kept") and "meta" (history and selections as JSON), written atomically
after each epoch.
"""

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import jax
from flax import serialization

from advjax.records import atomic_write_bytes
from advjax_train._steps import TrainState, tree_shape_mismatch

FIT_PROGRESS_FORMAT = "advjax-fit-progress-v1"


class Selection(NamedTuple):
    """The epoch a selection criterion keeps so far: its weights `(params, batch_stats)`,
    1-based epoch, clean validation accuracy and score (None, -1, -1, -1 before any)."""

    weights: Any = None
    epoch: int = -1
    accuracy: float = -1.0
    score: float = -1.0


class FitProgress(NamedTuple):
    """The loop's state after `epoch` finished epochs: enough to run the rest of them.

    `kept` is the epoch selected so far; with weight averaging `ema` holds the averaged
    weights and `live_kept` the live weights' own selection (else both are None).
    """

    epoch: int
    state: TrainState
    ema: Any
    history: list[dict]
    kept: Selection
    live_kept: Selection | None


def save_fit_progress(path: str | os.PathLike, progress: FitProgress, *, tag: str) -> Path:
    """Write `progress` to `path` atomically (a kill leaves the previous epoch's file)."""
    host = jax.device_get(progress)
    payload = {
        "format": FIT_PROGRESS_FORMAT,
        "tag": tag,
        "epoch": int(host.epoch),
        "state": serialization.to_state_dict(host.state),
        "ema": {} if host.ema is None else serialization.to_state_dict(host.ema),
        "kept": _weights(host.kept),
        "live_kept": {} if host.live_kept is None else _weights(host.live_kept),
        "meta": json.dumps(
            {
                "history": host.history,
                "kept": _selection_meta(host.kept),
                "live_kept": None if host.live_kept is None else _selection_meta(host.live_kept),
                "has_ema": host.ema is not None,
            }
        ),
    }
    return atomic_write_bytes(path, serialization.msgpack_serialize(payload))


def _weights(kept: Selection) -> dict:
    if kept.weights is None:
        return {}
    return {"params": kept.weights[0], "batch_stats": kept.weights[1]}


def _selection_meta(kept: Selection) -> dict:
    return {
        "has_weights": kept.weights is not None,
        "epoch": kept.epoch,
        "accuracy": kept.accuracy,
        "score": kept.score,
    }


def _restore_selection(template: TrainState, weights: dict, meta: dict) -> Selection:
    restored = None
    if meta["has_weights"]:
        restored = (
            serialization.from_state_dict(template.params, weights["params"]),
            serialization.from_state_dict(template.batch_stats, weights["batch_stats"]),
        )
    return Selection(restored, int(meta["epoch"]), float(meta["accuracy"]), float(meta["score"]))


def read_fit_history(path: str | os.PathLike) -> list[dict]:
    """The per-epoch history (one dict per finished epoch, as `fit` logs it) stored in the
    fit-progress file at `path`, read without restoring the model: how far an unfinished
    or stopped training got, and its validation curve so far.

    Raises FileNotFoundError when there is no file and ValueError when it is not a
    fit-progress file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training progress {path}: no such file")
    _, meta = _read(path)
    return meta["history"]


def _read(path: Path) -> tuple[dict, dict]:
    """The raw msgpack map of a fit-progress file and its decoded "meta"."""
    try:
        raw = serialization.msgpack_restore(path.read_bytes())
        if not isinstance(raw, dict) or raw.get("format") != FIT_PROGRESS_FORMAT:
            raise ValueError("not an advjax fit-progress file")
        meta = json.loads(raw["meta"])
        if not isinstance(meta.get("history"), list) or "tag" not in raw:
            raise ValueError("no history or tag")
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"training progress {path} is unreadable: {error}") from error
    return raw, meta


def load_fit_progress(
    path: str | os.PathLike, template: TrainState, *, tag: str
) -> FitProgress | None:
    """The progress stored at `path` for the run `tag`, restored into `template`'s structure
    (a freshly created train state of the same config); None when there is no file.

    Raises ValueError when the file is not a fit-progress file, belongs to another run
    (`tag` differs) or does not match `template`'s structure.
    """
    path = Path(path)
    if not path.is_file():
        return None
    raw, meta = _read(path)
    if raw["tag"] != tag:
        raise ValueError(
            f"training progress {path} belongs to another run (tag {raw['tag']!r}, this run "
            f"{tag!r}); delete it to start this run over"
        )
    try:
        state = serialization.from_state_dict(template, raw["state"])
        ema = (
            serialization.from_state_dict(template.params, raw["ema"]) if meta["has_ema"] else None
        )
        kept = _restore_selection(template, raw["kept"], meta["kept"])
        live_kept = None
        if meta["live_kept"] is not None:
            live_kept = _restore_selection(template, raw["live_kept"], meta["live_kept"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"training progress {path} does not match the model: {error}") from error
    _check_shapes(path, template, state)
    return FitProgress(
        epoch=int(raw["epoch"]),
        state=state,
        ema=ema,
        history=meta["history"],
        kept=kept,
        live_kept=live_kept,
    )


def _check_shapes(path: Path, template: TrainState, state: TrainState) -> None:
    for part in ("params", "batch_stats", "opt_state"):
        problem = tree_shape_mismatch(getattr(template, part), getattr(state, part))
        if problem is not None:
            raise ValueError(f"training progress {path}: {part} has {problem}")
