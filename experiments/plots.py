"""Figures for robustness studies (matplotlib, Agg backend); each writes one PNG atomically.

Every figure answers one question and stays legible at README size: at most
`MAX_SERIES` labelled series per axes (more models become small multiples), legends
below the axes or direct labels beside them, never over the data, and one colour per
model in every figure (`model_colour`).
"""

import hashlib
import io
import os
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from advjax.records import atomic_write_bytes

MAX_SERIES = 6
"""Most labelled series one axes carries; beyond it a figure becomes small multiples."""

MODEL_ORDER = (
    "standard",
    "fgsm_reference",
    "fgsm_matched",
    "standard_flip",
    "fgsm_rs_matched",
    "fgsm_rs_full",
    "fgsm_rs_full_nodrop",
    "pgd_finetune_nodrop",
    "trades_finetune_nodrop",
    "pgd_continue_nodrop",
    "pgd_continue_silu",
    "pgd_continue2_silu",
    "surrogate",
)
PALETTE = (
    "#4477aa",
    "#ee6677",
    "#228833",
    "#66ccee",
    "#ccbb44",
    "#aa3377",
    "#bbbbbb",
    "#332288",
    "#ee8866",
    "#117733",
    "#882255",
    "#000000",
    "#999933",
)
"""Paul Tol's bright and muted qualitative colours: distinct, and distinct in grey."""


def model_colour(name: str) -> str:
    """The colour of model `name`, the same in every figure of every run."""
    if name in MODEL_ORDER:
        return PALETTE[MODEL_ORDER.index(name)]
    digest = int(hashlib.sha256(name.encode()).hexdigest(), 16)
    return PALETTE[digest % len(PALETTE)]


def save_figure(fig, path: str | os.PathLike) -> None:
    """Render `fig` to PNG bytes and write them atomically; close the figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def _grid(n: int, *, ncols: int = 3, size: tuple[float, float] = (3.6, 2.9)):
    ncols = min(ncols, n)
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(size[0] * ncols, size[1] * nrows + 0.6),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for i in range(max(0, n - ncols), n):  # the lowest panel of each column shows its x ticks
        axes.flat[i].xaxis.set_tick_params(labelbottom=True)
    return fig, list(axes.flat[:n])


def _legend_below(fig, handles, labels, *, ncol: int | None = None) -> None:
    """One figure legend under every axes (deduplicated), so it never covers data."""
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    if not seen:
        return
    ncol = ncol or min(3, len(seen))
    fig.legend(
        list(seen.values()),
        list(seen),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=ncol,
        fontsize=8,
        frameon=False,
    )


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
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.suptitle(title)
    save_figure(fig, path)


Series = dict
"""One line: {"x": [...], "y": [...], "colour": ..., "style": "o-", "label": ...}."""


def _grey_key(line: Line2D) -> Line2D:
    """A legend key with `line`'s style in grey, for a label drawn in several colours."""
    return Line2D([], [], ls=line.get_linestyle(), marker=line.get_marker(),
                  ms=line.get_markersize(), color="#555555")  # fmt: skip


