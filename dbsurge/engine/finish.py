"""The end of a run: the ledger, final timeline, stage and summary tables, the verdict and exit code.

The ledger comes first (`dbsurge.ledger`): what the plan called for, per stage and operation,
against ok, failed by kind, dropped and not sent by reason; whatever no worker reported is booked
(``worker_lost`` or, a bug of dbsurge's, ``unaccounted``), so the ledger balances in every run.

The verdict tells the truth (README, "Exit codes"): `judge` gathers what the ledger and the run's end say into a
`dbsurge.engine.verdict.Account`, and `dbsurge.engine.verdict.decide` alone turns it into the exit code and the
sentence a person reads: 0 only when the plan was delivered and accounted for (a closed-model run: operations
sent, every worker's final account in) and every check passed; 1 when a check failed or the target could not
take the plan; 3 when the measurement is incomplete (arrivals lost to the tool, a final account missing, the
plan's arrivals not counted, the test's start failed, nothing sent, results not written); 130/143/4 when a
signal or the web UI's Stop ended it. Checks on an incomplete ledger fail.

Lag names its cause per stage: the generator (its event loop stalled), the pool (capped by
``--max-users``) or the target (every user busy waiting for the database).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass
from typing import NamedTuple

from dbsurge.base.errors import EXIT_CHECKS, EXIT_INCOMPLETE
from dbsurge.config.checks import evaluate_checks, parse_checks
from dbsurge.engine import console
from dbsurge.engine.collector_hooks import collectors
from dbsurge.engine.verdict import Account, Decision, decide
from dbsurge.load.pacer import TARGET_SILENT_S
from dbsurge.measure.aggregator import ALL
from dbsurge.measure.cells import NOT_SENT_REASONS
from dbsurge.measure.ledger import balance, planned_counts, share_counts
from dbsurge.measure.tables import (
    failure_lines,
    ledger_table,
    markdown,
    operation_table,
    render,
    segment_table,
    stage_table,
)
from dbsurge.plan.segments import segment_rows
from dbsurge.plan.stage_plan import parse_duration
from dbsurge.rundir import SEGMENT_COLUMNS, utc_iso
from dbsurge.rundir.schema import EVENTS, REPORT_HTML, RUN_JSON, SEGMENTS, STAGES, SUMMARY_CSV, SUMMARY_MD, TIMELINE
from dbsurge.rundir.writer import remove_temp_files

log = logging.getLogger("dbsurge")

class LagFinding(NamedTuple):
    """A stage in which slots went late or were dropped: who caused it, the sentence, and whether it is material.

    Material: it changes an answer the run gives, namely slots dropped, the achieved rate short of the plan
    by more than 1%, or lag p99 past `LAG_MATERIAL_WARNS` times --lag-warn (arrivals queued: it explains
    the latency); or, lag of the generator or the user cap (which the response times include, but which is
    not the database's), lag p99 at least `LAG_SHARE_MATERIAL` of the stage's response-time p99. Only
    material findings are printed as warnings, in one short sentence: a warning that fires on healthy runs
    (lag p99 of 5-16 ms at a rate that was delivered) teaches users to skip the one that matters.
    `--fail-on-lag` and the exit code still see them all.

    The generator is blamed only on its own evidence (its event loop stalled) and not when the stage's
    operations were failing or timing out (a target that stopped answering keeps users waiting and the
    driver's reconnects busy) or the target was busy (its service p99 at least the lag p99 and twice the
    worst stall: users waited on the database longer than the stall could explain); the lag and a short
    rate are then the target's.
    """

    cause: str
    text: str
    material: bool


#: Lag of the generator or the cap is material once its p99 is this share of the response-time p99 it is part of.
LAG_SHARE_MATERIAL = 0.5
#: Lag of any cause is worth a warning once its p99 passes this multiple of --lag-warn (queueing, a stall).
LAG_MATERIAL_WARNS = 10.0
#: The achieved rate is short of the plan when below this share of it.
RATE_SHORT = 0.99
#: A stage whose failures pass this share of its operations was failing: its lag is the target's.
FAILING_SHARE = 0.01
_FAILED_FAMILIES = ("timeout", "connect", "disconnect", "server", "occ", "throttled", "other")


def lag_findings(stage_rows: list[dict], lag_warn_ms: float, capped: set[str] | None = None,
                 max_users: int | None = None) -> list[LagFinding]:
    """A `LagFinding` per stage in which slots went late or were dropped; cause is generator, cap or target."""
    out = []
    for r in stage_rows:
        if r["operation"] != ALL:
            continue
        lag_p99, dropped = float(r["lag_p99_ms"] or 0), int(r["dropped"] or 0)
        if lag_p99 > lag_warn_ms or dropped:
            out.append(_lag_finding(r, lag_p99, dropped, lag_warn_ms, capped, max_users))
    return out


def _lag_finding(r: dict, lag_p99: float, dropped: int, lag_warn_ms: float, capped: set[str] | None,
                 max_users: int | None) -> LagFinding:
    stage = r["stage"]
    achieved, target = float(r["achieved_tps"] or 0), float(r["target_tps"] or 0)
    short = target > 0 and achieved < RATE_SHORT * target
    numbers = f"lag p99 {lag_p99:.1f} ms" + (f", {dropped} slots dropped" if dropped else "")
    numbers += f", {achieved:.1f} of {target:.1f} TPS achieved" if short else ""
    loop, service_p99 = float(r.get("loop_lag_max_ms") or 0), float(r.get("service_p99_ms") or 0)
    # the database held users longer than the slots waited and than twice the worst stall: the queue was its
    busy = service_p99 >= lag_p99 and service_p99 >= 2 * loop
    failing = _failing(r)
    if failing:
        cause, text = "target", f"the target kept every user busy in stage {stage}: it failed {failing}; {numbers}"
    elif loop >= max(lag_warn_ms, 0.5 * lag_p99) and not busy:
        cause = "generator"
        text = (f"the generator fell behind the plan in stage {stage}: its event loop stalled up to {loop:.0f} ms "
                f"(CPU or blocking code on the load host); {numbers}")
    elif capped and stage in capped:
        cause, text = "cap", f"the user pool was capped by --max-users {max_users} in stage {stage}; {numbers}"
    else:
        cause = "target"
        text = f"the target kept every user busy in stage {stage} (service p99 {service_p99:.1f} ms); {numbers}"
    p99 = float(r.get("p99_ms") or 0)
    ours = cause != "target" and p99 > 0 and lag_p99 >= LAG_SHARE_MATERIAL * p99
    if ours:
        text += f" (of a response-time p99 of {p99:.1f} ms)"
    return LagFinding(cause, text, bool(dropped) or short or ours or lag_p99 > LAG_MATERIAL_WARNS * lag_warn_ms)


def _failing(r: dict) -> str:
    """``"30 of 40 operations (timeout 20, connect 10)"`` when the stage was failing (`FAILING_SHARE`), else ""."""
    failures, count = int(r.get("failures") or 0), int(r.get("count") or 0)
    if not failures or failures <= FAILING_SHARE * max(count, 1):
        return ""
    kinds = ", ".join(f"{k} {int(r.get(f'failed_{k}') or 0)}" for k in _FAILED_FAMILIES
                      if int(r.get(f"failed_{k}") or 0))
    return f"{failures} of {count} operations" + (f" ({kinds})" if kinds else "")


def _book_ledger(run) -> dict[str, int]:
    """Count what the plan called for and book what nobody reported (see `dbsurge.ledger`)."""
    agg = run.aggregator
    if run.schedule is None:
        return {}
    until = run.ending.until_position
    if until is None and not math.isfinite(run.schedule.end_s):
        until = run.schedule.cumulative(max(0.0, (agg.stop_epoch_s or time.time()) - agg.start_epoch_s))
    mix = run.operation_mix()
    counts = planned_counts(run.schedule, run.arrivals(), mix, until)
    agg.planned = {(mix.names[op], stage): n for (stage, op), n in counts.items()}
    had_workers = not run.has_workers or bool(run.shares) or bool(run.ending.lost_workers)
    leased = {}
    for cid in set(run.ending.lost_workers):
        history = run.share_history_of(cid)
        if history is not None and cid in run.ending.lease_end:
            held = share_counts(run.schedule, run.arrivals(), mix, history, run.ending.lease_end[cid])
            leased[cid] = {(mix.names[op], stage): n for (stage, op), n in held.items()}
    return balance(agg.stage_cells, agg.planned, run.ending.lost_workers, had_workers,
                   gap_reason=run.ending.unreported_reason,
                   unreported=agg.unreported(run.ending.lost_workers, leased))


@dataclass
class Verdict:
    """What the end of a run concluded: the findings to print, the checks, and the exit code."""

    findings: list[str]
    results: list
    code: int
    incomplete: bool
    not_sent: dict[str, int]
    lag_causes: list[str]
    text: str = ""


def finish_run(run, hurry: bool = False) -> None:
    """Write the final files and print the tables; idempotent. Nothing here may stop the others.

    In order: the last measurements (`_collect`), the ledger (`_book_ledger`), the final timeline and
    tables (`_write_measurements`), the verdict (`judge`), then summary.md, run.json and the report.
    """
    if run.ending.finished or run.aggregator is None:
        return
    run.ending.finished = True
    run.ending.finish_state = "writing"
    _collect(run)
    try:
        booked = _book_ledger(run)
    except Exception as e:
        booked = {}
        run.note_problem("counting the plan's arrivals", e)
    if run.ending.disk_full:
        run.rundir.release_reserve()  # the space kept back at the start: the final files fit in it
    stages, summary = run.aggregator.tables()
    write_failed = not _write_measurements(run, stages, summary)
    total = next((r for r in summary if r["operation"] == ALL), {})
    verdict = judge(run, stages, summary, total, write_failed)
    run.exit_code = verdict.code
    if run.writes_results:  # headless or not: the web UI's console is a person's too
        if console.final_tables():
            text = summary_text(run, stages, summary, verdict.findings, verdict.results, verdict.text)
        else:  # a scenario prints the study's table from the files; the checks and the verdict are the engine's
            text = "\n\n".join(_check_lines(verdict.results) + [verdict.text])
        try:
            sys.stdout.write("\n" + text + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):  # nobody reads any more (`dbsurge run` was killed): the files still matter
            pass
    _write_summary(run, stages, summary, total, verdict, booked)
    by_signal = run.ending.interrupted is not None and run.ending.interrupted[0].startswith("SIG")
    if by_signal and run.writes_results:
        # a signal asks for the process to end: the tables and summary.md are written; the report (its
        # plots take a minute for a plan of thousands of stages) can be built from them at any time
        log.warning("%s not built (interrupted): `dbsurge report %s` builds it", REPORT_HTML, run.rundir.path)
    elif run.writes_results and not hurry and not write_failed and not run.ending.disk_full:
        run.ending.finish_state = "report"
        try:
            run.ending.report_path = collectors().build_report(run.rundir.path)
        except Exception as e:  # the measurements are on disk; a report can be built later
            log.warning("report not built (%s); run `dbsurge report %s` later", e, run.rundir.path)
    run.rundir.release_reserve()
    remove_temp_files(run.rundir.path)
    run.ending.finish_state = "done"


def _collect(run) -> None:
    try:
        with run.timeline_lock:  # the once-a-second loop between two seconds: stopping it loses nothing
            collectors().stop(run)
    except Exception as e:
        run.note_problem("stopping the side collectors", e)
    if run.measures_here:
        run.merge_payload(run.recorder.drain(), source="local")
        run.feed_locust_stats()
    run.aggregator.end_epoch_s = time.time()


def _write_measurements(run, stages: list[dict], summary: list[dict]) -> bool:
    """The final timeline and stages.csv / summary.csv; False when something could not be written."""
    ok = True
    try:
        flush = run.aggregator.flush(final=True)
        run.rundir.write_flush(flush)
        for line in run.side.progress.finish(flush.rows) if run.side.progress is not None else []:
            log.info(line)  # the last stage's seconds come in this flush: they get their line too
        console.say_failures(run, flush.failures)
    except Exception as e:
        ok = False
        run.note_problem("writing the timeline", e)
    try:
        run.rundir.write_tables(stages, summary)
    except Exception as e:
        ok = False
        run.note_problem(f"writing {STAGES} and {SUMMARY_CSV}", e)
    if run.changes:
        try:
            run.rundir.write_csv(SEGMENTS, SEGMENT_COLUMNS, segments(run))
        except Exception as e:
            ok = False
            run.note_problem(f"writing {SEGMENTS}", e)
    return ok


def segments(run) -> list[dict]:
    """The run's rows by stage and rate override (`dbsurge.plan.segments`), from the timeline's seconds."""
    agg = run.aggregator
    return segment_rows(agg.live.rows, run.changes, agg.stage_names, agg.start_epoch_s, agg.schedule)


def judge(run, stages: list[dict], summary: list[dict], total: dict, write_failed: bool) -> Verdict:
    """The findings, the checks on the ledger, and the exit code: the run's `verdict.Account`, `verdict.decide`d."""
    opts = run.options
    capped = {run.aggregator.stage_names[i] for i in run.capped_stages}
    lag = lag_findings(stages, parse_duration(opts.lag_warn) * 1000.0, capped, opts.max_users) if run.plan else []
    not_sent = {r: int(total.get(f"not_sent_{r}") or 0) for r in NOT_SENT_REASONS}
    findings = [f.text for f in lag if f.material] + _ledger_findings(run, total, not_sent) + _failing_workers(run)
    not_reached = stages_not_reached(run)
    if not_reached:
        findings.append(f"stages not reached (the run stopped before they began): {', '.join(not_reached)}; "
                        f"their planned arrivals are not sent (interrupted)")
    results = evaluate_checks(parse_checks(opts.check), summary)
    decision = decide(account_of(run, total, not_sent, [f.cause for f in lag], [ok for _, ok, _ in results],
                                 write_failed))
    results = [(c, ok, v) for (c, _, v), ok in zip(results, decision.checks)]  # all failed when incomplete
    verdict = Verdict(findings, results, decision.code, decision.incomplete, not_sent, sorted({f.cause for f in lag}))
    verdict.text = _verdict_text(decision, total)
    return verdict


def account_of(run, total: dict, not_sent: dict[str, int], lag_causes: list[str], checks: list[bool],
               write_failed: bool) -> Account:
    """What the verdict is decided from (`verdict.Account`): the run's ledger totals and how it ended."""
    planned = total.get("planned")
    return Account(
        open_model=run.plan is not None, planned=None if planned in ("", None) else int(planned),
        ok=int(total.get("ok") or 0), failed=int(total.get("failures") or 0),
        failed_timeout=int(total.get("failed_timeout") or 0), dropped=int(total.get("dropped") or 0),
        unknown=int(total.get("unknown") or 0), unknown_in_flight=int(run.aggregator.unknown_at_end["in_flight"]),
        not_sent=dict(not_sent), over_plan=int(total.get("over_plan") or 0),
        # a worker that never sent its final account took its last operations with it, plan or not
        lost_workers=len(set(run.ending.lost_workers)), lag_causes=tuple(lag_causes), checks=tuple(checks),
        fail_on_lag=bool(run.options.fail_on_lag), exit_code_on_error=failure_exit_code(run.options),
        write_failed=write_failed, start_failed=run.ending.start_failed, stop_reason=run.ending.stop_reason,
        interrupted=run.ending.interrupted, exit_code_override=run.ending.exit_code_override)


def failure_exit_code(opts) -> int:
    """The exit code of a run whose operations failed with no --check to judge them: Locust's
    ``--exit-code-on-error`` (default 1), which dbsurge's Locust child parses like Locust does."""
    code = getattr(opts, "exit_code_on_error", 1)
    return 1 if code is None else int(code)


def stages_not_reached(run) -> list[str]:
    """The plan's stages that an interruption or a stop came before (``3 (1m@200%)``), in order."""
    agg = run.aggregator
    if run.plan is None or agg is None or agg.stop_epoch_s is None or run.start_epoch_ns is None:
        return []
    if run.ending.interrupted is None and run.ending.stop_reason is None:
        return []
    stopped_at = agg.stop_epoch_s - run.start_epoch_ns / 1e9
    return [f"{i + 1} ({stage.name})" for i, (st, stage) in enumerate(zip(run.plan.starts, run.plan.stages))
            if math.isfinite(st) and st >= stopped_at]


def _ledger_findings(run, total: dict, not_sent: dict[str, int]) -> list[str]:
    out = []
    if not_sent["unaccounted"]:
        out.append(f"{not_sent['unaccounted']} planned arrivals are unaccounted for: no worker reported them "
                   f"(a bug in dbsurge; please report it with this run directory)")
    if total.get("over_plan"):
        out.append(f"{total['over_plan']} operations were sent beyond the plan (a worker kept its share "
                   f"after the master gave it away)")
    at_end = run.aggregator.unknown_at_end
    by_lost = int(total.get("unknown") or 0) - sum(at_end.values())
    if by_lost > 0:
        lost = ", ".join(run.hosts.name(w) for w in sorted(set(run.ending.lost_workers)))
        out.append(f"{by_lost} planned arrivals have an unknown outcome: issued to the database by {lost}, which was "
                   f"lost before "
                   f"it reported them (the database may or may not have done them)")
    out += [f"{n} planned arrivals have an unknown outcome: sent to the database, {_UNKNOWN_TEXT.get(r, r)} "
            f"(the database may or may not have done them)" for r, n in sorted(at_end.items()) if n]
    out += [f"{n} planned arrivals were not sent: {_REASON_TEXT[r]}" for r, n in not_sent.items()
            if n and r != "unaccounted"]
    out += _refused_connections(run)
    refused = run.membership.refused if run.membership is not None else {}
    if refused:
        out.append("workers refused, with no share and no load: " + ", ".join(
            f"{run.hosts.name(w)} ({why})" for w, why in sorted(refused.items())))
    out += run.clocks.warnings()
    if run.ending.lost_workers:
        lost = sorted(set(run.ending.lost_workers))
        out.append("workers lost during the run: " + ", ".join(run.hosts.name(w) for w in lost))
    return out


def connection_counts(run) -> dict:
    """The users' connection attempts: asked, ok, failed, and refused by the server's reason."""
    c = run.aggregator.connects
    refused = {k.split(":", 1)[1]: n for k, n in sorted(c.items()) if k.startswith("refused:")}
    return {"asked": sum(c.values()), "ok": c.get("ok", 0), "failed": c.get("failed", 0), "refused": refused}


def _refused_connections(run) -> list[str]:
    """How many connections the server refused, against how many were asked for, and in its own words."""
    counts = connection_counts(run)
    out = []
    for code, n in counts["refused"].items():
        first = run.aggregator.first_errors.get(f"connect:{code}", "")
        label = f"SQLSTATE {code}" if code[:1].isdigit() else code
        out.append(f"the server refused {n} of the {counts['asked']} connections asked for ({label}"
                   + (f": {first}" if first else "") + f"); the slots of users left without one failed as "
                   f"connect:{code}")
    return out


def _failing_workers(run) -> list[str]:
    """Master: whose operations failed, how, and the first error of the commonest kind.

    A worker cut from the database (or with a wrong password) fails while the others succeed; the
    summary names it, by host and address, instead of leaving a failure rate to guess from.
    """
    agg = run.aggregator
    failing = {w: kinds for w, kinds in agg.failed_by_source.items() if sum(kinds.values())}
    if not run.has_workers or not failing:
        return []
    workers = set(agg.per_source) | set(run.shares) | set(run.ending.lost_workers)
    parts = []
    for w, kinds in sorted(failing.items(), key=lambda item: -sum(item[1].values())):
        commonest = max(kinds, key=kinds.get)
        first = agg.first_errors_by_source.get(w, {}).get(commonest)
        detail = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        parts.append(f"{run.hosts.name(w)}: {sum(kinds.values())} failed ({detail})"
                     + (f", first {commonest}: {first}" if first else ""))
    return [f"operations failed on {len(failing)} of {len(workers)} workers: " + "; ".join(parts)]


def _write_summary(run, stages, summary, total: dict, verdict: Verdict, booked: dict) -> None:
    agg = run.aggregator
    try:
        run.rundir.write_text(SUMMARY_MD, summary_markdown(run, stages, summary, verdict.findings,
                                                             verdict.results, verdict.text))
        run.rundir.write_meta(
            ended_utc=utc_iso(agg.end_epoch_s), complete=not verdict.incomplete and run.ending.interrupted is None,
            interrupted=None if run.ending.interrupted is None else {
                "signal": run.ending.interrupted[0] if run.ending.interrupted[0].startswith("SIG") else None,
                "by": run.ending.interrupted[0], "at_s": round(run.ending.interrupted[1], 3)},
            stop_reason=run.ending.stop_reason, exit_code=verdict.code,
            results={
                "planned_operations": agg.planned_arrivals(),
                "operations": int(total.get("count") or 0), "ok": int(total.get("ok") or 0),
                "failures": int(total.get("failures") or 0),
                "failed_by_kind": dict(agg.errors), "dropped": int(total.get("dropped") or 0),
                "unknown": int(total.get("unknown") or 0),
                "unknown_at_end": dict(agg.unknown_at_end),  # of those, sent and still in flight at the end
                "not_sent": sum(verdict.not_sent.values()), "not_sent_by_reason": verdict.not_sent,
                "over_plan": int(total.get("over_plan") or 0), "booked_by_master": booked,
                "behind_plan": verdict.findings, "lag_causes": verdict.lag_causes,
                "checks": [{"check": str(c), "passed": ok, "value": v, "shown": c.shown(v)}
                           for c, ok, v in verdict.results],
                "errors": dict(agg.errors), "first_errors": dict(agg.first_errors),
                "operations_per_worker": dict(agg.per_source), "lost_workers": sorted(set(run.ending.lost_workers)),
                "refused_workers": dict(run.membership.refused) if run.membership is not None else {},
                "clock_offsets": run.clocks.describe(), "workers": run.hosts.describe(),
                "failed_by_worker": {w: dict(k) for w, k in sorted(agg.failed_by_source.items()) if sum(k.values())},
                "problems": dict(run.problems), "verdict": verdict.text,
                "stages_not_reached": stages_not_reached(run), "connections": connection_counts(run),
                "master_loop_stall_max_ms": (round(run.master_stall_max_s * 1000, 1)
                                             if run.master_stall_max_s is not None else None),
            },
        )
        run.rundir.event("run_end", operations=int(total.get("count") or 0), exit_code=verdict.code)
    except Exception as e:
        run.note_problem(f"writing {SUMMARY_MD} and {RUN_JSON}", e)
        if run.exit_code in (0, EXIT_CHECKS):
            run.exit_code = EXIT_INCOMPLETE


_REASON_TEXT = {
    "worker_lost": "a worker was lost, or its lease had lapsed (a stalled or starved host), before sending them",
    "no_connect": "no worker took them (none connected, none proved the join token, or none could be set up)",
    "interrupted": "the run was interrupted before they were due",
    "in_flight": "taken by a user that had not sent them yet (it was connecting) when the run ended",
    "users_exhausted": "every user was busy until the end of the plan (+ --drain)",
    "target_silent": "every user was waiting on the database, which had not answered for at least "
                     f"{TARGET_SILENT_S:g} s at the end of the plan (the target's failure: blackholed, paused, stalled)",
}

#: Why an arrival that was sent has no outcome (the ``unknown`` a live worker wrote off at the end).
_UNKNOWN_TEXT = {
    "in_flight": f"still in flight when the run ended, past --drain (bounded by --op-timeout; see {EVENTS} "
                 "for their age)",
    "interrupted": "still in flight when the interrupted run stopped waiting for them (a signal, the web UI's Stop, "
                   "a full results disk)",
}


def _verdict_text(decision: Decision, total: dict) -> str:
    """The verdict's line: `verdict.decide`'s sentence, the exit code, and the ledger's equation when planned is known."""
    planned = total.get("planned")
    if planned in ("", None):
        return f"{decision.head} (exit {decision.code})"
    return (f"{decision.head} (exit {decision.code}): planned {planned} = ok {total.get('ok')} + failed "
            f"{total.get('failures')} + dropped {total.get('dropped')}"
            + (f" + unknown {total['unknown']}" if int(total.get("unknown") or 0) else "")
            + f" + not sent {total.get('not_sent')}")


SEGMENTS_TITLE = (f"Rate overrides: a row per stage and per override in force ({SEGMENTS}: {TIMELINE}'s seconds, "
                  "each in the row in force at its start; the ledger stays per stage)")


#: A run without a finding: slots may have started a few ms late (`LagFinding`: not material), nothing more.
KEPT_TO_PLAN = "no slot dropped, no stage short of its rate or late enough to change a figure"
#: Above the failure kinds: each with its count and the first message of it (events.jsonl has them all).
FAILURES_TITLE = f"Failures by kind (the first message of each; {EVENTS} holds the first of each kind per worker)"


def _check_lines(results) -> list[str]:
    lines = []
    for c, ok, v in results:
        lines.append(f"check {'passed' if ok else 'FAILED'}: {c} (measured {c.shown(v)})")
    return lines


def _title(run) -> str:
    title = f"dbsurge run {run.rundir.run_id}: {run.target.display}"
    if run.ending.interrupted is not None:
        title += (f" -- interrupted at t = {run.ending.interrupted[1]:.1f} s ({run.ending.interrupted[0]}); "
                  "rates over the time that ran")
    elif run.ending.stop_reason:
        title += f" -- stopped: {run.ending.stop_reason}"
    return title


def summary_text(run, stages, summary, findings, results, verdict: str = "") -> str:
    parts = [_title(run)]
    h, rows = operation_table(summary)
    parts.append(render(h, rows, "Operations (response time from the intended start; svc = service time)"))
    if run.plan:
        h, rows = stage_table(stages, _capacity(run))
        parts.append(render(h, rows, f"Stages ({run.plan})"))
    if run.changes:
        h, rows = segment_table(segments(run))
        parts.append(render(h, rows, SEGMENTS_TITLE))
    h, rows = ledger_table(stages if run.plan else summary)
    parts.append(render(h, rows, "Ledger (planned = ok + failed + dropped + unknown + not sent)" if run.plan
                        else "Ledger (closed model: no plan)"))
    failures = failure_lines(run.aggregator.errors, run.aggregator.first_errors)
    if failures:
        parts.append("\n".join([FAILURES_TITLE, ""] + ["  " + line for line in failures]))
    if findings:
        parts.append("\n".join("WARNING: " + f for f in findings))
    elif run.plan:
        parts.append(f"The generator kept to the plan: {KEPT_TO_PLAN}, every arrival accounted for.")
    parts += _check_lines(results)
    parts += ["WARNING: " + w for w in _negotiated(run).get("warnings") or []]  # the TLS one, again at the end
    parts.append(verdict)
    parts.append(f"results: {run.rundir.path}")
    return "\n\n".join(p for p in parts if p)


def summary_markdown(run, stages, summary, findings, results, verdict: str = "") -> str:
    negotiated = _negotiated(run)
    out = [f"# {_title(run)}", "", f"Target: `{run.target.display}`", ""]
    out += [f"Connection: {negotiated['line']}", ""] if negotiated.get("line") else []
    out += [f"**WARNING: {w}**" for w in negotiated.get("warnings") or []] + [f"**{verdict}**", ""]
    h, rows = operation_table(summary)
    out += ["## Operations", "", markdown(h, rows), ""]
    if run.plan:
        h, rows = stage_table(stages, _capacity(run))
        out += [f"## Stages (`{run.plan}`)", "", markdown(h, rows), ""]
    if run.changes:
        h, rows = segment_table(segments(run))
        out += ["## Rate overrides", "", SEGMENTS_TITLE, "", markdown(h, rows), ""]
    h, rows = ledger_table(stages if run.plan else summary)
    out += ["## Ledger", "", "planned = ok + failed (by kind) + dropped + unknown + not sent (by reason)", "",
            markdown(h, rows), ""]
    failures = failure_lines(run.aggregator.errors, run.aggregator.first_errors)
    if failures:
        out += ["## Failures", "", FAILURES_TITLE, ""] + [f"- {line}" for line in failures] + [""]
    out += ["## Generator", ""]
    out += [f"- {f}" for f in findings] or [f"- kept to the plan: {KEPT_TO_PLAN}"]
    if results:
        out += ["", "## Checks", ""] + [f"- {line}" for line in _check_lines(results)]
    return "\n".join(out) + "\n"


def _negotiated(run) -> dict:
    """What the target's check negotiated (`Target.negotiated`); {} for a target that cannot say."""
    return run.target.negotiated() if hasattr(run.target, "negotiated") else {}


def _capacity(run) -> dict[str, str] | None:
    """Maximum capacity per stage from the collector, when one is attached; None leaves the column out."""
    if not getattr(run.options, "cloudwatch", None):
        return None
    try:
        return collectors().stage_capacity(run.rundir.path)
    except Exception as e:
        log.info("no capacity per stage yet (%s)", e)
        return {}

