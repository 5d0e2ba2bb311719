"""``dbsurge scenario idle``: study 001, the first request after an idle window.

For each of ``--repeat`` runs (2): close every connection, wait ``--idle`` (900 s), then time

- a new connection: ``target.connect()``, i.e. TCP, TLS, authentication and, on Aurora DSQL, signing
  a fresh IAM token; on MongoDB also the first ``ping`` (pymongo connects lazily), with
  ``--connect-timeout`` (15 s, the study's driver setting);
- a first lookup (orders' ``product_lookup`` on PostgreSQL, documents' ``read_by_id`` on MongoDB);
- ``--lookups`` further lookups (20), of which the table gives the p50.

A connection that does not complete within the timeout is a recorded failure with the time it
took (Aurora Serverless v2 resuming from 0 ACU took longer than 15 s in the study), and the next
run goes on. Each step also has a watchdog (``--query-timeout``) so that a server that accepts a
connection and then never answers cannot hang the scenario.

Raw data: ``probes.csv`` (run, step, index, started_utc, latency_ms, ok, error). Table
``idle.csv``: run, first connection ms, first query ms, p50 of the next N, result.
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import threading
import time
from pathlib import Path
from typing import Any

from dbsurge.base.errors import UserError
from dbsurge.base.redact import redact_text
from dbsurge.measure.timing import elapsed_ms, time_call
from dbsurge.rundir import utc_iso
from dbsurge.rundir.schema import PROBES, scenario_table
from dbsurge.scenarios.arguments import positive, seconds
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.cold_start import wait_idle
from dbsurge.scenarios.files import opt_float, read_meta, read_rows
from dbsurge.scenarios.latency import ms, summarize_ms
from dbsurge.scenarios.report import Report, Table, say
from dbsurge.scenarios.scenario_run import ScenarioRun, ensure_loaded
from dbsurge.targets import one_line
from dbsurge.workloads import get_workload

NAME = "idle"
STUDY = {"idle": "900s", "connect_timeout": "15s", "repeat": 2, "lookups": 20, "query_timeout": "60s"}
QUICK = {"idle": "1s", "repeat": 2, "lookups": 20, "query_timeout": "30s"}
PROBE_COLUMNS = ["run", "step", "index", "started_utc", "latency_ms", "ok", "error"]
TABLE_COLUMNS = ["run", "first_connection_ms", "first_query_ms", "next_p50_ms", "next_count", "result"]
DEFAULT_OPERATION = {"orders": "product_lookup", "documents": "read_by_id", "ycsb": "read"}
DEFAULT_DATA = {"orders": ("products", 2000), "documents": ("documents", 2000), "ycsb": ("recordcount", 1000)}


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--idle", default=None, help="wait with every connection closed (study 900s; quick 1s)")
    p.add_argument("--connect-timeout", default=None, help="connection timeout (study 15s; PostgreSQL's libpq "
                                                           "counts whole seconds, at least 2)")
    p.add_argument("--repeat", type=int, default=None, help="idle-then-connect runs (2)")
    p.add_argument("--lookups", type=int, default=None, help="lookups after the first one (20)")
    p.add_argument("--query-timeout", default=None,
                   help="give up on a query that has not answered after this long (study 60s; quick 30s)")
    p.add_argument("--workload", default=None, choices=sorted(DEFAULT_OPERATION),
                   help="whose lookup to time (default: orders on PostgreSQL, documents on MongoDB)")
    p.add_argument("--operation", default=None, help="the operation to time (default: product_lookup, read_by_id "
                                                     "or read)")


def check(setup: Setup) -> None:
    args = setup.args
    setup.values["idle_s"] = seconds(args.idle, "--idle")
    timeout_s = positive(seconds(args.connect_timeout, "--connect-timeout"), "--connect-timeout")
    setup.values["query_timeout_s"] = positive(seconds(args.query_timeout, "--query-timeout"), "--query-timeout")
    positive(args.repeat, "--repeat")
    if args.lookups < 0:
        raise UserError("--lookups must not be negative")
    setup.settings["connect_timeout_s"] = timeout_s


def phases(run: ScenarioRun, setup: Setup) -> None:
    args, wopts = setup.args, setup.workload_options
    timeout_s = setup.settings["connect_timeout_s"]
    run.connect_target(setup.target_options)
    target = run.target = run.reopen_target(run.target.with_connect_timeout(setup.target_options, timeout_s))
    name = args.workload or ("orders" if target.kind == "postgres" else "documents")
    if args.quick and name in DEFAULT_DATA:
        key, size = DEFAULT_DATA[name]
        wopts.setdefault(key, str(size))
    workload = get_workload(name, target, wopts)
    operation = args.operation or DEFAULT_OPERATION[name]
    if operation not in workload.operations:
        raise UserError(f"unknown operation '{operation}' for workload {name} (known: "
                        f"{', '.join(workload.operations)})")
    run.begin(workload=name, workload_options=workload.options, operation=operation)
    run.meta(load_s=ensure_loaded(workload))
    idle_s = setup.values["idle_s"]
    for i in range(1, args.repeat + 1):
        say(f"run {i}/{args.repeat}: every connection closed")
        run.event("idle_start", run=i, idle_s=idle_s)
        wait_idle(idle_s, f"run {i}/{args.repeat}")
        rows = probe(target, workload, operation, i, args.lookups, timeout_s, setup.values["query_timeout_s"],
                     args.seed)
        run.append_rows(PROBES, PROBE_COLUMNS, rows)
        run.event("probe", run=i, result=_result(rows))
        say(f"run {i}/{args.repeat}: {_result(rows)}")


def probe(target: Any, workload: Any, operation: str, run_number: int, lookups: int, connect_timeout_s: float,
          query_timeout_s: float, seed: int) -> list[dict]:
    """One idle probe: connect, first query, ``lookups`` more; stops at the first failure.

    The steps run in a worker thread; this thread waits for each with a deadline, so a server that
    never answers ends the probe with a failure instead of hanging it (the worker is abandoned).
    """
    results: queue.Queue = queue.Queue()
    steps = [("connect", 0)] + [("first_query", 0)] + [("lookup", k) for k in range(1, lookups + 1)]

    sessions: list[Any] = []

    def connect() -> Any:
        """The connect step: a new session that has talked to the server (`Target.first_contact`: MongoDB's
        driver connects lazily, so a ping); returns the lookup."""
        session = target.connect()
        sessions.append(session)
        target.first_contact(session)
        return workload.new_client(session, seed + run_number)[operation]

    def work() -> None:
        call = connect
        try:
            for step, _ in steps:
                wall = time.time()
                ok, value, start, end = time_call(call)
                results.put((step, wall, elapsed_ms(start, end), "" if ok else _error_text(value)))
                if not ok:
                    return
                if step == "connect":
                    call = value  # every later step is the lookup
        finally:
            for session in sessions:
                with contextlib.suppress(Exception):
                    session.close()

    threading.Thread(target=work, name=f"idle-probe-{run_number}", daemon=True).start()
    return _collect(results, steps, run_number, connect_timeout_s, query_timeout_s)


def _collect(results: queue.Queue, steps: list[tuple[str, int]], run_number: int, connect_timeout_s: float,
             query_timeout_s: float) -> list[dict]:
    """The probe's rows as its steps answer, each with a deadline; the first failure or silence ends it."""
    rows = []
    for step, index in steps:
        limit = connect_timeout_s + 5.0 if step == "connect" else query_timeout_s
        started = time.time()
        try:
            got_step, wall, latency_ms, error = results.get(timeout=limit)
        except queue.Empty:
            waited = time.time() - started
            rows.append(_row(run_number, step, index, started, waited * 1000, f"no answer after {waited:.1f} s"))
            break
        rows.append(_row(run_number, got_step, index, wall, latency_ms, error))
        if error:
            break
    return rows


