"""The run directory, ``results/<run-id>/``, written as the run goes.

Every file is appended and flushed as data arrives, so a crash or a kill loses at most the last
interval: ``events.jsonl`` and ``timeline.csv`` gain a line per event or second, the interval
histogram log a line per second and operation, and ``run.json`` is rewritten atomically when
something about the run changes (its end time, a rate change). See docs/architecture.md for
the columns.
"""

from __future__ import annotations

import csv
import contextlib
import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path

from .redact import redact_uri
from .utc import utc_iso

_SECRET_KEYS = {"password", "passwd", "token", "secret", "auth_token", "aws_secret_access_key", "aws_session_token",
                "web_auth", "join_token"}


def redact_obj(obj):
    """A copy of a JSON-like object with secrets removed: secret-named keys and passwords in URIs."""
    if isinstance(obj, dict):
        return {k: ("***" if str(k).lower() in _SECRET_KEYS and v else redact_obj(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str) and "://" in obj:
        return redact_uri(obj)
    return obj

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
#: ``name (address)`` as the worker reported them (dbsurge.hosts).
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
#: segments.csv (runs with live rate overrides, `dbsurge.segments`): per stage and per override in force,
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


def new_run_id(label: str = "run") -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{label}-{secrets.token_hex(2)}"


#: Space kept back in the run directory (`RunDirectory.keep_reserve`) for the final files: a results
#: disk that fills up mid-run still gets summary.csv, summary.md and a finalised run.json.
RESERVE_BYTES = 512 * 1024
RESERVE_NAME = "space.reserve.tmp"


class RunDirectory:
    """Files of one run. Create with the results root and a run id; write through its methods.

    Every file rewritten whole goes through a temporary file and ``os.replace``; a write that fails
    removes its temporary file, so a full disk leaves no ``*.tmp`` behind.
    """

    def __init__(self, root: str | Path, run_id: str):
        self.run_id = run_id
        self.path = Path(root) / run_id
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "metrics").mkdir(exist_ok=True)
        self._events = open(self.path / "events.jsonl", "a", buffering=1)
        self._timeline_file = None
        self._timeline = None
        self._hlog = None
        self.meta: dict = {}

    # -- run.json ---------------------------------------------------------------------------------

    def write_meta(self, **fields) -> None:
        """Update run.json (secrets removed) atomically; its `RUN_SCHEMA` first, for every reader."""
        self.meta = {"schema": self.meta.get("schema", RUN_SCHEMA), **self.meta, **fields}
        self._replace("run.json", json.dumps(redact_obj(self.meta), indent=2, default=str) + "\n")

    def _replace(self, name: str, text: str) -> Path:
        """Write ``name`` whole, atomically; on failure no temporary file is left."""
        path = self.path / name
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    # -- the space kept for the final files ---------------------------------------------------------

    def keep_reserve(self, size: int = RESERVE_BYTES) -> None:
        """Keep ``size`` bytes of the disk for the end (best effort: a disk already full keeps none)."""
        try:
            with open(self.path / RESERVE_NAME, "wb") as f:
                f.write(b"\0" * size)
        except OSError:
            (self.path / RESERVE_NAME).unlink(missing_ok=True)

    def release_reserve(self) -> None:
        """Give the reserved space back (nothing to do on a directory that cannot be written any more)."""
        with contextlib.suppress(OSError):
            (self.path / RESERVE_NAME).unlink(missing_ok=True)

    # -- events.jsonl -------------------------------------------------------------------------------

    def event(self, kind: str, at: float | None = None, **fields) -> None:
        row = {"time_utc": utc_iso(at if at is not None else time.time()), "kind": kind, **fields}
        self._events.write(json.dumps(redact_obj(row), default=str) + "\n")

    # -- timeline.csv and the interval histogram log --------------------------------------------------

    def timeline_rows(self, rows: list[dict]) -> None:
        if self._timeline is None:
            self._timeline_file = open(self.path / "timeline.csv", "a", newline="", buffering=1)
            self._timeline = csv.DictWriter(self._timeline_file, TIMELINE_COLUMNS, extrasaction="ignore")
            if self._timeline_file.tell() == 0:
                self._timeline.writeheader()
        self._timeline.writerows(rows)
        self._timeline_file.flush()

    def write_flush(self, flush, pause=None) -> None:
        """Write what `Aggregator.flush` gave back: timeline rows, interval-log lines, the open seconds, events.

        ``pause()``, when given, is called between the files (a local run lets its pacer run there: the
        four files of one second took 0.75-1.1 ms in one piece at 16,000 TPS)."""
        pause = pause or (lambda: None)
        for kind, message, worker in flush.failures:
            self.event("failure", failure_kind=kind, message=message, worker=worker)
        if flush.rows:
            self.timeline_rows(flush.rows)
            pause()
        for op, sec, max_ms, encoded in flush.intervals:
            self.hlog_interval(op, sec, 1.0, max_ms, encoded, flush.base_s or sec)
        if flush.worker_rows:
            pause()
            self._append_csv("workers.csv", WORKER_COLUMNS, flush.worker_rows)
        for worker, rec in flush.logs:
            self.event("worker_log", worker=worker, **rec)
        pause()
        open_path = self.path / "timeline.open.csv"
        if flush.open_rows is None:
            open_path.unlink(missing_ok=True)
        else:
            self.write_csv("timeline.open.csv", TIMELINE_COLUMNS, flush.open_rows)

    def _append_csv(self, name: str, columns: list[str], rows: list[dict]) -> None:
        path = self.path / name
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, columns, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerows(rows)

    def write_tables(self, stages: list[dict], summary: list[dict]) -> None:
        self.write_csv("stages.csv", STAGE_COLUMNS, stages)
        self.write_csv("summary.csv", STAGE_COLUMNS, summary)

    def hlog_interval(self, tag: str, start_s: float, length_s: float, max_ms: float, encoded: bytes | str,
                      base_s: float) -> None:
        """One line of the HdrHistogram interval log (values in microseconds, max in milliseconds).

        Written here rather than with `hdrh.log.HistogramLogWriter`: that writer has no ``Tag=``
        (one tag per operation is how this log keeps operations apart, log format 1.3), and its
        ``output_start_time`` fails (it formats milliseconds as seconds with a method datetime lacks).
        """
        if self._hlog is None:
            self._hlog = open(self.path / "intervals.hlog", "a", buffering=1)
            if self._hlog.tell() == 0:
                self._hlog.write("#[Histogram log format version 1.3]\n")
                self._hlog.write(f"#[StartTime: {base_s:.3f} (seconds since epoch), {utc_iso(base_s)}]\n")
                self._hlog.write(f"#[BaseTime: {base_s:.3f} (seconds since epoch)]\n")
                self._hlog.write("#[values in microseconds; response time from the intended start]\n")
                self._hlog.write('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')
        enc = encoded.decode() if isinstance(encoded, bytes) else encoded
        self._hlog.write(f"Tag={tag},{start_s - base_s:.3f},{length_s:.3f},{max_ms:.3f},{enc}\n")

    def write_csv(self, name: str, columns: list[str], rows: list[dict]) -> Path:
        path = self.path / name
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w", newline="") as f:
                w = csv.DictWriter(f, columns, extrasaction="ignore")
                w.writeheader()
                w.writerows(rows)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    def write_text(self, name: str, text: str) -> Path:
        """Write ``name`` whole, atomically (a full disk leaves the old file, never an empty one)."""
        return self._replace(name, text)

    def close(self) -> None:
        for f in (self._events, self._timeline_file, self._hlog):
            if f is not None and not f.closed:
                f.close()
