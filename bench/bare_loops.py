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
- ``pymongo``: YCSB read (``find_one({"_id": key})``, all fields) with uniformly drawn keys.
- ``pymongo_gevent``: the same loop after gevent's ``monkey.patch_all()`` (what Locust does on
  import): the floor for any gevent-based client of pymongo, such as a Locust user.

    python bench/bare_loops.py psycopg --uri postgresql://... --duration 10 --products 100000
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


LOOPS = {"psycopg": loop_psycopg, "pq": loop_pq, "pq16": loop_pq16,
         "pymongo": loop_pymongo, "pymongo_gevent": loop_pymongo}


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
    p.add_argument("--connections", type=int, default=16, help="pq16: connections in flight")
    p.add_argument("--database", default="dbsurge")
    p.add_argument("--collection", default="usertable")
    p.add_argument("--repo", default=".")
    args = p.parse_args(argv)
    started = time.perf_counter()
    ops = LOOPS[args.loop](args)
    print(json.dumps({"ops": ops, "elapsed_s": time.perf_counter() - started}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