def _row(run_number: int, step: str, index: int, wall: float, latency_ms: float, error: str) -> dict:
    return {"run": run_number, "step": step, "index": index, "started_utc": utc_iso(wall),
            "latency_ms": round(latency_ms, 3), "ok": 0 if error else 1, "error": error}


def _error_text(e: BaseException) -> str:
    """``Kind: first line`` of a failed step's exception, secrets removed."""
    return redact_text(f"{type(e).__name__}: {one_line(str(e), 200)}")


def _result(rows: list[dict]) -> str:
    failed = next((r for r in rows if not r["ok"]), None)
    if failed is None:
        return "success"
    what = "connection" if failed["step"] == "connect" else f"{failed['step'].replace('_', ' ')} {failed['index']}"
    return f"{what} failed after {failed['latency_ms'] / 1000:.1f} s: {failed['error']}"


# -- the table (pure, from probes.csv) ------------------------------------------------------------------


def idle_rows(probes: list[dict]) -> list[dict]:
    """One row per run: first connection and first query ms, p50 of the further lookups, result."""
    out = []
    for run_number in sorted({int(r["run"]) for r in probes}):
        rows = [r for r in probes if int(r["run"]) == run_number]
        for r in rows:
            r["ok"] = str(r["ok"]) not in ("0", "False", "false")
            r["latency_ms"] = float(r["latency_ms"])
        connect = next((r for r in rows if r["step"] == "connect"), None)
        first = next((r for r in rows if r["step"] == "first_query"), None)
        nxt = [r["latency_ms"] for r in rows if r["step"] == "lookup" and r["ok"]]
        out.append({
            "run": run_number,
            "first_connection_ms": connect["latency_ms"] if connect else None,
            "first_query_ms": first["latency_ms"] if first and first["ok"] else None,
            "next_p50_ms": summarize_ms(nxt)["p50_ms"],
            "next_count": len(nxt),
            "result": _result(rows),
        })
    return out


