"""Database-side samplers: what the database itself saw, once a second, during a run.

A 60-second CloudWatch average smooths over a cold cache's first seconds (study 000, Rule 3); these
samplers read the server's own counters every second, on their own connection (never one of the
load's), and append a CSV row per sample under ``metrics/``, flushed as it is written, so a crash
loses at most the last interval.

``metrics/pg_stat_database.csv`` (`PostgresSampler`, the row of the connected database):
    ``time_utc``, ``numbackends`` (includes the sampler's own connection), the cumulative counters
    ``xact_commit, xact_rollback, blks_read, blks_hit, tup_returned, tup_fetched, tup_inserted,
    tup_updated, tup_deleted, conflicts, temp_files, temp_bytes, deadlocks``, and from the deltas
    since the previous sample: ``buffer_hit_ratio`` (percent, ``100 * hit / (hit + read)``; blank
    when the interval had no reads and no hits, after a reconnect, or when the counters went
    backwards after a stats reset), ``commits_per_s``, ``rollbacks_per_s``, ``blks_read_per_s``.

``metrics/mongo_server_status.csv`` (`MongoSampler`, from ``serverStatus``):
    ``time_utc``, ``uptime_s``, ``connections.current`` (includes the sampler's own and the
    driver's monitoring connections), ``connections.available``, ``connections.totalCreated``,
    ``opcounters.insert|query|update|delete|getmore|command``, ``ops_per_s`` (from the deltas),
    ``network.bytesIn|bytesOut|numRequests``, ``mem.resident_mb``, and WiredTiger's cache figures
    ``wiredTiger.cache.bytes_in_cache``, ``wiredTiger.cache.max_bytes``,
    ``wiredTiger.cache.pages_read_into_cache``, ``wiredTiger.cache.pages_requested``, and
    ``cache_hit_ratio`` (percent, ``100 * (1 - pages read / pages requested)`` over the interval).
    A figure the server does not report is a blank cell: secantusdb 0.7 reports no ``wiredTiger``
    section, so its cache columns are blank; a real mongod fills them.

Samples are taken on whole UTC seconds (for ``interval_s=1``) on a schedule that does not drift;
``time_utc`` is when the sample was read. After a lost connection the sampler reports one
``{"kind": "error", "source": "pg_sampler"|"mongo_sampler"}`` event, reconnects on the next tick,
and leaves the deltas of the first sample after the reconnect blank.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from dbsurge.collectors.rundata import append_event, format_utc

from dbsurge.rundir.schema import METRICS, MONGO_SERVER_STATUS, PG_STAT_DATABASE
from dbsurge.rundir.writer import CsvAppender
from dbsurge.targets import Target, open_target

log = logging.getLogger("dbsurge.collectors.samplers")

PG_COLUMNS = [
    "time_utc", "numbackends", "xact_commit", "xact_rollback", "blks_read", "blks_hit", "buffer_hit_ratio",
    "deadlocks", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated", "tup_deleted", "conflicts",
    "temp_files", "temp_bytes", "commits_per_s", "rollbacks_per_s", "blks_read_per_s",
]
_PG_COUNTERS = [c for c in PG_COLUMNS if c not in ("time_utc", "numbackends", "buffer_hit_ratio") and "_per_s" not in c]
_PG_QUERY = (
    "SELECT numbackends, " + ", ".join(_PG_COUNTERS) + " FROM pg_stat_database WHERE datname = current_database()"
)

MONGO_COLUMNS = [
    "time_utc", "uptime_s", "connections.current", "connections.available", "connections.totalCreated",
    "opcounters.insert", "opcounters.query", "opcounters.update", "opcounters.delete", "opcounters.getmore",
    "opcounters.command", "ops_per_s", "network.bytesIn", "network.bytesOut", "network.numRequests",
    "mem.resident_mb", "wiredTiger.cache.bytes_in_cache", "wiredTiger.cache.max_bytes",
    "wiredTiger.cache.pages_read_into_cache", "wiredTiger.cache.pages_requested", "cache_hit_ratio",
]
_MONGO_PATHS = {
    "uptime_s": ("uptime",),
    "connections.current": ("connections", "current"),
    "connections.available": ("connections", "available"),
    "connections.totalCreated": ("connections", "totalCreated"),
    "opcounters.insert": ("opcounters", "insert"),
    "opcounters.query": ("opcounters", "query"),
    "opcounters.update": ("opcounters", "update"),
    "opcounters.delete": ("opcounters", "delete"),
    "opcounters.getmore": ("opcounters", "getmore"),
    "opcounters.command": ("opcounters", "command"),
    "network.bytesIn": ("network", "bytesIn"),
    "network.bytesOut": ("network", "bytesOut"),
    "network.numRequests": ("network", "numRequests"),
    "mem.resident_mb": ("mem", "resident"),
    "wiredTiger.cache.bytes_in_cache": ("wiredTiger", "cache", "bytes currently in the cache"),
    "wiredTiger.cache.max_bytes": ("wiredTiger", "cache", "maximum bytes configured"),
    "wiredTiger.cache.pages_read_into_cache": ("wiredTiger", "cache", "pages read into cache"),
    "wiredTiger.cache.pages_requested": ("wiredTiger", "cache", "pages requested from the cache"),
}
_OPCOUNTERS = [c for c in MONGO_COLUMNS if c.startswith("opcounters.")]


class _Sampler:
    """A greenlet that reads the server's counters every ``interval_s`` and appends a CSV row."""

    filename: ClassVar[str] = ""
    columns: ClassVar[list[str]] = []
    source: ClassVar[str] = ""

    def __init__(
        self,
        target: Target | str,
        run_dir: str | Path,
        interval_s: float = 1.0,
        *,
        events: Callable[[dict], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        # the run's own target (a URI is opened here): its options, TLS and credentials, and DSQL's IAM token
        self.target = open_target(target) if isinstance(target, str) else target
        self.run_dir = Path(run_dir)
        self.interval_s = float(interval_s)
        self.clock = clock
        self.events = events or (lambda event: append_event(self.run_dir, event, clock))
        self.path = self.run_dir / METRICS / self.filename
        self.samples = 0
        self.errors = 0
        self._conn: Any = None
        self._prev: tuple[float, dict] | None = None
        self._out = CsvAppender(self.path, self.columns)
        self._greenlet: Any = None
        self._down = False

    # -- what a subclass provides ------------------------------------------------------------------

    def _connect(self) -> Any:
        raise NotImplementedError

    def _read(self, conn: Any) -> dict:
        raise NotImplementedError

    def _derive(self, raw: dict, prev: dict | None, dt: float | None) -> dict:
        raise NotImplementedError

    def _close(self, conn: Any) -> None:
        raise NotImplementedError

    # -- the loop ---------------------------------------------------------------------------------

    def sample_once(self) -> dict | None:
        """Take one sample and append its row; returns the row, or ``None`` when the server is unreachable."""
        self._out.write([])  # the header, before the first sample
        try:
            if self._conn is None:
                self._conn = self._connect()
            raw = self._read(self._conn)
        except Exception as exc:  # noqa: BLE001 - a sampler never stops the run
            self._lost(exc)
            return None
        now = self.clock()
        if self._down:
            log.info("%s reconnected", self.source)
            self._down = False
        prev_raw, dt = (self._prev[1], now - self._prev[0]) if self._prev else (None, None)
        row = {"time_utc": format_utc(now), **raw, **self._derive(raw, prev_raw, dt)}
        self._prev = (now, raw)
        self._out.write([{k: _cell(v) for k, v in row.items()}])
        self.samples += 1
        return row

    def _lost(self, exc: BaseException) -> None:
        self.errors += 1
        self._prev = None
        if self._conn is not None:
            with contextlib.suppress(Exception):  # the connection is gone anyway
                self._close(self._conn)
            self._conn = None
        if not self._down:
            self._down = True
            message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            log.warning("%s lost its connection: %s", self.source, message)
            try:
                self.events({"time_utc": format_utc(self.clock()), "kind": "error", "source": self.source,
                             "message": message})
            except Exception:
                log.exception("could not record the sampler error event")

    def _loop(self) -> None:
        import gevent

        next_t = math.ceil(self.clock() / self.interval_s) * self.interval_s
        while True:
            gevent.sleep(max(0.0, next_t - self.clock()))
            self.sample_once()
            next_t += self.interval_s
            if next_t <= self.clock():  # fell behind: skip the missed ticks rather than burst
                next_t = math.ceil(self.clock() / self.interval_s) * self.interval_s

    def start(self) -> _Sampler:
        """Start sampling in a greenlet."""
        import gevent

        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)
        return self

    def stop(self) -> None:
        """Stop sampling and close the connection and the file."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._close(self._conn)
            self._conn = None
        self._out.close()


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, float):
        return round(value, 4)
    return value


def _delta(raw: dict, prev: dict | None, key: str) -> float | None:
    if prev is None or raw.get(key) is None or prev.get(key) is None:
        return None
    change = float(raw[key]) - float(prev[key])
    return None if change < 0 else change  # counters went backwards: a reset or a restart


def _ratio_pct(good: float | None, total: float | None) -> float | None:
    if good is None or total is None or total <= 0:
        return None
    return 100.0 * good / total


class PostgresSampler(_Sampler):
    """Samples ``pg_stat_database`` for the connected database once a second.

    The buffer hit ratio comes from the deltas of ``blks_hit`` and ``blks_read``, so it says what
    happened in the last second, not since the statistics were last reset: after a restart it
    falls (every block is read from the OS) and climbs back as shared buffers warm.
    """

    filename = PG_STAT_DATABASE
    columns = PG_COLUMNS
    source = "pg_sampler"

    def _connect(self) -> Any:
        # through the target's own connect: its options (connect_timeout, sslmode, statement_timeout, ...) and, on
        # DSQL, a fresh IAM token; a raw psycopg.connect on the URI had neither. Named apart from the users.
        return self.target.new_connection(application_name=f"{self.target.application_name}-sampler")

    def _read(self, conn: Any) -> dict:
        row = conn.execute(_PG_QUERY).fetchone()
        if row is None:
            raise RuntimeError("pg_stat_database has no row for the current database")
        return dict(zip(["numbackends", *_PG_COUNTERS], (None if v is None else int(v) for v in row)))

    def _derive(self, raw: dict, prev: dict | None, dt: float | None) -> dict:
        hit, read = _delta(raw, prev, "blks_hit"), _delta(raw, prev, "blks_read")
        total = None if hit is None or read is None else hit + read
        per_s = (lambda d: None if d is None or not dt else d / dt)
        return {
            "buffer_hit_ratio": _ratio_pct(hit, total),
            "commits_per_s": per_s(_delta(raw, prev, "xact_commit")),
            "rollbacks_per_s": per_s(_delta(raw, prev, "xact_rollback")),
            "blks_read_per_s": per_s(read),
        }

    def _close(self, conn: Any) -> None:
        conn.close()


class MongoSampler(_Sampler):
    """Samples ``serverStatus`` once a second: connections, opcounters and what cache figures exist."""

    filename = MONGO_SERVER_STATUS
    columns = MONGO_COLUMNS
    source = "mongo_sampler"

    def _connect(self) -> Any:
        # through the target's own client: its TLS, CA file and credentials options, as the users get them
        return self.target.new_client(
            maxPoolSize=1,
            appname="dbsurge-sampler",
            serverSelectionTimeoutMS=3000,
            connectTimeoutMS=3000,
            socketTimeoutMS=5000,
        )

    def _read(self, conn: Any) -> dict:
        status = conn.admin.command("serverStatus")
        raw: dict[str, Any] = {}
        for column, path in _MONGO_PATHS.items():
            value: Any = status
            for part in path:
                value = value.get(part) if isinstance(value, dict) else None
            raw[column] = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        return raw

    def _derive(self, raw: dict, prev: dict | None, dt: float | None) -> dict:
        deltas = [_delta(raw, prev, c) for c in _OPCOUNTERS]
        ops = None if any(d is None for d in deltas) or not dt else sum(d for d in deltas if d is not None) / dt
        read = _delta(raw, prev, "wiredTiger.cache.pages_read_into_cache")
        requested = _delta(raw, prev, "wiredTiger.cache.pages_requested")
        hits = None if read is None or requested is None else max(0.0, requested - read)
        return {"ops_per_s": ops, "cache_hit_ratio": _ratio_pct(hits, requested)}

    def _close(self, conn: Any) -> None:
        conn.close()
