"""Tables, budget curves, the gate-readable summary and sanity checks of the text study,
all computed from the per-case records (and their traces) alone.
"""

from collections.abc import Callable, Sequence

from advjax.evaluation import Check, ThreatModel, run_summary
from advjax.evaluation.stats import format_rate
from advjax_text import TextCaseRecord, derive_record, gate_group, summarise


def point_name(attack: str, max_queries: int) -> str:
    """The gate's attack name of an operating point, e.g. 'textfooler@q500'."""
    return f"{attack}@q{max_queries}"


def derive(
    records: Sequence[TextCaseRecord], judges: dict, *, max_queries: int, max_share: float
) -> list[TextCaseRecord]:
    """Every record at smaller caps (identity at the run's own caps)."""
    return [
        r
        if (r.max_queries, r.max_share) == (max_queries, max_share)
        else derive_record(r, max_queries=max_queries, max_share=max_share, judge=judges[r.attack])
        for r in records
    ]


def by_group(records: Sequence[TextCaseRecord]) -> dict:
    out: dict = {}
    for r in records:
        out.setdefault((r.model, r.attack), []).append(r)
    return out


def curves(records: Sequence[TextCaseRecord], judges: dict, config) -> dict:
    """Per (model, attack): summaries vs query cap (at max_share) and vs share (at max_queries)."""
    out = {}
    for (model, attack), group in by_group(records).items():
        out[f"{model}/{attack}"] = {
            "queries": [
                {
                    "cap": q,
                    **summarise(derive(group, judges, max_queries=q, max_share=config.max_share)),
                }
                for q in config.query_caps
            ],
            "share": [
                {
                    "cap": s,
                    **summarise(derive(group, judges, max_queries=config.max_queries, max_share=s)),
                }
                for s in config.share_caps
            ],
        }
    return out


def points(records: Sequence[TextCaseRecord], judges: dict, config) -> list[tuple[dict, list]]:
    """(summary, derived records) at every declared operating point of every group."""
    out = []
    for (_, _), group in by_group(records).items():
        for q, s in config.points:
            derived = derive(group, judges, max_queries=q, max_share=s)
            out.append((summarise(derived), derived))
    return out


def _q(v) -> str:
    return "-" if v is None else f"{v:g}"


def denominators_table(summaries: Sequence[dict]) -> str:
    """Markdown: one row per (model, attack, caps) with every count and rate."""
    head = (
        "| model | attack | queries | share | n | clean acc | skipped (clean wrong) | success | "
        "failed | budget exhausted | invalid | valid attack success rate | robust accuracy "
        "(valid set) | median / p90 queries |\n|" + "---|" * 14
    )
    rows = []
    for s in summaries:
        c = s["status_counts"]
        rows.append(
            f"| {s['model']} | {s['attack']} | {s['max_queries']} | {100 * s['max_share']:g} % | "
            f"{s['cases']} | {format_rate(s['clean_accuracy'])} | {c['skipped_clean_wrong']} | "
            f"{c['success']} | {c['failed']} | {c['budget_exhausted']} | {c['invalid']} | "
            f"{format_rate(s['attack_success_rate'])} | {format_rate(s['robust_accuracy'])} | "
            f"{_q(s['queries_attacked']['median'])} / {_q(s['queries_attacked']['p90'])} |"
        )
    return "\n".join([head, *rows])


def curve_table(curve: dict, kind: str) -> str:
    """Markdown: robust accuracy (and counts) along one budget curve."""
    label = "query cap" if kind == "queries" else "max share of edited words"
    lines = [
        f"| {label} | robust accuracy | success | budget exhausted | invalid |",
        "|---|---|---|---|---|",
    ]
    for p in curve[kind]:
        cap = p["cap"] if kind == "queries" else f"{100 * p['cap']:g} %"
        c = p["status_counts"]
        lines.append(
            f"| {cap} | {format_rate(p['robust_accuracy'])} | {c['success']} | "
            f"{c['budget_exhausted']} | {c['invalid']} |"
        )
    return "\n".join(lines)


