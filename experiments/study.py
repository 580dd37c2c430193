"""The CIFAR-10 robustness study's phases: train, attack, aggregate; each resumable."""

import dataclasses
import os
import platform
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import jax
import numpy as np

from advjax import metrics
from advjax.augment import to_float
from advjax.checkpoint import read_checkpoint, save_checkpoint
from advjax.data import Cifar10, fingerprint, load_cifar10, stratified_indices, study_splits
from advjax.evaluate import ATTACKS, attack_dataset, make_attack_fn, predict
from advjax.fit import fit
from advjax.io import atomic_write_json, atomic_write_npz
from advjax.model import CompactCNN, eval_logits_fn
from advjax.train import Batch, TrainConfig, load_checkpoint
from experiments.study_config import REFERENCE_RESULTS, ModelSpec, StudyConfig

_SUBSET_STREAM, _ATTACK_STREAM = 100, 200


def eps_label(eps: float) -> str:
    """eps in pixel units as its /255 numerator, e.g. 8/255 -> '8'."""
    return f"{eps * 255:g}"


def train_config(config: StudyConfig, spec: ModelSpec) -> TrainConfig:
    return TrainConfig(
        mode=spec.mode,
        epochs=spec.epochs,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        dropout_rate=config.dropout_rate,
        adv_eps=config.train_eps,
        seed=config.seed,
    )


def model_train_indices(config: StudyConfig, spec: ModelSpec, data: Cifar10, train_idx: np.ndarray):
    """The model's training images: the study's subset, or a stratified part of it."""
    if spec.train_size == len(train_idx):
        return train_idx
    key = jax.random.fold_in(jax.random.key(config.seed), _SUBSET_STREAM)
    part = stratified_indices(data.train_labels[train_idx], spec.train_size, key)
    return train_idx[part]


def train_phase(config, spec, data, splits, out: Path, show_progress: bool, log) -> Path:
    """Train one model unless a checkpoint of this exact config exists; return its path."""
    path = out / "checkpoints" / f"{spec.name}.msgpack"
    digest = config.model_digest(spec, attacks=False)
    if path.exists() and read_checkpoint(path)["metadata"].get("config_digest") == digest:
        log(f"[train] {spec.name}: reusing {path}")
        return path
    idx = model_train_indices(config, spec, data, splits.train)
    train = Batch(data.train_images[idx], data.train_labels[idx])
    val = Batch(data.train_images[splits.val], data.train_labels[splits.val])
    log(f"[train] {spec.name}: {spec.mode} on {len(idx):,} images, {spec.epochs} epochs")
    started = time.perf_counter()
    result = fit(
        train_config(config, spec), train, val, show_progress=show_progress, log=log, name=spec.name
    )
    seconds = time.perf_counter() - started
    variables = {"params": result.state.params, "batch_stats": result.state.batch_stats}
    metadata = {
        "config_digest": digest,
        "spec": dataclasses.asdict(spec),
        "train_config": dataclasses.asdict(train_config(config, spec)),
        "history": result.history,
        "best_epoch": result.best_epoch,
        "best_val_accuracy": result.best_val_accuracy,
        "train_size": len(idx),
        "train_fingerprint": fingerprint(train.images, train.labels),
        "seconds": seconds,
        "git_revision": environment()["git_revision"],
    }
    save_checkpoint(path, CompactCNN(dropout_rate=config.dropout_rate), variables, metadata)
    return path


def model_stream(spec: ModelSpec) -> int:
    """A stable per-model PRNG stream id (independent of which other models run)."""
    return zlib.crc32(spec.name.encode()) & 0x7FFFFFFF


