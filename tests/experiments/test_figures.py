"""The study's figures are legible: legends never cover data, few series per axes, titled.

Renders the multi-series figures of every committed run from its results.json (nothing is
written) and checks them with matplotlib's own bounding boxes.
"""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from experiments import plots
from experiments.cifar_robustness import figures
from experiments.cifar_robustness.tradeoff import load_strong, tradeoff_figure

ROOT = Path(__file__).resolve().parents[2]
RUNS = [
    p
    for p in (ROOT / "results" / "cifar10" / "default", ROOT / "results" / "cifar10" / "research")
    if (p / "results.json").exists()
]


def legibility_problems(fig) -> list[str]:
    """What makes `fig` hard to read: a legend over an axes' data area, more than
    `plots.MAX_SERIES` labelled lines on one axes or entries in one legend, no title."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    legends = list(fig.legends) + [ax.get_legend() for ax in axes if ax.get_legend()]
    problems = []
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in axes:
            if box.overlaps(ax.get_window_extent(renderer)):
                problems.append(f"a legend overlaps the axes {ax.get_title()!r}")
        entries = len(legend.get_texts())
        if entries > plots.MAX_SERIES:
            problems.append(f"a legend has {entries} entries")
    for ax in axes:
        labelled = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        if len(labelled) > plots.MAX_SERIES:
            problems.append(f"axes {ax.get_title()!r} has {len(labelled)} labelled lines")
    if not (fig.get_suptitle() or any(ax.get_title() for ax in axes)):
        problems.append("no title")
    return problems


@pytest.fixture
def captured(monkeypatch):
    """The figures the plotting functions would save, kept open instead of written."""
    kept = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: kept.append((Path(path).name, fig)))
    yield kept
    for _, fig in kept:
        plt.close(fig)


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_no_legend_covers_data_and_no_axes_holds_more_than_six_series(run, captured):
    results = json.loads((run / "results.json").read_text())
    strong = load_strong(run)
    top = max(next(iter(results["models"].values()))["attacks"]["pgd"], key=float)
    figures._eps_figure(results, "robust_accuracy", "robust accuracy (%)", "robust.png")
    figures._eps_figure(results, "attack_success_rate", "success (%)", "success.png")
    figures._budget_figure(results, "steps", "steps", "steps.png")
    figures._budget_figure(results, "restarts", "restarts", "restarts.png")
    figures._clean_vs_robust(results, strong, top, "clean_vs_robust.png")
    figures._per_class(results, results["data"]["class_names"], top, "per_class.png")
    tradeoff_figure(results, strong, "tradeoff.png")
    first = next(iter(results["models"].values()))
    plots.training_curves(first["training"]["history"], "curves", "curves.png")
    assert len(captured) == 8
    problems = {name: legibility_problems(fig) for name, fig in captured}
    assert problems == {name: [] for name, _ in captured}


def test_the_legibility_check_fails_a_crowded_figure_with_its_legend_on_the_data():
    fig, ax = plt.subplots()
    for i in range(8):
        ax.plot([0, 1], [i, i + 1], label=f"series {i}")
    ax.legend(loc="center")
    problems = legibility_problems(fig)
    plt.close(fig)
    assert any("overlaps" in p for p in problems)
    assert any("8 labelled lines" in p for p in problems)
    assert any("8 entries" in p for p in problems)


def test_every_model_keeps_one_colour_across_figures_and_runs():
    names = plots.MODEL_ORDER
    assert len({plots.model_colour(n) for n in names}) == len(names)
    assert plots.model_colour("fgsm_matched") == plots.model_colour("fgsm_matched")
    assert plots.model_colour("a_new_model") in plots.PALETTE
