"""The clean-vs-robust trade-off of every studied model, with the stronger evaluation.

Reads the study's results and, when present, `<run>/strong_evaluation/summary.json`
(AutoAttack's standard version from `experiments.cifar_robustness.strong_evaluation` on the
same cases) to report, per model, PGD-20 against AutoAttack at the largest eps and how far
PGD-20 overstated robustness, with counts and Wilson intervals, as a table and a figure.
"""

import json
from pathlib import Path

from advjax.evaluation import AUTOATTACK, find_group
from advjax.evaluation.stats import format_rate
from experiments import plots

STRONG_SUMMARY = Path("strong_evaluation") / "summary.json"
TARGET = (65.0, 35.0)
"""The defense's aim at 8/255: clean and strong-evaluation robust accuracy (%)."""
REFERENCE_FGSM_AT = (42.3, 27.0)
"""The reproduced study's FGSM-AT model: clean and PGD-20 8/255 robust accuracy (%)."""


def load_strong(out: Path) -> dict | None:
    path = Path(out) / STRONG_SUMMARY
    return json.loads(path.read_text()) if path.exists() else None


def ensemble_rate(strong: dict | None, model: str, eps: float) -> dict | None:
    """The strong evaluation's robust accuracy of `model` at `eps` (AutoAttack, else the
    three-member ensemble where a summary holds that); None where it did not run."""
    group = strong and (
        find_group(strong["aggregates"], model=model, attack=AUTOATTACK, eps=eps)
        or find_group(strong["aggregates"], model=model, attack="ensemble", eps=eps)
    )
    return group["robust_accuracy"] if group else None


def strong_name(strong: dict | None) -> str:
    """What the strong evaluation's summary ran: AutoAttack or the study's ensemble."""
    if not strong:
        return "none"
    attacks = {g["attack"] for g in strong["aggregates"]}
    return "AutoAttack" if "autoattack" in attacks else "ensemble"


def _top(results: dict) -> str:
    return max(next(iter(results["models"].values()))["attacks"]["pgd"], key=float)


def train_time(results: dict, model: dict) -> str:
    """The model's training seconds; a fine-tune adds its parents' ("own + parent = total")."""
    own = model["training"]["seconds"]
    parents, spec = [], model["spec"].get("init_from")
    while spec:
        parent = results["models"].get(spec["name"])
        if parent is None:
            return f"{own:.0f} + {spec['name']} (not in this run)"
        parents.append(parent["training"]["seconds"])
        spec = spec.get("init_from")
    if not parents:
        return f"{own:.0f}"
    return " + ".join(f"{t:.0f}" for t in [own, *parents]) + f" = {own + sum(parents):.0f}"


def strong_table(results: dict, strong: dict | None) -> str:
    """PGD-20 vs the strong evaluation per model at the largest eps, with the training time."""
    top = _top(results)
    eps = float(top) / 255
    strong_label = strong_name(strong) if strong else "strong evaluation"
    rows = [
        f"| model | training images x epochs | train time (s, 2 cores) | clean | PGD-20 {top}/255 "
        f"| {strong_label} {top}/255 | PGD-20 overstatement (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in results["models"].items():
        pgd = m["attacks"]["pgd"][top]["robust_accuracy"]
        ens = ensemble_rate(strong, name, eps)
        over = f"{100 * (pgd['value'] - ens['value']):.1f}" if ens else "not run"
        rows.append(
            f"| {m['label']} | {m['training']['train_size']:,} x {m['spec']['epochs']} | "
            f"{train_time(results, m)} | {format_rate(m['clean_accuracy'])} | "
            f"{format_rate(pgd)} | {format_rate(ens) if ens else 'not run'} | {over} |"
        )
    members = (
        ", ".join(s.get("name") or s["method"] for s in strong["extra"]["members"])
        if strong
        else "none"
    )
    note = (
        f"{strong_label} members, in order, each on the cases still robust: {members} "
        f"(`experiments.cifar_robustness.strong_evaluation`; details in `strong_evaluation/tables.md`). "
        f"Reference FGSM-AT model: clean {REFERENCE_FGSM_AT[0]} %, PGD-20 {REFERENCE_FGSM_AT[1]} %; "
        f"the aim: clean >= {TARGET[0]:g} % and {strong_label} robust >= {TARGET[1]:g} %. "
        f"A fine-tune's train time adds its parent's: own + parent = total."
    )
    return "\n".join(rows) + "\n\n" + note


def _triple(rate: dict) -> tuple[float, float, float]:
    lo, hi = rate["ci95"]
    return 100 * rate["value"], 100 * lo, 100 * hi


def tradeoff_figure(results: dict, strong: dict | None, path) -> None:
    top = _top(results)
    eps = float(top) / 255
    points = {}
    for name, m in results["models"].items():
        point = {
            "label": name,
            "colour": plots.model_colour(name),
            "clean": _triple(m["clean_accuracy"]),
            f"PGD-20 {top}/255": _triple(m["attacks"]["pgd"][top]["robust_accuracy"]),
        }
        ens = ensemble_rate(strong, name, eps)
        if ens:
            point[f"strong evaluation {top}/255"] = _triple(ens)
        points[name] = point
    plots.tradeoff_scatter(
        points,
        title=f"Clean vs robust accuracy at {top}/255 (Wilson 95 % intervals)",
        xlabel="clean accuracy (%)",
        ylabel="robust accuracy (%)",
        path=path,
        references={"reference FGSM-AT (PGD-20)": REFERENCE_FGSM_AT},
        target=TARGET,
    )
