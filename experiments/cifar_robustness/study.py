"""The CIFAR-10 robustness study's phases: train, attack into records, aggregate; resumable."""

import dataclasses
import shutil
import time
from pathlib import Path

import jax
import numpy as np

from advjax.data import Cifar10, fingerprint, load_cifar10, stratified_indices, study_splits
from advjax.io import environment, git_state, read_checkpoint, save_checkpoint
from advjax.records import RecordLog, atomic_write_json, atomic_write_npz, record_file
from advjax_train import (
    Batch,
    SentinelConfig,
    TrainConfig,
    create_train_state,
    fit,
    load_fit_progress,
    load_logits_fn,
    make_model,
    save_fit_progress,
    to_float,
)
from experiments.cifar_robustness.config import REFERENCE_RESULTS, StudyConfig
from experiments.cifar_robustness.evaluation import (
    RECORDS_FILE,
    SUMMARY_FILE,
    attack_specs,
    evaluate_model,
    model_results,
    release_decision,
    study_threat_model,
    summarise_run,
)
from experiments.cifar_robustness.model_specs import ModelSpec
from experiments.cli import results_folder

_SUBSET_STREAM = 100
DEFAULT_POLICY = Path(__file__).parent / "release_policy.json"


def train_config(config: StudyConfig, spec: ModelSpec) -> TrainConfig:
    return TrainConfig(
        mode=spec.mode,
        epochs=spec.epochs,
        batch_size=config.batch_size if spec.batch_size is None else spec.batch_size,
        learning_rate=config.learning_rate if spec.learning_rate is None else spec.learning_rate,
        weight_decay=config.weight_decay if spec.weight_decay is None else spec.weight_decay,
        dropout_rate=config.dropout_rate if spec.dropout_rate is None else spec.dropout_rate,
        adv_eps=config.train_eps,
        seed=config.seed if spec.seed is None else spec.seed,
        augment_pad=4 if spec.augment_pad is None else spec.augment_pad,
        adv_steps=spec.adv_steps,
        activation="relu" if spec.activation is None else spec.activation,
        width=1 if spec.width is None else spec.width,
        ema_decay=spec.ema_decay,
    )


def model_train_indices(config: StudyConfig, spec: ModelSpec, data: Cifar10, splits) -> np.ndarray:
    """The model's training images: the study's subset or, for a `full_split` model, every
    training image outside validation; or a stratified part of either."""
    if spec.full_split:
        pool = np.setdiff1d(np.arange(len(data.train_labels)), splits.val)
    else:
        pool = splits.train
    if spec.train_size == len(pool):
        return pool
    key = jax.random.fold_in(jax.random.key(config.seed), _SUBSET_STREAM)
    part = stratified_indices(data.train_labels[pool], spec.train_size, key)
    return pool[part]


