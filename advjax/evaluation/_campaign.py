"""Running attacks case by case into an append-only record log.

An evaluation campaign is a declared `ThreatModel`, one or more models and a list of
`AttackSpec`s. `run_attack` attacks every case at every eps of a spec and appends one
`CaseRecord` per case to a `RecordLog` as soon as the case is final, so that a killed
run resumes where it stopped and every aggregate is computed from the records alone.

Randomness: case `i` of a group (model, attack, eps) uses the key named by the path
`[root, stream, model, attack, eps, i]` (`advjax.evaluation.engine.key_from_path`; the root
is the run's key as one integer, the seed of `jax.random.key(seed)`); restart `r` of that case uses
`fold_in(case key, r)`. Restarts run one after another over the cases still unbroken
(a broken case is final: the earliest breaking restart decides it), in batches padded
to a fixed `batch_size`, and within a restart broken cases stop between chunks of steps
(`advjax.evaluation`). Per-example results do not depend on which other cases share
the batch, so `replay_record` re-runs any one record alone and gets the same record.
"""

import time
from collections.abc import Callable, Mapping, Sequence

import jax
import numpy as np

from advjax.data import EvalCases
from advjax.evaluation._attack_spec import METHODS, AttackSpec, check_within_threat_model
from advjax.evaluation._early_stop import CampaignOutcome, Program, attack_cases, make_program
from advjax.evaluation._keys import case_keys, key_from_path, key_root
from advjax.evaluation._model import Model
from advjax.evaluation._scoring import records_from_arrays
from advjax.evaluation._threat_model import ThreatModel, format_eps, require_threat_model
from advjax.io import Progress, model_hash
from advjax.records import CaseRecord, RecordLog
from advjax.types import LogitsFn

__all__ = [
    "METHODS",
    "AttackSpec",
    "check_within_threat_model",
    "make_program",
    "model_hash",
    "run_attack",
    "attack_group",
    "replay_record",
    "ListLog",
]


def run_attack(
    log: RecordLog,
    model: Model,
    cases: EvalCases,
    spec: AttackSpec,
    *,
    threat_model: ThreatModel,
    key: jax.Array,
    stream: str = "attack",
    source: Model | None = None,
    show_progress: bool = True,
    log_line: Callable[[str], None] = print,
) -> int:
    """Attack the cases not yet in `log` at every eps of `spec`; return records appended.

    Args:
      log: the run's record log (cases already in it are skipped: resume).
      threat_model: declared before the run; the spec must fit inside it.
      model: the evaluated model (`Model`: name, logits function, hash).
      cases: the evaluation cases (`advjax.data.EvalCases`: pixels in [0, 1], labels and
        stable ids, 0 .. n-1 where none are given).
      spec: the attack.
      key: the run's key (`jax.random.key(seed)`); the first element of every case's key
        path (stored in its record) is the key as one integer (`key_root`: the seed), as
        in `run_autoattack`.
      stream: the second element, which keeps this run's keys apart from another run's
        under the same key (the study's attacks use "attack", its attack variants
        "attack_variants").
      source: the surrogate of a transfer attack (exactly when spec.source is set).

    Raises:
      ValueError: no threat model, a spec outside it, a transfer spec without surrogate,
        or records of `model` in `log` made with other hashes (`check_record_hashes`);
        nothing is appended then.
    """
    threat_model = require_threat_model(threat_model)
    check_within_threat_model(spec, threat_model)
    root = key_root(key)
    if (spec.source is None) != (source is None):
        raise ValueError(f"attack {spec.name!r}: pass source exactly when spec.source is set")
    model, logits_fn, model_hash = model
    source_fn, source_hash = (None, None) if source is None else source[1:]
    x, y = np.asarray(cases.x, np.float32), np.asarray(cases.y)
    ids = np.arange(len(y)) if cases.case_ids is None else np.asarray(cases.case_ids)
    if x.ndim != 4 or len(x) != len(y) or len(y) != len(ids) or len(np.unique(ids)) != len(ids):
        raise ValueError(
            f"need x (n, h, w, c), y (n,), unique case_ids (n,): {x.shape=} {y.shape=} {ids.shape=}"
        )
    attack_hash = spec.config_hash(source_hash)
    check_record_hashes(
        log,
        model=model,
        model_hash=model_hash,
        attack_hashes={spec.name: attack_hash},
        threat_model_hash=threat_model.digest(),
    )
    program = make_program(logits_fn, spec, source_fn)
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
            program,
            threat_model=threat_model,
            spec=spec,
            attack_hash=attack_hash,
            model=model,
            model_hash=model_hash,
            x=x[todo],
            y=y[todo],
            case_ids=ids[todo],
            eps=eps,
            group_path=[root, stream, model, spec.name, format_eps(eps)],
            show_progress=show_progress,
        )
        log_line(
            f"[attack] {model} {spec.name} eps {format_eps(eps)}: {len(todo):,} cases in "
            f"{time.perf_counter() - started:.1f} s"
        )
    return written


