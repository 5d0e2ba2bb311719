"""``dbsurge scenario longrun``: study 002's 12-hour run, a target rate held for hours, read per window.

The study held 500 kOps/s of YCSB workload A for 12 hours and showed throughput over time, the P99 of
reads and updates per window, their spikes, and the 12-hour average P99 against the 30-minute run's.
This scenario runs the same plan through the engine, exactly as

    dbsurge run --workload ycsb --shape constant --rate RATE --duration DURATION [--processes N] ...

(``--workload`` names another workload; options this scenario does not know, such as ``--users``,
``--master`` or Locust's ``--expect-workers``, go to ``dbsurge run``), then reads the run directory:

- per window length of ``--windows`` (``1m,10m``): each window's throughput (successes per second)
  against the target, and each operation's P99 over the window, exact: the merge of the window's
  per-second histograms from intervals.hlog (`dbsurge.scenarios.windows`);
- the average, median and largest window P99 per operation, and the spikes: windows whose P99 is
  above ``--spike-factor`` (3) times the median window P99;
- the whole run's P99 (summary.csv) and, with ``--baseline RUN_DIR`` (a shorter run of the same plan,
  say a 30-minute ``ycsb-run``), that run's P99 beside the average window P99;
- per hour, the generator's memory and the run directory's size (the engine's ``resources`` events,
  once a minute).

It writes longrun.csv (P99 per window length and operation), longrun-throughput.csv,
longrun-spikes.csv, one longrun-windows-<length>.csv per window length, summary.md and report.html
(with the per-window curves). Building the tables reads intervals.hlog once and keeps only open
windows' histograms; ``--from`` during or after a run reads only what was added since the last build.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.collectors.report import build_report
from dbsurge.engine.run_command import asks_for_repeat
from dbsurge.rundir import RunDirectory
from dbsurge.rundir.reader import iter_events
from dbsurge.rundir.schema import (
    EVENTS,
    INTERVALS,
    LONGRUN_HOURS,
    LONGRUN_SETTINGS,
    LONGRUN_SPIKES,
    LONGRUN_THROUGHPUT,
    REPORT_HTML,
    RUN_JSON,
    SUMMARY_CSV,
    longrun_windows,
    scenario_table,
)
from dbsurge.rundir.writer import write_text
from dbsurge.scenarios.arguments import seconds
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.engine_run import annotate_run, pairs, run_engine
from dbsurge.scenarios.files import csv_cell, epoch_of, opt_float, read_meta, read_rows
from dbsurge.scenarios.latency import ms, number
from dbsurge.scenarios.report import Report, Table, say
from dbsurge.scenarios.windows import build_windows, p99_summary, parse_windows, window_label, window_rows

NAME = "longrun"
#: The study's plan is 500,000 ops/s for 12 hours across 16 load generators; one host's default is a
#: hundredth of that rate (pass --rate 500000 with runners for the study's).
STUDY = {"rate": 5000.0, "duration": "12h", "windows": "1m,10m", "spike_factor": 3.0, "workload": "ycsb",
         "records": 1_000_000}
#: --quick runs in seconds, as every scenario's (the README): six 5 s windows, two of 15 s.
QUICK = {"rate": 200.0, "duration": "30s", "windows": "5s,15s", "records": 2000}
#: The window settings, written once the engine has made the run directory (run.json is the engine's until the end).
SETTINGS_NAME = LONGRUN_SETTINGS
#: Printed spikes at most (longrun-spikes.csv lists them all).
SHOWN_SPIKES = 20
THROUGHPUT_COLUMNS = ["window", "windows", "target_tps", "mean_ops_s", "min_ops_s", "max_ops_s", "min_pct_of_target",
                      "below_95pct"]
P99_COLUMNS = ["window", "operation", "windows", "avg_p99_ms", "median_p99_ms", "max_p99_ms", "spike_threshold_ms",
               "spikes", "run_p99_ms", "baseline_p99_ms", "avg_vs_baseline"]
SPIKE_COLUMNS = ["window", "operation", "index", "start_s", "end_s", "p99_ms", "x_median"]
HOUR_COLUMNS = ["hour", "samples", "rss_mb_max", "processes", "run_dir_mb", "run_dir_mb_added"]


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=float, default=None,
                   help="target throughput, operations per second across all workers (study-like 5000; quick 200)")
    p.add_argument("--duration", default=None, help="how long to hold it, e.g. 12h, 30m (study 12h; quick 3m)")
    p.add_argument("--workload", default=None, help="the engine's workload (ycsb: workload A, 50%% read/update)")
    p.add_argument("--records", type=int, default=None,
                   help="ycsb recordcount (study-like 1,000,000; quick 2,000); other workloads: --workload-option")
    p.add_argument("--windows", default=None, metavar="LEN,LEN",
                   help="window lengths for throughput and P99, e.g. 1m,10m (quick 10s,1m)")
    p.add_argument("--spike-factor", type=float, default=None,
                   help="a window is a spike when its P99 exceeds this times the median window P99 (3)")
    p.add_argument("--baseline", default=None, metavar="RUN_DIR",
                   help="a shorter run of the same plan (e.g. a 30-minute ycsb-run) whose P99 goes beside the "
                        "average window P99")
    p.add_argument("--processes", type=int, default=None, help="Locust worker processes on this host")


def check(setup: Setup) -> None:
    args = setup.args
    if not args.rate > 0:
        raise UserError("--rate must be positive")
    duration_s = seconds(args.duration, "--duration")
    if duration_s <= 0:
        raise UserError("--duration must be positive")
    windows = parse_windows(args.windows)
    if min(windows) > duration_s:
        raise UserError(f"--windows '{args.windows}': every window is longer than --duration {args.duration}")
    if not args.spike_factor > 1:
        raise UserError("--spike-factor must be above 1 (a window's P99 against the median window P99)")
    if args.records < 1:
        raise UserError("--records must be positive")
    if args.processes is not None and args.processes == 0:
        raise UserError("--processes must not be 0")
    _check_runs(setup)
    setup.values["windows"] = windows
    if args.workload == "ycsb":
        setup.workload_options.setdefault("recordcount", str(args.records))


def _check_runs(setup: Setup) -> None:
    """One run directory is read: no ``--repeat``; a ``--baseline`` must be a finished run."""
    if asks_for_repeat(setup.rest):
        raise UserError("--repeat is not for a long run: its windows are read from one run directory; run the "
                        "scenario again instead")
    if setup.args.baseline is not None:
        base = Path(setup.args.baseline)
        if not (base / SUMMARY_CSV).is_file():
            raise UserError(f"--baseline {setup.args.baseline}: not a finished run directory (no {SUMMARY_CSV})")
        setup.values["baseline"] = str(base)


def _longrun_settings(setup: Setup) -> dict:
    args = setup.args
    return {"windows": setup.values["windows"], "spike_factor": args.spike_factor,
            "baseline": setup.values.get("baseline"), "rate": args.rate}


def launch(setup: Setup, uri: str, run_id: str) -> int:
    """``dbsurge run --workload W --shape constant --rate R --duration D`` with the rest passed on.

    The window settings go into the run directory as soon as the engine has made it (`SETTINGS_NAME`,
    by `_leave_settings` beside the child): the engine owns run.json until the end, refuses a run
    directory that exists before it starts, and ``--from`` during a 12-hour run needs the settings
    long before the end.
    """
    args = setup.args
    stop = threading.Event()
    watcher = threading.Thread(target=_leave_settings, name="longrun-settings", daemon=True,
                               args=(Path(args.results_dir) / run_id, _longrun_settings(setup), stop))
    watcher.start()
    try:
        return _run(setup, uri, run_id)
    finally:
        stop.set()
        watcher.join(timeout=5)


def _leave_settings(run_dir: Path, settings: dict, stop: threading.Event) -> None:
    """Write `SETTINGS_NAME` once the engine's run.json is there (polled twice a second until the run ends)."""
    while not stop.is_set():
        if (run_dir / RUN_JSON).is_file():
            write_settings(run_dir, settings)
            return
        stop.wait(0.5)


