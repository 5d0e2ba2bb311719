"""The run directory's schema: every file and folder it holds, the columns of its CSVs and their types,
and run.json's keys and their types.

This is the one place that spells a run directory's file names. The writer (`dbsurge.rundir.writer`) and the
reader (`dbsurge.rundir.reader`) take them from here, and so does every module that names a file in a message.
A scenario's run directory holds the engine's files it writes (run.json, events.jsonl, summary.md,
report.html) and its own raw and table CSVs; a parent directory of repetitions (``--repeat``, ``ycsb-run``,
``ycsb-consistency``) holds a run.json of kind ``repetitions``, ``repetitions.csv`` and one run directory per
repetition (``1``, ``2``, ... or under ``runs/``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

# -- files and folders of a run directory (``results/<run-id>/``) ---------------------------------------------

#: The run's description: plan, options, versions, UTC start and end, target with secrets removed, results.
RUN_JSON = "run.json"
#: One JSON object a line: stage changes, worker joins and losses, failures, the end.
EVENTS = "events.jsonl"
#: Per second and operation (`TIMELINE_COLUMNS`).
TIMELINE = "timeline.csv"
#: The seconds still open (not yet reported by every worker): rewritten each second, removed at the end.
TIMELINE_OPEN = "timeline.open.csv"
#: Per stage and operation, and over the run (`STAGE_COLUMNS`).
STAGES = "stages.csv"
SUMMARY_CSV = "summary.csv"
#: Per worker and second (`WORKER_COLUMNS`).
WORKERS = "workers.csv"
#: Per stage and live rate override (`SEGMENT_COLUMNS`).
SEGMENTS = "segments.csv"
#: The HdrHistogram interval log: a line per second and operation.
INTERVALS = "intervals.hlog"
#: What a reader opens first: the verdict and the tables in Markdown; the plots in HTML.
SUMMARY_MD = "summary.md"
REPORT_HTML = "report.html"
#: The report's figure of the timeline, beside report.html.
TIMELINE_PNG = "timeline.png"
#: What Locust's ``--csv PREFIX`` writes (``PREFIX_stats.csv``...), outside the run directory: checked before the load.
LOCUST_CSV_SUFFIXES = ("_stats.csv", "_failures.csv", "_exceptions.csv")
#: The side collector's merge: one row per second of the client's and the database's figures.
MERGED = "merged.csv"
#: The bill (`dbsurge cost`) and the actual bill from Cost Explorer.
COST = "cost.csv"
COST_ACTUAL = "cost_actual.csv"
#: The collectors' folder, and what it holds.
METRICS = "metrics"
CLOUDWATCH = "cloudwatch.csv"
RUNNERS = "runners.csv"
PG_STAT_DATABASE = "pg_stat_database.csv"
MONGO_SERVER_STATUS = "mongo_server_status.csv"
#: Space kept back for the final files (`RunDirectory.keep_reserve`).
RESERVE_NAME = "space.reserve.tmp"
#: Temporary files a run directory may hold while it is written; none may outlive the run.
TEMP_SUFFIX = ".tmp"
TEMP_SUFFIXES = (TEMP_SUFFIX,)

# -- a parent directory of repetitions ---------------------------------------------------------------------------

#: Per stage, operation and figure: the spread across the repetitions (`REPETITION_COLUMNS`).
REPETITIONS = "repetitions.csv"
#: Where ``ycsb-run`` and ``ycsb-consistency`` put their engine runs.
RUNS = "runs"

# -- a scenario's files ----------------------------------------------------------------------------------------

PROBES = "probes.csv"
SNAPSHOTS = "snapshots.csv"
WARM_PHASE = "warm_phase.csv"
SERVER_CACHE = "server_cache.csv"
TRACE = "trace.csv"
BATCHES = "batches.csv"
INSERTS = "inserts.csv"
CAPACITY_TABLE = "capacity.csv"
YCSB_LOAD_TABLE = "ycsb-load.csv"
YCSB_RUN_TABLE = "ycsb-run.csv"
#: rewarm's table of the first window, after the scenario's name
FIRST_WINDOW_SUFFIX = "-first-window.csv"
LONGRUN_THROUGHPUT = "longrun-throughput.csv"
LONGRUN_SPIKES = "longrun-spikes.csv"
LONGRUN_HOURS = "longrun-hours.csv"
#: ``longrun-windows-<length>.csv``, one per window length
LONGRUN_WINDOWS_PREFIX = "longrun-windows-"
LONGRUN_SETTINGS = "longrun.settings.json"
LONGRUN_STATE = "longrun.state.json"
#: The tables a report does not list as a scenario's raw files.
NOT_RAW = (MERGED, COST)


#: Every CSV of a folder, and a CSV's suffix.
CSV_GLOB = "*.csv"
CSV_SUFFIX = ".csv"


def longrun_windows(length: str) -> str:
    """The file of longrun's table for windows of ``length`` (``*`` for all of them)."""
    return f"{LONGRUN_WINDOWS_PREFIX}{length}{CSV_SUFFIX}"


