"""``dbsurge scenario ycsb-run``: study 002's run phase, YCSB workload A, and its scalability.

Workload A (50% read, 50% update) over ``--records`` records with ``--distribution``
uniform|hotspot|zipfian|latest. ``--distribution hotspot`` uses the study's fractions (1.3% of the
records get 95% of the operations) unless ``--workload-option hotspotdatafraction=...`` /
``hotspotopnfraction=...`` say otherwise. It runs through the engine:

- with ``--target-tps N``: an arrival rate, ``dbsurge run --workload ycsb --shape constant --rate N``
  (latency from the intended start; the engine says if it could not keep the rate);
- without: flat out (closed model), ``--users`` concurrent clients per worker process, as YCSB
  runs without ``-target``.

Consistency knobs are binding options: MongoDB ``--target-option read_preference=secondaryPreferred``,
``read_concern=local``, ``w=1``, ``j=false``; PostgreSQL ``--target-option isolation=serializable``; DynamoDB-API
``--target-option consistent_read=true``.
The table: throughput, read p99, update p99, failures.

``--scale-workers 1,2,4`` runs the same plan flat out with 1, 2, 4 worker processes (``--users``
per process) one after the other, and prints the achieved throughput per worker count against the
ideal linear line (1-process throughput x n), as the study compared achieved with theoretical
scalability. Each run's own directory is under ``runs/`` of the scenario's run directory.
``--consistency ONE,QUORUM`` (CQL; ``eventual,strong`` on DynamoDB-API targets) runs the plan once per
level and compares them (`dbsurge.scenarios.ycsb_consistency`).
``--repeat N`` (a single run only) repeats it into ``<run-id>/1..N`` with the spread across them
and each repetition's table. Options this scenario does not know go to ``dbsurge run``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.base.versions import versions
from dbsurge.engine.run_command import asks_for_repeat
from dbsurge.rundir import RunDirectory, utc_iso
from dbsurge.rundir.reader import read_meta, read_rows
from dbsurge.rundir.schema import REPETITIONS, RUNS, SUMMARY_CSV, scenario_table
from dbsurge.rundir.summaries import summary_numbers
from dbsurge.scenarios.arguments import seconds
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.engine_run import annotate_run, pairs, repetitions, run_engine
from dbsurge.scenarios.latency import ms, number
from dbsurge.scenarios.report import Report, Table
from dbsurge.scenarios.ycsb_consistency import consistency_table, parse_levels, run_levels

NAME = "ycsb-run"
STUDY = {"distribution": "uniform", "duration": "30m", "users": 16, "records": 1_000_000}
QUICK = {"distribution": "uniform", "duration": "4s", "users": 4, "records": 2000}
STUDY_HOTSPOT = {"hotspotdatafraction": "0.013", "hotspotopnfraction": "0.95"}
CONSISTENCY_OPTIONS = ("read_preference", "read_concern", "w", "j", "isolation", "consistent_read", "consistency",
                       "serial_consistency")
RUN_COLUMNS = ["distribution", "target_tps", "throughput_ops_s", "read_p99_ms", "update_p99_ms", "operations",
               "failures", "failure_rate", "consistency"]
SCALE_COLUMNS = ["workers", "users", "throughput_ops_s", "ideal_ops_s", "pct_of_ideal", "scaling_pct",
                 "theoretical_pct", "read_p99_ms", "update_p99_ms", "failures"]


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--distribution", default=None, choices=["uniform", "hotspot", "zipfian", "latest"],
                   help="request distribution (uniform)")
    p.add_argument("--target-tps", type=float, default=None,
                   help="arrival rate in operations per second through the constant shape (default: flat out)")
    p.add_argument("--duration", default=None, help="run time (study 30m; quick 4s)")
    p.add_argument("--users", type=int, default=None,
                   help="concurrent clients (per worker process with --scale-workers) when flat out (study 16; "
                        "quick 4); under --target-tps the cap on clients (default: as many as the rate needs)")
    p.add_argument("--records", type=int, default=None,
                   help="records loaded (recordcount; the same as for ycsb-load; study 1,000,000 here; quick 2,000)")
    p.add_argument("--processes", type=int, default=None, help="Locust worker processes on this host")
    p.add_argument("--scale-workers", default=None, metavar="N,N,...",
                   help="scalability mode: run flat out with each number of worker processes, e.g. 1,2,4")
    p.add_argument("--repeat", default=None, metavar="N",
                   help="run it N times into <run-id>/1..N and print the spread (median, min, max) across them")
    p.add_argument("--consistency", default=None, metavar="LEVEL,LEVEL,...",
                   help="run once per consistency level and compare: CQL ONE,QUORUM,...; DynamoDB-API "
                        "eventual,strong")


def parse_workers(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; `UserError` for anything but positive integers."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--scale-workers '{text}': expected worker counts such as 1,2,4") from None
    if not out or any(n < 1 for n in out):
        raise UserError(f"--scale-workers '{text}': expected positive worker counts such as 1,2,4")
    return out


def check(setup: Setup) -> None:
    args, wopts = setup.args, setup.workload_options
    if "distribution" not in setup.given and wopts.get("requestdistribution"):
        args.distribution = setup.settings["distribution"] = wopts["requestdistribution"]
    duration_s = seconds(args.duration, "--duration")
    if duration_s <= 0:
        raise UserError("--duration must be positive")
    if args.users < 1 or args.records < 1:
        raise UserError("--users and --records must be positive")
    if args.target_tps is not None and args.target_tps <= 0:
        raise UserError("--target-tps must be positive")
    workers = setup.values["workers"] = parse_workers(args.scale_workers) if args.scale_workers else None
    if args.repeat is not None:
        setup.rest = [*setup.rest, "--repeat", args.repeat]  # dbsurge run's: it checks the number and runs the set
    if workers and asks_for_repeat(setup.rest):
        raise UserError("--repeat repeats one run; with --scale-workers, run the scenario again instead")
    levels = setup.values["levels"] = parse_levels(args.consistency, args.target) if args.consistency else None
    if levels and (workers or asks_for_repeat(setup.rest)):
        raise UserError("--consistency runs one plan per level: leave out --scale-workers and --repeat")
    if workers and args.target_tps is not None:
        raise UserError("--scale-workers runs flat out (a target rate would cap the throughput): leave out "
                        "--target-tps")
    wopts.setdefault("recordcount", str(args.records))
    wopts["requestdistribution"] = args.distribution
    if args.distribution == "hotspot":
        for k, v in STUDY_HOTSPOT.items():
            wopts.setdefault(k, v)
    consistency = {k: v for k, v in setup.target_options.items() if k in CONSISTENCY_OPTIONS}
    consistency.update({k: v for k, v in wopts.items() if k in ("readpreference", "writeconcern")})
    setup.values["consistency"] = consistency


def launch(setup: Setup, uri: str, run_id: str) -> int:
    """One engine run (at ``--target-tps`` or flat out), or one per worker count with ``--scale-workers``."""
    args = setup.args
    base = ["--workload", "ycsb", "--target", uri, "--duration", args.duration, "--quiet", "--seed", str(args.seed)]
    base += pairs("--target-option", args.target_option)
    base += pairs("--workload-option", [f"{k}={v}" for k, v in setup.workload_options.items()])
    if setup.values["workers"]:
        return _scale(setup, run_id, base + setup.rest)
    if setup.values["levels"]:
        return _levels(setup, run_id, base + setup.rest)
    cmd = base + ["--results-dir", args.results_dir, "--run-id", run_id]
    if args.target_tps is not None:
        # under an arrival rate the shape sizes the pool; --users, when given, caps it
        cmd += ["--shape", "constant", "--rate", f"{args.target_tps:g}"]
        cmd += ["--users", str(args.users)] if "users" in setup.given else []
    else:
        cmd += ["--users", str(args.users)]
    if args.processes:
        cmd += ["--processes", str(args.processes)]
    return run_engine(cmd + setup.rest)


def after(setup: Setup, run_id: str, code: int) -> int:
    """Annotate a single run's run.json and show the table (a scale run wrote its own run.json)."""
    args = setup.args
    run_dir = Path(args.results_dir) / run_id
    if setup.values["workers"] or setup.values["levels"]:
        SCENARIO.show(run_dir)
        return code
    annotation = dict(scenario=NAME, mode="single", scenario_settings=setup.settings, target_name=args.target,
                      distribution=args.distribution, target_tps=args.target_tps,
                      consistency=setup.values["consistency"])
    if (reps := repetitions(run_dir)) is not None:  # --repeat N went to dbsurge run: a table per repetition
        for sub in reps:
            annotate_run(sub, **annotation)
            SCENARIO.show(sub)
        print(f"\nresults: {run_dir} (repetitions 1..N and their spread: {REPETITIONS})")
        return code
    if not (run_dir / SUMMARY_CSV).is_file():
        return code or 1
    annotate_run(run_dir, **annotation)
    SCENARIO.show(run_dir)
    return code