def write_settings(run_dir: Path, settings: dict) -> None:
    """`SETTINGS_NAME`, atomically; a results disk that refuses it costs only ``--from`` during the run."""
    with contextlib.suppress(OSError):
        write_text(run_dir / SETTINGS_NAME, json.dumps(settings) + "\n")


def _run(setup: Setup, uri: str, run_id: str) -> int:
    args = setup.args
    cmd = ["--workload", args.workload, "--shape", "constant", "--rate", f"{args.rate:g}", "--duration",
           args.duration, "--target", uri, "--quiet", "--results-dir", args.results_dir, "--run-id", run_id,
           "--seed", str(args.seed)]
    if args.processes:
        cmd += ["--processes", str(args.processes)]
    cmd += pairs("--target-option", args.target_option)
    cmd += pairs("--workload-option", [f"{k}={v}" for k, v in setup.workload_options.items()])
    return run_engine(cmd + setup.rest)


def after(setup: Setup, run_id: str, code: int) -> int:
    """Annotate run.json with the window settings, show the tables and write report.html."""
    args = setup.args
    run_dir = Path(args.results_dir) / run_id
    if not (run_dir / RUN_JSON).is_file() or not (run_dir / INTERVALS).is_file():
        return code or 1
    annotate_run(run_dir, scenario=NAME, scenario_settings=setup.settings, target_name=args.target,
                 longrun=_longrun_settings(setup))
    write_settings(run_dir, _longrun_settings(setup))  # a run shorter than the watcher's first look
    SCENARIO.show(run_dir)
    write_html(run_dir)
    return code


