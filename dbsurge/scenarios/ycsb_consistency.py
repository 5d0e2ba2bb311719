"""``dbsurge scenario ycsb-run --consistency ONE,QUORUM``: the same YCSB-A plan once per consistency level.

Study 002 compared ScyllaDB at consistency ONE and QUORUM. Each level runs the engine with the same plan,
seed and options into ``runs/consistency-<LEVEL>`` of the scenario's run directory, the level set as the
target's own option: on CQL targets ``consistency=<LEVEL>`` (ONE, QUORUM, LOCAL_QUORUM, ...), on
DynamoDB-API targets ``consistent_read`` (``eventual``: false, ``strong``: true; DynamoDB has no other
read consistency, and its writes are always acknowledged by a quorum). The table shows each level's
throughput, read and update p99 and failures, and each against the first level.
"""

from __future__ import annotations

import time
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.base.versions import versions
from dbsurge.rundir import RunDirectory, utc_iso
from dbsurge.rundir.schema import RUNS, SUMMARY_CSV, YCSB_RUN_TABLE
from dbsurge.scenarios.engine_run import run_engine
from dbsurge.scenarios.files import read_rows
from dbsurge.scenarios.latency import ms, number
from dbsurge.scenarios.report import Table

CQL_LEVELS = ("ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE")
DYNAMODB_LEVELS = {"EVENTUAL": "false", "STRONG": "true"}
COLUMNS = ["consistency", "throughput_ops_s", "read_p99_ms", "update_p99_ms", "operations", "failures",
           "throughput_vs_first", "read_p99_vs_first", "update_p99_vs_first"]


def target_family(target: str) -> str | None:
    """``cql`` or ``dynamodb`` from a target URI or embedded name; None for the others."""
    name = (target or "").strip().lower()
    scheme = name.split("://", 1)[0] if "://" in name else name
    if scheme in ("cql", "scylla", "embedded-cassandra"):
        return "cql"
    if scheme in ("dynamodb", "alternator", "embedded-dynamodb"):
        return "dynamodb"
    return None


def parse_levels(text: str, target: str) -> list[str]:
    """``"ONE,QUORUM"`` -> ``["ONE", "QUORUM"]``, checked against what the target accepts (`UserError`)."""
    family = target_family(target)
    if family is None:
        raise UserError("--consistency compares CQL consistency levels (cql://, scylla://, embedded-cassandra) or "
                        "DynamoDB read consistency (dynamodb://, alternator://, embedded-dynamodb); for MongoDB and "
                        "PostgreSQL run once per --target-option instead")
    levels = [part.strip().upper() for part in text.split(",") if part.strip()]
    allowed = CQL_LEVELS if family == "cql" else tuple(DYNAMODB_LEVELS)
    bad = [level for level in levels if level not in allowed]
    if len(levels) < 2 or bad or len(set(levels)) != len(levels):
        raise UserError(f"--consistency '{text}': expected two or more different levels of "
                        f"{', '.join(level.lower() if family == 'dynamodb' else level for level in allowed)}")
    return levels


def target_option(family: str, level: str) -> str:
    """The ``--target-option`` that sets ``level`` on a target of ``family``."""
    return f"consistency={level}" if family == "cql" else f"consistent_read={DYNAMODB_LEVELS[level]}"


def run_levels(run_dir: RunDirectory, meta: dict, target: str, levels: list[str], base: list[str]) -> int:
    """One engine run per level into ``runs/consistency-<LEVEL>``; returns the first non-zero exit code."""
    family = target_family(target) or ""
    runs: list[dict] = []
    run_dir.write_meta(**meta, mode="consistency", started_utc=utc_iso(time.time()), ended_utc=None, levels=levels,
                       runs=runs, versions=versions())
    code = 0
    for level in levels:
        sub = f"consistency-{level}"
        run_dir.event("consistency_run_start", consistency=level)
        c = run_engine(base + ["--target-option", target_option(family, level), "--results-dir",
                               str(run_dir.path / RUNS), "--run-id", sub])
        code = code or c
        runs.append({"consistency": level, "run_dir": f"runs/{sub}", "exit_code": c})
        run_dir.write_meta(runs=runs)
    run_dir.write_meta(ended_utc=utc_iso(time.time()))
    run_dir.event("run_end")
    return code


def _ratio(value: float | None, first: float | None) -> float | None:
    return round(value / first, 4) if value is not None and first else None


def consistency_rows(per_level: list[tuple[str, dict]]) -> list[dict]:
    """Each level's numbers (`summary_numbers`) and their ratio to the first level's. Pure."""
    first = per_level[0][1] if per_level else {}
    rows = []
    for level, numbers in per_level:
        rows.append({"consistency": level, **{k: numbers[k] for k in COLUMNS[1:6]},
                     "throughput_vs_first": _ratio(numbers["throughput_ops_s"], first.get("throughput_ops_s")),
                     "read_p99_vs_first": _ratio(numbers["read_p99_ms"], first.get("read_p99_ms")),
                     "update_p99_vs_first": _ratio(numbers["update_p99_ms"], first.get("update_p99_ms"))})
    return rows


def consistency_table(run_dir: Path, meta: dict, summary_numbers) -> tuple[Table, list[str]]:
    """The comparison table of a ``--consistency`` run directory, and its notes."""
    per_level = []
    for r in meta.get("runs") or []:
        rows = read_rows(run_dir / r["run_dir"], SUMMARY_CSV)
        if rows:
            per_level.append((r["consistency"], summary_numbers(rows)))
    rows = consistency_rows(per_level)
    first = rows[0]["consistency"] if rows else "-"

    def times(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    table = Table(title=f"YCSB workload A by consistency level ({meta.get('distribution')}; ratios against {first})",
                  headers=["consistency", "throughput ops/s", "read p99 ms", "update p99 ms", "failures",
                           f"throughput vs {first}", f"read p99 vs {first}", f"update p99 vs {first}"],
                  rows=[[r["consistency"], number(r["throughput_ops_s"], 1), ms(r["read_p99_ms"]),
                         ms(r["update_p99_ms"]), str(r["failures"]), times(r["throughput_vs_first"]),
                         times(r["read_p99_vs_first"]), times(r["update_p99_vs_first"])] for r in rows],
                  csv_name=YCSB_RUN_TABLE, csv_columns=COLUMNS, csv_rows=rows)
    notes = ["Each level is its own run of the same plan and seed (runs/consistency-<LEVEL>/); a single run per "
             "level has no spread: repeat the scenario to judge a small difference."]
    if len(per_level) < len(meta.get("levels") or []):
        notes.append("Some levels did not finish: their rows are missing.")
    return table, notes
