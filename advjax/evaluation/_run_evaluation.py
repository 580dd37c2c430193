"""An AutoAttack evaluation of one model into a folder, from records to release decision:
what `python -m advjax.evaluate` runs, as one call. The folder's one-page HTML report
(decision, robust accuracy after each member with its interval, per-class robust accuracy,
checks and the threat model) is self-contained (no script, no external file) and written
atomically."""

import contextlib
import html
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from advjax.data import EvalCases
from advjax.evaluation._aggregate import aggregate_records
from advjax.evaluation._attack_spec import AttackSpec
from advjax.evaluation._attack_times import add_attack_time, untimed_records
from advjax.evaluation._autoattack import FAST, eps_zero_check
from advjax.evaluation._autoattack_checks import black_box_check, probe_checks
from advjax.evaluation._autoattack_records import (
    AUTOATTACK,
    AutoAttackConfig,
    broken_by_member,
    fast_outcome,
    member_passes,
    model_checks_on_every_process,
    run_autoattack,
)
from advjax.evaluation._gate import decide, format_decision, load_policy
from advjax.evaluation._metrics import format_rate, rate
from advjax.evaluation._model import Model
from advjax.evaluation._processes import (
    process_folder,
    process_record_files,
    this_process,
    wait_for_every_process,
)
from advjax.evaluation._sanity import check_finite_loss, check_perturbations
from advjax.evaluation._summary import run_summary
from advjax.io import OutputLock, Progress, environment
from advjax.records import (
    ProcessRecordLog,
    RecordLog,
    atomic_write_json,
    atomic_write_text,
    merge_record_files,
    record_file,
)

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
GATE_FILE = "gate.txt"


class Evaluation(NamedTuple):
    """What `run_evaluation` wrote: the run summary, the gate's verdict ("ALLOW", "HOLD",
    "ROLLBACK"; None without a policy) and its exit code (0 without a policy). Under
    `jax.distributed`, processes other than 0 return summary None and exit code 0."""

    summary: dict | None
    verdict: str | None
    exit_code: int


