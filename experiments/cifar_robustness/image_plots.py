"""Figures of images and matrices: sample grids, clean / perturbation / adversarial
columns, and confusion matrices (matplotlib, Agg backend via `plots`; one PNG each)."""

from typing import Sequence

import numpy as np

from experiments.plots import plt, save_figure


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