def _levels(setup: Setup, run_id: str, base: list[str]) -> int:
    """One run per consistency level (the rate options as for a single run), in runs/consistency-LEVEL."""
    args = setup.args
    if args.target_tps is not None:
        base = base + ["--shape", "constant", "--rate", f"{args.target_tps:g}"]
        base += ["--users", str(args.users)] if "users" in setup.given else []
    else:
        base = base + ["--users", str(args.users)]
    if args.processes:
        base += ["--processes", str(args.processes)]
    rd = RunDirectory(args.results_dir, run_id)
    try:
        meta = dict(run_id=run_id, scenario=NAME, target_name=args.target, distribution=args.distribution,
                    target_tps=args.target_tps, consistency=setup.values["consistency"],
                    scenario_settings=setup.settings)
        return run_levels(rd, meta, args.target, setup.values["levels"], base)
    finally:
        rd.close()


def _scale(setup: Setup, run_id: str, base: list[str]) -> int:
    """One flat-out run per worker count, each in runs/workers-N of the scenario's directory."""
    import time

    args, workers = setup.args, setup.values["workers"]
    rd = RunDirectory(args.results_dir, run_id)
    try:
        runs: list[dict] = []
        rd.write_meta(run_id=run_id, scenario=NAME, mode="scale", started_utc=utc_iso(time.time()), ended_utc=None,
                      target_name=args.target, distribution=args.distribution,
                      consistency=setup.values["consistency"], scenario_settings=setup.settings, workers=workers,
                      users_per_process=args.users, runs=runs, versions=versions())
        code = 0
        for n in workers:
            sub = f"workers-{n}"
            rd.event("scale_run_start", workers=n)
            c = run_engine(base + ["--results-dir", str(rd.path / RUNS), "--run-id", sub, "--users",
                                   str(args.users * n), "--processes", str(n)])
            code = code or c
            runs.append({"workers": n, "users": args.users * n, "run_dir": f"runs/{sub}", "exit_code": c})
            rd.write_meta(runs=runs)
            if not (rd.path / RUNS / sub / SUMMARY_CSV).is_file():
                break
        rd.write_meta(ended_utc=utc_iso(time.time()))
        rd.event("run_end")
    finally:
        rd.close()
    return code


