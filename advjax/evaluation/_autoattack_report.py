"""A one-page HTML report of an AutoAttack run: decision, robust accuracy after each member
with its interval, per-class robust accuracy, checks and the threat model; self-contained
(no script, no external file), written atomically."""

import html

from advjax.evaluation._autoattack_records import AUTOATTACK
from advjax.evaluation._metrics import format_rate, rate
from advjax.records import atomic_write_text

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}.pass{color:#176b2c}.fail{color:#b3261e;font-weight:600}
.bar{display:inline-block;height:.8em;background:#3b6fb6;vertical-align:middle}
pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:13px}
"""


def _pct(rate: dict) -> str:
    return format_rate(rate)


def cumulative_rows(groups: list[dict], members, model: str) -> list[tuple[str, dict]]:
    """(label, rate) of clean accuracy, then robust accuracy after each member: the cases
    clean-correct minus those broken by that member or an earlier one (Wilson intervals)."""
    by_attack = {g["attack"]: g for g in groups if g["model"] == model}
    final = by_attack[AUTOATTACK]
    total = final["cases"]
    robust = final["clean_accuracy"]["count"]
    rows = [("clean", final["clean_accuracy"])]
    for m in members:
        group = by_attack.get(m.name)
        robust -= group["status_counts"]["success"] if group else 0
        rows.append((f"after {m.name}", rate(robust, total)))
    return rows


def report_html(summary: dict, groups: list[dict], members, model: str, decision: str) -> str:
    """The page as a string (pure)."""
    final = next(g for g in groups if g["model"] == model and g["attack"] == AUTOATTACK)
    member_rows = "".join(
        f"<tr><td>{html.escape(label)}</td><td>{_pct(r)}</td>"
        f"<td><span class=bar style='width:{12 * r['value']:.2f}em'></span></td></tr>"
        for label, r in cumulative_rows(groups, members, model)
    )
    classes = "".join(
        f"<tr><td>{html.escape(str(c['class']))}</td><td>{_pct(c['robust_accuracy'])}</td></tr>"
        for c in final["per_class"]
    )
    checks = "".join(
        f"<tr><td>{html.escape(c['name'])}</td><td class={'pass' if c['passed'] else 'fail'}>"
        f"{'pass' if c['passed'] else 'FAIL'}</td><td style='text-align:left'>"
        f"{html.escape(c['evidence'])}</td></tr>"
        for c in summary["checks"]
    )
    verdict = decision.strip() or "no release policy given"
    command = html.escape(summary.get("extra", {}).get("command", ""))
    threat = html.escape(summary.get("extra", {}).get("threat_model_text", ""))
    return f"""<!doctype html><html lang=en><meta charset=utf-8>
<title>AutoAttack: {html.escape(model)}</title><style>{STYLE}</style>
<h1>{html.escape(model)}: {_pct(final["robust_accuracy"])} robust under AutoAttack</h1>
<p>Gate: <b>{html.escape(verdict.splitlines()[0])}</b></p>
<h2>Robust accuracy after each member (cumulative)</h2>
<table><tr><th></th><th>accuracy</th><th></th></tr>{member_rows}</table>
<h2>Checks</h2><table><tr><th>check</th><th></th><th>evidence</th></tr>{checks}</table>
<h2>Per class</h2><table><tr><th>class</th><th>robust accuracy</th></tr>{classes}</table>
<h2>Threat model</h2><pre>{threat}</pre>
<h2>Gate</h2><pre>{html.escape(verdict)}</pre>
<p><code>{command}</code></p></html>
"""


def write_report(path, summary, groups, members, model: str, decision: str) -> None:
    atomic_write_text(path, report_html(summary, groups, members, model, decision))