def write_html(run_dir: Path) -> None:
    """report.html with the per-window curves (collectors.report); a failure is said, the tables stand."""
    try:
        say(f"report: {build_report(run_dir)}")
    except Exception as e:  # noqa: BLE001 - the tables and CSVs are written; `dbsurge report` tries again
        say(f"{REPORT_HTML} was not written ({type(e).__name__}: {e}); `dbsurge report {run_dir}` tries again")


# -- the tables -----------------------------------------------------------------------------------------


def _settings(meta: dict, run_dir: Path) -> dict:
    """The window settings: run.json's once the run has ended, `SETTINGS_NAME`'s while it runs."""
    lr = meta.get("longrun")
    if not lr and (run_dir / SETTINGS_NAME).is_file():
        try:
            lr = json.loads((run_dir / SETTINGS_NAME).read_text())
        except ValueError:
            lr = None
    if not isinstance(lr, dict) or not lr.get("windows"):
        raise UserError(f"{run_dir} has no longrun window settings: not a run of dbsurge scenario longrun")
    return lr


def _whole_run_p99(run_dir: Path) -> dict[str, float | None]:
    return {r["operation"]: opt_float(r.get("p99_ms")) for r in read_rows(run_dir, SUMMARY_CSV)
            if r.get("operation") and r.get("operation") != "ALL" and r.get("count") not in (None, "", "0")}


def hour_rows(run_dir: Path, started: float | None) -> list[dict]:
    """Per hour of the run: the largest generator RSS and the run directory's size (``resources`` events)."""
    if started is None:
        return []
    hours: dict[int, dict] = {}
    for e in iter_events(run_dir, containing='"resources"'):
        at = epoch_of(e.get("time_utc"))
        if e.get("kind") != "resources" or at is None:
            continue
        h = hours.setdefault(int(max(at - started, 0) // 3600), {"samples": 0, "rss": 0.0, "procs": 0,
                                                                  "dir": 0.0})
        h["samples"] += 1
        h["rss"] = max(h["rss"], float(e.get("rss_mb") or 0))
        h["procs"] = max(h["procs"], int(e.get("processes") or 0))
        h["dir"] = max(h["dir"], float(e.get("run_dir_mb") or 0))
    rows, before = [], 0.0
    for hour in sorted(hours):
        h = hours[hour]
        rows.append({"hour": hour + 1, "samples": h["samples"], "rss_mb_max": h["rss"], "processes": h["procs"],
                     "run_dir_mb": h["dir"], "run_dir_mb_added": round(h["dir"] - before, 3)})
        before = h["dir"]
    return rows