def run_evaluation(
    out: str | Path,
    model: Model,
    cases: EvalCases,
    config: AutoAttackConfig,
    *,
    key: jax.Array,
    mesh: jax.sharding.Mesh | None = None,
    policy: str | Path | None = None,
    command: str | None = None,
    show_progress: bool = True,
    log_line: Callable[[str], None] = print,
) -> Evaluation:
    """AutoAttack every case into the folder `out` and judge the run (`run_autoattack`, then
    `aggregate_records`, the checks, `run_summary`, the report and, with a `policy` file,
    `decide`).

    Writes, holding `out` (a second writer is refused): `records.jsonl.gz` as cases are
    decided, so a run killed at any moment resumes with the same call; the run's attack time
    added to `attack_seconds.json` (finished or not), so the summary gives the whole
    evaluation's time; `summary.json`, `report.html` and, with a policy, `gate.txt`.
    `model` (`Model`): the attacked model's name, logits function and hash. `cases`
    (`advjax.data.EvalCases`): x, y and optionally the case ids, the dataset's class
    count (default: the model's logits) and each case's position among all the evaluation's
    cases (its key's index; default 0 .. n-1). `config` (`AutoAttackConfig`): eps, norm,
    version or custom members, batch size, checked when it was made. `mesh`: the devices
    each batch is sharded over (default: this process's devices, where it has several).

    Under `jax.distributed` (more than one process), each process passes only its share of the
    cases (`advjax.data.load_eval_cases(..., share=engine.this_process())`, with their
    positions), attacks them on its own devices and appends their records to its own file in
    `out/processes/I-of-N/` (resumable as one process's); once every process is done, process
    0 merges the files into `out`'s record file without duplicates and writes the summary, the
    report and the gate's decision (each model check run on the first cases of every
    process's share, passed where it passed on all). The records are those of one process on
    all the cases; the fast version's processes exchange what its probe needs between its
    phases (a model check failing on any process's cases escalates).
    `command` is recorded in the summary. `log_line` receives the threat model, the members, each run's progress and the
    result.

    Raises:
      ValueError: an eps outside the norm's range; labels outside the classes of the model
        or the data (checked before any work, from the model's output shape); records in
        `out` of another model version or attack config (nothing is appended then).
      LockedError: another live process holds `out`.
    """
    subject, model, logits_fn = model, model.name, model.logits_fn
    eps, norm, version, members = config.eps, config.norm, config.version, config.members
    x, y = np.asarray(cases.x, np.float32), np.asarray(cases.y)
    ids = np.arange(len(y)) if cases.case_ids is None else np.asarray(cases.case_ids)
    positions, classes = cases.positions, cases.classes
    index, count = this_process()
    if count > 1 and (positions is None or np.any(np.asarray(positions) % count != index)):
        raise ValueError(f"process {index} of {count}: pass this process's share of the cases "
                         "and their positions (advjax.data.load_eval_cases(..., share=(index, "
                         "count)))")  # fmt: skip
    outputs = int(jax.eval_shape(logits_fn, x[:1]).shape[-1])
    classes = outputs if classes is None else classes
    if len(y) and (int(y.min()) < 0 or int(y.max()) >= min(classes, outputs)):
        raise ValueError(f"labels must lie in [0, {min(classes, outputs)}) (the classes of the "
                         f"model and the data), got [{int(y.min())}, {int(y.max())}]")  # fmt: skip
    scheduled, tm = config.scheduled, config.threat_model
    log_line(tm.describe())
    if config.fast:
        log_line(f"members: {', '.join(m.name for m in FAST.always)} on every case; "
                 f"{', '.join(m.name for m in FAST.probe)} on a sample of those left robust; "
                 f"{', '.join(m.name for m in FAST.escalation)} on all of them if the sample "
                 "or a model check shows masked gradients")  # fmt: skip
    else:
        log_line(f"members: {', '.join(m.name for m in scheduled)}")
    if mesh is None and len(jax.local_devices()) > 1:
        mesh = jax.make_mesh((len(jax.local_devices()),), ("data",), devices=jax.local_devices())
    out = Path(out)
    with contextlib.ExitStack() as held:
        if index == 0:
            held.enter_context(OutputLock(out))
        if count > 1:
            own = process_folder(out, index=index, count=count)
            held.enter_context(OutputLock(own))
            log = ProcessRecordLog(record_file(own), merged=record_file(out))
        else:
            log = RecordLog(record_file(out))
        run_key = {"model": model, "eps": eps, "norm": norm, "version": version}
        if members is not None:
            run_key["members"] = [
                m.method if m.member_fields() == AttackSpec(m.method).member_fields()
                else m.member_fields() for m in members
            ]  # fmt: skip
        untimed = untimed_records(out, log.read(), run_key)
        started = time.perf_counter()

        def on_run(member, target, restart, left):
            elapsed = time.perf_counter() - started
            log_line(f"  [{elapsed:6.0f} s] {member.name} target {target} restart {restart}: "
                     f"{left} still robust")  # fmt: skip

        bars: dict = {}

        def on_batch(member, target, restart, done, total):
            run = (member.name, target, restart)
            if run not in bars:
                bars[run] = Progress(total, f"  {member.name} target {target} restart {restart}")
            bars[run].update(done - bars[run].count)

        finished = False
        try:
            run_autoattack(
                log, subject, EvalCases(x, y, ids, classes, positions), config, key=key,
                mesh=mesh, on_run=on_run, on_batch=on_batch if show_progress else None,
            )  # fmt: skip
            finished = True
            wait_for_every_process("advjax.run_evaluation: records written")
            model_checks = model_checks_on_every_process(
                probe_checks(logits_fn, x, y, random_model=version == "rand")
            )
        finally:
            seconds = time.perf_counter() - started
            if index == 0:
                runs = add_attack_time(out, run_key, seconds, finished=finished, untimed=untimed)
        if index != 0:
            log_line(f"process {index} of {count}: records in {log.path}; process 0 merges them "
                     "and writes the summary")  # fmt: skip
            return Evaluation(None, None, 0)
        total = None if runs[0]["untimed_records_before"] else sum(r["seconds"] for r in runs)
        if count > 1:
            merged = merge_record_files(record_file(out), process_record_files(out))
            log_line(f"merged {merged} records of {count} processes into {record_file(out)}")
            log = RecordLog(record_file(out))
        records = [r for r in log.read() if r.model == model and r.eps == float(eps)]
        summary, groups, judged = _summary(
            records, logits_fn, x, y, config, key=key, ids=ids, classes=classes,
            processes=count, model_checks=model_checks, model=model,
        )  # fmt: skip
        summary["extra"].update(
            {"command": command, "seconds": seconds, "seconds_all_runs": total,
             "attack_runs": len(runs), "environment": environment()}
        )  # fmt: skip
        atomic_write_json(out / SUMMARY_FILE, summary)
        decision_text, verdict, code = "", None, 0
        if policy is not None:
            rules, policy_hash = load_policy(policy)
            decision = decide(rules, summary)
            decision_text = (
                format_decision(decision) + f"\n  policy {policy} (sha256 {policy_hash})\n"
            )
            atomic_write_text(out / GATE_FILE, decision_text)
            verdict, code = decision.verdict, decision.exit_code
        write_report(out / REPORT_FILE, summary, groups, judged, model, decision_text)
    final = next(g for g in groups if g["attack"] == AUTOATTACK)
    ra = final["robust_accuracy"]
    log_line(f"{model}: robust accuracy {100 * ra['value']:.1f} % ({ra['count']}/{ra['total']}) "
             f"under AutoAttack {summary['extra']['version']} at eps {eps:.5g} ({norm}); "
             f"{_describe_time(seconds, total, len(runs))}")  # fmt: skip
    if decision_text:
        log_line(decision_text.rstrip())
    log_line(f"wrote {log.path}, {out / SUMMARY_FILE}, {REPORT_FILE}")
    return Evaluation(summary, verdict, code)