def train_phase(config, spec, data, splits, out: Path, show_progress: bool, log) -> Path:
    """Train one model unless a checkpoint of this exact config exists; return its path.

    A fine-tuned model (`spec.init_from`) starts from its parent's checkpoint, trained
    (or reused) first under the same rule. After every epoch the loop's state is written
    to `progress_path` (outside `checkpoints/`, which holds only checkpoints), so an
    interrupted run resumes after its last finished epoch; the file goes once the checkpoint
    is written. A model whose averaged twin is in the run (`averaged_twin`) comes from the
    twin's training: its live weights.
    """
    path = out / "checkpoints" / f"{spec.name}.msgpack"
    digest = config.model_digest(spec)
    if _reusable(path, digest):
        log(f"[train] {spec.name}: reusing {path}")
        return path
    twin = averaged_twin(spec, config.models)
    if twin is not None:
        log(f"[train] {spec.name}: the live weights of {twin.name}'s training")
        train_phase(config, twin, data, splits, out, show_progress, log)
        if _reusable(path, digest):
            return path
    idx = model_train_indices(config, spec, data, splits)
    train = Batch(data.train_images[idx], data.train_labels[idx])
    val = Batch(data.train_images[splits.val], data.train_labels[splits.val])
    log(f"[train] {spec.name}: {spec.mode} on {len(idx):,} images, {spec.epochs} epochs")
    started = time.perf_counter()
    tc = train_config(config, spec)
    sentinel = SentinelConfig(select_by="val_pgd_accuracy") if spec.robust_selection else None
    init = None
    if spec.init_from is not None:
        parent = train_phase(config, spec.init_from, data, splits, out, show_progress, log)
        init = read_checkpoint(parent)["variables"]
        log(f"[train] {spec.name}: starting from {parent}")
    progress_file = progress_path(out, spec.name)
    resume, earlier_seconds = None, 0.0
    if progress_file.is_file():
        steps = max(1, tc.epochs * (len(idx) // tc.batch_size))
        template = create_train_state(jax.random.key(tc.seed), tc, steps)
        resume = load_fit_progress(progress_file, template, tag=digest)
        earlier_seconds = sum(r["seconds"] for r in resume.history)
        log(
            f"[train] {spec.name}: resuming after epoch {resume.epoch}/{tc.epochs} ({progress_file})"
        )
    result = fit(
        tc,
        train,
        val,
        show_progress=show_progress,
        log=log,
        name=spec.name,
        sentinel=sentinel,
        init=init,
        resume=resume,
        on_epoch=lambda progress: save_fit_progress(progress_file, progress, tag=digest),
    )
    common = {
        "sentinel": dataclasses.asdict(sentinel) if sentinel else None,
        "train_size": len(idx),
        "train_fingerprint": fingerprint(train.images, train.labels),
        "seconds": time.perf_counter() - started + earlier_seconds,
        "resumed_after_epoch": None if resume is None else resume.epoch,
        "git_revision": git_state(Path(__file__).parent)["commit"],
        "device": jax.devices()[0].device_kind,
    }
    _save_model(path, config, spec, result, common)
    for live in live_twins(spec, config.models):
        live_path = out / "checkpoints" / f"{live.name}.msgpack"
        _save_model(live_path, config, live, result.live, {**common, "trained_by": spec.name})
        log(f"[train] {live.name}: written from {spec.name}'s live weights ({live_path})")
    progress_file.unlink(missing_ok=True)
    return path


def _reusable(path: Path, digest: str) -> bool:
    return path.exists() and read_checkpoint(path)["metadata"].get("config_digest") == digest


def _save_model(path: Path, config, spec, result, common: dict) -> None:
    tc = train_config(config, spec)
    variables = {"params": result.state.params, "batch_stats": result.state.batch_stats}
    metadata = {
        "config_digest": config.model_digest(spec),
        "spec": dataclasses.asdict(spec),
        "train_config": dataclasses.asdict(tc),
        "history": result.history,
        "best_epoch": result.best_epoch,
        "best_val_accuracy": result.best_val_accuracy,
        **common,
    }
    save_checkpoint(path, make_model(tc), variables, metadata)


def averaged_twin(spec: ModelSpec, models) -> ModelSpec | None:
    """The model of `models` trained exactly like `spec` but with weight averaging, whose run
    also yields `spec` (its live weights, `FitResult.live`); None when there is none."""
    if spec.ema_decay is not None:
        return None
    for other in models:
        if other.ema_decay is not None and _without_averaging(other, spec) == spec:
            return other
    return None


def live_twins(spec: ModelSpec, models) -> list[ModelSpec]:
    """The models of `models` that `spec`'s averaged run also trains: `spec` without averaging."""
    if spec.ema_decay is None:
        return []
    return [m for m in models if m.ema_decay is None and _without_averaging(spec, m) == m]


def _without_averaging(spec: ModelSpec, named_like: ModelSpec) -> ModelSpec:
    return dataclasses.replace(spec, name=named_like.name, label=named_like.label, ema_decay=None)


def progress_path(out: Path, name: str) -> Path:
    """Where model `name`'s unfinished training keeps its state between epochs."""
    return out / "training_progress" / f"{name}.msgpack"


def load_study_data(config: StudyConfig, data_dir=None) -> tuple[Cifar10, object]:
    """CIFAR-10 and the study's train / val / eval splits of it."""
    data = load_cifar10(data_dir)
    splits = study_splits(
        data.train_labels,
        data.test_labels,
        train_size=config.train_size,
        val_size=config.val_size,
        eval_size=config.eval_size,
        seed=config.seed,
    )
    return data, splits


def train_models(
    config: StudyConfig,
    data: Cifar10,
    splits,
    out: Path,
    *,
    surrogate: bool = True,
    show_progress=True,
    log=print,
) -> dict[str, Path]:
    """Train (or reuse) every model of `config`, and its surrogate unless `surrogate` is False;
    their checkpoints by name."""
    specs = list(config.models) + ([config.surrogate] if config.surrogate and surrogate else [])
    return {
        spec.name: train_phase(config, spec, data, splits, Path(out), show_progress, log)
        for spec in specs
    }


def run_study(
    config: StudyConfig,
    out_dir,
    *,
    data_dir=None,
    force=False,
    show_progress=True,
    command: str = "",
    policy_path=DEFAULT_POLICY,
    log=print,
) -> dict:
    """Run (or resume) every phase; write records, results.json, summary.json and gate.txt.

    The threat model is declared and printed before any model is attacked; every number
    written is computed from the record file (`records.jsonl.gz`) alone.
    """
    out = Path(out_dir)
    if force:
        for sub in ("checkpoints", "examples", "records.jsonl", RECORDS_FILE):
            target = out / sub
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    threat_model = study_threat_model(config)
    log(threat_model.describe())
    timings = {}
    started = time.perf_counter()
    data, splits = load_study_data(config, data_dir)
    timings["load_data"] = time.perf_counter() - started
    save_class_samples(out / SAMPLES_FILE, data, splits.eval)
    x_eval = np.asarray(to_float(data.test_images[splits.eval]))
    y_eval = data.test_labels[splits.eval]
    checkpoints = train_models(config, data, splits, out, show_progress=show_progress, log=log)
    sources = {
        name: load_logits_fn(checkpoints[name])
        for name in {config.transfer_source(m.name) for m in config.models} - {None}
    }
    for spec in config.models:
        if config.transfer_source(spec.name) is None:
            log(f"[attack] {spec.name}: no transfer check (its transfer source is not in this run)")
    records_log = RecordLog(record_file(out))
    extras = {}
    for spec in config.models:
        extras[spec.name] = evaluate_model(
            config,
            spec,
            checkpoints[spec.name],
            x_eval,
            y_eval,
            records_log,
            threat_model,
            sources,
            out,
            show_progress,
            log,
        )
    attacked = {m.name: {a.name for a in attack_specs(config, m.name)} for m in config.models}
    records = [r for r in records_log.read() if r.attack in attacked.get(r.model, ())]
    num_classes = len(data.class_names)
    provenance = {
        "command": command,
        "config_digest": config.digest(),
        "git_revision": git_state(Path(__file__).parent)["commit"],
        "device": jax.devices()[0].device_kind,
    }
    summary = summarise_run(config, records, extras, threat_model, num_classes, provenance)
    atomic_write_json(out / SUMMARY_FILE, summary)
    failed = [c for c in summary["checks"] if not c["passed"]]
    log(
        f"[checks] {len(summary['checks']) - len(failed)} of {len(summary['checks'])} passed"
        + "".join(f"\n  FAIL {c['name']}: {c['evidence']}" for c in failed)
    )
    gate = release_decision(summary, Path(policy_path), out, log)
    models = {}
    for spec in config.models:
        meta = read_checkpoint(checkpoints[spec.name])["metadata"]
        models[spec.name] = {
            "label": spec.label,
            "spec": dataclasses.asdict(spec),
            "training": {k: meta[k] for k in TRAINING_FIELDS},
            **model_results(config, summary["aggregates"], records, spec.name, num_classes),
            **extras[spec.name],
        }
        timings[f"train_{spec.name}"] = meta["seconds"]
        timings[f"attack_{spec.name}"] = extras[spec.name]["attack_seconds"]
    results = {
        "study": "cifar10_robustness",
        "folder": results_folder(out),
        "command": command,
        "config": config.to_dict(),
        "config_digest": config.digest(),
        "environment": environment(extra_packages=("matplotlib",)),
        "data": {
            "source": data.source,
            "class_names": list(data.class_names),
            "train_fingerprint": fingerprint(data.train_images, data.train_labels),
            "test_fingerprint": fingerprint(data.test_images, data.test_labels),
            "eval_fingerprint": fingerprint(data.test_images[splits.eval], y_eval),
            "sizes": {"train": len(splits.train), "val": len(splits.val), "eval": len(splits.eval)},
            "eval_indices": splits.eval.tolist(),
        },
        "threat_model": threat_model.to_dict(),
        "threat_model_text": threat_model.describe(),
        "threat_model_hash": threat_model.digest(),
        "attacks": [
            a.to_dict() | {"config_hash": a.config_hash(sources[a.source][1] if a.source else None)}
            for a in attack_specs(config)
        ],
        "records": {"file": records_log.path.name, "count": len(records)},
        "checks": summary["checks"],
        "sanity_passed": summary["sanity_passed"],
        "gate": gate,
        "models": models,
        "reference": REFERENCE_RESULTS,
        "timings_seconds": timings,
    }
    if config.surrogate:
        meta = read_checkpoint(checkpoints[config.surrogate.name])["metadata"]
        timings[f"train_{config.surrogate.name}"] = meta["seconds"]
        results["surrogate"] = {
            "label": config.surrogate.label,
            "spec": dataclasses.asdict(config.surrogate),
            "training": {k: meta[k] for k in TRAINING_FIELDS},
        }
    if {"standard", "fgsm_matched"} <= models.keys():
        cost = (
            models["standard"]["clean_accuracy"]["value"]
            - models["fgsm_matched"]["clean_accuracy"]["value"]
        )
        results["matched_defense_clean_cost"] = cost
    atomic_write_json(out / "results.json", results)
    return results


TRAINING_FIELDS = (
    "history",
    "best_epoch",
    "best_val_accuracy",
    "train_size",
    "train_fingerprint",
    "seconds",
    "git_revision",
)


SAMPLES_FILE = "class_samples.npz"


def save_class_samples(path: Path, data: Cifar10, eval_idx: np.ndarray, per_class: int = 8) -> None:
    """Save the first `per_class` evaluation images of each class (uint8) for the report."""
    labels = data.test_labels[eval_idx]
    rows = [eval_idx[labels == c][:per_class] for c in range(len(data.class_names))]
    atomic_write_npz(path, images=np.stack([data.test_images[r] for r in rows]))