def check_record_hashes(
    log: RecordLog,
    *,
    model: str,
    model_hash: str,
    attack_hashes: Mapping[str, str],
    threat_model_hash: str,
) -> None:
    """Refuse to mix records of another model version, attack config or threat model.

    A log's records of one model must all carry one model hash (whatever the attack: a
    changed checkpoint is another model), and its records of one (model, attack) one
    attack-config hash and one threat-model hash. Call before appending anything.

    Args:
      log: the record log about to receive records of `model`.
      model, model_hash: the evaluated model's name and checkpoint hash.
      attack_hashes: {attack name: attack config hash} of the attacks about to run.
      threat_model_hash: the run's `ThreatModel.digest()`.

    Raises:
      ValueError: naming the file, the hash that differs, the given value and the
        records' value(s).
    """
    attacks = {key[1] for key in log.keys if key[0] == model}
    checks = [
        ("model_hash", None, model_hash, {h[0] for a in attacks for h in log.hashes(model, a)})
    ]
    for attack, attack_hash in attack_hashes.items():
        found = log.hashes(model, attack)
        checks.append(("attack_config_hash", attack, attack_hash, {h[1] for h in found}))
        checks.append(("threat_model_hash", attack, threat_model_hash, {h[2] for h in found}))
    for field, attack, given, found in checks:
        other = sorted(found - {given})
        if other:
            whose = f"{model!r}" if attack is None else f"{model!r} under {attack!r}"
            raise ValueError(
                f"{log.path} holds records of {whose} with {field} {', '.join(other)}; the given "
                f"{field} is {given}: refusing to mix them (write to a new record file)"
            )


def attack_group(
    log,
    program: Program,
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

    def on_final(done: np.ndarray, state: CampaignOutcome) -> None:
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
                queries=np.where(run == -2, 0, np.where(run >= 0, run, spec.steps_per_restart)).sum(
                    axis=0
                ),
                budget_capped=state.capped[done],
                broken_step=None if spec.source else np.where(run == -2, -1, run),
                key_path_prefix=group_path,
            )
        )

    attack_cases(program, spec, x, y, eps, keys, on_final=on_final, progress=bar)
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
    on_x_adv: Callable[[dict], None] | None = None,
) -> CaseRecord:
    """Re-run one record's case alone from its key path and configs; return the new record.

    Equal to `record` (compare `to_dict()`) when the model, attack and threat model are
    the ones that wrote it. `on_x_adv`, if given, receives `{case_id: returned input}`.

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
        ListLog(out),
        make_program(logits_fn, spec, source_fn),
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
        on_x_adv=on_x_adv,
    )
    (new,) = out
    return new


class ListLog:
    """A `RecordLog` stand-in for `attack_group` that keeps the records in a list (replay)."""

    def __init__(self, out: list):
        self.out, self.path = out, "<replay>"

    def append(self, records) -> int:
        records = list(records)
        self.out.extend(records)
        return len(records)
