"""Markdown tables and PNG figures of the study, built from results.json and attack records."""

from pathlib import Path

import numpy as np

from advjax.evaluation import format_rate
from advjax.io import atomic_write_text
from experiments.cifar_robustness import plots
from experiments.cifar_robustness.html_report import write_html_report
from experiments.cifar_robustness.study import SAMPLES_FILE
from experiments.cifar_robustness.tradeoff import load_strong, strong_table, tradeoff_figure

ATTACK_NAMES = {"fgsm": "FGSM", "pgd": "PGD"}


def _pct(r: dict) -> str:
    return f"{100 * r['value']:.1f} % ({r['count']:,}/{r['total']:,})"


def _ref(results: dict, model: str, key: str, eps: str) -> str:
    value = results["reference"].get(model, {}).get(key, {}).get(int(float(eps)))
    return "" if value is None else f"{100 * value:.2f} %"


def main_table(results: dict) -> str:
    """Clean vs robust accuracy and attack success per model / attack / eps, reference beside."""
    rows = [
        "| model | attack | eps | clean acc | robust acc (95 % CI) | reference robust | "
        "attack success (flipped / correct) | reference success |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in results["models"].items():
        ref_model = name if name in results["reference"] else None
        for attack, per_eps in m["attacks"].items():
            for eps, s in per_eps.items():
                ra, sr = s["robust_accuracy"], s["attack_success_rate"]
                rows.append(
                    f"| {m['label']} | {ATTACK_NAMES[attack]} | {eps}/255 | {_pct(s['clean_accuracy'])} | "
                    f"{format_rate(ra)} | {_ref(results, ref_model, attack, eps) if ref_model else ''} | "
                    f"{_pct(sr)} | {_ref(results, ref_model, attack + '_success', eps) if ref_model else ''} |"
                )
    return "\n".join(rows)


def counts_table(results: dict) -> str:
    """'755 correct -> 30 under FGSM -> 0 under PGD' per model and eps."""
    rows = [
        "| model | eps | correct clean | still correct under FGSM | still correct under PGD |",
        "|---|---|---|---|---|",
    ]
    for m in results["models"].values():
        for eps in m["attacks"]["pgd"]:
            f, p = m["attacks"]["fgsm"][eps], m["attacks"]["pgd"][eps]
            total = p["clean_accuracy"]["total"]
            rows.append(
                f"| {m['label']} | {eps}/255 | {p['clean_accuracy']['count']:,}/{total:,} | "
                f"{f['robust_accuracy']['count']:,} | {p['robust_accuracy']['count']:,} |"
            )
    return "\n".join(rows)


def training_table(results: dict) -> str:
    rows = [
        "| model | training images | epochs | best epoch | best val acc | reference best val | "
        "clean test acc | reference clean | train time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in results["models"].items():
        t, ref = m["training"], results["reference"].get(name, {})
        ref_val = f"{100 * ref['best_val_accuracy']:.2f} %" if "best_val_accuracy" in ref else ""
        ref_clean = f"{100 * ref['clean_accuracy']:.2f} %" if "clean_accuracy" in ref else ""
        rows.append(
            f"| {m['label']} | {t['train_size']:,} | {m['spec']['epochs']} | {t['best_epoch']} | "
            f"{100 * t['best_val_accuracy']:.2f} % | {ref_val} | {_pct(m['clean_accuracy'])} | "
            f"{ref_clean} | {t['seconds']:.0f} |"
        )
    return "\n".join(rows)


def evidence_table(results: dict) -> str:
    """Budget-curve end points, transfer and large-eps probes, worst class, per model."""
    rows = [
        "| model | eps | PGD steps curve (1 restart): k=0 -> k=K | restarts curve: r=1 -> r=R "
        "| transfer PGD from surrogate | white-box PGD |",
        "|---|---|---|---|---|---|",
    ]
    for m in results["models"].values():
        for eps, curves in m["budget_curves"].items():
            steps, restarts = curves["steps"] or [], curves["restarts"] or []
            rows.append(
                f"| {m['label']} | {eps}/255 | "
                + (f"{_pct(steps[0])} -> {_pct(steps[-1])} (K={len(steps) - 1})" if steps else "")
                + " | "
                + (
                    f"{_pct(restarts[0])} -> {_pct(restarts[-1])} (R={len(restarts)})"
                    if restarts
                    else ""
                )
                + f" | {_pct(m['transfer'][eps]) if eps in m['transfer'] else ''} | "
                f"{_pct(m['attacks']['pgd'][eps]['robust_accuracy']) if eps in m['attacks']['pgd'] else ''} |"
            )
    return "\n".join(rows)


def worst_class_table(results: dict) -> str:
    names = results["data"]["class_names"]
    rows = ["| model | attack / eps | worst class | its robust accuracy |", "|---|---|---|---|"]
    for m in results["models"].values():
        for label, worst in m["worst_class"].items():
            if worst and not label.endswith("_0"):
                attack, eps = label.rsplit("_", 1)
                rows.append(
                    f"| {m['label']} | {ATTACK_NAMES.get(attack, attack)} {eps}/255 | "
                    f"{names[worst['class']]} | {format_rate(worst['robust_accuracy'])} |"
                )
    return "\n".join(rows)


def checks_table(results: dict) -> str:
    rows = ["| check | result | evidence |", "|---|---|---|"]
    for c in results["checks"]:
        rows.append(f"| {c['name']} | {'pass' if c['passed'] else '**FAIL**'} | {c['evidence']} |")
    return "\n".join(rows)


def gate_text(results: dict) -> str:
    gate = results["gate"]
    failed = [r for r in gate["reasons"] if not r["passed"]]
    head = "**ALLOW**" if gate["allow"] else "**HOLD**"
    lines = [
        f"{head}: {len(gate['reasons']) - len(failed)} of {len(gate['reasons'])} conditions of "
        f"the declared policy (sha256 {gate['policy_sha256']}) passed."
    ]
    lines += [f"- FAIL {r['rule']}: {r['detail']}" for r in failed]
    return "\n".join(lines)


def tables_markdown(results: dict, strong: dict | None = None) -> str:
    parts = [
        "# CIFAR-10 robustness study: tables",
        f"Generated by `{results['command']}` at git revision `{results['environment']['git_revision']}` "
        f"(profile `{results['config']['profile']}`, seed {results['config']['seed']}, data "
        f"`{results['data']['source']}`, {results['data']['sizes']['eval']:,} evaluation images).",
        "Robust accuracy counts an example as robust only if it is classified correctly both clean and "
        "after the attack; attack success rate = flipped / initially correct. Reference numbers: the "
        "reproduced PyTorch study.",
        "## Threat model",
        "```\n" + results.get("threat_model_text", "") + "\n```",
        "## Release gate",
        gate_text(results),
        "## Training",
        training_table(results),
        "## Clean vs robust accuracy and attack success",
        main_table(results),
        "## Counts",
        counts_table(results),
        "## Trade-off and stronger evaluation",
        strong_table(results, strong),
    ]
    if "matched_defense_clean_cost" in results:
        std, adv = results["models"]["standard"], results["models"]["fgsm_matched"]
        parts += [
            "## Matched-budget finding",
            f"With the same 15,000 images and 12 epochs, FGSM adversarial training costs "
            f"{100 * results['matched_defense_clean_cost']:.1f} points of clean accuracy "
            f"({_pct(std['clean_accuracy'])} -> {_pct(adv['clean_accuracy'])}); PGD 8/255 robust accuracy "
            f"goes {_pct(std['attacks']['pgd'][max(std['attacks']['pgd'], key=float)]['robust_accuracy'])} -> "
            f"{_pct(adv['attacks']['pgd'][max(adv['attacks']['pgd'], key=float)]['robust_accuracy'])}.",
        ]
    parts += [
        "## Attack budget curves, transfer attack",
        evidence_table(results),
        "## Worst class",
        worst_class_table(results),
        "## Attack sanity checks",
        checks_table(results),
        "## Wall time per phase (s)",
        "| phase | seconds |\n|---|---|\n"
        + "\n".join(f"| {k} | {v:.0f} |" for k, v in results["timings_seconds"].items()),
    ]
    return "\n\n".join(parts) + "\n"


def figures(
    results: dict,
    out: Path,
    class_names,
    sample_images: np.ndarray | None,
    strong: dict | None = None,
) -> list[Path]:
    """Write the study's figures into out/figures; return their paths."""
    fig_dir = out / "figures"
    written = []

    def path(name):
        written.append(fig_dir / name)
        return fig_dir / name

    models = results["models"]
    eps_values = [float(e) for e in next(iter(models.values()))["attacks"]["pgd"]]
    top = max(next(iter(models.values()))["attacks"]["pgd"], key=float)
    if sample_images is not None:
        plots.image_grid(
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
    for metric, fname, ylabel in (
        ("robust_accuracy", "robust_accuracy_vs_eps.png", "robust accuracy (%)"),
        ("attack_success_rate", "attack_success_vs_eps.png", "attack success rate (%)"),
    ):
        series, refs = {}, {}
        for name, m in models.items():
            for attack, per_eps in m["attacks"].items():
                series[f"{m['label']} / {ATTACK_NAMES[attack]}"] = (
                    eps_values,
                    [100 * per_eps[e][metric]["value"] for e in per_eps],
                )
                ref = (
                    results["reference"]
                    .get(name, {})
                    .get(attack if metric == "robust_accuracy" else f"{attack}_success")
                )
                if ref:
                    refs[f"reference {name} / {ATTACK_NAMES[attack]}"] = (
                        list(ref),
                        [100 * v for v in ref.values()],
                    )
        plots.lines(
            series,
            markers=refs,
            title=f"{metric.replace('_', ' ').capitalize()} vs eps (L-inf, white-box)",
            xlabel="eps (/255)",
            ylabel=ylabel,
            path=path(fname),
        )
    labels = [m["label"] for m in models.values()]
    plots.grouped_bars(
        labels,
        {
            "clean": [100 * m["clean_accuracy"]["value"] for m in models.values()],
            f"FGSM {top}/255": [
                100 * m["attacks"]["fgsm"][top]["robust_accuracy"]["value"] for m in models.values()
            ],
            f"PGD {top}/255": [
                100 * m["attacks"]["pgd"][top]["robust_accuracy"]["value"] for m in models.values()
            ],
        },
        title="Clean vs robust accuracy trade-off",
        ylabel="accuracy (%)",
        path=path("clean_vs_robust.png"),
    )
    tradeoff_figure(results, strong, path("tradeoff_clean_vs_robust.png"))
    for name, m in models.items():
        plots.confusion_pair(
            {"clean": m["confusion"]["clean"], f"PGD {top}/255": m["confusion"][f"pgd_{top}"]},
            class_names,
            f"Confusion matrices: {m['label']}",
            path(f"confusion_{name}.png"),
        )
    nonzero = [e for e in next(iter(models.values()))["attacks"]["pgd"] if float(e) > 0]
    for eps in sorted({min(nonzero, key=float), top}, key=float):
        bars = {
            f"{m['label']} clean": [100 * r["value"] for r in m["per_class"]["clean"]]
            for m in models.values()
        }
        bars.update(
            {
                f"{m['label']} PGD {eps}/255": [
                    100 * r["value"] for r in m["per_class"][f"pgd_{eps}"]
                ]
                for m in models.values()
            }
        )
        plots.grouped_bars(
            list(class_names),
            bars,
            title=f"Per-class accuracy, clean and under PGD {eps}/255",
            ylabel="accuracy (%)",
            path=path(f"per_class_accuracy_pgd_{eps}.png"),
            annotate=False,
        )
    for what, xlabel in (("steps", "PGD steps (first restart)"), ("restarts", "random restarts")):
        series = {}
        for m in models.values():
            for eps, curves in m["budget_curves"].items():
                curve = curves[what]
                if curve:
                    start = 0 if what == "steps" else 1
                    series[f"{m['label']} eps {eps}/255"] = (
                        list(range(start, start + len(curve))),
                        [100 * r["value"] for r in curve],
                    )
        plots.lines(
            series,
            title=f"Robust accuracy vs PGD {what} (one run, first-break tracking)",
            xlabel=xlabel,
            ylabel="robust accuracy (%)",
            path=path(f"budget_curve_{what}.png"),
        )
    for name, m in models.items():
        with np.load(out / "examples" / f"{name}.npz") as saved:
            k = min(8, len(saved["x_clean"]))
            magnify = 10.0
            plots.adversarial_grid(
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
    return written


def write_report(results: dict, out) -> None:
    """Write tables.md, figures/*.png and report.html from results.json and the files beside it."""
    out = Path(out)
    strong = load_strong(out)
    atomic_write_text(out / "tables.md", tables_markdown(results, strong))
    samples_path = out / SAMPLES_FILE
    samples = None
    if samples_path.exists():
        with np.load(samples_path) as saved:
            samples = saved["images"].astype(np.float32) / 255.0
    figures(results, out, results["data"]["class_names"], samples, strong)
    write_html_report(
        results,
        out,
        {
            "Training": training_table(results),
            "Trade-off and stronger evaluation": strong_table(results, strong),
            "Attack budget curves and transfer attack": evidence_table(results),
            "Worst class": worst_class_table(results),
        },
    )