# -- the tables (pure, from summary.csv files) ----------------------------------------------------------


def scale_rows(per_run: list[tuple[int, int, dict]]) -> list[dict]:
    """Throughput per worker count against the ideal linear line from the first (1-worker) run."""
    rows = []
    base = per_run[0][2]["throughput_ops_s"] if per_run else None
    base_n = per_run[0][0] if per_run else 1
    for n, users, numbers in per_run:
        tp = numbers["throughput_ops_s"]
        ideal = base * n / base_n if base else None
        rows.append({"workers": n, "users": users, "throughput_ops_s": tp, "ideal_ops_s": ideal,
                     "pct_of_ideal": round(100.0 * tp / ideal, 3) if tp is not None and ideal else None,
                     "scaling_pct": round(100.0 * tp / base, 3) if tp is not None and base else None,
                     "theoretical_pct": round(100.0 * n / base_n, 3),
                     "read_p99_ms": numbers["read_p99_ms"], "update_p99_ms": numbers["update_p99_ms"],
                     "failures": numbers["failures"]})
    return rows


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    consistency = ", ".join(f"{k}={v}" for k, v in (meta.get("consistency") or {}).items()) or "defaults"
    dist = meta.get("distribution", "")
    if meta.get("mode") == "scale":
        return _scale_report(run_dir, meta, consistency, dist)
    if meta.get("mode") == "consistency":
        table, notes = consistency_table(run_dir, meta, summary_numbers)
        return Report(heading=f"dbsurge scenario ycsb-run --consistency (study 002): {meta.get('target_name')}",
                      tables=[table], notes=notes)
    numbers = summary_numbers(read_rows(run_dir, SUMMARY_CSV))
    row = {"distribution": dist, "target_tps": meta.get("target_tps"), "consistency": consistency, **numbers}
    table = Table(title="YCSB workload A (50% read, 50% update)",
                  headers=["distribution", "target TPS", "throughput ops/s", "read p99 ms", "update p99 ms",
                           "failures", "consistency"],
                  rows=[[dist, number(row["target_tps"], 0) if row["target_tps"] else "flat out",
                         number(row["throughput_ops_s"], 1), ms(row["read_p99_ms"]), ms(row["update_p99_ms"]),
                         f"{row['failures']} ({(row['failure_rate'] or 0) * 100:.3f}%)", consistency]],
                  csv_name=scenario_table(NAME), csv_columns=RUN_COLUMNS, csv_rows=[row])
    notes = [f"{numbers['operations']:,} operations; throughput counts successful operations per second."]
    for finding in (meta.get("results") or {}).get("behind_plan") or []:
        notes.append(f"WARNING: {finding}")
    if meta.get("target_tps") is None:
        notes.append("Flat out (closed model): latency equals service time; pass --target-tps for an arrival rate.")
    return Report(heading=f"dbsurge scenario ycsb-run (study 002): {meta.get('target_display')}", tables=[table],
                  notes=notes)


