"""Running attacks case by case into an append-only record log.

An evaluation campaign is a declared `ThreatModel`, one or more models and a list of
`AttackSpec`s. `run_attack` attacks every case at every eps of a spec and appends one
`CaseRecord` per case to a `RecordLog` as soon as the case is final, so that a killed
run resumes where it stopped and every aggregate is computed from the records alone.

Randomness: case `i` of a group (model, attack, eps) uses the key named by the path
`root_path + [model, attack, eps, i]` (`advjax.keys`); restart `r` of that case uses
`fold_in(case key, r)`. Restarts run one after another over the cases still unbroken
(a broken case is final: the earliest breaking restart decides it), in batches padded
to a fixed `batch_size`. Per-example results do not depend on which other cases share
the batch, so `replay_record` re-runs any one record alone and gets the same record.
"""

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from advjax.attacks import check_eps, fgsm, per_example_cross_entropy, pgd_search
from advjax.keys import case_keys, key_from_path
from advjax.progress import Progress
from advjax.records import CaseRecord, RecordLog
from advjax.scoring import records_from_arrays
from advjax.threat_model import ThreatModel, format_eps, require_threat_model
from advjax.types import LogitsFn

METHODS = ("fgsm", "pgd")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AttackSpec:
    """One attack of a campaign, as the records name it.

    Attributes:
      name: the records' attack name, e.g. "pgd" or "pgd_budget".
      method: "fgsm" or "pgd".
      eps: the budgets to run, each one of the threat model's.
      steps: PGD steps per restart (FGSM: 1).
      restarts: PGD random restarts, run one after another over the unbroken cases.
      step_fraction: PGD step size as a fraction of eps.
      batch_size: cases per compiled batch (part of the config: replay uses it).
      source: None for a white-box attack on the evaluated model; else the name of the
        surrogate model whose gradients craft the inputs (a transfer attack).
    """

    name: str
    method: str
    eps: tuple[float, ...]
    steps: int = 1
    restarts: int = 1
    step_fraction: float = 0.25
    batch_size: int = 250
    source: str | None = None

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"name={self.name!r} must be a non-empty string")
        if self.method not in METHODS:
            raise ValueError(f"unknown attack method {self.method!r}; choose from {METHODS}")
        object.__setattr__(self, "eps", tuple(float(e) for e in self.eps))
        if not self.eps:
            raise ValueError(f"attack {self.name!r} needs at least one eps")
        for e in self.eps:
            check_eps(e)
        for field in ("steps", "restarts", "batch_size"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field}={value!r} must be an integer >= 1")
        if self.method == "fgsm" and (self.steps, self.restarts) != (1, 1):
            raise ValueError("fgsm takes one step and no restarts: steps=1, restarts=1")
        if not 0 < self.step_fraction <= 1:
            raise ValueError(f"step_fraction={self.step_fraction!r} must be in (0, 1]")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["eps"] = list(self.eps)
        return d

    def config_hash(self, source_hash: str | None = None) -> str:
        """Hash of everything that decides the attack's output (with the surrogate's hash)."""
        d = self.to_dict() | {"source_hash": source_hash}
        blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def max_queries(self) -> int:
        """Gradient queries per case per eps in the worst case (no early stop)."""
        return self.steps * self.restarts


def check_within_threat_model(spec: AttackSpec, threat_model: ThreatModel) -> None:
    """Refuse an attack whose eps, steps, restarts or queries exceed the declared budget."""
    problems = [f"eps {format_eps(e)} not declared" for e in spec.eps if e not in threat_model.eps]
    if spec.steps > max(threat_model.steps, 1):
        problems.append(f"steps {spec.steps} > declared {threat_model.steps}")
    if spec.restarts > threat_model.restarts:
        problems.append(f"restarts {spec.restarts} > declared {threat_model.restarts}")
    if threat_model.queries is not None and spec.max_queries() > threat_model.queries:
        problems.append(f"queries {spec.max_queries()} > declared {threat_model.queries}")
    if threat_model.knowledge != "white-box":
        problems.append(
            f"a gradient attack needs white-box knowledge, declared {threat_model.knowledge!r}"
        )
    if problems:
        raise ValueError(
            f"attack {spec.name!r} is outside threat model {threat_model.digest()}: "
            + "; ".join(problems)
        )