def threat_model(config, rule_text: str) -> ThreatModel:
    """The study's declared threat model (eps = maximum share of changed words)."""
    shares = sorted({s for _, s in config.points} | {config.max_share})
    return ThreatModel(
        eps=tuple(shares),
        steps=0,
        restarts=1,
        knowledge="scores",
        norm="linf",
        queries=config.max_queries,
        protected_asset="the sentiment classifier's top-1 label on each SST-2 dev sentence",
        validity_rule=f"{rule_text}; eps is the maximum share of changed words",
    )


def sanity_checks(
    records: Sequence[TextCaseRecord], reruns: Sequence[tuple], clean: dict, antonyms: frozenset
) -> list[Check]:
    """Checks the gate requires: caps respected, no antonyms, derived = direct re-runs, ..."""
    over = [r for r in records if r.queries > r.max_queries]
    too_many = [r for r in records if r.status != "invalid" and r.changed_words > r.max_changes]
    antonym = [
        r
        for r in records
        if r.status != "invalid"
        and any((e.old.lower(), e.new.lower()) in antonyms for e in r.edits)
    ]
    mismatched = [
        (a.case_id, a.status, b.status)
        for a, b in reruns
        if (a.status, a.queries) != (b.status, b.queries)
    ]
    checks = [
        Check(
            "queries_within_cap",
            not over,
            f"{len(over)} of {len(records)} records over their query cap",
        ),
        Check(
            "share_within_cap",
            not too_many,
            f"{len(too_many)} valid records change more words than their cap allows",
        ),
        Check("no_antonym_in_valid", not antonym, f"{len(antonym)} valid records use an antonym"),
        Check(
            "derived_equals_rerun",
            bool(reruns) and not mismatched,
            f"{len(reruns) - len(mismatched)} of {len(reruns)} direct re-runs at smaller caps "
            f"match the derived status and query count"
            + (f"; first mismatches {mismatched[:3]}" if mismatched else ""),
        ),
    ]
    for (model, attack), group in by_group(records).items():
        rec = summarise(group)["clean_accuracy"]
        batch = clean[model]
        ok = rec["count"] == batch["count"] and rec["total"] == batch["total"]
        checks.append(
            Check(
                f"clean_accuracy_consistent[{model}/{attack}]",
                ok,
                f"black-box oracle {format_rate(rec)} vs batched eval on the same cases {format_rate(batch)}",
            )
        )
    return checks


def gate_summary(
    point_records: Sequence[list], config, rule_text: str, checks: Sequence[Check], extra: dict
) -> dict:
    """The `advjax.evaluation` document the release gate reads."""
    tm = threat_model(config, rule_text)
    groups = [
        gate_group(
            recs,
            attack=point_name(recs[0].attack, recs[0].max_queries),
            threat_model_hash=tm.digest(),
        )
        for recs in point_records
    ]
    return run_summary(groups, checks, tm, extra=extra)


def plot_curves(curve_data: dict, path, save: Callable) -> None:
    """Robust accuracy vs query cap (log x) and vs max share of edited words, with CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, curve in sorted(curve_data.items()):
        for ax, kind in zip(axes, ("queries", "share")):
            xs = [p["cap"] * (100 if kind == "share" else 1) for p in curve[kind]]
            ys = [100 * p["robust_accuracy"]["value"] for p in curve[kind]]
            lo = [100 * p["robust_accuracy"]["ci95"][0] for p in curve[kind]]
            hi = [100 * p["robust_accuracy"]["ci95"][1] for p in curve[kind]]
            ax.plot(xs, ys, marker="o", label=name)
            ax.fill_between(xs, lo, hi, alpha=0.15)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("query cap per case (max share fixed at the largest)")
    axes[1].set_xlabel("max share of edited words, % (query cap fixed at the largest)")
    for ax in axes:
        ax.set_ylabel("robust accuracy on the valid set, %")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("SST-2 dev: robust accuracy vs attack budget (derived from one run's traces)")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
