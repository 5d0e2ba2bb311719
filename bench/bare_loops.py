"""Bare driver loops: one connection, one operation after another, no framework.

The floor a generator's per-operation CPU is measured against. Each loop does the same operation
as the dbsurge workload it stands beside (the same SQL or query, the same keys), runs for
``--duration`` seconds and prints one JSON line: ``{"ops": N, "elapsed_s": T}``.

- ``psycopg``: dbsurge's product lookup through psycopg 3's ``Connection.execute`` (prepared).
- ``pq``: the same query through psycopg's low-level ``psycopg.pq`` interface (libpq directly:
  ``send_query_prepared``, wait for the socket, ``get_result``; binary parameters), the floor
  for any psycopg-based client.
- ``pq16``: the same libpq calls on 16 connections from one thread, multiplexed with ``epoll``
  (as pgbench multiplexes its connections): the floor for a client that keeps 16 lookups in flight,
  as dbsurge's 16 users do. A one-connection loop sleeps in every round trip and pays a wake-up per
  operation, which a 16-user generator mostly does not, so its CPU per operation is no floor for one.
- ``pq16_gevent``: the same closed loop on dbsurge's stack: one gevent greenlet per connection, each
  sending its lookup and waiting for the answer through gevent's loop (libev) instead of one epoll
  loop in plain Python. What dbsurge's 16 users cost beyond it is dbsurge's own; what it costs beyond
  ``pq16`` is the stack's (greenlet switches, the hub).
- ``pq16_open``: the open model on the same stack as dbsurge's users, with nothing of dbsurge: 16
  connections, one gevent greenlet each, arrivals due every ``1 / --rate`` seconds; a free greenlet
  takes the next arrival, sleeps until it is due on a timerfd of its own (watched by gevent's loop,
  as dbsurge's pacer waits), sends the lookup and waits for the answer through the loop. It prints
  the schedule lag's p99 (how late each lookup started): the ceiling of this loop, found by the
  same search as dbsurge's, is what gevent + ``psycopg.pq`` can pace in one Python process, the
  floor for dbsurge's open-model ceiling (bench/rate_search.py).
- ``pymongo``: YCSB read (``find_one({"_id": key})``, all fields) with uniformly drawn keys.
- ``pymongo_gevent``: the same loop after gevent's ``monkey.patch_all()`` (what Locust does on
  import): the floor for any gevent-based client of pymongo, such as a Locust user.
- ``cql_gevent``: YCSB workload A on a CQL server (Cassandra, ScyllaDB) at a fixed rate, with
  nothing of dbsurge: gevent's ``monkey.patch_all()`` as Locust does, one scylla-driver ``Session``
  on the driver's asyncore reactor (the one dbsurge's CQL target picks under gevent: the driver's
  libev reactor would block gevent's hub), token-aware routing, the read and the update prepared
  once with ``--consistency``. ``--connections`` greenlets share the session; a free greenlet takes
  the next arrival, due every ``1 / --rate`` seconds, sleeps until it is due and runs it: a read of
  every field (``.one()``) or an update of one random field of 100 characters, half and half, on
  uniformly drawn keys, as dbsurge's ycsb workload does with its defaults. The floor for dbsurge's
  client CPU per operation on CQL (bench/clients.py ``dbsurge_ycsb_cql``).

    python bench/bare_loops.py psycopg --uri postgresql://... --duration 10 --products 100000
    python bench/bare_loops.py pq16_open --rate 20000 --uri postgresql://... --duration 10
    python bench/bare_loops.py cql_gevent --rate 500 --uri cql://127.0.0.1:9042 --duration 10 --records 10000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import select
import sys
import time
import uuid

LOOKUP_SQL = "select id, sku, name, price, stock from products where id = %s"
LOOKUP_SQL_PQ = b"select id, sku, name, price, stock from products where id = $1"
UUID_OID = 2950
#: The consistency levels the CQL loop takes (the driver's names; dbsurge's CQL target takes the same).
CQL_CONSISTENCY = ("ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE")


def product_id(seed: int, index: int) -> uuid.UUID:
    digest = hashlib.blake2b(f"dbsurge-orders:{seed}:{index}".encode(), digest_size=20).digest()
    return uuid.UUID(bytes=digest[:16], version=4)


def loop_psycopg(args) -> int:
    import psycopg

    conn = psycopg.connect(args.uri, autocommit=True)
    draw, products, seed = random.random, args.products, args.seed
    deadline = time.perf_counter() + args.duration
    n = 0
    while time.perf_counter() < deadline:
        row = conn.execute(LOOKUP_SQL, (product_id(seed, int(draw() * products)),), prepare=True).fetchone()
        if row is None:
            raise SystemExit("product not found: is the orders workload loaded?")
        n += 1
    conn.close()
    return n


def _prepared_pq(uri: str):
    """A connection with the lookup prepared, its libpq handle switched to non-blocking."""
    import psycopg
    from psycopg import pq

    conn = psycopg.connect(uri, autocommit=True)
    pgconn = conn.pgconn
    res = pgconn.prepare(b"lookup", LOOKUP_SQL_PQ, [UUID_OID])
    if res.status != pq.ExecStatus.COMMAND_OK:
        raise SystemExit(res.error_message.decode())
    pgconn.nonblocking = 1
    return conn, pgconn


def loop_pq(args) -> int:
    from psycopg import pq

    conn, pgconn = _prepared_pq(args.uri)
    sock = pgconn.socket
    draw, products, seed = random.random, args.products, args.seed
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    deadline = time.perf_counter() + args.duration
    n = 0
    while time.perf_counter() < deadline:
        pid = product_id(seed, int(draw() * products))
        pgconn.send_query_prepared(b"lookup", [pid.bytes], param_formats=[1], result_format=0)
        while pgconn.flush():
            select.select([], [sock], [])
        rows = None
        while True:
            pgconn.consume_input()
            if pgconn.is_busy():
                poller.poll()
                continue
            r = pgconn.get_result()
            if r is None:
                break
            if r.status != pq.ExecStatus.TUPLES_OK:
                raise SystemExit(r.error_message.decode())
            rows = [tuple(r.get_value(0, c) for c in range(r.nfields))] if r.ntuples else []
        if not rows:
            raise SystemExit("product not found: is the orders workload loaded?")
        n += 1
    conn.close()
    return n


def loop_pq16(args) -> int:
    from psycopg import pq

    conns, by_fd = [], {}
    poller = select.epoll()
    for _ in range(args.connections):
        conn, pgconn = _prepared_pq(args.uri)
        conns.append(conn)
        by_fd[pgconn.socket] = [pgconn, None]
        poller.register(pgconn.socket, select.EPOLLIN)
    draw, products, seed = random.random, args.products, args.seed

    def send(pgconn) -> None:
        pid = product_id(seed, int(draw() * products))
        pgconn.send_query_prepared(b"lookup", [pid.bytes], param_formats=[1], result_format=0)
        while pgconn.flush():
            select.select([], [pgconn.socket], [])

    for pgconn, _ in by_fd.values():
        send(pgconn)
    deadline = time.perf_counter() + args.duration
    n = 0
    while time.perf_counter() < deadline:
        for fd, _ in poller.poll():
            state = by_fd[fd]
            pgconn = state[0]
            pgconn.consume_input()
            while not pgconn.is_busy():
                r = pgconn.get_result()
                if r is None:  # this lookup's answer is complete: count it, send the next one
                    if not state[1]:
                        raise SystemExit("product not found: is the orders workload loaded?")
                    state[1] = None
                    n += 1
                    send(pgconn)
                    break
                if r.status != pq.ExecStatus.TUPLES_OK:
                    raise SystemExit(r.error_message.decode())
                state[1] = [tuple(r.get_value(0, c) for c in range(r.nfields))] if r.ntuples else []
    for conn in conns:
        conn.close()
    return n


def _lookup_through_the_loop(hub, readable, pgconn, pid: uuid.UUID) -> None:
    """One lookup on a greenlet's own connection, waiting for its socket through gevent's loop."""
    pgconn.send_query_prepared(b"lookup", [pid.bytes], param_formats=[1], result_format=0)
    while pgconn.flush():
        hub.wait(hub.loop.io(pgconn.socket, 2))
    found = False
    while True:
        hub.wait(readable)
        pgconn.consume_input()
        if not pgconn.is_busy():
            break
    while (r := pgconn.get_result()) is not None:
        found = found or r.ntuples > 0
    if not found:
        raise SystemExit("product not found: is the orders workload loaded?")


def loop_pq16_gevent(args) -> int:
    """pq16's closed loop on dbsurge's stack: one gevent greenlet per connection, lookup after lookup."""
    import gevent
    from gevent import get_hub

    conns = [_prepared_pq(args.uri) for _ in range(args.connections)]
    draw, products, seed = random.random, args.products, args.seed
    deadline = time.perf_counter() + args.duration
    done = [0]

    def user(pgconn) -> None:
        hub = get_hub()
        readable = hub.loop.io(pgconn.socket, 1)
        while time.perf_counter() < deadline:
            _lookup_through_the_loop(hub, readable, pgconn, product_id(seed, int(draw() * products)))
            done[0] += 1

    gevent.joinall([gevent.spawn(user, pgconn) for _, pgconn in conns], raise_error=True)
    for conn, _ in conns:
        conn.close()
    return done[0]


def loop_pq16_open(args) -> dict:
    """The open model on gevent + libpq with nothing else (see the module's docstring): ops, lag p99, CPU."""
    import ctypes
    import os
    import resource

    import gevent
    from gevent import get_hub

    ns = 1_000_000_000
    libc = ctypes.CDLL(None, use_errno=True)

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    class Itimerspec(ctypes.Structure):
        _fields_ = [("it_interval", Timespec), ("it_value", Timespec)]

    conns = [_prepared_pq(args.uri) for _ in range(args.connections)]
    draw, products, seed = random.random, args.products, args.seed
    interval_ns = ns / args.rate
    start_ns = time.perf_counter_ns() + 200_000_000
    end_ns = start_ns + int(args.duration * ns)
    lags: list[int] = []
    state = {"next": 0, "done": 0}

    def user(pgconn) -> None:
        hub = get_hub()
        readable = hub.loop.io(pgconn.socket, 1)
        timer_fd = libc.timerfd_create(1, os.O_NONBLOCK | os.O_CLOEXEC)  # CLOCK_MONOTONIC: perf_counter's clock
        alarm = hub.loop.io(timer_fd, 1)
        spec = Itimerspec()
        spec_ref = ctypes.byref(spec)
        clock = time.perf_counter_ns
        while True:
            k = state["next"]
            state["next"] = k + 1
            due = start_ns + int(k * interval_ns)
            if due >= end_ns:
                os.close(timer_fd)
                return
            if due - clock() > 10_000:  # further than a sleep costs: on the timerfd, through the loop
                spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(due, ns)
                libc.timerfd_settime(timer_fd, 1, spec_ref, None)  # TFD_TIMER_ABSTIME
                hub.wait(alarm)
                try:
                    os.read(timer_fd, 8)
                except BlockingIOError:
                    pass
            while clock() < due:
                pass
            lags.append(clock() - due)
            _lookup_through_the_loop(hub, readable, pgconn, product_id(seed, int(draw() * products)))
            state["done"] += 1

    before = resource.getrusage(resource.RUSAGE_SELF)
    gevent.joinall([gevent.spawn(user, pgconn) for _, pgconn in conns], raise_error=True)
    after = resource.getrusage(resource.RUSAGE_SELF)
    for conn, _ in conns:
        conn.close()
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] / 1e6 if lags else float("nan")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"ops": state["done"], "lag_p99_ms": p99, "achieved_tps": state["done"] / args.duration,
            "cpu_s": cpu_s}