def _scale_report(run_dir: Path, meta: dict, consistency: str, dist: str) -> Report:
    per_run = []
    for r in meta.get("runs") or []:
        rows = read_rows(run_dir / r["run_dir"], SUMMARY_CSV)
        if rows:
            per_run.append((int(r["workers"]), int(r["users"]), summary_numbers(rows)))
    rows = scale_rows(per_run)
    table = Table(title=f"Scalability, flat out, {meta.get('users_per_process')} clients per worker process "
                        f"({dist}; {consistency})",
                  headers=["workers", "clients", "throughput ops/s", "ideal ops/s", "% of ideal", "achieved scaling",
                           "theoretical", "read p99 ms", "update p99 ms", "failures"],
                  rows=[[str(r["workers"]), str(r["users"]), number(r["throughput_ops_s"], 1),
                         number(r["ideal_ops_s"], 1), _pct(r["pct_of_ideal"]), _pct(r["scaling_pct"]),
                         _pct(r["theoretical_pct"]), ms(r["read_p99_ms"]), ms(r["update_p99_ms"]), str(r["failures"])]
                        for r in rows],
                  csv_name=scenario_table(NAME), csv_columns=SCALE_COLUMNS, csv_rows=rows)
    notes = [("Ideal = the first run's throughput x its share of workers (linear scaling). On one host the worker "
              "processes share its cores with each other (and with an embedded database): the line shows where the "
              "generator or the database stops scaling.")]
    if len(per_run) < len(meta.get("runs") or []) or len(per_run) < len(meta.get("workers") or []):
        notes.append("Some runs did not finish: their rows are missing.")
    return Report(heading=f"dbsurge scenario ycsb-run --scale-workers (study 002): {meta.get('target_name')}",
                  tables=[table], notes=notes)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


SCENARIO = Scenario(NAME, "Study 002: YCSB workload A at a target rate or flat out, and its scalability.", STUDY,
                    QUICK, report=report, options=add_options, check=check, launch=launch, after=after,
                    engine_workload="ycsb")


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
