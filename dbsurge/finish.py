"""The end of a run: the ledger, final timeline, stage and summary tables, the verdict and exit code.

The ledger comes first (`dbsurge.ledger`): what the plan called for, per stage and operation,
against ok, failed by kind, dropped and not sent by reason; whatever no worker reported is booked
(``worker_lost`` or, a bug of dbsurge's, ``unaccounted``), so the ledger balances in every run.

The verdict tells the truth (README, "Exit codes"): 0 only when the plan was delivered and
accounted for and every check passed; 1 when a check failed or slots were dropped because the
target kept every user busy; 3 when arrivals were lost to the tool (not sent: worker lost,
could not connect, users exhausted, in flight at the end, unaccounted) or results could not be
written; 130/143 when SIGINT/SIGTERM stopped it. Checks on an incomplete ledger fail.

Lag names its cause per stage: the generator (its event loop stalled), the pool (capped by
``--max-users``) or the target (every user busy waiting for the database).
"""

from __future__ import annotations

import logging
import math
import sys
import time

from .measure.aggregator import ALL
from .checks import evaluate_checks, parse_checks
from .rundir import utc_iso
from .stage_plan import parse_duration
from .errors import EXIT_CHECKS, EXIT_INCOMPLETE
from .tables import ledger_table, markdown, operation_table, render, stage_table

log = logging.getLogger("dbsurge")

#: Not-sent reasons that mean the tool lost arrivals (exit 3); ``interrupted`` is the user's doing.
TOOL_REASONS = ("worker_lost", "no_connect", "users_exhausted", "in_flight", "unaccounted")


def lag_findings(stage_rows: list[dict], lag_warn_ms: float, capped: set[str] | None = None,
                 max_users: int | None = None) -> list[tuple[str, str]]:
    """(cause, sentence) per stage in which slots went late or were dropped; cause is generator, cap or target."""
    out = []
    for r in stage_rows:
        if r["operation"] != ALL:
            continue
        lag_p99 = float(r["lag_p99_ms"] or 0)
        dropped = int(r["dropped"] or 0)
        if not (lag_p99 > lag_warn_ms or dropped):
            continue
        loop = float(r.get("loop_lag_max_ms") or 0)
        numbers = (f"lag p99 {lag_p99:.3f} ms, max {float(r['lag_max_ms'] or 0):.3f} ms, {dropped} slots dropped, "
                   f"achieved {float(r['achieved_tps'] or 0):.1f} of {float(r['target_tps'] or 0):.1f} TPS")
        if loop >= max(lag_warn_ms, 0.5 * lag_p99):
            out.append(("generator", f"the generator fell behind the plan in stage {r['stage']}: its event loop "
                                     f"stalled up to {loop:.1f} ms (CPU or blocking code on the load host); {numbers}"))
        elif capped and r["stage"] in capped:
            out.append(("cap", f"the user pool was capped by --max-users {max_users} in stage {r['stage']}: "
                               f"slots waited for a free user; {numbers}"))
        else:
            out.append(("target", f"the target kept every user busy in stage {r['stage']} (the generator was "
                                  f"idle, waiting on the database: the latency is the database's); {numbers}; "
                                  f"service p99 {float(r['service_p99_ms'] or 0):.3f} ms"))
    return out


def _book_ledger(run) -> dict[str, int]:
    """Count what the plan called for and book what nobody reported (see `dbsurge.ledger`)."""
    from .arrivals import ArrivalSequence
    from .measure.ledger import balance, planned_counts

    agg = run.aggregator
    if run.schedule is None:
        return {}
    until = run.until_position
    if until is None and not math.isfinite(run.schedule.end_s):
        until = run.schedule.cumulative(max(0.0, (agg.stop_epoch_s or time.time()) - agg.start_epoch_s))
    mix = run.operation_mix()
    counts = planned_counts(run.schedule, ArrivalSequence(run.options.arrivals, run.options.seed), mix, until)
    agg.planned = {(mix.names[op], stage): n for (stage, op), n in counts.items()}
    had_workers = run.role != "master" or bool(run.shares) or bool(run.lost_workers)
    return balance(agg.stage_cells, agg.planned, run.lost_workers, had_workers)


