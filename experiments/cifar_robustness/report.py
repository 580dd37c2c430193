"""Markdown tables and PNG figures of the study, built from results.json and attack records."""

from pathlib import Path

import numpy as np

from advjax.evaluation.stats import format_rate
from advjax.records import atomic_write_text
from experiments.cifar_robustness.figures import figures
from experiments.cifar_robustness.html_report import write_html_report
from experiments.cifar_robustness.study import SAMPLES_FILE
from experiments.cifar_robustness.tradeoff import load_strong, strong_table

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
        "| model | eps | cases | PGD steps curve (1 restart): k=0 -> k=K | restarts curve: "
        "r=1 -> r=R | transfer PGD (source) | white-box PGD |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in results["models"].values():
        source = m.get("transfer_source") or results.get("surrogate", {}).get("spec", {}).get(
            "name"
        )
        for eps, curves in m["budget_curves"].items():
            steps, restarts = curves["steps"] or [], curves["restarts"] or []
            transfer = m["transfer"].get(eps)
            rows.append(
                f"| {m['label']} | {eps}/255 | {curves['robust_accuracy']['total']:,} | "
                + (f"{_pct(steps[0])} -> {_pct(steps[-1])} (K={len(steps) - 1})" if steps else "")
                + " | "
                + (
                    f"{_pct(restarts[0])} -> {_pct(restarts[-1])} (R={len(restarts)})"
                    if restarts
                    else ""
                )
                + f" | {f'{_pct(transfer)} ({source})' if transfer else ''} | "
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
    head = f"**{gate.get('verdict') or ('ALLOW' if gate['allow'] else 'HOLD')}**"
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
        strong,
    )
