"""``dbsurge scenario rewarm``: study 000, experiment 2, how a cold cache warms up again.

``--clients`` clients (20) each send ``--rate`` reads per second (5) by random id over a hot set
of ``--hot-set`` documents (100) for ``--duration`` (10 minutes), on a schedule that does not
drift. The study ran it right after experiment 1 left the cluster cold; here ``--restart-target``
(embedded targets) or ``--restart-command`` empties the server's cache first, and ``--idle``
waits before starting.

Every read is traced (``trace.csv``: t_since_start_s, client, id, latency_ms, service_ms, ok,
error; latency from the intended start, service time from the actual start). The tables are the
study's: ``--bucket`` (30 s) buckets with P50 and mean, the per-read trace of the first
``--first-window`` (1 s) and the maximum of the run with its time.
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path

from dbsurge.rundir import utc_iso
from dbsurge.rundir.schema import FIRST_WINDOW_SUFFIX, TRACE, scenario_table
from dbsurge.scenarios.arguments import positive, seconds
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.capacity import capacity_at, capacity_text, fetch_capacity
from dbsurge.scenarios.cold_start import (
    add_cold_start_options,
    restart_target,
    settle_after_load,
    wait_idle,
    wants_own_server,
)
from dbsurge.scenarios.files import epoch_of, is_ok, read_meta, read_rows
from dbsurge.scenarios.latency import ms, summarize_ms
from dbsurge.scenarios.paced_clients import run_paced_clients
from dbsurge.scenarios.report import Report, Table, say
from dbsurge.scenarios.scenario_run import ScenarioRun, ensure_loaded
from dbsurge.workloads import get_workload

NAME = "rewarm"
STUDY = {"clients": 20, "rate": 5.0, "hot_set": 100, "duration": "10m", "bucket": "30s", "first_window": "1s",
         "idle": "0s", "documents": 2_000_000}
QUICK = {"clients": 5, "rate": 20.0, "hot_set": 100, "duration": "4s", "bucket": "1s", "first_window": "1s",
         "documents": 20_000}
TRACE_COLUMNS = ["t_since_start_s", "client", "id", "latency_ms", "service_ms", "ok", "error"]
BUCKET_COLUMNS = ["bucket", "start_s", "end_s", "count", "failures", "p50_ms", "mean_ms", "p99_ms", "max_ms",
                  "capacity"]
FIRST_COLUMNS = ["t_since_start_s", "client", "id", "latency_ms"]


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=int, default=None, help="concurrent clients (study 20; quick 5)")
    p.add_argument("--rate", type=float, default=None, help="reads per second per client (study 5; quick 20)")
    p.add_argument("--hot-set", type=int, default=None, help="documents read: ids 0..N-1 (100)")
    p.add_argument("--duration", default=None, help="how long (study 10m; quick 4s)")
    p.add_argument("--bucket", default=None, help="bucket length of the timeline table (study 30s; quick 1s)")
    p.add_argument("--first-window", default=None, help="trace every read of this first window (1s)")
    p.add_argument("--idle", default=None, help="wait before starting, no connection open (default 0s)")
    p.add_argument("--documents", type=int, default=None,
                   help="documents in the collection (study 2,000,000; quick 20,000)")
    add_cold_start_options(p, restart_help="restart the server first so its cache is empty (embedded targets; "
                           "the scenario starts a server of its own)")


def check(setup: Setup) -> None:
    args = setup.args
    duration_s = positive(seconds(args.duration, "--duration"), "--duration")
    bucket_s = positive(seconds(args.bucket, "--bucket"), "--bucket")
    window_s = positive(seconds(args.first_window, "--first-window"), "--first-window")
    idle_s = seconds(args.idle, "--idle")
    positive(args.clients, "--clients")
    positive(args.rate, "--rate")
    positive(args.hot_set, "--hot-set")
    setup.workload_options.setdefault("documents", str(args.documents))
    setup.values["own_server"] = wants_own_server(args)
    setup.settings.update(duration_s=duration_s, bucket_s=bucket_s, first_window_s=window_s, idle_s=idle_s)


def phases(run: ScenarioRun, setup: Setup) -> dict:
    args = setup.args
    target = run.connect_target(setup.target_options, own_server=setup.values["own_server"], server_settings={
        "shared_buffers": args.embedded_shared_buffers, "cache_size": args.embedded_cache_size})
    workload = get_workload("documents", target, setup.workload_options)
    hot = min(args.hot_set, workload.options["documents"])
    run.begin(workload="documents", workload_options=workload.options, hot_set=hot)
    load_s = ensure_loaded(workload)
    if load_s:
        settle_after_load(workload, ("documents",))
    run.meta(load_s=load_s)
    _make_cold(run, setup)
    duration_s = setup.settings["duration_s"]
    say(f"re-warm: {args.clients} clients x {args.rate:g} reads/s on a hot set of {hot} for {duration_s:g} s")

    def make(session, i):
        rng = random.Random(args.seed * 7919 + i)
        return (lambda: int(rng.random() * hot)), workload.store.id_reader(session)

    result = run_paced_clients(clients=args.clients, rate_per_client=args.rate, duration_s=duration_s,
                               connect=lambda i: target.connect(), make_operation=make)
    rows = [{"t_since_start_s": round(result.since_start_s(op.start_ns), 6), "client": op.client, "id": op.key,
             "latency_ms": round(op.response_ms, 3), "service_ms": round(op.service_ms, 3),
             "ok": int(op.ok), "error": op.error} for op in result.operations]
    run.append_rows(TRACE, TRACE_COLUMNS, rows)
    run.meta(time_zero_utc=utc_iso(result.t0_epoch_s), connect_errors=dict(result.connect_errors))
    if setup.collector is not None:
        run.meta(cloudwatch_note=fetch_capacity(run.path, setup.collector, result.t0_epoch_s,
                                                result.t0_epoch_s + result.elapsed_s))
    return {"reads": len(rows), "failures": sum(1 for r in rows if not r["ok"])}


def _make_cold(run: ScenarioRun, setup: Setup) -> None:
    """Wait ``--idle``, then restart the server when asked; the cold start goes to run.json."""
    args, idle_s = setup.args, setup.settings["idle_s"]
    wait_idle(idle_s, "before the re-warm")
    restarted = {}
    if args.restart_target or args.restart_command:
        restarted = restart_target(run, args.restart_command, evict_os_cache=not args.keep_os_cache)
    run.meta(cold_start={"idle_s": idle_s, "restart": bool(args.restart_target or args.restart_command),
                         **restarted})


# -- the tables (pure, from trace.csv) ------------------------------------------------------------------


def bucket_rows(trace: list[dict], bucket_s: float, duration_s: float) -> list[dict]:
    """Per bucket of ``bucket_s`` (by start time): count, failures, P50, mean, P99, max of latency."""
    buckets = max(1, math.ceil(duration_s / bucket_s - 1e-9))
    grouped: list[list[dict]] = [[] for _ in range(buckets)]
    for r in trace:
        i = min(buckets - 1, int(float(r["t_since_start_s"]) // bucket_s))
        grouped[max(0, i)].append(r)
    out = []
    for i, rows in enumerate(grouped):
        ok = [float(r["latency_ms"]) for r in rows if is_ok(r)]
        s = summarize_ms(ok)
        out.append({"bucket": i, "start_s": round(i * bucket_s, 3), "end_s": round(min((i + 1) * bucket_s,
                                                                                          duration_s), 3),
                    "count": len(rows), "failures": len(rows) - len(ok), "p50_ms": s["p50_ms"],
                    "mean_ms": s["mean_ms"], "p99_ms": s["p99_ms"], "max_ms": s["max_ms"]})
    return out


def first_window_rows(trace: list[dict], window_s: float) -> list[dict]:
    """Every read that started in the first ``window_s``, in time order."""
    rows = [r for r in trace if float(r["t_since_start_s"]) < window_s]
    rows.sort(key=lambda r: float(r["t_since_start_s"]))
    return [{"t_since_start_s": float(r["t_since_start_s"]), "client": int(r["client"]), "id": r["id"],
             "latency_ms": float(r["latency_ms"]) if is_ok(r) else None} for r in rows]


def run_maximum(trace: list[dict]) -> dict | None:
    """The slowest successful read of the run and when it started."""
    ok = [r for r in trace if is_ok(r)]
    if not ok:
        return None
    top = max(ok, key=lambda r: float(r["latency_ms"]))
    return {"t_since_start_s": float(top["t_since_start_s"]), "latency_ms": float(top["latency_ms"]),
            "client": int(top["client"]), "id": top["id"]}


def _window_label(start: float, end: float) -> str:
    def t(x: float) -> str:
        if x >= 60 and x % 60 == 0:
            return f"{x / 60:g}min"
        return f"{x:g}s"

    return f"{t(start)}-{t(end)}"


def _marks(first: list[dict], top: dict | None) -> list[str]:
    """The last column of the first window's trace: the first read, and the run's maximum if it is there."""
    marks = []
    for i, r in enumerate(first):
        mark = "first read" if i == 0 else ""
        if top and r["latency_ms"] == top["latency_ms"] and r["t_since_start_s"] == top["t_since_start_s"]:
            mark = (mark + ", " if mark else "") + "MAX of the run"
        marks.append(mark)
    return marks


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    settings = meta.get("settings") or {}
    trace = read_rows(run_dir, TRACE)
    buckets = bucket_rows(trace, float(settings["bucket_s"]), float(settings["duration_s"]))
    zero = epoch_of(meta.get("time_zero_utc"))
    for b in buckets:  # the capacity for the period holding the bucket's start (blank without a collector)
        b["capacity"] = capacity_text(capacity_at(run_dir, zero + b["start_s"])) if zero is not None else ""
    first = first_window_rows(trace, float(settings["first_window_s"]))
    top = run_maximum(trace)
    t1 = Table(title=f"Re-warm timeline: {settings.get('clients')} clients x {settings.get('rate'):g} reads/s on a hot "
                     f"set of {meta.get('hot_set')} (latency in ms, from the intended start)",
               headers=["bucket", "time window", "reads", "failures", "P50", "mean", "P99", "max", "capacity"],
               rows=[[str(b["bucket"]), _window_label(b["start_s"], b["end_s"]), str(b["count"]), str(b["failures"]),
                      ms(b["p50_ms"]), ms(b["mean_ms"]), ms(b["p99_ms"]), ms(b["max_ms"]), b["capacity"]]
                     for b in buckets],
               csv_name=scenario_table(NAME), csv_columns=BUCKET_COLUMNS, csv_rows=buckets)
    marks = _marks(first, top)
    t2 = Table(title=f"Every read of the first {settings.get('first_window_s'):g} s",
               headers=["t since start", "client", "id", "latency ms", ""],
               rows=[[f"t={r['t_since_start_s']:.3f}s", str(r["client"]), str(r["id"]), ms(r["latency_ms"]), m]
                     for r, m in zip(first, marks)],
               csv_name=f"{NAME}{FIRST_WINDOW_SUFFIX}", csv_columns=FIRST_COLUMNS, csv_rows=first)
    notes = []
    if top:
        notes.append(f"Maximum of the run: {top['latency_ms']:.3f} ms at t={top['t_since_start_s']:.3f}s "
                     f"(client {top['client']}, id {top['id']}).")
    if len(buckets) > 1 and buckets[0]["p50_ms"] is not None:
        rest = [b for b in buckets[1:] if b["p50_ms"] is not None]
        if rest:
            lo, hi = min(b["p50_ms"] for b in rest), max(b["p50_ms"] for b in rest)
            notes.append(f"P50 of bucket 0: {buckets[0]['p50_ms']:.3f} ms; of buckets 1-{len(buckets) - 1}: "
                         f"{lo:.3f}-{hi:.3f} ms.")
    if not meta.get("cloudwatch"):
        notes.append("No collector attached (--cloudwatch docdb:ID): the capacity column is blank.")
    elif meta.get("cloudwatch_note"):
        notes.append(meta["cloudwatch_note"])
    cold = meta.get("cold_start") or {}
    if cold.get("restart"):
        evicted = cold.get("os_cache_evicted_bytes")
        page_cache = (f"its files, {evicted / 2**20:,.1f} MiB, evicted from the OS page cache" if evicted
                      else "the operating system's page cache warm")
        notes.append(f"Started right after a restart of the server (its own cache empty; {page_cache}).")
    return Report(heading=f"dbsurge scenario rewarm (study 000, experiment 2): {meta.get('target_display')}",
                  tables=[t1, t2], notes=notes)


SCENARIO = Scenario(NAME, "Study 000, experiment 2: re-warming a cold cache on a small hot set.", STUDY, QUICK,
                    report=report, options=add_options, check=check, phases=phases, cloudwatch=True)


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
