"""Figures for robustness studies (matplotlib, Agg backend); each writes one PNG atomically."""

import io
import os
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from advjax.io import atomic_write_bytes


def save_figure(fig, path: str | os.PathLike) -> None:
    """Render `fig` to PNG bytes and write them atomically; close the figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def image_grid(images: np.ndarray, row_labels: Sequence[str], title: str, path) -> None:
    """images: (rows, cols, H, W, 3) in [0, 1]."""
    rows, cols = images.shape[:2]
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.0, rows * 1.05), squeeze=False)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            ax.imshow(np.clip(images[r, c], 0, 1), interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
        axes[r, 0].set_ylabel(row_labels[r], rotation=0, ha="right", va="center", fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path)


def training_curves(history: list[dict], title: str, path) -> None:
    """Train/validation loss and accuracy per epoch."""
    epochs = [h["epoch"] for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax_loss.plot(epochs, [h["train_loss"] for h in history], "o-", label="train loss")
    ax_loss.plot(epochs, [h["val_loss"] for h in history], "s-", label="validation loss")
    for key, style, label in (
        ("train_accuracy", "o-", "train accuracy (clean)"),
        ("train_adv_accuracy", "^-", "train accuracy (adversarial)"),
        ("probe_pgd_accuracy", "v--", "sentinel probe PGD accuracy (train batch)"),
        ("val_pgd_accuracy", "d--", "validation PGD accuracy"),
    ):
        if key in history[0]:
            ax_acc.plot(epochs, [100 * h[key] for h in history], style, label=label)
    ax_acc.plot(
        epochs, [100 * h["val_accuracy"] for h in history], "s-", label="validation accuracy"
    )
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3), ax.legend(fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path)


def lines(
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    path,
    markers: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None,
) -> None:
    """One line per named (x, y) series; optional reference points as unfilled markers."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, (x, y) in series.items():
        ax.plot(x, y, "o-" if len(x) < 30 else "-", label=name)
    for name, (x, y) in (markers or {}).items():
        ax.plot(x, y, "x", markersize=9, mew=2, label=name)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def grouped_bars(
    groups: Sequence[str],
    bars: dict[str, Sequence[float]],
    *,
    title: str,
    ylabel: str,
    path,
    annotate: bool = True,
) -> None:
    """Bars grouped by `groups`, one colour per key of `bars`."""
    fig, ax = plt.subplots(figsize=(min(14, max(7, 0.3 * len(groups) * len(bars))), 4.5))
    width = 0.8 / len(bars)
    x = np.arange(len(groups))
    for i, (name, values) in enumerate(bars.items()):
        rects = ax.bar(x + (i - (len(bars) - 1) / 2) * width, values, width, label=name)
        if annotate and len(groups) * len(bars) <= 16:
            ax.bar_label(rects, fmt="%.1f", fontsize=7)
    ax.set_xticks(
        x,
        groups,
        rotation=20 if len(groups) > 4 else 0,
        ha="right" if len(groups) > 4 else "center",
    )
    ax.set(title=title, ylabel=ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def confusion_pair(
    matrices: dict[str, np.ndarray], class_names: Sequence[str], title: str, path
) -> None:
    """Side-by-side confusion matrices (rows: true class, columns: predicted)."""
    fig, axes = plt.subplots(1, len(matrices), figsize=(6.2 * len(matrices), 5.4), squeeze=False)
    for ax, (name, m) in zip(axes[0], matrices.items()):
        m = np.asarray(m)
        im = ax.imshow(m, cmap="Blues")
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(
                    j,
                    i,
                    str(m[i, j]),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if m[i, j] > m.max() / 2 else "black",
                )
        ax.set_xticks(range(len(class_names)), class_names, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(class_names)), class_names, fontsize=8)
        ax.set(title=name, xlabel="predicted class", ylabel="true class")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title)
    save_figure(fig, path)


def adversarial_grid(
    x: np.ndarray,
    x_adv: np.ndarray,
    labels: np.ndarray,
    clean_pred: np.ndarray,
    adv_pred: np.ndarray,
    class_names: Sequence[str],
    *,
    magnify: float,
    title: str,
    path,
) -> None:
    """Columns of clean image / magnified perturbation / adversarial image, with predictions."""
    n = len(x)
    fig, axes = plt.subplots(3, n, figsize=(1.45 * n, 4.9), squeeze=False)
    delta = x_adv - x
    for i in range(n):
        panels = (x[i], np.clip(0.5 + magnify * delta[i], 0, 1), x_adv[i])
        texts = (
            f"true {class_names[labels[i]]}\npred {class_names[clean_pred[i]]}",
            f"|d|max {255 * np.abs(delta[i]).max():.1f}/255",
            f"pred {class_names[adv_pred[i]]}",
        )
        for r in range(3):
            ax = axes[r, i]
            ax.imshow(panels[r], interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(
                texts[r],
                fontsize=7,
                color="red" if r == 2 and adv_pred[i] != labels[i] else "black",
            )
    for r, name in enumerate(("clean", f"perturbation x{magnify:g}", "adversarial")):
        axes[r, 0].set_ylabel(name, fontsize=8)
    fig.suptitle(title)
    save_figure(fig, path)


def tradeoff_scatter(
    points: dict[str, dict[str, tuple[float, float, float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    path,
    references: dict[str, tuple[float, float]] | None = None,
    target: tuple[float, float] | None = None,
) -> None:
    """Clean (x) against robust (y) accuracy per model, with interval bars on both axes.

    `points[label][kind] = (value, low, high)` with kind "clean" and one or more robust
    kinds (e.g. "PGD-20", "ensemble"), each drawn with its own marker and joined per model;
    `references` are single labelled points (black crosses); `target` shades the region
    clean >= target[0], robust >= target[1].
    """
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    markers = ["o", "s", "^", "D"]
    for i, (label, kinds) in enumerate(points.items()):
        colour = f"C{i}"
        cx, clo, chi = kinds["clean"]
        robust = [(k, v) for k, v in kinds.items() if k != "clean"]
        for j, (kind, (y, lo, hi)) in enumerate(robust):
            ax.errorbar(
                cx,
                y,
                xerr=[[max(0.0, cx - clo)], [max(0.0, chi - cx)]],
                yerr=[[max(0.0, y - lo)], [max(0.0, hi - y)]],
                fmt=markers[j % len(markers)],
                color=colour,
                capsize=3,
                mfc=colour if j == len(robust) - 1 else "white",
                label=f"{label} ({kind})",
            )
        if len(robust) > 1:
            ax.plot([cx] * len(robust), [v[0] for _, v in robust], color=colour, alpha=0.4)
    for name, (x, y) in (references or {}).items():
        ax.plot(x, y, "x", markersize=10, mew=2, color="black")
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=7)
    if target is not None:
        ax.fill_between(
            [target[0], 100],
            target[1],
            100,
            color="green",
            alpha=0.08,
            label=f"target: clean >= {target[0]:g} %, robust >= {target[1]:g} %",
        )
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel, xlim=(0, 100), ylim=(0, 60))
    ax.grid(alpha=0.3)
    # Outside the axes: with ten models and two attacks each, a legend inside hides the points.
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    save_figure(fig, path)