def scenario_table(name: str) -> str:
    """The CSV of a scenario's table, after its name (``spike.csv``)."""
    return f"{name}{CSV_SUFFIX}"


def in_metrics(name: str) -> str:
    """A file of the collectors' folder, as a path relative to the run directory (``metrics/NAME``)."""
    return f"{METRICS}/{name}"


# -- the columns of the engine's CSVs ----------------------------------------------------------------------------

_FAILED = ["failed_connect", "failed_timeout", "failed_disconnect", "failed_server", "failed_occ", "failed_throttled",
           "failed_other"]
_NOT_SENT = ["not_sent_worker_lost", "not_sent_no_connect", "not_sent_interrupted", "not_sent_in_flight",
             "not_sent_users_exhausted", "not_sent_target_silent", "not_sent_unaccounted"]
TIMELINE_COLUMNS = [
    "time_utc", "stage", "operation", "target_tps", "count", "failures", "retries", "achieved_tps",
    "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "service_p50_ms", "service_p99_ms", "lag_p99_ms",
    "dropped", "failed_p99_ms", *_FAILED, "failed_detail",
]
#: workers.csv: per worker and second (by completion), with its share of the plan's rate; ``host`` is
#: ``name (address)`` as the worker reported them (dbsurge.engine.hosts).
WORKER_COLUMNS = ["time_utc", "worker", "host", "assigned", "sent", "ok", "failed", "dropped", "lag_p99_ms", "p99_ms"]
#: stages.csv and summary.csv. The ledger: planned = count (ok + failures) + dropped + unknown + not_sent,
#: with failures split by kind (failed_*; failed_detail has each SQLSTATE or MongoDB code), unknown the
#: arrivals sent whose outcome nobody knows (still in flight at the end, or issued by a lost worker and never
#: reported), and not_sent by reason (not_sent_*); over_plan counts
#: operations sent beyond the plan (a bug or a partition).
STAGE_COLUMNS = [
    "stage", "operation", "start_utc", "end_utc", "duration_s", "target_tps", "achieved_tps", "delivered_tps", "planned",
    "count",
    "ok", "failures", "failure_rate", "retries", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms",
    "service_p50_ms", "service_p95_ms", "service_p99_ms", "lag_p99_ms", "lag_max_ms", "loop_lag_max_ms",
    "failed_p50_ms", "failed_p99_ms", "failed_max_ms", *_FAILED, "failed_detail", "dropped", "unknown", "not_sent",
    *_NOT_SENT, "over_plan",
]
#: segments.csv (runs with live rate overrides, `dbsurge.plan.segments`): per stage and per override in force,
#: the timeline's seconds merged (by second of completion, as timeline.csv; the ledger is stages.csv's).
SEGMENT_COLUMNS = [
    "segment", "stage", "override", "rate", "start_utc", "end_utc", "seconds", "target_tps", "achieved_tps",
    "count", "ok", "failures", "failure_rate", "retries", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms",
    "service_p50_ms", "service_p95_ms", "service_p99_ms", "lag_p99_ms", "lag_max_ms", "failed_p99_ms", *_FAILED,
    "failed_detail", "dropped",
]

#: run.json's format. A reader refuses a run.json of a higher schema (a newer dbsurge's, whose keys may mean
#: something else) in one line; a run.json without ``schema`` (before it was written) is schema 1. Raise it
#: when a key changes meaning or type, not when one is added.
RUN_SCHEMA = 1

#: spread columns of repetitions.csv; the figures of stages.csv it summarises
REPETITION_COLUMNS = ["stage", "operation", "figure", "n", "median", "min", "max", "spread_pct", "values"]
#: metrics/cloudwatch.csv in long form, and the key of one value
CLOUDWATCH_COLUMNS = ["time_utc", "preset", "id", "metric", "stat", "value"]
CLOUDWATCH_KEY = ["time_utc", "preset", "id", "metric", "stat"]

#: The types of the engine's CSV columns: text, ISO 8601 UTC times, counts (whole numbers of 0 or more); every
#: other column is a finite number. A blank cell is "not measured" in any column.
TEXT_COLUMNS = {"stage", "operation", "failed_detail", "worker", "host", "segment", "override"}
TIME_COLUMNS = {"time_utc", "start_utc", "end_utc"}
COUNT_COLUMNS = {"planned", "count", "ok", "failures", "retries", "dropped", "not_sent", "over_plan", "sent",
                 "failed", *(c for c in STAGE_COLUMNS if c.startswith(("failed_", "not_sent_"))
                             and not c.endswith("_ms") and c != "failed_detail")}


