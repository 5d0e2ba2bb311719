"""``dbsurge scenario longscan``: study 000, experiment 3, a long query while capacity changes.

One ``find`` whose filter matches 1% of the documents collection (so it scans all of it), read
batch by batch with the documents workload's ``scan_batches``; each batch is timed. The study asked
whether the query speeds up when the cluster scales out under it: it compares the throughput of
the first, middle and last 10 batches (it did not speed up: -2% and -1.9%). With ``--cloudwatch``
the capacity at the query's start and end stands beside it (blank without a collector).

Raw data: ``batches.csv`` (batch, documents, elapsed_ms, t_end_s, docs_per_s). Table
``longscan.csv``: metric, value, unit, change_pct.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dbsurge.collectors.scenario_figures import segments
from dbsurge.measure.timing import Laps
from dbsurge.rundir import utc_iso
from dbsurge.rundir.schema import BATCHES, scenario_table
from dbsurge.scenarios.arguments import positive
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.capacity import capacity_at, capacity_text, fetch_capacity
from dbsurge.scenarios.cold_start import settle_after_load
from dbsurge.scenarios.files import epoch_of, opt_float, read_meta, read_rows
from dbsurge.scenarios.report import Report, Table, say
from dbsurge.scenarios.scenario_run import ScenarioRun, ensure_loaded
from dbsurge.workloads import get_workload

NAME = "longscan"
STUDY = {"documents": 5_000_000, "batch_size": 0, "segment": 10}
QUICK = {"documents": 20_000, "batch_size": 5, "segment": 10}
BATCH_COLUMNS = ["batch", "documents", "elapsed_ms", "t_end_s", "docs_per_s"]
TABLE_COLUMNS = ["metric", "value", "unit", "change_pct"]


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--documents", type=int, default=None,
                   help="documents in the collection (study 5,000,000; quick 20,000)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="documents per batch of the cursor (default: the workload's scan_batch_size, 1000; quick 5)")
    p.add_argument("--segment", type=int, default=None, help="batches in each of first/middle/last (10)")


def check(setup: Setup) -> None:
    args, wopts = setup.args, setup.workload_options
    positive(args.segment, "--segment")
    wopts.setdefault("documents", str(args.documents))
    if args.batch_size:
        wopts["scan_batch_size"] = str(positive(args.batch_size, "--batch-size"))


def phases(run: ScenarioRun, setup: Setup) -> dict:
    target = run.connect_target(setup.target_options)
    workload = get_workload("documents", target, setup.workload_options)
    run.begin(workload="documents", workload_options=workload.options)
    load_s = ensure_loaded(workload)
    if load_s:
        settle_after_load(workload, ("documents",))
    run.meta(load_s=load_s)
    say(f"full scan of {workload.options['documents']:,} documents (1% match), "
        f"{workload.options['scan_batch_size']} per batch")
    rows: list[dict] = []
    session = target.connect()
    try:
        query = Laps()

        def on_batch(index: int, docs: int, elapsed_ns: int) -> None:
            rows.append({"batch": index, "documents": docs, "elapsed_ms": round(elapsed_ns / 1e6, 3),
                         "t_end_s": round(query.since_start_ns() / 1e9, 6),
                         "docs_per_s": round(docs / (elapsed_ns / 1e9), 3) if elapsed_ns else None})

        started = time.time()
        run.event("query_start")
        total = workload.scan_batches(session, on_batch)
        query_s = query.since_start_ns() / 1e9
        ended = started + query_s
        run.event("query_end", documents=total, batches=len(rows), query_s=round(query_s, 6))
    finally:
        session.close()
    run.append_rows(BATCHES, BATCH_COLUMNS, rows)
    note = fetch_capacity(run.path, setup.collector, started, ended) if setup.collector else None
    run.meta(query={"started_utc": utc_iso(started), "ended_utc": utc_iso(ended), "seconds": round(query_s, 6),
                    "documents": total, "batches": len(rows)}, cloudwatch_note=note)
    return {"query_s": round(query_s, 6), "documents": total, "batches": len(rows)}


# -- the table (pure, from batches.csv) ----------------------------------------------------------------


def throughput(batches: list[dict]) -> float | None:
    """Documents per second over some batches: their documents over their summed batch times."""
    secs = sum(float(b["elapsed_ms"]) for b in batches) / 1000.0
    docs = sum(int(b["documents"]) for b in batches)
    return docs / secs if secs > 0 else None


def longscan_rows(batches: list[dict], query_s: float | None, size: int, capacity_start: str,
                  capacity_end: str) -> list[dict]:
    parts = segments(batches, size)
    first = throughput(parts["first"])
    rows = [{"metric": "query time", "value": query_s, "unit": "s", "change_pct": None},
            {"metric": "batches", "value": len(batches), "unit": "", "change_pct": None},
            {"metric": "documents returned", "value": sum(int(b["documents"]) for b in batches), "unit": "",
             "change_pct": None}]
    for name in ("first", "middle", "last"):
        tp = throughput(parts[name])
        change = None if name == "first" or tp is None or not first else (tp - first) / first * 100.0
        rows.append({"metric": f"{name} {len(parts[name])} batches", "value": tp, "unit": "docs/s",
                     "change_pct": change})
    rows.append({"metric": "capacity at start", "value": capacity_start, "unit": "", "change_pct": None})
    rows.append({"metric": "capacity at end", "value": capacity_end, "unit": "", "change_pct": None})
    return rows


def _display(row: dict) -> list[str]:
    v = row["value"]
    if row["unit"] == "s":
        value = "-" if v is None else f"{v:.3f} s"
    elif row["unit"] == "docs/s":
        value = "-" if v is None else f"{v:,.1f} docs/s"
    elif isinstance(v, (int, float)):
        value = f"{v:,}"
    else:
        value = v or ""
    change = "" if row["change_pct"] is None else f"{row['change_pct']:+.1f}% vs first"
    return [row["metric"], value, change]


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    batches = read_rows(run_dir, BATCHES)
    query = meta.get("query") or {}
    settings = meta.get("settings") or {}
    start, end = epoch_of(query.get("started_utc")), epoch_of(query.get("ended_utc"))
    cap_start = capacity_text(capacity_at(run_dir, start)) if start is not None else ""
    cap_end = capacity_text(capacity_at(run_dir, end)) if end is not None else ""
    rows = longscan_rows(batches, opt_float(query.get("seconds")), int(settings.get("segment", 10)), cap_start,
                         cap_end)
    wopts = meta.get("workload_options") or {}
    table = Table(title=f"One full scan, 1% match, of {wopts.get('documents', 0):,} documents, "
                        f"{wopts.get('scan_batch_size')} per batch",
                  headers=["", "value", "change"], rows=[_display(r) for r in rows], csv_name=scenario_table(NAME),
                  csv_columns=TABLE_COLUMNS, csv_rows=rows)
    notes = [("Throughput counts the documents returned (the query reads 100 for each one it returns); a batch's "
              "time is one round trip (the first includes starting the query).")]
    if len(batches) < 3 * int(settings.get("segment", 10)):
        notes.append(f"Only {len(batches)} batches: the first, middle and last segments overlap.")
    if not meta.get("cloudwatch"):
        notes.append("No collector attached (--cloudwatch): capacity left blank.")
    elif meta.get("cloudwatch_note"):
        notes.append(meta["cloudwatch_note"])
    return Report(heading=f"dbsurge scenario longscan (study 000, experiment 3): {meta.get('target_display')}",
                  tables=[table], notes=notes)


SCENARIO = Scenario(NAME, "Study 000, experiment 3: one full-scan query timed batch by batch.", STUDY, QUICK,
                    report=report, options=add_options, check=check, phases=phases, cloudwatch=True)


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