def finish_run(run, hurry: bool = False) -> None:
    """Write the final files and print the tables; idempotent. Nothing here may stop the others."""
    if run.finished or run.aggregator is None:
        return
    run.finished = True
    from .side import stop_side_collectors

    try:
        stop_side_collectors(run)
    except Exception as e:
        run.note_problem("stopping the side collectors", e)
    if run.role == "local":
        run.merge_payload(run.recorder.drain(), source="local")
    agg = run.aggregator
    agg.end_epoch_s = time.time()
    opts = run.options
    try:
        booked = _book_ledger(run)
    except Exception as e:
        booked = {}
        run.note_problem("counting the plan's arrivals", e)
    write_failed = False
    try:
        run.rundir.write_flush(agg.flush(final=True))
    except Exception as e:
        write_failed = True
        run.note_problem("writing the timeline", e)
    stages, summary = agg.tables()
    try:
        run.rundir.write_tables(stages, summary)
    except Exception as e:
        write_failed = True
        run.note_problem("writing stages.csv and summary.csv", e)

    total = next((r for r in summary if r["operation"] == ALL), {})
    capped = {agg.stage_names[i] for i in run.capped_stages}
    lag = lag_findings(stages, parse_duration(opts.lag_warn) * 1000.0, capped, opts.max_users) if run.plan else []
    findings = [text for _, text in lag]
    not_sent = {r: int(total.get(f"not_sent_{r}") or 0) for r in ("worker_lost", "no_connect", "interrupted",
                                                                    "in_flight", "users_exhausted", "unaccounted")}
    tool_reasons = list(TOOL_REASONS)
    if (lag and all(cause == "target" for cause, _ in lag)) or int(total.get("failed_timeout") or 0):
        # every user was busy waiting on the database until the end, or operations were timing out:
        # the target could not take the plan (exit 1); the measurement itself is whole
        tool_reasons.remove("users_exhausted")
        tool_reasons.remove("in_flight")
    lost = sum(not_sent[r] for r in tool_reasons) + int(total.get("over_plan") or 0)
    if not_sent["unaccounted"]:
        findings.append(f"{not_sent['unaccounted']} planned arrivals are unaccounted for: no worker reported them "
                        f"(a bug in dbsurge; please report it with this run directory)")
    if total.get("over_plan"):
        findings.append(f"{total['over_plan']} operations were sent beyond the plan (a worker kept its share "
                        f"after the master gave it away)")
    for reason, n in not_sent.items():
        if n and reason != "unaccounted":
            findings.append(f"{n} planned arrivals were not sent: {_REASON_TEXT[reason]}")
    refused = getattr(run.membership, "refused", None) if getattr(run, "membership", None) else None
    if refused:
        findings.append("workers refused, with no share and no load: " + ", ".join(
            f"{w} ({why})" for w, why in sorted(refused.items())))
    clocks = getattr(run, "clocks", None)
    if clocks is not None:
        findings += clocks.warnings()
    if run.lost_workers:
        findings.append(f"workers lost during the run: {', '.join(sorted(set(run.lost_workers)))}")
    incomplete = bool(lost) or write_failed or run.stop_reason is not None

    checks = parse_checks(opts.check)
    results = evaluate_checks(checks, summary)
    if incomplete:  # a threshold measured on an incomplete ledger proves nothing
        results = [(c, False, v) for c, ok, v in results]
    failed = [(c, v) for c, ok, v in results if not ok]

    dropped = int(total.get("dropped") or 0)
    generator_behind = any(cause in ("generator", "cap") for cause, _ in lag)  # the tool as configured
    code = 0
    target_short = (not_sent["users_exhausted"] or not_sent["in_flight"]) and "users_exhausted" not in tool_reasons
    if failed or (dropped and not generator_behind) or (opts.fail_on_lag and lag) or target_short:
        code = EXIT_CHECKS  # the database missed its SLO, or could not take the plan
    if incomplete or (dropped and generator_behind):
        code = EXIT_INCOMPLETE  # the measurement is incomplete: the tool lost arrivals
    if run.exit_code_override is not None:
        code = run.exit_code_override
    run.exit_code = code
    verdict = _verdict(run, code, total, incomplete)

    text = summary_text(run, stages, summary, findings, results, verdict)
    if opts.headless or run.role == "local":
        sys.stdout.write("\n" + text + "\n")
        sys.stdout.flush()
    try:
        run.rundir.write_text("summary.md", summary_markdown(run, stages, summary, findings, results, verdict))
        run.rundir.write_meta(
            ended_utc=utc_iso(agg.end_epoch_s), complete=not incomplete and run.interrupted is None,
            interrupted=None if run.interrupted is None else {"signal": run.interrupted[0],
                                                             "at_s": round(run.interrupted[1], 3)},
            stop_reason=run.stop_reason, exit_code=code,
            results={
                "planned_operations": agg.planned_arrivals(),
                "operations": int(total.get("count") or 0), "ok": int(total.get("ok") or 0),
                "failures": int(total.get("failures") or 0),
                "failed_by_kind": dict(agg.errors), "dropped": int(total.get("dropped") or 0),
                "not_sent": sum(not_sent.values()), "not_sent_by_reason": not_sent,
                "over_plan": int(total.get("over_plan") or 0), "booked_by_master": booked,
                "behind_plan": findings, "lag_causes": sorted({c for c, _ in lag}),
                "checks": [{"check": str(c), "passed": ok, "value": v} for c, ok, v in results],
                "errors": dict(agg.errors), "first_errors": dict(agg.first_errors),
                "operations_per_worker": dict(agg.per_source), "lost_workers": sorted(set(run.lost_workers)),
                "refused_workers": dict(refused or {}),
                "clock_offsets": clocks.describe() if clocks is not None else {},
                "problems": dict(run.problems), "verdict": verdict,
            },
        )
        run.rundir.event("run_end", operations=int(total.get("count") or 0), exit_code=code)
    except Exception as e:
        run.note_problem("writing summary.md and run.json", e)
        if run.exit_code in (0, EXIT_CHECKS):
            run.exit_code = EXIT_INCOMPLETE
    if run.role != "worker" and not hurry and not write_failed:
        try:
            from .collectors.report import build_report

            build_report(run.rundir.path)
        except Exception as e:  # the measurements are on disk; a report can be built later
            log.warning("report not built (%s); run `dbsurge report %s` later", e, run.rundir.path)


