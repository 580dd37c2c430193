"""One self-contained HTML page per run: threat model, gate, tables, checks, figures inline.

No external file, script or font: figures are embedded as base64 PNG, so the page opens
offline in any browser. Every percentage in the main table links to its row of counts.
"""

import base64
import html
from pathlib import Path

from advjax.evaluation import format_rate
from advjax.io import atomic_write_text

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
"""

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


def gate_section(results: dict) -> str:
    gate = results["gate"]
    verdict = "ALLOW" if gate["allow"] else "HOLD"
    failed = [r for r in gate["reasons"] if not r["passed"]]

    def rows(reasons):
        return [
            [
                f'<span class="{"pass" if r["passed"] else "fail"}">'
                f"{'pass' if r['passed'] else 'FAIL'}</span>",
                _e(r["rule"]),
                _e(r["detail"]),
            ]
            for r in reasons
        ]

    return (
        f'<div id="gate-decision" class="{verdict.lower()}"><h2>Release gate: {verdict}</h2>'
        f"<p>{len(gate['reasons']) - len(failed)} of {len(gate['reasons'])} conditions of the "
        f"policy declared before the run passed (policy sha256 {_e(gate['policy_sha256'])}).</p>"
        + (_table(["result", "rule", "evidence"], rows(failed)) if failed else "")
        + "<details><summary>every condition</summary>"
        + _table(["result", "rule", "evidence"], rows(gate["reasons"]))
        + "</details></div>"
    )


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
        [
            f'<span class="{"pass" if c["passed"] else "fail"}">{"pass" if c["passed"] else "FAIL"}'
            f"</span>",
            _e(c["name"]),
            _e(c["evidence"]),
        ]
        for c in sorted(results["checks"], key=lambda c: c["passed"])
    ]
    return _table(["result", "check", "evidence"], rows, "checks-table")


def _figures(out: Path) -> str:
    parts = []
    for png in sorted((out / "figures").glob("*.png")):
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(
            f'<figure><img alt="{_e(png.stem)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(png.name)}</figcaption></figure>"
        )
    return "".join(parts)


def render(results: dict, out: Path, markdown_sections: dict[str, str]) -> str:
    """The page's HTML text."""
    env = results["environment"]
    n_checks = len(results["checks"])
    n_failed = sum(not c["passed"] for c in results["checks"])
    body = [
        "<h1>CIFAR-10 robustness study</h1>",
        f"<p>Command <code>{_e(results['command'])}</code>, git revision "
        f"<code>{_e(env['git_revision'])}</code>, {results['data']['sizes']['eval']:,} evaluation "
        f"images, {results['records']['count']:,} per-case records "
        f"(<code>{_e(results['records']['file'])}</code>).</p>",
        "<h2>Threat model (declared before any attack)</h2>",
        f'<pre id="threat-model">{_e(results["threat_model_text"])}</pre>',
        gate_section(results),
        "<h2>Clean vs robust accuracy</h2>",
        "<p>Robust accuracy: correct on the clean and on the attacked input, over all cases. "
        "Each percentage links to its counts.</p>",
        main_table(results),
        f"<h2>Attack sanity checks: {n_checks - n_failed} of {n_checks} passed</h2>",
        checks_table(results),
    ]
    for title, text in markdown_sections.items():
        body.append(f"<h2>{_e(title)}</h2><pre>{_e(text)}</pre>")
    body += ["<h2>Counts per status</h2>", counts_table(results), "<h2>Figures</h2>", _figures(out)]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>advjax: CIFAR-10 robustness study</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    )


def write_html_report(results: dict, out, markdown_sections: dict[str, str]) -> Path:
    """Write out/report.html (atomically) and return its path."""
    out = Path(out)
    return atomic_write_text(out / "report.html", render(results, out, markdown_sections))
