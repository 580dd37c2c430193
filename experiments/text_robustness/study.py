"""The text robustness study's phases: train, evaluate, attack, aggregate, gate, report."""

import time
from pathlib import Path

import numpy as np

from advjax.evaluation import decide
from advjax.evaluation.gate import format_decision, load_policy
from advjax.evaluation.stats import format_rate, rate
from advjax.io import environment
from advjax.records import atomic_write_json, atomic_write_lines, atomic_write_text
from advjax_text import ValidityRule
from advjax_text.classify import predict_logits
from experiments.cli import results_folder
from experiments.plots import save_figure
from experiments.text_robustness import pipeline as tp
from experiments.text_robustness import report as tr

POLICY = Path(__file__).with_name("policy.json")


def run(config, out: Path, *, text_dir=None, show_progress=True, command="", policy=POLICY) -> dict:
    """Every phase of the study; returns results.json's content."""
    start = time.time()
    log_lines: list[str] = []

    def log(line: str) -> None:
        log_lines.append(line)
        print(line, flush=True)

    data = tp.load_data(text_dir)
    vocab, models = tp.train_models(config, data, log)
    max_len = config.classifier.max_len
    clean = {m.name: tp.clean_eval(m, vocab, data, max_len) for m in models}
    for name, c in clean.items():
        log(f"{name}: " + "; ".join(f"{k} {format_rate(v)}" for k, v in c.items()))
    cases = tp.eval_cases(config, len(data.dev.sentences))
    judges = tp.make_judges(config, data)
    records = tp.run_attacks(config, data, models, cases, judges, show_progress=show_progress)
    # clean accuracy of the batched eval on exactly the attacked cases (oracle consistency)
    sub = [data.dev.sentences[i] for i in cases]
    labels = np.asarray([data.dev.labels[i] for i in cases])
    clean_cases = {
        m.name: rate(
            int(
                (
                    predict_logits(m.state, vocab.encode_texts(sub, max_len=max_len)).argmax(-1)
                    == labels
                ).sum()
            ),
            len(cases),
        )
        for m in models
    }
    # direct re-runs at the declared points, to check the derived outcomes
    reruns = []
    by_key = {(r.model, r.attack, r.case_id): r for r in records}
    for model in models:
        for attack in config.attacks:
            for q, s in config.points:
                for case_id in cases[: config.rerun_cases]:
                    direct = tp.attack_case(
                        config,
                        data,
                        model,
                        attack,
                        case_id,
                        max_queries=q,
                        max_share=s,
                        judge=judges[attack],
                    )
                    derived = tr.derive(
                        [by_key[(model.name, attack, case_id)]], judges, max_queries=q, max_share=s
                    )[0]
                    reruns.append((derived, direct))
    rule_text = ValidityRule(max_share=config.max_share, chrf_floor=config.chrf_floor).describe()
    checks = tr.sanity_checks(records, reruns, clean_cases, data.antonyms)
    point_data = tr.points(records, judges, config)
    curve_data = tr.curves(records, judges, config)
    summary = tr.gate_summary(
        [recs for _, recs in point_data], config, rule_text, checks, extra={"command": command}
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_lines(out / "records.jsonl.gz", (r.to_json() for r in records))
    (out / "records.jsonl").unlink(missing_ok=True)  # a plain file of an earlier run
    atomic_write_json(out / "summary.json", summary)
    policy_parsed, policy_hash = load_policy(policy)
    decision = decide(policy_parsed, summary)
    gate_text = format_decision(decision) + f"\n  policy {policy} (sha256 {policy_hash})\n"
    atomic_write_text(out / "gate.txt", gate_text)
    tr.plot_curves(curve_data, out / "budget_curves.png", save_figure)
    env = environment(extra_packages=("sacrebleu",))
    results = {
        "command": command,
        "config": config.to_dict(),
        "threat_model": summary["threat_model"],
        "validity_rule": rule_text,
        "models": {
            m.name: {"version": m.version, "history": m.history, "clean": clean[m.name]}
            for m in models
        },
        "vocabulary_size": len(vocab),
        "cases": cases,
        "operating_points": [s for s, _ in point_data],
        "budget_curves": curve_data,
        "checks": [c._asdict() for c in checks],
        "gate": {"allow": decision.allow, "text": gate_text},
        "seconds": round(time.time() - start, 1),
        "environment": env,
        "folder": results_folder(out),
    }
    atomic_write_json(out / "results.json", results)
    atomic_write_json(
        out / "provenance.json",
        {"command": command, "config": config.to_dict(), "environment": env, "log": log_lines},
    )
    atomic_write_text(out / "tables.md", tables_markdown(results))
    log(f"wrote {out} in {results['seconds']} s; gate: {'ALLOW' if decision.allow else 'HOLD'}")
    return results


def tables_markdown(results: dict) -> str:
    """The report: clean / AdvGLUE accuracy, the denominators table, the budget curves."""
    lines = [
        "# Text robustness (SST-2 word-CNN)",
        "",
        f"Command: `{results['command']}`  ",
        f"Git revision: {results['environment']['git_revision']}",
        "",
        f"Validity rule: {results['validity_rule']}.",
        "",
        "## Clean accuracy (Wilson 95 % intervals)",
        "",
        "| model | version | SST-2 dev | AdvGLUE SST-2 dev | MR (Pang & Lee; SST was built from the same reviews, so not a new domain) |",
        "|---|---|---|---|---|",
    ]
    for name, m in results["models"].items():
        c = m["clean"]
        lines.append(
            f"| {name} | {m['version']} | {format_rate(c['sst2_dev'])} | "
            f"{format_rate(c['advglue_sst2_dev'])} | {format_rate(c['mr'])} |"
        )
    lines += [
        "",
        "## Denominators at the declared operating points",
        "",
        "Robust accuracy = (failed + budget exhausted) / (cases - invalid); valid attack "
        "success rate = success / (success + failed + budget exhausted); invalid = the label "
        "flipped on a sentence that breaks the validity rule (validity is recorded for every "
        "case; an unflipped case is never invalid). Points below the "
        "largest caps are derived from the one run's per-case traces (exact in status and "
        "queries; checked against direct re-runs, see checks).",
        "",
        tr.denominators_table(results["operating_points"]),
        "",
        "## Budget curves",
        "",
    ]
    for name, curve in results["budget_curves"].items():
        lines += [
            f"### {name}",
            "",
            tr.curve_table(curve, "queries"),
            "",
            tr.curve_table(curve, "share"),
            "",
        ]
    lines += ["## Checks", ""] + [
        f"- {'pass' if c['passed'] else 'FAIL'} {c['name']}: {c['evidence']}"
        for c in results["checks"]
    ]
    lines += ["", "## Release gate", "", "```", results["gate"]["text"].rstrip(), "```", ""]
    return "\n".join(lines)