def model_hash(path) -> str:
    """First 16 hex digits of the SHA-256 of a checkpoint file."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:16]


def make_batch_fn(logits_fn: LogitsFn, spec: AttackSpec, source_fn: LogitsFn | None = None):
    """Jitted `(x, y, eps, keys, restart) -> (clean_pred, x_adv, adv_pred, loss, broken_step)`.

    One restart of `spec` on one batch; `keys` holds one key per example and `restart`
    is the restart's index (static). Inputs are crafted on `source_fn` when given (a
    transfer attack, no break tracking: broken_step is -1), else on `logits_fn`.
    """
    craft_fn = logits_fn if source_fn is None else source_fn

    def run(x, y, eps, keys, restart):
        clean_pred = jnp.argmax(logits_fn(x), axis=-1)
        if spec.method == "fgsm":
            x_adv = fgsm(craft_fn, x, y, eps)
            broken = None
        else:
            result = pgd_search(
                craft_fn,
                x,
                y,
                eps,
                key=keys,
                steps=spec.steps,
                step_size=spec.step_fraction * eps,
                restarts=1,
                first_restart=restart,
            )
            x_adv, broken = result.x_adv, result.broken_step[0]
        logits = logits_fn(x_adv)
        adv_pred = jnp.argmax(logits, axis=-1)
        if source_fn is not None:
            broken = jnp.full(y.shape, -1, jnp.int32)  # the search ran on another model
        elif broken is None:
            broken = jnp.where(adv_pred != y, 1, -1).astype(jnp.int32)  # FGSM's one step
        return clean_pred, x_adv, adv_pred, per_example_cross_entropy(logits, y), broken

    return jax.jit(run, static_argnums=4)


def _padded(index: np.ndarray, size: int) -> np.ndarray:
    """`index` repeated at its first entry up to `size` entries (fixed compiled shape)."""
    return np.concatenate([index, np.full(size - len(index), index[0], index.dtype)])


@dataclasses.dataclass
class _Pending:
    """Host-side state of the cases still being attacked at one eps."""

    clean_pred: np.ndarray
    adv_pred: np.ndarray
    loss: np.ndarray
    x_adv: np.ndarray
    by_restart: np.ndarray  # (restarts, n): break step, -1 never, -2 not run


def attack_cases(
    batch_fn,
    spec: AttackSpec,
    x: np.ndarray,
    y: np.ndarray,
    eps: float,
    keys: jax.Array,
    *,
    on_final: Callable[[np.ndarray, _Pending], None],
    progress: Progress | None = None,
) -> None:
    """Attack every case of (x, y) at eps; call `on_final(positions, state)` for final cases.

    A case is final when a restart breaks it (its earliest breaking restart decides) or
    after the last restart (the highest-loss input over its restarts is kept).
    """
    n = len(y)
    state = _Pending(
        clean_pred=np.full(n, -1, np.int64),
        adv_pred=np.full(n, -1, np.int64),
        loss=np.full(n, -np.inf, np.float64),
        x_adv=np.array(x, np.float32, copy=True),
        by_restart=np.full((spec.restarts, n), -2, np.int32),
    )
    remaining = np.arange(n)
    eps_value = jnp.float32(eps)
    for restart in range(spec.restarts):
        survivors = []
        for start in range(0, len(remaining), spec.batch_size):
            part = remaining[start : start + spec.batch_size]
            index = _padded(part, spec.batch_size)
            clean, x_adv, adv, loss, broken = (
                np.asarray(a)
                for a in batch_fn(
                    jnp.asarray(x[index]), jnp.asarray(y[index]), eps_value, keys[index], restart
                )
            )
            m = len(part)
            clean, x_adv, adv, loss, broken = clean[:m], x_adv[:m], adv[:m], loss[:m], broken[:m]
            state.clean_pred[part] = clean
            state.by_restart[restart, part] = broken
            better = (broken >= 0) | (loss > state.loss[part])
            take = part[better]
            state.adv_pred[take], state.loss[take] = adv[better], loss[better]
            state.x_adv[take] = x_adv[better]
            last = restart == spec.restarts - 1
            done = part[(broken >= 0) | last]
            if len(done):
                on_final(done, state)
            survivors.append(part[(broken < 0) & (not last)])
            if progress is not None and restart == 0:
                progress.update(m)
        remaining = np.concatenate(survivors) if survivors else remaining[:0]
        if not len(remaining):
            break


def run_attack(
    log: RecordLog,
    *,
    threat_model: ThreatModel,
    spec: AttackSpec,
    model: str,
    model_hash: str,
    logits_fn: LogitsFn,
    x: np.ndarray,
    y: np.ndarray,
    case_ids: Sequence[int],
    root_path: Sequence[int | str],
    source_fn: LogitsFn | None = None,
    source_hash: str | None = None,
    show_progress: bool = True,
    log_line: Callable[[str], None] = print,
) -> int:
    """Attack the cases not yet in `log` at every eps of `spec`; return records appended.

    Args:
      log: the run's record log (cases already in it are skipped: resume).
      threat_model: declared before the run; the spec must fit inside it.
      spec, model, model_hash, logits_fn: the attack and the evaluated model.
      x, y, case_ids: the evaluation cases (pixels in [0, 1], labels, stable ids).
      root_path: key path of the run, e.g. [seed, "attack"]; case keys extend it.
      source_fn, source_hash: the surrogate of a transfer attack (spec.source set).

    Raises:
      ValueError: no threat model, a spec outside it, a transfer spec without surrogate,
        or records of this (model, attack) in `log` made with other hashes.
    """
    threat_model = require_threat_model(threat_model)
    check_within_threat_model(spec, threat_model)
    if (spec.source is None) != (source_fn is None):
        raise ValueError(f"attack {spec.name!r}: pass source_fn exactly when spec.source is set")
    x, y, ids = np.asarray(x, np.float32), np.asarray(y), np.asarray(case_ids)
    if x.ndim != 4 or len(x) != len(y) or len(y) != len(ids) or len(np.unique(ids)) != len(ids):
        raise ValueError(
            f"need x (n, h, w, c), y (n,), unique case_ids (n,): {x.shape=} {y.shape=} {ids.shape=}"
        )
    attack_hash = spec.config_hash(source_hash)
    stale = log.hashes(model, spec.name) - {(model_hash, attack_hash, threat_model.digest())}
    if stale:
        raise ValueError(
            f"{log.path} holds {model}/{spec.name} records made with other (model, attack, "
            f"threat model) hashes {sorted(stale)}: write to a new record file (or --force)"
        )
    batch_fn = make_batch_fn(logits_fn, spec, source_fn)
    written = 0
    for eps in spec.eps:
        todo = np.array(
            [i for i, c in enumerate(ids) if (model, spec.name, eps, int(c)) not in log], int
        )
        if not len(todo):
            continue
        started = time.perf_counter()
        written += attack_group(
            log,
            batch_fn,
            threat_model=threat_model,
            spec=spec,
            attack_hash=attack_hash,
            model=model,
            model_hash=model_hash,
            x=x[todo],
            y=y[todo],
            case_ids=ids[todo],
            eps=eps,
            group_path=[*root_path, model, spec.name, format_eps(eps)],
            show_progress=show_progress,
        )
        log_line(
            f"[attack] {model} {spec.name} eps {format_eps(eps)}: {len(todo):,} cases in "
            f"{time.perf_counter() - started:.1f} s"
        )
    return written


def attack_group(
    log,
    batch_fn,
    *,
    threat_model: ThreatModel,
    spec: AttackSpec,
    attack_hash: str,
    model: str,
    model_hash: str,
    x: np.ndarray,
    y: np.ndarray,
    case_ids: np.ndarray,
    eps: float,
    group_path: Sequence[int | str],
    show_progress: bool = False,
    on_x_adv: Callable[[dict], None] | None = None,
) -> int:
    """Attack the given cases at one eps, appending each record once final; return how many.

    `on_x_adv`, if given, receives {case_id: adversarial input} of every final case.
    """
    keys = case_keys(key_from_path(group_path), case_ids)
    bar = Progress(len(y), f"[attack] {model} {spec.name} eps {format_eps(eps)}", show_progress)
    written = 0

    def on_final(done: np.ndarray, state: _Pending) -> None:
        nonlocal written
        if on_x_adv is not None:
            on_x_adv({int(case_ids[i]): state.x_adv[i].copy() for i in done})
        run = state.by_restart[:, done]
        written += log.append(
            records_from_arrays(
                threat_model=threat_model,
                eps=eps,
                model=model,
                model_hash=model_hash,
                attack=spec.name,
                attack_config_hash=attack_hash,
                case_ids=case_ids[done],
                labels=y[done],
                clean_pred=state.clean_pred[done],
                adv_pred=state.adv_pred[done],
                loss=state.loss[done],
                x=x[done],
                x_adv=state.x_adv[done],
                queries=spec.steps * (run != -2).sum(axis=0),
                broken_step=None if spec.source else np.where(run == -2, -1, run),
                key_path_prefix=group_path,
            )
        )

    attack_cases(batch_fn, spec, x, y, eps, keys, on_final=on_final, progress=bar)
    bar.close()
    return written


def replay_record(
    record: CaseRecord,
    *,
    threat_model: ThreatModel,
    spec: AttackSpec,
    logits_fn: LogitsFn,
    x: np.ndarray,
    y: int,
    source_fn: LogitsFn | None = None,
    source_hash: str | None = None,
) -> CaseRecord:
    """Re-run one record's case alone from its key path and configs; return the new record.

    Equal to `record` (compare `to_dict()`) when the model, attack and threat model are
    the ones that wrote it.

    Raises:
      ValueError: the record's attack config or threat-model hash differ from the ones given.
    """
    attack_hash = spec.config_hash(source_hash)
    if (record.attack_config_hash, record.threat_model_hash) != (
        attack_hash,
        threat_model.digest(),
    ):
        raise ValueError(
            f"record was made with attack config {record.attack_config_hash} and threat model "
            f"{record.threat_model_hash}; given {attack_hash} and {threat_model.digest()}"
        )
    if record.eps not in spec.eps:
        raise ValueError(f"record eps {record.eps} is not one of the spec's {spec.eps}")
    out: list[CaseRecord] = []
    attack_group(
        _ListLog(out),
        make_batch_fn(logits_fn, spec, source_fn),
        threat_model=threat_model,
        spec=spec,
        attack_hash=attack_hash,
        model=record.model,
        model_hash=record.model_hash,
        x=np.asarray(x, np.float32)[None],
        y=np.asarray([y]),
        case_ids=np.asarray([record.case_id]),
        eps=record.eps,
        group_path=record.key_path[:-1],
    )
    (new,) = out
    return new


class _ListLog:
    """A `RecordLog` stand-in that keeps records in a list (for replay)."""

    def __init__(self, out: list):
        self.out, self.path = out, "<replay>"

    def append(self, records) -> int:
        records = list(records)
        self.out.extend(records)
        return len(records)
