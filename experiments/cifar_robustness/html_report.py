"""One HTML page per run that opens on its answer: the gate, robustness per eps, one figure.

The first screen holds the release gate's decision and its failed conditions, the model x
eps matrix of robust accuracy under the strongest attack run, and the clean-vs-robust
figure (embedded); the threat model, every table, check and count, and the other figures
(linked beside the page) sit in collapsed sections below. No script, font or remote file.
Every percentage in the tables links to its row of counts.
"""

import base64
import html
from pathlib import Path

from advjax.evaluation.stats import format_rate
from advjax.records import atomic_write_text
from experiments.cifar_robustness.tradeoff import ensemble_rate, strong_name

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0} tr:target{background:#fff3b0}
.pass{color:#176317;font-weight:bold} .fail{color:#b00020;font-weight:bold}
.allow{background:#e3f5e3;border:2px solid #176317;padding:1em}
.hold{background:#fde7ea;border:2px solid #b00020;padding:1em}
pre{background:#f6f6f6;padding:1em;white-space:pre-wrap}
figure{display:inline-block;margin:0.5em;max-width:48%} figure img{max-width:100%}
#first-screen{display:flex;gap:1.5em;align-items:flex-start;flex-wrap:wrap}
#first-screen>div{flex:1 1 420px} #first-screen img{max-width:100%;max-height:440px}
details{margin:0.6em 0} summary{cursor:pointer;font-weight:bold;font-size:1.05em}
h1{margin:0.2em 0;font-size:1.5em} .meta{color:#555;font-size:13px;margin:0.2em 0 0.6em}
#gate-decision h2{margin:0 0 0.3em;font-size:1.2em} #gate-decision{padding:0.6em 1em}
#gate-decision table,#robustness-matrix{font-size:12px;margin:0.4em 0}
#robustness-matrix td{white-space:nowrap;padding:2px 6px} #gate-decision p{margin:0.3em 0}
"""

MAX_FAILED_SHOWN = 3

ATTACK_NAMES = {"fgsm": "FGSM", "pgd": "PGD"}


def _e(text) -> str:
    return html.escape(str(text))


def _table(header: list[str], rows: list[list[str]], table_id: str = "") -> str:
    """Rows are lists of already-escaped HTML cells; the first cell may carry a row id."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for row in rows:
        row_id = ""
        if isinstance(row, tuple):
            row_id, row = row
            row_id = f' id="{_e(row_id)}"'
        body.append(f"<tr{row_id}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    attr = f' id="{table_id}"' if table_id else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _count_id(model: str, attack: str, eps: str) -> str:
    return f"counts-{model}-{attack}-{eps}"


def _link(r: dict, anchor: str) -> str:
    return f'<a href="#{anchor}">{_e(format_rate(r))}</a>'


def _verdict(passed: bool) -> str:
    return f'<span class="{"pass" if passed else "fail"}">{"pass" if passed else "FAIL"}</span>'


def _reasons_table(reasons: list[dict]) -> str:
    rows = [[_verdict(r["passed"]), _e(r["rule"]), _e(r["detail"])] for r in reasons]
    return _table(["result", "rule", "evidence"], rows)


def gate_section(results: dict) -> str:
    """The gate's verdict, the model it judged and up to `MAX_FAILED_SHOWN` failed rules."""
    gate = results["gate"]
    verdict = gate.get("verdict") or ("ALLOW" if gate["allow"] else "HOLD")
    failed = [r for r in gate["reasons"] if not r["passed"]]
    models = ", ".join(gate.get("policy", {}).get("models", [])) or "every model"

    more = len(failed) - MAX_FAILED_SHOWN
    css = {"ALLOW": "allow"}.get(verdict, "hold")
    return (
        f'<div id="gate-decision" class="{css}"><h2>Release gate: {verdict} ({_e(models)})</h2>'
        f"<p>{len(gate['reasons']) - len(failed)} of {len(gate['reasons'])} conditions of the "
        f"policy declared before the run passed.</p>"
        + (_reasons_table(failed[:MAX_FAILED_SHOWN]) if failed else "")
        + (f"<p>and {more} more failed conditions (below).</p>" if more > 0 else "")
        + "</div>"
    )


def strongest(results: dict, strong: dict | None, name: str, eps: str) -> tuple[str, dict]:
    """(attack name, robust-accuracy rate) of the attack that left model `name` the fewest
    robust cases at `eps` (/255): FGSM, PGD-20 or the strong evaluation where it ran (the
    first of them on a tie)."""
    attacks = results["models"][name]["attacks"]
    options = [(ATTACK_NAMES[a], per_eps[eps]["robust_accuracy"]) for a, per_eps in attacks.items()]
    rate = ensemble_rate(strong, name, float(eps) / 255)
    if rate:
        options.append((strong_name(strong), rate))
    return min(options, key=lambda o: o[1]["count"])


def _compact(rate: dict) -> str:
    """'8.3 % (6.7-10.2)' with the count in the tooltip: one line per cell."""
    lo, hi = rate["ci95"]
    return (
        f'<span title="{rate["count"]:,}/{rate["total"]:,}">{100 * rate["value"]:.1f} %</span> '
        f"<small>({100 * lo:.1f}-{100 * hi:.1f})</small>"
    )


def robustness_matrix(results: dict, strong: dict | None) -> str:
    """Models x eps: robust accuracy (95 % CI) under the strongest attack, named."""
    first = next(iter(results["models"].values()))
    eps_values = [e for e in first["attacks"]["pgd"] if float(e) > 0]
    rows = []
    for name, m in results["models"].items():
        cells = [f"<b>{_e(name)}</b>", _compact(m["clean_accuracy"])]
        for eps in eps_values:
            attack, rate = strongest(results, strong, name, eps)
            cells.append(f"{_compact(rate)} <small>{_e(attack)}</small>")
        rows.append(cells)
    return _table(
        ["model", "clean", *(f"robust {e}/255" for e in eps_values)], rows, "robustness-matrix"
    )


def _embedded(png: Path) -> str:
    if not png.exists():
        return ""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<img id="first-figure" alt="{_e(png.stem)}" src="data:image/png;base64,{data}">'


def main_table(results: dict) -> str:
    rows = []
    for name, m in results["models"].items():
        for attack, per_eps in m["attacks"].items():
            for eps, s in per_eps.items():
                anchor = _count_id(name, attack, eps)
                rows.append(
                    [
                        _e(m["label"]),
                        ATTACK_NAMES[attack],
                        f"{_e(eps)}/255",
                        _link(s["clean_accuracy"], anchor),
                        _link(s["robust_accuracy"], anchor),
                        _link(s["attack_success_rate"], anchor),
                    ]
                )
    return _table(
        [
            "model",
            "attack",
            "eps",
            "clean accuracy",
            "robust accuracy (95 % CI)",
            "attack success (flipped / initially correct)",
        ],
        rows,
        "main-table",
    )


def counts_table(results: dict) -> str:
    statuses = ("skipped_clean_wrong", "success", "failed", "budget_exhausted", "invalid")
    rows = []
    for name, m in results["models"].items():
        for label, counts in m["status_counts"].items():
            attack, eps = label.rsplit("_", 1)
            rows.append(
                (
                    _count_id(name, attack, eps),
                    [
                        _e(m["label"]),
                        ATTACK_NAMES.get(attack, attack),
                        f"{_e(eps)}/255",
                        *(f"{counts[s]:,}" for s in statuses),
                        f"{sum(counts.values()):,}",
                    ],
                )
            )
    return _table(["model", "attack", "eps", *statuses, "records"], rows, "counts-table")


def checks_table(results: dict) -> str:
    rows = [
        [_verdict(c["passed"]), _e(c["name"]), _e(c["evidence"])]
        for c in sorted(results["checks"], key=lambda c: c["passed"])
    ]
    return _table(["result", "check", "evidence"], rows, "checks-table")


def _figures(out: Path) -> str:
    parts = []
    for png in sorted((out / "figures").glob("*.png")):
        rel = png.relative_to(out).as_posix()
        parts.append(
            f'<figure><a href="{_e(rel)}"><img loading="lazy" alt="{_e(png.stem)}" '
            f'src="{_e(rel)}"></a><figcaption>{_e(png.name)}</figcaption></figure>'
        )
    return "".join(parts)


def _section(title: str, content: str, section_id: str = "") -> str:
    attr = f' id="{section_id}"' if section_id else ""
    return f"<details{attr}><summary>{_e(title)}</summary>{content}</details>"


def render(
    results: dict, out: Path, markdown_sections: dict[str, str], strong: dict | None = None
) -> str:
    """The page's HTML text; `strong` is the strong evaluation's summary, where it ran."""
    env = results["environment"]
    n_checks = len(results["checks"])
    n_failed = sum(not c["passed"] for c in results["checks"])
    body = [
        "<h1>CIFAR-10 robustness study</h1>",
        f'<p class="meta">{results["data"]["sizes"]["eval"]:,} evaluation images, '
        f"{len(results['models'])} models, {results['records']['count']:,} per-case records; "
        f"{n_checks - n_failed} of {n_checks} sanity checks passed; git "
        f"<code>{_e(env['git_revision'][:12])}</code>, <code>{_e(results['command'])}</code></p>",
        '<div id="first-screen"><div>',
        gate_section(results),
        "<p>Robust accuracy under the strongest attack run at each eps (L-inf, untargeted, "
        "white-box; Wilson 95 % intervals):</p>",
        robustness_matrix(results, strong),
        "</div><div>",
        _embedded(out / "figures" / "clean_vs_robust.png"),
        "</div></div>",
        _section(
            "Threat model (declared before any attack)",
            f'<pre id="threat-model">{_e(results["threat_model_text"])}</pre>',
        ),
        _section(
            "Every gate condition",
            _reasons_table(results["gate"]["reasons"])
            + f"<p>policy sha256 {_e(results['gate']['policy_sha256'])}</p>",
        ),
        _section(
            "Clean and robust accuracy, every attack and eps",
            "<p>Robust accuracy: correct on the clean and on the attacked input, over all "
            "cases. Each percentage links to its counts.</p>" + main_table(results),
            "main-section",
        ),
        _section(
            f"Attack sanity checks: {n_checks - n_failed} of {n_checks} passed",
            checks_table(results),
        ),
    ]
    for title, text in markdown_sections.items():
        body.append(_section(title, f"<pre>{_e(text)}</pre>"))
    body += [
        _section("Counts per status", counts_table(results), "counts-section"),
        _section("Figures", _figures(out), "figures-section"),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>advjax: CIFAR-10 robustness study</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    )


def write_html_report(
    results: dict, out, markdown_sections: dict[str, str], strong: dict | None = None
) -> Path:
    """Write out/report.html (atomically) and return its path."""
    out = Path(out)
    return atomic_write_text(out / "report.html", render(results, out, markdown_sections, strong))