def report(run_dir: Path) -> Report:
    """The tables, built from intervals.hlog (resumed from longrun.state.json), summary.csv and events.jsonl."""
    meta = read_meta(run_dir)
    lr = _settings(meta, run_dir)
    windows, baseline = [float(w) for w in lr["windows"]], lr.get("baseline")
    factor = float(lr.get("spike_factor") or STUDY["spike_factor"])
    plan = meta.get("plan") or {}
    stages = plan.get("stages") or []
    duration = float(plan.get("duration_s") or 0.0)
    if duration <= 0:
        raise UserError(f"{run_dir}: {RUN_JSON} has no plan duration")
    started, ended = epoch_of(meta.get("started_utc")), epoch_of(meta.get("ended_utc"))
    elapsed = min(duration, ended - started) if started is not None and ended is not None else None
    hw = build_windows(run_dir, windows, duration, ended=ended is not None)
    ops = _ordered(hw.operations, [op for op, _ in meta.get("operations") or []])
    run_p99 = _whole_run_p99(run_dir)
    base_p99 = _whole_run_p99(Path(baseline)) if baseline and Path(baseline).is_dir() else {}

    tp_rows, p99_rows, spikes, per_window = [], [], [], {}
    for w in windows:
        label = window_label(w)
        rows = window_rows(hw.windows[w], ops, stages, factor, end_s=elapsed)
        per_window[label] = rows
        tps = [r["throughput_ops_s"] for r in rows if r["throughput_ops_s"] is not None]
        pcts = [r["pct_of_target"] for r in rows if r["pct_of_target"] is not None]
        targets = [r["target_tps"] for r in rows if r["target_tps"] is not None]
        tp_rows.append({"window": label, "windows": len(rows),
                        "target_tps": sum(targets) / len(targets) if targets else None,
                        "mean_ops_s": round(sum(tps) / len(tps), 3) if tps else None,
                        "min_ops_s": min(tps, default=None), "max_ops_s": max(tps, default=None),
                        "min_pct_of_target": min(pcts, default=None),
                        "below_95pct": sum(1 for p in pcts if p < 95.0)})
        for op in ops:
            s = p99_summary(rows, op, factor)
            base = base_p99.get(op)
            p99_rows.append({"window": label, "operation": op, **s, "run_p99_ms": run_p99.get(op),
                             "baseline_p99_ms": base,
                             "avg_vs_baseline": round(s["avg_p99_ms"] / base, 3) if base and s["avg_p99_ms"] else None})
            median = s["median_p99_ms"]
            spikes += [{"window": label, "operation": op, "index": r["window"], "start_s": r["start_s"],
                        "end_s": r["end_s"], "p99_ms": r[f"{op}_p99_ms"],
                        "x_median": round(r[f"{op}_p99_ms"] / median, 2) if median else None}
                       for r in rows if r[f"{op}_spike"]]
    write_window_csvs(run_dir, per_window, ops)
    return _report(meta, run_dir, tp_rows, p99_rows, spikes, hour_rows(run_dir, started), factor, hw)


def _ordered(seen: list[str], declared: list[str]) -> list[str]:
    """The operations in the workload's order, then any other the log has."""
    return [op for op in declared if op in seen] + [op for op in seen if op not in declared]


def window_columns(ops: list[str]) -> list[str]:
    cols = ["window", "start_s", "end_s", "seconds", "target_tps", "throughput_ops_s", "pct_of_target", "ok"]
    for op in ops:
        cols += [f"{op}_count", f"{op}_p99_ms", f"{op}_max_ms", f"{op}_spike"]
    return cols


def write_window_csvs(run_dir: Path, per_window: dict[str, list[dict]], ops: list[str]) -> None:
    """longrun-windows-<length>.csv: one row per window (too many to print for a 12-hour run)."""
    rd = RunDirectory(run_dir.parent, run_dir.name)
    try:
        for label, rows in per_window.items():
            rd.write_csv(longrun_windows(label), window_columns(ops),
                         [{k: (int(v) if isinstance(v, bool) else csv_cell(v)) for k, v in r.items()} for r in rows])
    finally:
        rd.close()