_REASON_TEXT = {
    "worker_lost": "a worker was lost before reporting them",
    "no_connect": "no worker took them (none connected, none proved the join token, or none could be set up)",
    "interrupted": "the run was interrupted before they were due",
    "in_flight": "still in flight when the run ended (bounded by --op-timeout; see events.jsonl for their age)",
    "users_exhausted": "every user was busy until the end of the plan (+ --drain)",
}


def _verdict(run, code: int, total: dict, incomplete: bool) -> str:
    planned = total.get("planned")
    head = {0: "OK: the plan was delivered and accounted for, every check passed",
            1: "FAILED: a check failed or the target could not take the plan",
            3: "INCOMPLETE: the tool lost arrivals (not sent, or dropped while the generator fell behind) "
               "or results were not written",
            130: "INTERRUPTED (SIGINT)", 143: "INTERRUPTED (SIGTERM)"}.get(code, f"exit {code}")
    if code == 0 and int(total.get("failures") or 0):
        head = (f"DELIVERED WITH FAILURES: every arrival accounted for, {total.get('failures')} operations failed "
                f"(no --check judged them)")
    if run.stop_reason:
        head = f"STOPPED: {run.stop_reason}"
    if planned in ("", None):
        return f"{head} (exit {code})"
    return (f"{head} (exit {code}): planned {planned} = ok {total.get('ok')} + failed {total.get('failures')} "
            f"+ dropped {total.get('dropped')} + not sent {total.get('not_sent')}")


def _check_lines(results) -> list[str]:
    lines = []
    for c, ok, v in results:
        shown = "no data" if v is None else f"{v:g}"
        lines.append(f"check {'passed' if ok else 'FAILED'}: {c} (measured {shown})")
    return lines


def _title(run) -> str:
    title = f"dbsurge run {run.rundir.run_id}: {run.target.display}"
    if run.interrupted is not None:
        title += f" -- interrupted at t = {run.interrupted[1]:.1f} s ({run.interrupted[0]}); rates over the time that ran"
    elif run.stop_reason:
        title += f" -- stopped: {run.stop_reason}"
    return title


def summary_text(run, stages, summary, findings, results, verdict: str = "") -> str:
    parts = [_title(run)]
    h, rows = operation_table(summary)
    parts.append(render(h, rows, "Operations (response time from the intended start; svc = service time)"))
    if run.plan:
        h, rows = stage_table(stages, _capacity(run))
        parts.append(render(h, rows, f"Stages ({run.plan})"))
    h, rows = ledger_table(stages if run.plan else summary)
    parts.append(render(h, rows, "Ledger (planned = ok + failed + dropped + not sent)" if run.plan
                        else "Ledger (closed model: no plan)"))
    if findings:
        parts.append("\n".join("WARNING: " + f for f in findings))
    elif run.plan:
        parts.append("The generator kept to the plan: no stage lagged or dropped slots, every arrival accounted for.")
    parts += _check_lines(results)
    parts.append(verdict)
    parts.append(f"results: {run.rundir.path}")
    return "\n\n".join(p for p in parts if p)


def summary_markdown(run, stages, summary, findings, results, verdict: str = "") -> str:
    out = [f"# {_title(run)}", "", f"Target: `{run.target.display}`", "", f"**{verdict}**", ""]
    h, rows = operation_table(summary)
    out += ["## Operations", "", markdown(h, rows), ""]
    if run.plan:
        h, rows = stage_table(stages, _capacity(run))
        out += [f"## Stages (`{run.plan}`)", "", markdown(h, rows), ""]
    h, rows = ledger_table(stages if run.plan else summary)
    out += ["## Ledger", "", "planned = ok + failed (by kind) + dropped + not sent (by reason)", "",
            markdown(h, rows), ""]
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