def _connection_cell(row: dict) -> str:
    if row["first_connection_ms"] is None:
        return "-"
    if row["result"].startswith("connection failed"):
        return f"failed after {row['first_connection_ms'] / 1000:.1f} s"
    return ms(row["first_connection_ms"])


def idle_words(idle: Any) -> str:
    """The idle window with its unit: ``--idle 5`` is ``5 s``, ``900s`` is ``15 min`` (the title said "after 5 idle").

        >>> idle_words("5"), idle_words("900s"), idle_words("90m"), idle_words(None)
        ('5 s', '15 min', '1.5 h', '?')
    """
    try:
        s = seconds(idle, "--idle")
    except (UserError, TypeError, ValueError):
        return "?" if idle in (None, "") else str(idle)
    if s >= 3600 and s % 1800 == 0:
        return f"{s / 3600:g} h"
    if s >= 60 and s % 30 == 0:
        return f"{s / 60:g} min"
    return f"{s:g} s"


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    rows = idle_rows(read_rows(run_dir, PROBES))
    settings = meta.get("settings") or {}
    lookups = settings.get("lookups", 20)
    display = [[str(r["run"]), _connection_cell(r), ms(r["first_query_ms"]), ms(r["next_p50_ms"]),
                "success" if r["result"] == "success" else r["result"]] for r in rows]
    table = Table(title=f"First request after {idle_words(settings.get('idle'))} idle (connect timeout "
                        f"{opt_float(settings.get('connect_timeout_s')) or 0:g} s; times in ms)",
                  headers=["run", "first connection", "first query", f"p50 of next {lookups}", "result"],
                  rows=display, csv_name=scenario_table(NAME), csv_columns=TABLE_COLUMNS, csv_rows=rows)
    ok = sum(1 for r in rows if r["result"] == "success")
    what = f"operation {meta.get('operation')} of workload {meta.get('workload')}"
    notes = [f"{ok} of {len(rows)} runs succeeded; {what}."]
    target = meta.get("target") or {}
    if target.get("kind") == "mongo":
        notes.append("MongoDB: first connection = creating the client and its first ping (pymongo connects lazily).")
    if target.get("flavor") == "dsql":
        notes.append("Aurora DSQL: first connection includes signing a fresh IAM token.")
    return Report(heading=f"dbsurge scenario idle (study 001): {meta.get('target_display')}", tables=[table],
                  notes=notes)


SCENARIO = Scenario(NAME, "Study 001: a new connection and the first queries after an idle window.", STUDY, QUICK,
                    report=report, options=add_options, check=check, phases=phases)


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