def line_panels(
    panels: dict[str, list[Series]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    path,
    markers: dict[str, list[Series]] | None = None,
) -> None:
    """Small multiples: one axes per panel title, its lines, a shared legend below.

    `markers[panel]` are unjoined reference points (drawn as crosses).
    """
    fig, axes = _grid(len(panels))
    keys: dict[str, tuple[Line2D, set]] = {}  # label -> (its first line, its colours)
    for ax, (name, series) in zip(axes, panels.items()):
        if len(series) > MAX_SERIES:
            raise ValueError(f"panel {name!r} has {len(series)} series; at most {MAX_SERIES}")
        for s in series:
            style = s.get("style") or ("o-" if len(s["x"]) < 30 else "-")
            (line,) = ax.plot(s["x"], s["y"], style, color=s["colour"], label=s["label"], ms=4)
            keys.setdefault(s["label"], (line, set()))[1].add(s["colour"])
        for s in (markers or {}).get(name, []):
            ax.plot(s["x"], s["y"], "x", color=s["colour"], ms=8, mew=2)
            black = Line2D([], [], ls="", marker="x", color="black", ms=8, mew=2)
            keys.setdefault(s["label"], (black, {"black"}))
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    handles = [_grey_key(line) if len(colours) > 1 else line for line, colours in keys.values()]
    ncols = axes[0].get_subplotspec().get_gridspec().ncols
    for i, ax in enumerate(axes):
        if i >= len(axes) - ncols:
            ax.set_xlabel(xlabel, fontsize=8)
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(ylabel, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    _legend_below(fig, handles, list(keys))
    save_figure(fig, path)


def dot_plot(
    rows: list[tuple[str, str]],
    values: dict[str, list[tuple[float, float, float]]],
    *,
    title: str,
    xlabel: str,
    path,
) -> None:
    """One row per model (label, colour), one marker per kind at (value, low, high).

    Answers "how much accuracy does each model keep under each attack" at a glance: the
    grey bar spans a model's clean-to-robust drop.
    """
    kinds = list(values)
    if len(kinds) > MAX_SERIES:
        raise ValueError(f"{len(kinds)} kinds; at most {MAX_SERIES}")
    styles = ("o", "^", "s", "D", "v", "P")
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.4))
    y = np.arange(len(rows))[::-1]
    for i, (label, colour) in enumerate(rows):
        xs = [values[k][i][0] for k in kinds]
        ax.plot([min(xs), max(xs)], [y[i]] * 2, color="#cccccc", lw=4, zorder=1)
    for j, kind in enumerate(kinds):
        for i, (label, colour) in enumerate(rows):
            v, lo, hi = values[kind][i]
            ax.errorbar(
                v,
                y[i],
                xerr=[[max(0.0, v - lo)], [max(0.0, hi - v)]],
                fmt=styles[j],
                color=colour,
                mfc="white" if j == 0 else colour,
                ms=7,
                capsize=2,
                zorder=3,
            )
    ax.set_yticks(y, [label for label, _ in rows], fontsize=8)
    ax.set(title=title, xlabel=xlabel, xlim=(0, 100))
    ax.grid(axis="x", alpha=0.3)
    proxies = [
        Line2D([], [], ls="", marker=styles[j], color="#555555", mfc="white" if j == 0 else None)
        for j in range(len(kinds))
    ]
    fig.tight_layout()
    _legend_below(fig, proxies, kinds, ncol=len(kinds))
    save_figure(fig, path)


