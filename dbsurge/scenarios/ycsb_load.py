"""``dbsurge scenario ycsb-load``: study 002's load phase, insert throughput with and without batching.

``--clients`` clients (threads, each on its own connection) insert ``--records`` YCSB records into an
empty ``usertable``, each client a contiguous range of record numbers, ``--batch-size`` records per
insert (1: unbatched, one INSERT or ``insert_one`` per record, as YCSB's default; more: one
multi-row INSERT in a transaction, or ``insert_many``, as YCSB's MongoDB binding with batching; on
DynamoDB-API targets ``PutItem`` or ``BatchWriteItem``, at most 25 records per batch).
The data is the ycsb workload's own (same keys, same seeded values as ``dbsurge load``), so
``ycsb-run`` can follow.

Every insert call is timed: the latency is per insert when ``--batch-size`` is 1 and per batch
otherwise, and the table says which. Raw data: ``inserts.csv`` (client, first_record, records,
t_since_start_s, latency_ms, ok, error), one row per insert call.

The phase measures inserts into an empty table: a table that already holds records is refused
unless ``--drop`` is given, which drops it first.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dbsurge.base.errors import UserError
from dbsurge.measure.timing import elapsed_ms, time_call
from dbsurge.rundir import utc_iso
from dbsurge.rundir.schema import INSERTS, YCSB_LOAD_TABLE
from dbsurge.scenarios.arguments import positive
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.client_threads import Start, run_client_threads
from dbsurge.scenarios.files import error_cell, is_ok, iter_rows, read_meta
from dbsurge.scenarios.latency import ms, number, summarize_ms
from dbsurge.scenarios.report import Report, Table, say
from dbsurge.scenarios.scenario_run import ScenarioRun
from dbsurge.workloads import get_workload
from dbsurge.workloads.loading import block_rows, blocks

NAME = "ycsb-load"
STUDY = {"records": 1_000_000, "batch_size": 1, "clients": 16}
QUICK = {"records": 2000, "batch_size": 1, "clients": 4}
INSERT_COLUMNS = ["client", "first_record", "records", "t_since_start_s", "latency_ms", "ok", "error"]
SINK_EVERY = 1000
TABLE_COLUMNS = ["records", "inserted", "clients", "batch_size", "seconds", "inserts_per_s", "latency_per",
                 "calls", "p50_ms", "p99_ms", "max_ms", "failures"]


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=None, help="records to insert (recordcount; study 1,000,000 here; "
                                                             "quick 2,000)")
    p.add_argument("--batch-size", type=int, default=None, help="records per insert call (1 = unbatched)")
    p.add_argument("--clients", type=int, default=None, help="concurrent inserting clients (study 16; quick 4)")
    p.add_argument("--drop", action="store_true", help="drop the table first if it already holds records")


def check(setup: Setup) -> None:
    args, wopts = setup.args, setup.workload_options
    positive(args.records, "--records")
    positive(args.batch_size, "--batch-size")
    positive(args.clients, "--clients")
    wopts.setdefault("recordcount", str(args.records))
    wopts["batchsize"] = str(args.batch_size)


def phases(run: ScenarioRun, setup: Setup) -> None:
    args = setup.args
    target = run.connect_target(setup.target_options)
    workload = get_workload("ycsb", target, setup.workload_options)
    if table_has_rows(workload):
        if not args.drop:
            raise UserError(f"table {workload.table} already holds records: the load phase measures inserts "
                            "into an empty table; pass --drop to drop it first (or another "
                            "--workload-option table=NAME)")
        drop_table(workload)
    create_table(workload)
    run.begin(workload="ycsb", workload_options=workload.options)
    say(f"load phase: {workload.recordcount:,} records, {args.clients} clients, batch size {args.batch_size}")
    t0_epoch = load(workload, args.clients, args.batch_size,
                    sink=lambda rows: run.append_rows(INSERTS, INSERT_COLUMNS, rows))
    run.meta(time_zero_utc=utc_iso(t0_epoch))


def table_has_rows(workload: Any) -> bool:
    session = workload.target.connect()
    try:
        return workload.store.table_has_rows(session)
    finally:
        session.close()


def drop_table(workload: Any) -> None:
    session = workload.target.connect()
    try:
        workload.store.drop_table(session)
    finally:
        session.close()


def create_table(workload: Any) -> None:
    """The workload's own schema, without rows: its load with ``insertcount=0``."""
    empty = get_workload("ycsb", workload.target, {**_given(workload), "insertcount": "0"})
    empty.load(progress=False)


def _given(workload: Any) -> dict[str, str]:
    return {k: str(v) for k, v in workload.options.items() if v not in (None, "") and k != "insertcount"}


def record_batches(workload: Any, start: int, stop: int, batch_size: int) -> Iterator[tuple[int, list[tuple]]]:
    """``(first_record, rows)`` batches of records ``start..stop-1``, the same rows `Workload.load` inserts."""
    seed = workload.options["seed"]

    def make(rng: Any, first: int, last: int) -> list[tuple]:
        # the rows of YcsbWorkload.load(): key, then the fields from the block's generator
        return [(workload.key_for(i), *workload.record(rng)) for i in range(first, last)]

    pending: list[tuple] = []
    first_pending = start
    for block, first, last in blocks(start, stop):
        for row in block_rows(workload.name, seed, block, first, last, make):
            pending.append(row)
            if len(pending) == batch_size:
                yield first_pending, pending
                first_pending += len(pending)
                pending = []
    if pending:
        yield first_pending, pending