def _report(meta: dict, run_dir: Path, tp_rows: list[dict], p99_rows: list[dict], spikes: list[dict],
            hours: list[dict], factor: float, hw) -> Report:
    rate = _settings(meta, run_dir).get("rate")
    tables = [
        Table(title=f"Throughput per window (target {number(rate, 0)} ops/s)",
              headers=["window", "windows", "target ops/s", "mean ops/s", "min ops/s", "max ops/s",
                       "min % of target", "windows < 95%"],
              rows=[[r["window"], str(r["windows"]), number(r["target_tps"], 0), number(r["mean_ops_s"], 1),
                     number(r["min_ops_s"], 1), number(r["max_ops_s"], 1),
                     "-" if r["min_pct_of_target"] is None else f"{r['min_pct_of_target']:.1f}%",
                     str(r["below_95pct"])] for r in tp_rows],
              csv_name=LONGRUN_THROUGHPUT, csv_columns=THROUGHPUT_COLUMNS, csv_rows=tp_rows),
        Table(title=f"P99 per window (spike: above {factor:g} x the median window P99)",
              headers=["window", "operation", "windows", "avg P99 ms", "median P99 ms", "max P99 ms", "spikes",
                       "whole-run P99 ms", "baseline P99 ms", "avg / baseline"],
              rows=[[r["window"], r["operation"], str(r["windows"]), ms(r["avg_p99_ms"]), ms(r["median_p99_ms"]),
                     ms(r["max_p99_ms"]), str(r["spikes"]), ms(r["run_p99_ms"]), ms(r["baseline_p99_ms"]),
                     "-" if r["avg_vs_baseline"] is None else f"{r['avg_vs_baseline']:.2f}x"] for r in p99_rows],
              csv_name=scenario_table(NAME), csv_columns=P99_COLUMNS, csv_rows=p99_rows),
    ]
    if spikes:
        tables.append(Table(title=f"Spikes ({len(spikes)}" + (f"; the first {SHOWN_SPIKES} shown)" if len(spikes) > SHOWN_SPIKES
                                                         else ")"),
                            headers=["window", "operation", "#", "from s", "to s", "P99 ms", "x median"],
                            rows=[[s["window"], s["operation"], str(s["index"]), number(s["start_s"], 0),
                                   number(s["end_s"], 0), ms(s["p99_ms"]), f"{s['x_median']:.1f}"]
                                  for s in spikes[:SHOWN_SPIKES]],
                            csv_name=LONGRUN_SPIKES, csv_columns=SPIKE_COLUMNS, csv_rows=spikes))
    else:
        _write_empty_csv(run_dir, LONGRUN_SPIKES, SPIKE_COLUMNS)
    if hours:
        tables.append(Table(title="Generator memory and results disk per hour (this host)",
                            headers=["hour", "samples", "max RSS MB", "processes", "run dir MB", "added MB"],
                            rows=[[str(h["hour"]), str(h["samples"]), number(h["rss_mb_max"], 1),
                                   str(h["processes"]), number(h["run_dir_mb"], 2), number(h["run_dir_mb_added"], 2)]
                                  for h in hours],
                            csv_name=LONGRUN_HOURS, csv_columns=HOUR_COLUMNS, csv_rows=hours))
    notes = [(f"Window P99 = the P99 of the merged per-second histograms of {INTERVALS} in the window "
              f"({hw.lines:,} interval lines read); throughput counts successful operations per second. "
              f"Every window: {longrun_windows('<length>')}.")]
    if meta.get("ended_utc") is None:
        notes.append("The run has not ended (or did not record its end): the last windows may still change; "
                     f"`dbsurge scenario longrun --from {run_dir}` reads only what was added since.")
    late = sum(w.late_lines for w in hw.windows.values())
    if late:
        notes.append(f"WARNING: {late} interval lines arrived after their window was closed and are not counted.")
    if not hours:
        notes.append(f"No resources events in {EVENTS} (an engine from before they were recorded): no memory "
                     "or results-disk rows.")
    else:
        notes.append("Memory is this host's generator (the engine and its --processes workers); remote workers "
                     "are not sampled.")
    for finding in (meta.get("results") or {}).get("behind_plan") or []:
        notes.append(f"WARNING: {finding}")
    return Report(heading=f"dbsurge scenario longrun (study 002, 12-hour run): {meta.get('target_display')}",
                  tables=tables, notes=notes)


def _write_empty_csv(run_dir: Path, name: str, columns: list[str]) -> None:
    """An empty CSV (header only), so a run without spikes does not keep an earlier build's list."""
    rd = RunDirectory(run_dir.parent, run_dir.name)
    try:
        rd.write_csv(name, columns, [])
    finally:
        rd.close()


SCENARIO = Scenario(NAME, "Study 002: a target rate held for hours (12h); throughput and P99 per window, spikes.",
                    STUDY, QUICK, report=report, options=add_options, check=check, launch=launch, after=after)


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
