"""The study's figures, built from results.json and the files beside it.

A run of at most `SERIES_BY_MODEL` models draws one line per model on panels by attack or
eps; a larger run draws one panel per model. Colours follow `plots.model_colour`.
"""

from pathlib import Path

import numpy as np

from experiments import plots
from experiments.cifar_robustness import image_plots
from experiments.cifar_robustness.tradeoff import ensemble_rate, strong_name, tradeoff_figure

ATTACK_NAMES = {"fgsm": "FGSM", "pgd": "PGD"}
ATTACK_STYLES = {"fgsm": "o--", "pgd": "s-"}
SERIES_BY_MODEL = plots.MAX_SERIES - 1
"""Most models drawn as one line each on one axes (one legend slot is the reference's)."""


def _triple(rate: dict) -> tuple[float, float, float]:
    lo, hi = rate["ci95"]
    return 100 * rate["value"], 100 * lo, 100 * hi


def _eps_figure(results: dict, metric: str, ylabel: str, path) -> None:
    """Robust accuracy (or attack success) against eps, per model and attack."""
    models = results["models"]
    key = {"robust_accuracy": "{a}", "attack_success_rate": "{a}_success"}[metric]
    panels, markers = {}, {}
    by_model = len(models) > SERIES_BY_MODEL
    for name, m in models.items():
        for attack, per_eps in m["attacks"].items():
            eps = [float(e) for e in per_eps]
            panel = name if by_model else ATTACK_NAMES[attack]
            label = ATTACK_NAMES[attack] if by_model else name
            panels.setdefault(panel, []).append(
                {
                    "x": eps,
                    "y": [100 * s[metric]["value"] for s in per_eps.values()],
                    "colour": plots.model_colour(name),
                    "style": ATTACK_STYLES[attack] if by_model else "o-",
                    "label": label,
                }
            )
            ref = results["reference"].get(name, {}).get(key.format(a=attack))
            if ref:
                markers.setdefault(panel, []).append(
                    {
                        "x": [float(e) for e in ref],
                        "y": [100 * v for v in ref.values()],
                        "colour": plots.model_colour(name),
                        "label": "reference study (PyTorch)",
                    }
                )
    what = metric.replace("_", " ")
    plots.line_panels(
        panels,
        markers=markers,
        title=f"{what.capitalize()} against eps (L-inf, white-box, {len(models)} models)",
        xlabel="eps (/255)",
        ylabel=ylabel,
        path=path,
    )


def _budget_figure(results: dict, what: str, xlabel: str, path) -> None:
    """Robust accuracy against PGD steps (or restarts): does more budget still find more?"""
    models = results["models"]
    by_model = len(models) > SERIES_BY_MODEL
    panels = {}
    for name, m in models.items():
        for i, (eps, curves) in enumerate(m["budget_curves"].items()):
            curve = curves[what]
            if not curve:
                continue
            start = 0 if what == "steps" else 1
            panel = name if by_model else f"eps {eps}/255"
            panels.setdefault(panel, []).append(
                {
                    "x": list(range(start, start + len(curve))),
                    "y": [100 * r["value"] for r in curve],
                    "colour": plots.model_colour(name),
                    "style": ("-", "--", ":")[min(i, 2)] if by_model else "-",
                    "label": f"eps {eps}/255" if by_model else name,
                }
            )
    plots.line_panels(
        panels,
        title=f"Robust accuracy against PGD {what} (first-break tracking, one run)",
        xlabel=xlabel,
        ylabel="robust accuracy (%)",
        path=path,
    )