def attack_phase(config, spec, ckpt: Path, x, y, out: Path, show_progress, log) -> Path:
    """FGSM and PGD at every eps on the evaluation subset; per-example results as .npz."""
    path = out / "attacks" / f"{spec.name}.npz"
    digest = config.model_digest(spec, attacks=True)
    if path.exists():
        with np.load(path) as saved:
            if str(saved["config_digest"]) == digest:
                log(f"[attack] {spec.name}: reusing {path}")
                return path
    model, variables = load_checkpoint(ckpt)
    logits_fn = eval_logits_fn(model, variables)
    started = time.perf_counter()
    arrays = {"config_digest": np.array(digest), "labels": y, "clean_pred": predict(logits_fn, x)}
    root = jax.random.fold_in(
        jax.random.fold_in(jax.random.key(config.seed), _ATTACK_STREAM), model_stream(spec)
    )
    keep = config.saved_examples
    arrays["x_clean"] = x[:keep]
    for a, attack in enumerate(ATTACKS):
        fn = make_attack_fn(
            logits_fn,
            attack,
            steps=config.pgd_steps,
            restarts=config.pgd_restarts,
            step_fraction=config.pgd_step_fraction,
        )
        for e, eps in enumerate(config.eps_list):
            run = attack_dataset(
                fn,
                x,
                y,
                eps,
                key=jax.random.fold_in(jax.random.fold_in(root, a), e),
                batch_size=config.attack_batch_size,
                keep_adv=keep,
                desc=f"[attack] {spec.name} {attack} eps {eps_label(eps)}/255",
                show_progress=show_progress,
            )
            name = f"{attack}_{eps_label(eps)}"
            arrays[f"{name}_pred"] = run.predictions
            arrays[f"{name}_x_adv"] = run.x_adv
            if run.broken_step is not None:
                arrays[f"{name}_broken_step"] = run.broken_step
            summary = metrics.attack_summary(y, arrays["clean_pred"], run.predictions)
            log(
                f"[attack] {spec.name} {attack} eps {eps_label(eps)}/255: robust "
                + metrics.format_rate(summary["robust_accuracy"])
            )
    arrays["seconds"] = np.array(time.perf_counter() - started)
    arrays["git_revision"] = np.array(environment()["git_revision"] or "")
    return atomic_write_npz(path, **arrays)


def summarise_model(
    config: StudyConfig, spec: ModelSpec, ckpt: Path, attacks_path: Path, num_classes: int
) -> dict:
    """Every number of one model, with counts, from its checkpoint and attack records."""
    meta = read_checkpoint(ckpt)["metadata"]
    with np.load(attacks_path) as saved:
        y, clean = saved["labels"], saved["clean_pred"]
        summary = {
            "label": spec.label,
            "spec": dataclasses.asdict(spec),
            "training": {
                k: meta[k]
                for k in (
                    "history",
                    "best_epoch",
                    "best_val_accuracy",
                    "train_size",
                    "train_fingerprint",
                    "seconds",
                    "git_revision",
                )
            },
            "attack_git_revision": str(saved["git_revision"]),
            "clean_accuracy": metrics.rate((clean == y).sum(), len(y)),
            "attacks": {},
            "pgd_steps_curve": {},
            "per_class": {"clean": metrics.per_class_accuracy(y, clean, num_classes)},
            "confusion": {"clean": metrics.confusion_matrix(y, clean, num_classes).tolist()},
            "attack_seconds": float(saved["seconds"]),
        }
        for attack in ATTACKS:
            summary["attacks"][attack] = {}
            for eps in config.eps_list:
                name = f"{attack}_{eps_label(eps)}"
                pred = saved[f"{name}_pred"]
                s = metrics.attack_summary(y, clean, pred)
                summary["attacks"][attack][eps_label(eps)] = s
                summary["per_class"][name] = metrics.per_class_accuracy(
                    y, np.where(clean == y, pred, -1), num_classes
                )
                if eps == max(config.eps_list):
                    summary["confusion"][name] = metrics.confusion_matrix(
                        y, pred, num_classes
                    ).tolist()
                if f"{name}_broken_step" in saved:
                    summary["pgd_steps_curve"][eps_label(eps)] = metrics.robust_correct_by_steps(
                        y, clean, saved[f"{name}_broken_step"], config.pgd_steps
                    )
    return summary


