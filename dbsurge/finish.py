"""The end of a run: final timeline, stage and summary tables, the honesty report, checks, exit code.

The generator says plainly when it fell behind its plan: any stage whose lag p99 passed
``--lag-warn`` or that dropped slots is named with its numbers, and so is any difference between
the arrivals the plan called for and the operations sent. ``--fail-on-lag`` and failing
``--check`` thresholds turn into exit code 1.
"""

from __future__ import annotations

import logging
import sys
import time

from .aggregator import ALL
from .checks import evaluate_checks, parse_checks
from .rundir import utc_iso
from .stage_plan import parse_duration
from .tables import markdown, operation_table, render, stage_table

log = logging.getLogger("dbsurge")


def lag_findings(stage_rows: list[dict], lag_warn_ms: float) -> list[str]:
    """One sentence per stage in which the generator fell behind the plan."""
    out = []
    for r in stage_rows:
        if r["operation"] != ALL:
            continue
        lag_p99 = float(r["lag_p99_ms"] or 0)
        dropped = int(r["dropped"] or 0)
        if lag_p99 > lag_warn_ms or dropped:
            out.append(
                f"generator fell behind the plan in stage {r['stage']}: lag p99 {lag_p99:.3f} ms, "
                f"max {float(r['lag_max_ms'] or 0):.3f} ms, {dropped} slots dropped, "
                f"achieved {float(r['achieved_tps'] or 0):.1f} of {float(r['target_tps'] or 0):.1f} TPS"
            )
    return out


def finish_run(run) -> None:
    """Write the final files and print the tables; idempotent."""
    if run.finished or run.aggregator is None:
        return
    run.finished = True
    from .side import stop_side_collectors

    stop_side_collectors(run)
    if run.role == "local":
        from .locust_plugin import drain_local

        drain_local(run)
    agg = run.aggregator
    agg.end_epoch_s = time.time()
    agg.flush(final=True)
    stages, summary = agg.write_tables()
    opts = run.options

    findings = lag_findings(stages, parse_duration(opts.lag_warn) * 1000.0) if run.plan else []
    planned = agg.planned_arrivals()
    total = next((r for r in summary if r["operation"] == ALL), None)
    sent = int(total["count"]) if total else 0
    dropped = sum(agg.dropped.values())
    not_sent = None
    if planned is not None:
        planned_n = int(round(planned))
        unfinished = max(0, agg.issued - sent - dropped)  # taken by a user, still in flight at the stop
        if opts.arrivals == "uniform":
            not_sent = planned_n - sent - dropped
            if agg.issued < planned_n:
                findings.append(f"the run ended before the plan did: {agg.issued} of {planned_n} planned slots "
                                f"were reached")
        else:  # Poisson arrivals: the plan gives the expected count; the drawn count is what was owed
            not_sent = unfinished
        if unfinished:
            findings.append(f"{unfinished} operations were still in flight when the test stopped (not recorded)")

    checks = parse_checks(opts.check)
    results = evaluate_checks(checks, summary)
    failed = [(c, v) for c, ok, v in results if not ok]

    text = summary_text(run, stages, summary, findings, results)
    if opts.headless or run.role == "local":
        sys.stdout.write("\n" + text + "\n")
        sys.stdout.flush()
    run.rundir.write_text("summary.md", summary_markdown(run, stages, summary, findings, results))
    run.rundir.write_meta(
        ended_utc=utc_iso(agg.end_epoch_s),
        results={
            "planned_operations": None if planned is None else int(round(planned)),
            "slots": agg.issued if planned is not None else None,
            "operations": sent, "dropped": dropped, "not_sent": not_sent, "behind_plan": findings,
            "checks": [{"check": str(c), "passed": ok, "value": v} for c, ok, v in results],
            "errors": dict(agg.errors),
            "operations_per_worker": dict(agg.per_source),
        },
    )
    run.rundir.event("run_end", operations=sent, dropped=dropped)
    if run.role != "worker":
        try:
            from .collectors.report import build_report

            build_report(run.rundir.path)
        except Exception as e:  # the measurements are on disk; a report can be built later
            log.warning("report not built (%s); run `dbsurge report %s` later", e, run.rundir.path)
    code = None
    if failed:
        code = 1
    if findings and opts.fail_on_lag:
        code = 1
    run.exit_code = code


def _check_lines(results) -> list[str]:
    lines = []
    for c, ok, v in results:
        shown = "no data" if v is None else f"{v:g}"
        lines.append(f"check {'passed' if ok else 'FAILED'}: {c} (measured {shown})")
    return lines


def summary_text(run, stages, summary, findings, results) -> str:
    parts = [f"dbsurge run {run.rundir.run_id}: {run.target.display}"]
    h, rows = operation_table(summary)
    parts.append(render(h, rows, "Operations (response time from the intended start; svc = service time)"))
    if run.plan:
        h, rows = stage_table(stages, _capacity(run))
        parts.append(render(h, rows, f"Stages ({run.plan})"))
    if findings:
        parts.append("\n".join("WARNING: " + f for f in findings))
    elif run.plan:
        parts.append("The generator kept to the plan: no stage lagged or dropped slots.")
    parts += _check_lines(results)
    parts.append(f"results: {run.rundir.path}")
    return "\n\n".join(p for p in parts if p)


def summary_markdown(run, stages, summary, findings, results) -> str:
    out = [f"# dbsurge run {run.rundir.run_id}", "", f"Target: `{run.target.display}`", ""]
    h, rows = operation_table(summary)
    out += ["## Operations", "", markdown(h, rows), ""]
    if run.plan:
        h, rows = stage_table(stages, _capacity(run))
        out += [f"## Stages (`{run.plan}`)", "", markdown(h, rows), ""]
    out += ["## Generator", ""]
    out += [f"- {f}" for f in findings] or ["- kept to the plan: no stage lagged or dropped slots"]
    if results:
        out += ["", "## Checks", ""] + [f"- {line}" for line in _check_lines(results)]
    return "\n".join(out) + "\n"


def _capacity(run) -> dict[str, str] | None:
    """Maximum capacity per stage from the collector, when one is attached; None leaves the column out."""
    if not getattr(run.options, "cloudwatch", None):
        return None
    try:
        from .collectors.merge import stage_capacity

        df = stage_capacity(run.rundir.path)
    except Exception as e:
        log.info("no capacity per stage yet (%s)", e)
        return {}
    out = {}
    if df is None or len(df) == 0:
        return out
    for _, row in df.iterrows():
        cols = [c for c in df.columns if c.endswith("(max)")]
        vals = [row[c] for c in cols if row[c] == row[c]]
        if vals:
            out[str(row["stage"])] = "/".join(f"{v:g}" for v in vals)
    return out