def _clean_vs_robust(results: dict, strong: dict | None, top: str, path) -> None:
    """How much of its clean accuracy each model keeps at the largest eps, per attack."""
    models = results["models"]
    eps = float(top) / 255
    kinds = {"clean": [], f"FGSM {top}/255": [], f"PGD-20 {top}/255": []}
    strong_rates = [ensemble_rate(strong, name, eps) for name in models]
    strongest_name = f"{strong_name(strong)} {top}/255" if any(strong_rates) else None
    if strongest_name:
        kinds[strongest_name] = []
    for (name, m), strong_rate in zip(models.items(), strong_rates):
        kinds["clean"].append(_triple(m["clean_accuracy"]))
        kinds[f"FGSM {top}/255"].append(_triple(m["attacks"]["fgsm"][top]["robust_accuracy"]))
        pgd = m["attacks"]["pgd"][top]["robust_accuracy"]
        kinds[f"PGD-20 {top}/255"].append(_triple(pgd))
        if strongest_name:
            kinds[strongest_name].append(_triple(strong_rate or pgd))
    plots.dot_plot(
        [(name, plots.model_colour(name)) for name in models],
        kinds,
        title=f"Clean and robust accuracy at {top}/255 (L-inf; Wilson 95 % intervals)",
        xlabel="accuracy on the evaluation subset (%)",
        path=path,
    )


def _per_class(results: dict, class_names, eps: str, path) -> None:
    panels = {}
    for name, m in results["models"].items():
        colour = plots.model_colour(name)
        panels[name] = {
            "clean": ([100 * r["value"] for r in m["per_class"]["clean"]], colour),
            f"PGD {eps}/255": ([100 * r["value"] for r in m["per_class"][f"pgd_{eps}"]], colour),
        }
    plots.bar_panels(
        list(class_names),
        panels,
        title=f"Per-class accuracy, clean (pale) and under PGD-20 {eps}/255",
        ylabel="accuracy (%)",
        path=path,
    )


def figures(
    results: dict,
    out: Path,
    class_names,
    sample_images: np.ndarray | None,
    strong: dict | None = None,
) -> list[Path]:
    """Write the study's figures into out/figures; return their paths.

    Figures of models no longer in the run are removed, so the folder shows this run.
    """
    fig_dir = out / "figures"
    written = []

    def path(name):
        written.append(fig_dir / name)
        return fig_dir / name

    models = results["models"]
    top = max(next(iter(models.values()))["attacks"]["pgd"], key=float)
    if sample_images is not None:
        image_plots.image_grid(
            sample_images,
            class_names,
            "CIFAR-10 evaluation subset: samples per class",
            path("samples_per_class.png"),
        )
    for name, m in models.items():
        plots.training_curves(
            m["training"]["history"],
            f"Training curves: {m['label']}",
            path(f"training_curves_{name}.png"),
        )
    _eps_figure(
        results, "robust_accuracy", "robust accuracy (%)", path("robust_accuracy_vs_eps.png")
    )
    _eps_figure(
        results, "attack_success_rate", "attack success rate (%)", path("attack_success_vs_eps.png")
    )
    _clean_vs_robust(results, strong, top, path("clean_vs_robust.png"))
    tradeoff_figure(results, strong, path("tradeoff_clean_vs_robust.png"))
    for name, m in models.items():
        image_plots.confusion_pair(
            {"clean": m["confusion"]["clean"], f"PGD {top}/255": m["confusion"][f"pgd_{top}"]},
            class_names,
            f"Confusion matrices: {m['label']}",
            path(f"confusion_{name}.png"),
        )
    nonzero = [e for e in next(iter(models.values()))["attacks"]["pgd"] if float(e) > 0]
    for eps in sorted({min(nonzero, key=float), top}, key=float):
        _per_class(results, class_names, eps, path(f"per_class_accuracy_pgd_{eps}.png"))
    for what, xlabel in (("steps", "PGD steps (first restart)"), ("restarts", "random restarts")):
        _budget_figure(results, what, xlabel, path(f"budget_curve_{what}.png"))
    for name, m in models.items():
        with np.load(out / "examples" / f"{name}.npz") as saved:
            k = min(8, len(saved["x_clean"]))
            magnify = 10.0
            image_plots.adversarial_grid(
                saved["x_clean"][:k],
                saved["x_adv"][:k],
                saved["labels"][:k],
                saved["clean_pred"][:k],
                saved["adv_pred"][:k],
                class_names,
                magnify=magnify,
                title=f"{m['label']}: PGD {top}/255 (perturbation magnified x{magnify:g}, shown around grey)",
                path=path(f"adversarial_examples_{name}.png"),
            )
    for stale in set(fig_dir.glob("*.png")) - set(written):
        stale.unlink()
    return written
