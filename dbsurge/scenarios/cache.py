"""``dbsurge scenario cache``: study 000, experiment 1, buffer cache warm vs cold.

1. Warm phase: ``--warm-connections`` clients x ``--warm-rate`` reads/s by random id over the whole
   documents collection for ``--warm-duration`` (the study: 100 x 30 for 5 minutes, so the cache
   holds the data set).
2. Snapshot A (WARM): ``--reads`` seeded random ids (1,000), read one after another on one new
   connection, each timed.
3. Every connection closed, then ``--idle`` (the study waited 20 minutes for the cluster to scale in
   and drop its cache). With ``--restart-target`` (embedded targets) the server is restarted instead,
   so its cache really is empty; ``--restart-command`` does the same for any server.
4. Snapshot B (COLD): the same ids in the same order, same code path, on a new connection.

The table is the study's: P50, P95, P99 and MAX warm and cold with the change in % and as a
ratio, plus the first read, errors and the server's own cache hit ratio during each snapshot. The
output says in words whether cold was slower, with the numbers. A restart alone empties only the
database's own cache, and the operating system's page cache would still serve the "cold" reads
from memory; so after restarting its embedded server the scenario also evicts the server's files
from the page cache (``posix_fadvise``, those files only; ``--keep-os-cache`` leaves them), and
the output says which of the two it was.

Raw data: ``snapshots.csv`` (snapshot, index, id, t_since_start_s, latency_ms, ok, error),
``warm_phase.csv`` (one line), ``server_cache.csv`` (per snapshot).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dbsurge.measure.timing import elapsed_ms, now_ns, time_call
from dbsurge.rundir import utc_iso
from dbsurge.rundir.schema import SERVER_CACHE, SNAPSHOTS, WARM_PHASE, scenario_table
from dbsurge.scenarios.arguments import positive, seconds
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.capacity import capacity_at, capacity_text, fetch_capacity, metric_at
from dbsurge.scenarios.cold_start import (
    add_cold_start_options,
    restart_target,
    settle_after_load,
    wait_idle,
    wants_own_server,
)
from dbsurge.scenarios.documents_reads import (
    counter_delta,
    seeded_ids,
    server_cache_counters,
)
from dbsurge.scenarios.files import epoch_of, floats, is_ok, opt_float, read_meta, read_rows
from dbsurge.scenarios.latency import change_pct as change
from dbsurge.scenarios.latency import delta_text, ms, number, ratio, summarize_ms
from dbsurge.scenarios.paced_clients import run_paced_clients
from dbsurge.scenarios.report import Report, Table, say
from dbsurge.scenarios.scenario_run import ScenarioRun, ensure_loaded
from dbsurge.workloads import get_workload

NAME = "cache"
STUDY = {"warm_connections": 100, "warm_rate": 30.0, "warm_duration": "5m", "reads": 1000, "idle": "20m",
         "documents": 2_000_000}
QUICK = {"warm_connections": 4, "warm_rate": 50.0, "warm_duration": "3s", "reads": 1000, "idle": "1s",
         "documents": 20_000}
SNAPSHOT_COLUMNS = ["snapshot", "index", "id", "t_since_start_s", "latency_ms", "ok", "error"]
WARM_COLUMNS = ["connections", "rate_per_connection", "duration_s", "operations", "failures", "achieved_ops_s",
                "p50_ms", "p99_ms", "max_ms", "connect_errors"]
SERVER_COLUMNS = ["snapshot", "blocks_read", "blocks_hit", "hit_pct"]
TABLE_COLUMNS = ["metric", "warm", "cold", "delta_pct", "ratio"]
FIRST_READS = 10
# A quiet second before each snapshot, so that neither pays for our own connections closing (the
# warm phase's clients, the counter reading): backend exits take CPU on a small host.
SETTLE_S = 1.0


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warm-connections", type=int, default=None, help="clients of the warm phase (study 100; quick 4)")
    p.add_argument("--warm-rate", type=float, default=None,
                   help="reads per second per warm client (study 30; quick 50)")
    p.add_argument("--warm-duration", default=None, help="length of the warm phase (study 5m; quick 3s)")
    p.add_argument("--reads", type=int, default=None, help="reads per snapshot (1000)")
    p.add_argument("--idle", default=None,
                   help="wait between the snapshots, every connection closed (study 20m; quick 1s; "
                        "0 with --restart-target unless given)")
    p.add_argument("--documents", type=int, default=None,
                   help="documents in the collection (study 2,000,000; quick 20,000; "
                        "same as --workload-option documents=N)")
    add_cold_start_options(p, restart_help="restart the server between the snapshots so its cache is empty "
                           "(embedded targets: the scenario starts a server of its own; other targets need "
                           "--restart-command)")


def check(setup: Setup) -> None:
    args = setup.args
    setup.values["warm_s"] = seconds(args.warm_duration, "--warm-duration")
    restart = bool(args.restart_target or args.restart_command)
    idle_s = seconds(args.idle, "--idle") if ("idle" in setup.given or not restart) else 0.0
    positive(args.warm_connections, "--warm-connections")
    positive(args.warm_rate, "--warm-rate")
    positive(args.reads, "--reads")
    setup.workload_options.setdefault("documents", str(args.documents))
    setup.values["own_server"] = wants_own_server(args)
    setup.settings.update(idle_s=idle_s, restart=restart)


def phases(run: ScenarioRun, setup: Setup) -> None:
    args = setup.args
    idle_s, restart = setup.settings["idle_s"], setup.settings["restart"]
    target = run.connect_target(setup.target_options, own_server=setup.values["own_server"], server_settings={
        "shared_buffers": args.embedded_shared_buffers, "cache_size": args.embedded_cache_size})
    workload = get_workload("documents", target, setup.workload_options)
    run.begin(workload="documents", workload_options=workload.options)
    load_s = ensure_loaded(workload)
    if load_s:
        settle_after_load(workload, ("documents",))
    documents = workload.options["documents"]
    ids = seeded_ids(args.seed, args.reads, documents)

    warm_phase(run, workload, args.warm_connections, args.warm_rate, setup.values["warm_s"])
    before = server_cache_counters(workload)
    snapshot(run, workload, "warm", ids)
    after_warm = server_cache_counters(workload)

    run.event("cold_start", idle_s=idle_s, restart=restart)
    wait_idle(idle_s, "every connection closed")
    restarted = restart_target(run, args.restart_command, evict_os_cache=not args.keep_os_cache) if restart else {}
    snapshot(run, workload, "cold", ids)
    after_cold = server_cache_counters(workload)

    server = [{"snapshot": "warm", **counter_delta(before, after_warm)},
              {"snapshot": "cold", **counter_delta(after_warm, after_cold)}]
    run.append_rows(SERVER_CACHE, SERVER_COLUMNS, server)
    run.meta(cold_start={"idle_s": idle_s, "restart": restart, "restart_command": args.restart_command,
                         **restarted}, load_s=load_s, documents=documents, reads=len(ids))
    if setup.collector is not None:
        run.meta(cloudwatch_note=fetch_capacity(run.path, setup.collector, run.started_s, time.time()))


def warm_phase(run: ScenarioRun, workload, connections: int, rate: float, duration_s: float) -> None:
    """C clients x R random reads/s over the whole collection (the workload's own read_by_id)."""
    say(f"warm phase: {connections} connections x {rate:g} reads/s for {duration_s:g} s")
    target = run.target

    def make(session, i):
        read = workload.new_client(session, run.args.seed * 1000 + i)["read_by_id"]
        return (lambda: None), (lambda _key: read())

    result = run_paced_clients(clients=connections, rate_per_client=rate, duration_s=duration_s,
                               connect=lambda i: target.connect(), make_operation=make, keep_operations=False)
    ok = result.latencies_ms
    s = summarize_ms(ok)
    row = {"connections": connections, "rate_per_connection": rate, "duration_s": duration_s,
           "operations": result.count, "failures": result.count - len(ok),
           "achieved_ops_s": round(len(ok) / max(result.elapsed_s, 1e-9), 3) if ok else 0.0,
           "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "max_ms": s["max_ms"],
           "connect_errors": sum(result.connect_errors.values())}
    run.append_rows(WARM_PHASE, WARM_COLUMNS, [row])
    run.event("warm_phase", **{k: v for k, v in row.items()}, errors=dict(result.errors))


def snapshot(run: ScenarioRun, workload, name: str, ids: list[int]) -> None:
    """Read ``ids`` in order on one new connection, each read timed; rows go to snapshots.csv."""
    say(f"snapshot {name.upper()}: {len(ids)} reads by id on one new connection")
    target = run.target
    time.sleep(SETTLE_S)
    run.event("snapshot_start", snapshot=name)
    session = target.connect()
    rows = []
    started = time.time()
    try:
        read = workload.store.id_reader(session)
        t0 = now_ns()
        for index, doc_id in enumerate(ids):
            ok, value, start, end = time_call(read, doc_id)
            error = "" if ok else f"{type(value).__name__}: {str(value).strip()[:160]}"
            rows.append({"snapshot": name, "index": index, "id": doc_id,
                         "t_since_start_s": round((start - t0) / 1e9, 6),
                         "latency_ms": round(elapsed_ms(start, end), 3), "ok": 0 if error else 1, "error": error})
        workload.store.publish_counters(session)
    finally:
        session.close()
    run.append_rows(SNAPSHOTS, SNAPSHOT_COLUMNS, rows)
    run.event("snapshot_end", snapshot=name, reads=len(rows))
    times = dict(run.rundir.meta.get("snapshot_times") or {})
    times[name] = {"started_utc": utc_iso(started), "ended_utc": utc_iso(time.time())}
    run.meta(snapshot_times=times)


# -- the table (pure, from the run directory's files) -------------------------------------------------


def cache_rows(warm: list[float], cold: list[float], warm_errors: int, cold_errors: int,
               server: dict[str, dict], cloudwatch: dict[str, dict[str, str]] | None = None) -> list[dict]:
    """The table's rows as numbers: percentiles, first reads, errors, server cache hit %, CloudWatch.

    ``cloudwatch``: ``{"capacity": {"warm": text, "cold": text}, "BufferCacheHitRatio": {...}}``
    from the collector at each snapshot's start (rows left out without a collector).
    """
    sw, sc = summarize_ms(warm), summarize_ms(cold)
    rows = []
    for label, key in (("P50", "p50_ms"), ("P95", "p95_ms"), ("P99", "p99_ms"), ("MAX", "max_ms"),
                       ("MEAN", "mean_ms")):
        rows.append(_row(label, sw[key], sc[key]))
    rows.append(_row("first read", warm[0] if warm else None, cold[0] if cold else None))
    first_w = sum(warm[:FIRST_READS]) / len(warm[:FIRST_READS]) if warm else None
    first_c = sum(cold[:FIRST_READS]) / len(cold[:FIRST_READS]) if cold else None
    rows.append(_row(f"first {FIRST_READS} reads (mean)", first_w, first_c))
    rows.append({"metric": "errors", "warm": warm_errors, "cold": cold_errors, "delta_pct": None, "ratio": None})
    hw, hc = (server.get(s, {}).get("hit_pct") for s in ("warm", "cold"))
    rows.append({"metric": "server cache hit %", "warm": opt_float(hw), "cold": opt_float(hc), "delta_pct": None,
                 "ratio": None})
    for label, values in (cloudwatch or {}).items():
        rows.append({"metric": f"{label} (CloudWatch)", "warm": values.get("warm", ""), "cold": values.get("cold", ""),
                     "delta_pct": None, "ratio": None})
    return rows


def _row(label: str, warm: float | None, cold: float | None) -> dict:
    d = change(warm, cold)
    r = ratio(warm, cold)
    return {"metric": label, "warm": warm, "cold": cold, "delta_pct": None if d is None else round(d, 3),
            "ratio": None if r is None else round(r, 4)}


#: The server's cache hit ratio fell by at least this many points in the COLD snapshot: its cache was emptied.
HIT_DROP_PTS = 5.0


def not_cold(rows: list[dict], cold: dict | None) -> str | None:
    """Why the COLD snapshot is not shown to be cold (nothing emptied the cache), or None when something did:
    a restart (``cold``: run.json's ``cold_start``), or the server's own cache hit ratio falling."""
    if cold is None or cold.get("restart"):
        return None
    hit = next((r for r in rows if r["metric"] == "server cache hit %"), {})
    hw, hc = hit.get("warm"), hit.get("cold")
    if hw is not None and hc is not None and hc <= hw - HIT_DROP_PTS:
        return None
    seen = (f"; the server's cache hit ratio stayed {hw:.1f}% -> {hc:.1f}%" if hw is not None and hc is not None
            else "; the server gives no cache counters to show it")
    idle = float(cold.get("idle_s") or 0)
    return f"nothing emptied the cache between the snapshots ({idle:g} s idle, no restart{seen})"


def verdict(rows: list[dict], cold: dict | None = None) -> str:
    """One plain sentence: where COLD was slower than WARM and where it was not, with the numbers.

    With ``cold`` (run.json's ``cold_start``) and nothing that emptied the cache (`not_cold`), the sentence
    says so first: after 1 s idle and no restart the "COLD" snapshot re-reads a warm cache, and "COLD was
    slower than WARM at every percentile" would be read as a cold start that did not happen.
    """
    compared = _compared(rows)
    why = not_cold(rows, cold)
    if why is None:
        return compared
    return (f"NOT A COLD START: {why}, so COLD re-read a warm cache and its difference from WARM is not a cache "
            f"effect. Measured: {compared} For a cold cache pass --restart-target (embedded targets) or "
            "--restart-command, or an --idle long enough for the database to drop its cache.")


def _compared(rows: list[dict]) -> str:
    by = {r["metric"]: r for r in rows}
    slower, not_slower = [], []
    for label in ("P50", "P95", "P99", "MAX"):
        r = by[label]
        if r["warm"] is None or r["cold"] is None:
            continue
        text = f"{label} {r['warm']:.3f} -> {r['cold']:.3f} ms ({r['delta_pct']:+.0f}%)"
        (slower if r["cold"] > r["warm"] else not_slower).append(text)
    if not slower and not not_slower:
        return "No comparison: a snapshot has no successful reads."
    if not not_slower:
        return "COLD was slower than WARM at every percentile: " + "; ".join(slower) + "."
    if not slower:
        return "COLD was NOT slower than WARM at any percentile: " + "; ".join(not_slower) + "."
    return ("COLD was slower than WARM at " + "; ".join(slower) + ", and NOT slower at " + "; ".join(not_slower)
            + ".")


def report(run_dir: Path) -> Report:
    """The study's warm-vs-cold table from snapshots.csv, warm_phase.csv and server_cache.csv."""
    meta = read_meta(run_dir)
    snaps = read_rows(run_dir, SNAPSHOTS)
    warm_rows = [r for r in snaps if r["snapshot"] == "warm"]
    cold_rows = [r for r in snaps if r["snapshot"] == "cold"]
    warm, cold = floats(warm_rows, "latency_ms"), floats(cold_rows, "latency_ms")
    errors = [sum(1 for r in rs if not is_ok(r)) for rs in (warm_rows, cold_rows)]
    server = {r["snapshot"]: r for r in read_rows(run_dir, SERVER_CACHE)}
    rows = cache_rows(warm, cold, errors[0], errors[1], server, _cloudwatch_cells(run_dir, meta))
    display = []
    for r in rows:
        if r["metric"] == "errors":
            display.append([r["metric"], str(r["warm"]), str(r["cold"]), ""])
        elif r["metric"] == "server cache hit %":
            display.append([r["metric"], number(r["warm"], 1), number(r["cold"], 1), ""])
        elif r["metric"].endswith("(CloudWatch)"):
            display.append([r["metric"], r["warm"] or "", r["cold"] or "", ""])
        else:
            display.append([r["metric"], ms(r["warm"]), ms(r["cold"]), delta_text(r["warm"], r["cold"])])
    table = Table(title=f"Snapshots: {len(warm_rows)} seeded reads by id, warm then cold (latency in ms)",
                  headers=["", "WARM", "COLD", "delta"], rows=display, csv_name=scenario_table(NAME),
                  csv_columns=TABLE_COLUMNS, csv_rows=rows)
    return Report(heading=f"dbsurge scenario cache (study 000, experiment 1): {meta.get('target_display')}",
                  tables=[table], notes=_notes(meta, run_dir, rows))


def _cloudwatch_cells(run_dir: Path, meta: dict) -> dict[str, dict[str, str]] | None:
    """Capacity and BufferCacheHitRatio at each snapshot's start, when a collector was attached."""
    if not meta.get("cloudwatch"):
        return None
    cells: dict[str, dict[str, str]] = {"capacity": {}, "BufferCacheHitRatio": {}}
    for name, times in (meta.get("snapshot_times") or {}).items():
        at = epoch_of(times["started_utc"])
        cells["capacity"][name] = capacity_text(capacity_at(run_dir, at))
        ratio_ = metric_at(run_dir, "BufferCacheHitRatio", at)
        cells["BufferCacheHitRatio"][name] = "; ".join(f"{k} {v:g}%" for k, v in ratio_.items())
    return cells


def _notes(meta: dict, run_dir: Path, rows: list[dict]) -> list[str]:
    cold = meta.get("cold_start") or {}
    notes = [verdict(rows, cold)]
    if cold.get("restart"):
        how = f"`{cold['restart_command']}`" if cold.get("restart_command") else "restarting the embedded server"
        text = f"COLD: after {cold.get('idle_s', 0):g} s idle and {how} (back in {cold.get('restart_s')} s)"
        if cold.get("os_cache_evicted_bytes"):
            text += (f", its files ({cold['os_cache_evicted_bytes'] / 2**20:,.1f} MiB) evicted from the operating "
                     "system's page cache: the database's cache and the OS's were both empty, so cold reads went "
                     "to storage.")
        else:
            text += (". A restart empties the database's own cache only: the operating system's page cache stayed "
                     "warm, so cold reads came from memory, not from storage, and the gap is smaller than after a "
                     "serverless scale-in.")
        notes.append(text)
    else:
        notes.append(f"COLD: after {cold.get('idle_s', 0):g} s with every connection closed (the study waited 20 "
                     "minutes for a scale-in to the floor capacity).")
    for w in read_rows(run_dir, WARM_PHASE):
        notes.append(f"Warm phase: {w['connections']} connections x {float(w['rate_per_connection']):g} reads/s for "
                     f"{float(w['duration_s']):g} s: {w['operations']} reads, {w['failures']} failed, "
                     f"{float(w['achieved_ops_s']):,.1f} reads/s, p50 {ms(opt_float(w['p50_ms']))} ms, "
                     f"p99 {ms(opt_float(w['p99_ms']))} ms.")
    by = {r["metric"]: r for r in rows}
    hit = by["server cache hit %"]
    if hit["warm"] is None and hit["cold"] is None:
        notes.append("The server gives no cache counters here (blank server cache hit %).")
    if meta.get("cloudwatch"):
        notes.append("CloudWatch rows: the 60-second datapoint holding each snapshot's start; a 60 s average can "
                     "smooth over a cache-miss burst (study 000, rule 3). " + (meta.get("cloudwatch_note") or ""))
    return notes


SCENARIO = Scenario(NAME, "Study 000, experiment 1: the same seeded reads warm, then cold.", STUDY, QUICK,
                    report=report, options=add_options, check=check, phases=phases, cloudwatch=True)


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