def column_type(column: str) -> str:
    """The type of an engine CSV's column: ``text``, ``time`` (ISO 8601 UTC), ``count`` or ``number``.

    >>> [column_type(c) for c in ("operation", "time_utc", "failed_timeout", "p99_ms")]
    ['text', 'time', 'count', 'number']
    """
    if column in TEXT_COLUMNS:
        return "text"
    if column in TIME_COLUMNS:
        return "time"
    return "count" if column in COUNT_COLUMNS else "number"


#: The ledger's columns: a table with one of them must have them all.
LEDGER = ("planned", "ok", "failures", "dropped", "not_sent")

#: file -> (columns it may have, columns it must have, whether it carries the ledger)
CSV_FILES: dict[str, tuple[set[str], set[str], bool]] = {
    STAGES: (set(STAGE_COLUMNS), {"stage", "operation"}, True),
    SUMMARY_CSV: (set(STAGE_COLUMNS), {"operation"}, True),
    TIMELINE: (set(TIMELINE_COLUMNS), {"time_utc", "operation"}, False),
    WORKERS: (set(WORKER_COLUMNS), {"time_utc", "worker"}, False),
    SEGMENTS: (set(SEGMENT_COLUMNS), {"segment", "stage"}, False),
}

# -- run.json's keys and their types -----------------------------------------------------------------------------

def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_time(v: Any) -> bool:
    if is_number(v):
        return True
    if not isinstance(v, str):
        return False
    try:
        datetime.fromisoformat(v)
    except ValueError:
        return False
    return True


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def _one_of(*types: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, types) and not isinstance(v, bool)


_STR = _one_of(str)
_DICT = _one_of(dict)
#: run.json's keys as dbsurge writes them (a None value stands for "not known" anywhere): key -> (check, what)
RUN_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "schema": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "a schema number of 1 or more"),
    "run_id": (_STR, "a name"),
    "started_utc": (is_time, "an ISO 8601 time"),
    "ended_utc": (is_time, "an ISO 8601 time"),
    "command": (lambda v: isinstance(v, str) or _list_of(_STR)(v), "a command line"),
    "workload": (lambda v: isinstance(v, (str, dict)) or _list_of(_STR)(v), "a workload name or list of names"),
    "target": (_one_of(str, dict), "a target"),
    "target_display": (_STR, "a target"),
    # what the check's connection negotiated: server version, TLS, verified against which CA file, auth
    # (dbsurge.targets.negotiation)
    "negotiated": (_DICT, "an object"),
    "workload_options": (_DICT, "an object"),
    "operations": (_list_of(lambda p: isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                            and is_number(p[1])), "a list of [name, weight]"),
    "plan": (_DICT, "an object"),
    "arrivals": (_STR, "uniform or poisson"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "max_lag": (lambda v: isinstance(v, str) or is_number(v), "a duration"),
    "role": (_STR, "a role"),
    # an engine run's worker processes; the worker counts of `dbsurge scenario ycsb-run --scale-workers`
    "workers": (lambda v: is_count(v) or (_list_of(is_count)(v) and bool(v)), "a count or a list of counts"),
    "cloudwatch": (lambda v: isinstance(v, str) or _list_of(_STR)(v), "a list of PRESET:ID"),
    "runners": (_list_of(lambda r: isinstance(r, (str, dict))), "a list of runners"),
    "region": (_STR, "a region"),
    "versions": (_DICT, "an object"),
    "options": (_DICT, "an object"),
    "complete": (lambda v: isinstance(v, bool), "true or false"),
    "exit_code": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "results": (_DICT, "an object"),
    "kind": (_STR, "a kind"),
    "scenario": (_STR, "a scenario name"),
    "repetitions": (_DICT, "an object"),
}
STAGE_KEYS = {"name": (_STR, "a name"), "start_s": (is_number, "a number"), "duration_s": (is_number, "a number"),
               "start_tps": (is_number, "a number"), "end_tps": (is_number, "a number"),
               "target_tps": (is_number, "a number"), "start_utc": (is_time, "an ISO 8601 time"),
               "end_utc": (is_time, "an ISO 8601 time")}
PLAN_KEYS = {"text": (_STR, "a plan"), "baseline_tps": (is_number, "a number"),
              "duration_s": (is_number, "a number"), "stages": (_list_of(_DICT), "a list of stages")}
_WHOLE = (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number")
#: The options `dbsurge rerun` turns back into a command line (Locust's parsed values: numbers, not text).
OPTION_KEYS = {"max_users": _WHOLE, "num_users": _WHOLE, "processes": _WHOLE,
                "run_time": (is_number, "a number of seconds")}
RESULT_KEYS = {**{k: (is_count, "a count") for k in ("planned_operations", "operations", "ok", "failures",
                                                        "dropped", "not_sent", "over_plan")},
                "failed_by_kind": (_DICT, "an object"), "not_sent_by_reason": (_DICT, "an object"),
                "verdict": (_STR, "a verdict")}