def _summary(records, logits_fn, x, y, config, *, key, ids, classes, model, processes,
             model_checks):  # fmt: skip
    """(summary, groups, the members whose verdicts count) of a finished run's records (of
    every case; `x`, `y`, `ids`: this process's cases, which the eps-zero check runs on;
    `model_checks`: those of every process)."""
    eps, norm, tm = config.eps, config.norm, config.threat_model
    groups = aggregate_records(records, num_classes=classes)
    random_model = config.version == "rand"
    members, schedule, probe_check = config.scheduled, None, []
    stages = [(m, m.name) for m in members]
    if config.fast:
        failed = [c.name for c in model_checks if not c.passed]
        outcome = fast_outcome(records, model=model, eps=float(eps), key=key, failed=failed)
        members, schedule, probe_check = outcome["members"], outcome["schedule"], [outcome["check"]]
        stages = outcome["stages"]
    every = (
        ids if processes == 1 else np.unique([r.case_id for r in records if r.attack == AUTOATTACK])
    )
    clean_correct = broken_by_member(records, members, ids) != -2
    found = [
        *model_checks,
        *black_box_check(broken_by_member(records, members, every), members),
        eps_zero_check(logits_fn, x, y, clean_correct, members, norm, key, random_model),
        *probe_check,
    ]
    summary = run_summary(
        groups,
        [check_perturbations(groups), check_finite_loss(groups), *found],
        tm,
        extra={
            "members": [m.name for m in members],
            "model_passes": member_passes(
                records,
                [m for m, _ in stages],
                model=model,
                eps=float(eps),
                classes=classes,
                names=[label for _, label in stages],
            ),  # fmt: skip
            "version": config.label,
            "schedule": schedule,
            "threat_model_text": tm.describe(),
            "processes": processes,
            "robust_accuracy_after": [
                {"after": label, **rate} for label, rate in cumulative_rows(groups, members, model)
            ],
        },
    )
    return summary, groups, members


def _describe_time(seconds: float, total: float | None, runs: int) -> str:
    if total is None:
        return f"{seconds:.0f} s this run (earlier runs untimed)"
    if runs == 1:
        return f"{seconds:.0f} s"
    return f"{seconds:.0f} s this run, {total:.0f} s over {runs} runs"


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