def environment() -> dict:
    """Package versions, machine and git revision for provenance."""
    import chex
    import flax
    import matplotlib
    import optax

    def git(*args):
        try:
            return subprocess.run(
                ["git", *args],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).parent,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax_backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "versions": {m.__name__: m.__version__ for m in (jax, flax, optax, chex, np, matplotlib)},
        "git_revision": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def run_study(
    config: StudyConfig,
    out_dir,
    *,
    data_dir=None,
    force=False,
    show_progress=True,
    command: str = "",
    log=print,
) -> dict:
    """Run (or resume) every phase and write `results.json`; return the results."""
    out = Path(out_dir)
    if force:
        for sub in ("checkpoints", "attacks"):
            shutil.rmtree(out / sub, ignore_errors=True)
    timings = {}
    started = time.perf_counter()
    data = load_cifar10(data_dir)
    splits = study_splits(
        data.train_labels,
        data.test_labels,
        train_size=config.train_size,
        val_size=config.val_size,
        eval_size=config.eval_size,
        seed=config.seed,
    )
    timings["load_data"] = time.perf_counter() - started
    save_class_samples(out / SAMPLES_FILE, data, splits.eval)
    x_eval = np.asarray(to_float(data.test_images[splits.eval]))
    y_eval = data.test_labels[splits.eval]
    models = {}
    for spec in config.models:
        ckpt = train_phase(config, spec, data, splits, out, show_progress, log)
        attacks = attack_phase(config, spec, ckpt, x_eval, y_eval, out, show_progress, log)
        models[spec.name] = summarise_model(config, spec, ckpt, attacks, len(data.class_names))
        timings[f"train_{spec.name}"] = models[spec.name]["training"]["seconds"]
        timings[f"attack_{spec.name}"] = models[spec.name]["attack_seconds"]
    results = {
        "study": "cifar10_robustness",
        "command": command,
        "config": config.to_dict(),
        "config_digest": config.digest(),
        "environment": environment(),
        "data": {
            "source": data.source,
            "class_names": list(data.class_names),
            "train_fingerprint": fingerprint(data.train_images, data.train_labels),
            "test_fingerprint": fingerprint(data.test_images, data.test_labels),
            "eval_fingerprint": fingerprint(data.test_images[splits.eval], y_eval),
            "sizes": {"train": len(splits.train), "val": len(splits.val), "eval": len(splits.eval)},
            "eval_indices": splits.eval.tolist(),
        },
        "threat_model": {
            "norm": "linf",
            "space": "pixels in [0, 1]",
            "knowledge": "white-box gradients",
            "goal": "untargeted misclassification",
            "eps": list(config.eps_list),
            "pgd": {
                "steps": config.pgd_steps,
                "step_size": f"{config.pgd_step_fraction:g} * eps",
                "restarts": config.pgd_restarts,
                "random_start": "uniform in the eps-ball",
            },
        },
        "models": models,
        "reference": REFERENCE_RESULTS,
        "timings_seconds": timings,
    }
    if {"standard", "fgsm_matched"} <= models.keys():
        cost = (
            models["standard"]["clean_accuracy"]["value"]
            - models["fgsm_matched"]["clean_accuracy"]["value"]
        )
        results["matched_defense_clean_cost"] = cost
    atomic_write_json(out / "results.json", results)
    return results


SAMPLES_FILE = "class_samples.npz"


def save_class_samples(path: Path, data: Cifar10, eval_idx: np.ndarray, per_class: int = 8) -> None:
    """Save the first `per_class` evaluation images of each class (uint8) for the report."""
    labels = data.test_labels[eval_idx]
    rows = [eval_idx[labels == c][:per_class] for c in range(len(data.class_names))]
    atomic_write_npz(path, images=np.stack([data.test_images[r] for r in rows]))
