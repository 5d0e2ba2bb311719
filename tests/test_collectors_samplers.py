"""The database-side samplers against the real embedded servers (conftest's `pg_server`, `mongo_server`)."""

from __future__ import annotations

import random
import time

import gevent
import pandas as pd
import pytest
from dbsurge.collectors.rundata import read_events, read_sampler
from dbsurge.collectors.samplers import MONGO_COLUMNS, PG_COLUMNS, MongoSampler, PostgresSampler

TABLE = "dbsurge_sampler_cache"
ROWS = 12000


def wait_for(predicate, timeout_s: float = 10.0) -> None:
    """Yield to the sampler greenlet until ``predicate()`` holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        gevent.sleep(0.05)


def lookups(uri: str, seconds: float, rng: random.Random) -> None:
    """Random point reads (40 keys every 0.1 s) for ``seconds``, yielding to the sampler in between.

    Each read needs the row's heap page (``pad`` is not in the index). With ``count(*)``, PostgreSQL answered
    from the index alone once a vacuum had set the table's visibility map (autovacuum does so at its own
    moment): the ~700 heap pages were never read again, and a cold second showed 57 reads among about 650
    hits (two CI runs failed so; an earlier fix blamed the statistics' flush, which was not it).

    ``pg_stat_force_next_flush()`` hands each query's block counts to pg_stat_database at once (a backend
    otherwise does so when idle, at most once a second), so each sample counts the reads of its own second.
    """
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            keys = [rng.randint(1, ROWS) for _ in range(40)]
            conn.execute(f"SELECT sum(length(pad)) FROM {TABLE} WHERE id = ANY(%s)", (keys,)).fetchone()
            conn.execute("SELECT pg_stat_force_next_flush()")
            gevent.sleep(0.1)


def test_pg_buffer_hit_ratio_falls_after_a_restart_and_climbs_as_the_cache_warms(pg_server, tmp_path):
    import psycopg

    rng = random.Random(0)
    # a database of its own: pg_stat_database counts per database, and this pytest worker's other tests share
    # the session's server
    with psycopg.connect(pg_server.uri, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TABLE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TABLE}")
    uri = pg_server.uri.rsplit("/", 1)[0] + f"/{TABLE}"
    with psycopg.connect(uri, autocommit=True) as conn:
        # ~700 pages of ~18 rows: random reads fault them in over a few seconds after a restart; no autovacuum:
        # the table's visibility map and statistics are set once, here, not at autovacuum's moment
        conn.execute(f"CREATE TABLE {TABLE} WITH (autovacuum_enabled = off) AS "
                     f"SELECT g AS id, repeat('x', 400) AS pad FROM generate_series(1, {ROWS}) g")
        conn.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id)")
        conn.execute(f"VACUUM ANALYZE {TABLE}")  # hint bits and statistics set now, not by the first cold reads
        conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    sampler = PostgresSampler(uri, tmp_path, interval_s=1.0).start()
    try:
        lookups(uri, 3.0, rng)  # warm: at least two samples, the first of which has no delta
        warm_until = time.time()
        pg_server.restart()  # shared buffers start empty
        # wait until the sampler has reconnected and taken the sample the next deltas start from
        wait_for(lambda: sampler._prev is not None and sampler._prev[0] > warm_until + 0.5)
        lookups(uri, 5.5, rng)  # cold, then warming
        wait_for(lambda: sampler._prev is not None and sampler._prev[0] > time.time() - 0.3)
    finally:
        sampler.stop()
        with psycopg.connect(pg_server.uri, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {TABLE} WITH (FORCE)")
    frame = read_sampler(tmp_path, "pg_stat_database.csv")
    assert list(pd.read_csv(tmp_path / "metrics" / "pg_stat_database.csv", nrows=0).columns) == PG_COLUMNS
    stamp = pd.Timestamp(warm_until, unit="s", tz="UTC")
    before = frame[frame["time_utc"] <= stamp]["buffer_hit_ratio"].dropna()
    after = frame[frame["time_utc"] > stamp]["buffer_hit_ratio"].dropna()
    table = frame[["time_utc", "blks_read_per_s", "buffer_hit_ratio"]].to_string()
    assert len(before) >= 1 and before.iloc[-1] > 95, table
    assert len(after) >= 4, table
    assert after.min() < 85, table  # after the restart the reads come from the OS, not shared buffers
    assert after.idxmin() < after.index[-1] and after.iloc[-1] > after.min() + 8, table  # and then it climbs back
    assert frame["numbackends"].min() >= 1 and frame["xact_commit"].is_monotonic_increasing
    # the lost connection was reported once, and the sampler reconnected by itself
    errors = [e for e in read_events(tmp_path) if e["kind"] == "error"]
    assert [e["source"] for e in errors] == ["pg_sampler"]


def test_mongo_sampler_reads_server_status(mongo_server, tmp_path):
    import pymongo

    sampler = MongoSampler(mongo_server.uri, tmp_path, interval_s=0.25).start()
    client = pymongo.MongoClient(mongo_server.uri, serverSelectionTimeoutMS=5000)
    try:
        collection = client.dbsurge_sampler.items
        for i in range(6):
            collection.insert_many([{"i": i, "k": k} for k in range(20)])
            collection.find_one({"i": i})
            gevent.sleep(0.15)
        wait_for(lambda: sampler.samples >= 4)
    finally:
        sampler.stop()
        client.drop_database("dbsurge_sampler")
        client.close()
    path = tmp_path / "metrics" / "mongo_server_status.csv"
    assert list(pd.read_csv(path, nrows=0).columns) == MONGO_COLUMNS
    frame = read_sampler(tmp_path, "mongo_server_status.csv")
    assert frame["connections.current"].min() >= 1
    assert frame["opcounters.insert"].iloc[-1] > frame["opcounters.insert"].iloc[0]
    assert frame["ops_per_s"].iloc[1:].notna().all() and frame["ops_per_s"].max() > 0
    # secantusdb reports no WiredTiger section: its cache columns stay blank (a real mongod fills them)
    assert frame["wiredTiger.cache.bytes_in_cache"].isna().all() and frame["cache_hit_ratio"].isna().all()


def test_a_sampler_that_cannot_connect_reports_once_and_keeps_trying(tmp_path):
    sampler = PostgresSampler("postgresql://postgres@127.0.0.1:9/postgres", tmp_path, interval_s=0.05)
    assert sampler.sample_once() is None
    assert sampler.sample_once() is None
    sampler.stop()
    assert sampler.errors == 2
    events = read_events(tmp_path)
    assert len(events) == 1 and events[0]["kind"] == "error" and events[0]["source"] == "pg_sampler"
    assert (tmp_path / "metrics" / "pg_stat_database.csv").read_text().strip() == ",".join(PG_COLUMNS)


def test_hit_ratio_comes_from_deltas_and_is_blank_without_traffic(tmp_path):
    sampler = PostgresSampler("postgresql://unused", tmp_path)
    prev = {"blks_hit": 100, "blks_read": 50, "xact_commit": 10, "xact_rollback": 0}
    now = {"blks_hit": 190, "blks_read": 60, "xact_commit": 30, "xact_rollback": 1}
    derived = sampler._derive(now, prev, 2.0)
    assert derived["buffer_hit_ratio"] == pytest.approx(90.0)
    assert derived["commits_per_s"] == 10 and derived["rollbacks_per_s"] == 0.5 and derived["blks_read_per_s"] == 5
    assert sampler._derive(prev, prev, 1.0)["buffer_hit_ratio"] is None  # no reads and no hits
    assert sampler._derive(prev, now, 1.0)["buffer_hit_ratio"] is None  # counters went back: a reset
    assert sampler._derive(now, None, None)["buffer_hit_ratio"] is None  # the first sample


def test_samples_are_appended_and_flushed_row_by_row(tmp_path):
    class Counting(PostgresSampler):
        def _connect(self):
            return object()

        def _read(self, conn):
            self.n = getattr(self, "n", 0) + 1
            return {"numbackends": 3, "xact_commit": self.n, "blks_hit": 10 * self.n, "blks_read": self.n}

        def _close(self, conn):
            pass

    clock = iter([100.0, 101.0, 102.0])
    sampler = Counting("postgresql://unused", tmp_path, clock=lambda: next(clock))
    sampler.sample_once()
    sampler.sample_once()
    lines = (tmp_path / "metrics" / "pg_stat_database.csv").read_text().splitlines()
    assert len(lines) == 3  # header and two rows on disk before stop()
    assert lines[2].startswith("1970-01-01T00:01:41.000Z,3,2,")
    row = dict(zip(PG_COLUMNS, lines[2].split(",")))
    assert row["buffer_hit_ratio"] == str(round(100 * 10 / 11, 4)) and row["commits_per_s"] == "1.0"
    sampler.stop()


def test_the_postgres_sampler_connects_through_the_targets_own_connect(pg_server, tmp_path):
    """The sampler opened its own psycopg.connect on the raw URI: none of the target's options, and on DSQL no IAM
    token (the URI holds no password). It connects through PostgresTarget's connect now, named apart from the
    users: the target's application_name with ``-sampler``, its connect_timeout and statement_timeout."""
    import psycopg

    from dbsurge.targets import open_target

    target = open_target(pg_server.uri, {"application_name": "shop-bench", "connect_timeout": "7",
                                         "statement_timeout": "4s"})
    sampler = PostgresSampler(target, tmp_path, interval_s=1.0)
    try:
        assert sampler.sample_once() is not None
        assert sampler._conn.info.get_parameters()["connect_timeout"] == "7"
        with psycopg.connect(pg_server.uri, autocommit=True) as conn:
            seen = conn.execute("select application_name from pg_stat_activity where pid = %s",
                                (sampler._conn.info.backend_pid,)).fetchone()
        assert seen == ("shop-bench-sampler",)
        assert sampler._conn.execute("show statement_timeout").fetchone() == ("4s",)
    finally:
        sampler.stop()