def loop_pymongo(args) -> int:
    from pymongo import MongoClient

    sys.path.insert(0, args.repo)
    from dbsurge.distributions import fnvhash64

    client = MongoClient(args.uri, maxPoolSize=2)
    collection = client[args.database][args.collection]
    draw, records = random.random, args.records
    deadline = time.perf_counter() + args.duration
    n = 0
    while time.perf_counter() < deadline:
        key = f"user{fnvhash64(int(draw() * records))}"
        if collection.find_one({"_id": key}) is None:
            raise SystemExit(f"no record {key}: is the ycsb workload loaded?")
        n += 1
    client.close()
    return n


def _cql_session(uri: str, consistency: str):
    """A driver cluster and session as dbsurge's CQL target makes them under gevent (its reactor and routing)."""
    from urllib.parse import urlsplit

    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.io.asyncorereactor import AsyncoreConnection
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    parts = urlsplit(uri)
    level = getattr(ConsistencyLevel, consistency.upper())
    profile = ExecutionProfile(load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
                               consistency_level=level)
    cluster = Cluster([parts.hostname or "127.0.0.1"], port=parts.port or 9042, connection_class=AsyncoreConnection,
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    return cluster, cluster.connect(), level


def loop_cql_gevent(args) -> dict:
    """YCSB-A on one scylla-driver session under gevent at a fixed rate (see the module's docstring)."""
    import resource

    import gevent

    sys.path.insert(0, args.repo)
    from dbsurge.distributions import fnvhash64

    cluster, session, level = _cql_session(args.uri, args.consistency)
    table = f"{args.keyspace}.{args.collection}"
    fields = [f"field{i}" for i in range(10)]
    read = session.prepare(f"SELECT y_id, {', '.join(fields)} FROM {table} WHERE y_id = ?")
    updates = [session.prepare(f"UPDATE {table} SET {field} = ? WHERE y_id = ?") for field in fields]
    for statement in (read, *updates):
        statement.consistency_level = level
    rng = random.Random(args.seed)
    draw, records, execute = rng.random, args.records, session.execute
    interval = 1.0 / args.rate
    start = time.perf_counter() + 0.2
    total = int(args.duration * args.rate)
    lags: list[float] = []
    state = {"next": 0, "done": 0}

    def user() -> None:
        clock = time.perf_counter
        while (k := state["next"]) < total:
            state["next"] = k + 1
            due = start + k * interval
            wait = due - clock()
            if wait > 0:
                gevent.sleep(wait)
            lags.append(clock() - due)
            key = f"user{fnvhash64(int(draw() * records))}"
            if draw() < 0.5:
                if execute(read, (key,)).one() is None:
                    raise SystemExit(f"no record {key}: is the ycsb workload loaded on {table}?")
            else:
                execute(updates[int(draw() * len(updates))], (rng.randbytes(50).hex(), key))
            state["done"] += 1

    before = resource.getrusage(resource.RUSAGE_SELF)
    gevent.joinall([gevent.spawn(user) for _ in range(args.connections)], raise_error=True)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cluster.shutdown()
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1e3 if lags else float("nan")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"ops": state["done"], "lag_p99_ms": p99, "achieved_tps": state["done"] / args.duration, "cpu_s": cpu_s}