def inserter(workload: Any, session: Any, batch_size: int) -> Any:
    """``insert(rows)``: one insert call of ``rows`` on ``session`` (raises on failure), the database's own
    (`YcsbStore.batch_inserter`: one INSERT/``insert_one``/PutItem, or a batch of them); timed here."""
    return workload.store.batch_inserter(session, batch_size)


def load(workload: Any, clients: int, batch_size: int, sink: Any) -> float:
    """Insert the records with ``clients`` threads; returns time zero (epoch).

    Each insert call becomes one row handed to ``sink(rows)`` in chunks (a million unbatched
    inserts are a million rows: they go to disk as they come, not into memory).
    """
    total = workload.recordcount
    bounds = [total * i // clients for i in range(clients + 1)]

    def open_client(i: int) -> tuple[Any, Any]:
        session = workload.target.connect()
        return session, inserter(workload, session, batch_size)

    def client(i: int, insert: Any, start: Start) -> None:
        out: list[dict] = []
        for first, rows in record_batches(workload, bounds[i], bounds[i + 1], batch_size):
            if start.stop.is_set():  # a signal: no insert after it, and the rows of those before it are written
                break
            # a failed insert is data (a duplicate key, a timeout)
            ok, value, begun, end = time_call(insert, rows)
            error = "" if ok else error_cell(value)
            out.append({"client": i, "first_record": first, "records": len(rows),
                        "t_since_start_s": round((begun - start.t0_ns) / 1e9, 6),
                        "latency_ms": round(elapsed_ms(begun, end), 3), "ok": 0 if error else 1, "error": error})
            if len(out) >= SINK_EVERY:
                sink(out)
                out = []
        sink(out)

    def all_connected(start: Start) -> None:
        if start.connect_errors:
            raise UserError(f"a loading client could not connect: {next(iter(start.connect_errors))}")

    return run_client_threads(clients, open_client, client, before_go=all_connected, name="loader").t0_epoch_s


# -- the table (pure, from inserts.csv) -----------------------------------------------------------------


def load_row(inserts: Iterable[dict], records: int, clients: int, batch_size: int) -> dict:
    """The load phase as one row: records inserted per second, latency per insert call (one pass)."""
    inserted = calls = failures = 0
    seconds_ = None
    latencies: list[float] = []
    for r in inserts:
        calls += 1
        end = float(r["t_since_start_s"]) + float(r["latency_ms"]) / 1000
        seconds_ = end if seconds_ is None else max(seconds_, end)
        if not is_ok(r):
            failures += 1
            continue
        inserted += int(r["records"])
        latencies.append(float(r["latency_ms"]))
    s = summarize_ms(latencies)
    return {"records": records, "inserted": inserted, "clients": clients, "batch_size": batch_size,
            "seconds": None if seconds_ is None else round(seconds_, 6),
            "inserts_per_s": round(inserted / seconds_, 3) if seconds_ else None,
            "latency_per": "insert" if batch_size == 1 else f"batch of {batch_size}", "calls": calls,
            "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"], "max_ms": s["max_ms"], "failures": failures}


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    settings = meta.get("settings") or {}
    wopts = meta.get("workload_options") or {}
    row = load_row(iter_rows(run_dir, INSERTS), int(wopts.get("recordcount", 0)),
                   int(settings.get("clients", 1)), int(settings.get("batch_size", 1)))
    per = row["latency_per"]
    table = Table(title="YCSB load phase (insert throughput; latency per insert call)",
                  headers=["records", "clients", "batch size", "seconds", "inserts/s", f"p50 ms per {per}",
                           f"p99 ms per {per}", "max ms", "failures"],
                  rows=[[number(row["inserted"], 0), str(row["clients"]), str(row["batch_size"]),
                         number(row["seconds"], 3), number(row["inserts_per_s"], 1), ms(row["p50_ms"]),
                         ms(row["p99_ms"]), ms(row["max_ms"]), str(row["failures"])]],
                  csv_name=YCSB_LOAD_TABLE, csv_columns=TABLE_COLUMNS, csv_rows=[row])
    notes = [(f"{row['inserted']:,} of {row['records']:,} records inserted into {wopts.get('table', 'usertable')} "
              f"in {row['calls']:,} insert calls; inserts/s counts records.")]
    if row["failures"]:
        notes.append(f"{row['failures']} insert calls failed ({INSERTS} has the errors).")
    return Report(heading=f"dbsurge scenario ycsb-load (study 002): {meta.get('target_display')}", tables=[table],
                  notes=notes)


SCENARIO = Scenario(NAME, "Study 002: the YCSB load phase (inserts), batched or not.", STUDY, QUICK,
                    report=report, options=add_options, check=check, phases=phases)


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
