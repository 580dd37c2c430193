"""Where a `fit` run stands after an epoch, and that state on disk, so training resumes.

Every random choice of an epoch derives from the run's key and the epoch's index, so a run
resumed from the state after epoch k continues exactly as the uninterrupted run would have
(bit for bit on the same machine).

File format (advjax-fit-progress-v1): one msgpack map with "format", "tag" (the caller's
identity of the run: a resume is refused when it differs), "epoch", "state" (the train
state's step, parameters, optimiser state and batch statistics), "ema", "best" and "meta"
(history and selection as JSON), written atomically after each epoch.
"""

import json
import os
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from flax import serialization

from advjax.io._atomic import atomic_write_bytes
from advjax.train._steps import TrainState

FIT_PROGRESS_FORMAT = "advjax-fit-progress-v1"


class FitProgress(NamedTuple):
    """The loop's state after `epoch` finished epochs: enough to run the rest of them.

    `best` is the kept epoch's `(params, batch_stats)` (None before any is kept) and
    `best_score` its value of the selection criterion.
    """

    epoch: int
    state: TrainState
    ema: Any
    history: list[dict]
    best: Any
    best_epoch: int
    best_accuracy: float
    best_score: float


def save_fit_progress(path: str | os.PathLike, progress: FitProgress, *, tag: str) -> Path:
    """Write `progress` to `path` atomically (a kill leaves the previous epoch's file)."""
    host = jax.device_get(progress)
    payload = {
        "format": FIT_PROGRESS_FORMAT,
        "tag": tag,
        "epoch": int(host.epoch),
        "state": serialization.to_state_dict(host.state),
        "ema": {} if host.ema is None else serialization.to_state_dict(host.ema),
        "best": {} if host.best is None else {"params": host.best[0], "batch_stats": host.best[1]},
        "meta": json.dumps(
            {
                "history": host.history,
                "best_epoch": host.best_epoch,
                "best_accuracy": host.best_accuracy,
                "best_score": host.best_score,
                "has_ema": host.ema is not None,
                "has_best": host.best is not None,
            }
        ),
    }
    return atomic_write_bytes(path, serialization.msgpack_serialize(payload))


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
    try:
        raw = serialization.msgpack_restore(path.read_bytes())
        if not isinstance(raw, dict) or raw.get("format") != FIT_PROGRESS_FORMAT:
            raise ValueError("not an advjax fit-progress file")
        meta = json.loads(raw["meta"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"training progress {path} is unreadable: {error}") from error
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
        best = None
        if meta["has_best"]:
            best = (
                serialization.from_state_dict(template.params, raw["best"]["params"]),
                serialization.from_state_dict(template.batch_stats, raw["best"]["batch_stats"]),
            )
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"training progress {path} does not match the model: {error}") from error
    _check_shapes(path, template, state)
    return FitProgress(
        epoch=int(raw["epoch"]),
        state=state,
        ema=ema,
        history=meta["history"],
        best=best,
        best_epoch=int(meta["best_epoch"]),
        best_accuracy=float(meta["best_accuracy"]),
        best_score=float(meta["best_score"]),
    )


def _check_shapes(path: Path, template: TrainState, state: TrainState) -> None:
    for part in ("params", "batch_stats", "opt_state"):
        for want, got in zip(
            jax.tree.leaves(getattr(template, part)), jax.tree.leaves(getattr(state, part))
        ):
            if np.shape(want) != np.shape(got):
                raise ValueError(
                    f"training progress {path}: {part} leaf of shape {np.shape(got)}, the model "
                    f"has {np.shape(want)}"
                )