LOOPS = {"psycopg": loop_psycopg, "pq": loop_pq, "pq16": loop_pq16, "pq16_gevent": loop_pq16_gevent,
         "pq16_open": loop_pq16_open,
         "pymongo": loop_pymongo, "pymongo_gevent": loop_pymongo, "cql_gevent": loop_cql_gevent}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0].endswith("_gevent"):
        from gevent import monkey

        monkey.patch_all()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("loop", choices=sorted(LOOPS))
    p.add_argument("--uri", required=True)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--products", type=int, default=100_000)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--connections", type=int, default=16,
                   help="pq16, pq16_gevent, pq16_open: connections; cql_gevent: greenlets sharing the session")
    p.add_argument("--rate", type=float, default=1000.0, help="pq16_open, cql_gevent: arrivals per second")
    p.add_argument("--consistency", default="ONE", type=str.upper, choices=CQL_CONSISTENCY,
                   help="cql_gevent: the consistency level (dbsurge's default ONE)")
    p.add_argument("--keyspace", default="ycsb", help="cql_gevent: the ycsb workload's keyspace")
    p.add_argument("--database", default="dbsurge")
    p.add_argument("--collection", default="usertable")
    p.add_argument("--repo", default=".")
    args = p.parse_args(argv)
    started = time.perf_counter()
    out = LOOPS[args.loop](args)
    if not isinstance(out, dict):
        out = {"ops": out}
    print(json.dumps({**out, "elapsed_s": time.perf_counter() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