def bar_panels(
    groups: Sequence[str],
    panels: dict[str, dict[str, tuple[Sequence[float], str]]],
    *,
    title: str,
    ylabel: str,
    path,
) -> None:
    """Small multiples of grouped bars: per panel, bars per group for each (values, colour)."""
    fig, axes = _grid(len(panels), ncols=2 if len(panels) > 1 else 1, size=(6.0, 2.8))
    handles, labels = [], []
    x = np.arange(len(groups))
    for ax, (name, bars) in zip(axes, panels.items()):
        if len(bars) > MAX_SERIES:
            raise ValueError(f"panel {name!r} has {len(bars)} series; at most {MAX_SERIES}")
        width = 0.8 / len(bars)
        for i, (label, (values, colour)) in enumerate(bars.items()):
            rects = ax.bar(
                x + (i - (len(bars) - 1) / 2) * width,
                values,
                width,
                color=colour,
                alpha=1.0 if i else 0.35,
                label=label,
            )
            handles.append(rects), labels.append(label)
        ax.set_xticks(x, groups, rotation=40, ha="right", fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(ylabel, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    legend_labels = ["clean" if lab.startswith("clean") else lab for lab in labels]
    proxies = [
        plt.Rectangle((0, 0), 1, 1, color="#555555", alpha=0.35 if lab == "clean" else 1.0)
        for lab in legend_labels
    ]
    _legend_below(fig, proxies, legend_labels)
    save_figure(fig, path)


def _spread(values: list[float], gap: float) -> list[float]:
    """`values` moved apart to at least `gap`, order kept, as little as possible."""
    order = np.argsort(values)
    placed = np.asarray(values, dtype=float)[order]
    for i in range(1, len(placed)):
        placed[i] = max(placed[i], placed[i - 1] + gap)
    shift = max(0.0, (placed[-1] - max(values))) / 2 if len(placed) else 0.0
    placed -= shift
    for i in range(1, len(placed)):
        placed[i] = max(placed[i], placed[i - 1] + gap)
    out = np.empty_like(placed)
    out[order] = placed
    return out.tolist()


def tradeoff_scatter(
    points: dict[str, dict],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    path,
    references: dict[str, tuple[float, float]] | None = None,
    target: tuple[float, float] | None = None,
) -> None:
    """Clean (x) against robust (y) accuracy per model, with interval bars on both axes.

    `points[name] = {"label": ..., "colour": ..., "clean": (v, lo, hi), KIND: (v, lo, hi)...}`
    with one or more robust kinds (e.g. "PGD-20", "AutoAttack"): the last is the strongest
    and drawn filled, the others hollow, joined per model. Each model is labelled directly
    in a column beside the axes; `references` are black crosses, `target` shades the
    region clean >= target[0], robust >= target[1].
    """
    fig, ax = plt.subplots(figsize=(6.0, 4.8))
    markers = ["o", "s", "^", "D"]
    kinds_seen: list[str] = []
    label_at = []
    for name, p in points.items():
        colour = p["colour"]
        cx, clo, chi = p["clean"]
        robust = [(k, v) for k, v in p.items() if k not in ("clean", "label", "colour")]
        for j, (kind, (y, lo, hi)) in enumerate(robust):
            if kind not in kinds_seen:
                kinds_seen.append(kind)
            ax.errorbar(
                cx,
                y,
                xerr=[[max(0.0, cx - clo)], [max(0.0, chi - cx)]],
                yerr=[[max(0.0, y - lo)], [max(0.0, hi - y)]],
                fmt=markers[kinds_seen.index(kind) % len(markers)],
                color=colour,
                capsize=2,
                ms=6,
                mfc=colour if j == len(robust) - 1 else "white",
            )
        if len(robust) > 1:
            ax.plot([cx] * len(robust), [v[0] for _, v in robust], color=colour, alpha=0.4)
        label_at.append((p["label"], colour, cx, robust[-1][1][0]))
    for name, (x, y) in (references or {}).items():
        ax.plot(x, y, "x", markersize=9, mew=2, color="black")
        ax.annotate(name, (x, y), textcoords="offset points", xytext=(6, 8), fontsize=7)
    if target is not None:
        ax.fill_between([target[0], 100], target[1], 100, color="green", alpha=0.08)
    ylim = (0, max(60.0, max((v[3] for v in label_at), default=0) + 5))
    if target is not None:
        ax.annotate(
            f"target:\nclean >= {target[0]:g} %\nrobust >= {target[1]:g} %",
            (target[0] + 1, ylim[1] - 1),
            va="top",
            fontsize=7,
            color="darkgreen",
        )
    cleans = [v[2] for v in label_at] + [x for x, _ in (references or {}).values()]
    xlim = (max(0.0, 10 * (min(cleans, default=10) // 10) - 10), 100)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel, xlim=xlim, ylim=ylim)
    ax.grid(alpha=0.3)
    ys = _spread([v[3] for v in label_at], gap=(ylim[1] - ylim[0]) * 0.045)
    for (label, colour, cx, cy), ty in zip(label_at, ys):
        ax.annotate(
            label,
            (cx, cy),
            xytext=(xlim[1] + 0.03 * (xlim[1] - xlim[0]), ty),
            textcoords="data",
            fontsize=7,
            color=colour,
            va="center",
            annotation_clip=False,
            arrowprops={"arrowstyle": "-", "color": colour, "alpha": 0.35, "lw": 0.8},
        )
    proxies = [
        Line2D(
            [],
            [],
            ls="",
            marker=markers[i % len(markers)],
            color="#555555",
            mfc="#555555" if i == len(kinds_seen) - 1 else "white",
        )  # fmt: skip
        for i in range(len(kinds_seen))
    ]
    fig.tight_layout()
    _legend_below(fig, proxies, kinds_seen, ncol=len(kinds_seen))
    save_figure(fig, path)
