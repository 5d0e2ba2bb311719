"""The clients of the side-by-side table: how to start each one and how to read its operation count.

Every client runs as a child process (see `measure.run_measured`) with the same concurrency,
against the same servers, for the same duration. The operation count comes from the client's own
report: pgbench's "transactions actually processed", dbsurge's ``summary.csv`` ALL row, Locust's
``--csv`` stats, the bare loops' JSON line.

The CQL pair (kind ``cql``) is the exception to "the same concurrency": both run YCSB workload A at the
same fixed arrival rate (``Env.cql_rate``) with the same consistency, so that their CPU per operation
is compared at the same load on the server (bench/cql_pair.py runs them on their own server).
"""

from __future__ import annotations

import csv
import json
import re
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent


@dataclass
class Env:
    """What the clients need to know about the servers and the data."""

    pg_uri: str
    mongo_uri: str | None
    pgbench: Path
    pg_port: int
    products: int
    records: int
    users: int
    workdir: Path
    cql_uri: str | None = None  # the CQL pair's server (bench/cql_pair.py), None where it is not running
    cql_rate: int = 500  # the CQL pair's arrival rate, operations per second, the same for both clients
    cql_records: int = 10_000  # the ycsb records loaded on the CQL server
    cql_consistency: str = "ONE"  # dbsurge's CQL default (YCSB's cassandra binding's)


@dataclass(frozen=True)
class Client:
    """One client of the table: ``command(env, seconds, tag)`` and ``count(env, output, tag)``."""

    key: str
    label: str
    kind: str  # "postgres", "mongo" or "cql": which server it drives
    concurrency: str
    command: Callable[[Env, int, str], list[str]]
    count: Callable[[Env, str, str], int]


def _python() -> str:
    return sys.executable


def processes_args(processes: int) -> list[str]:
    """Locust's ``--processes``, on a free master port: the default 5557 may be another test's master,
    whose test our workers would then join."""
    if processes <= 1:
        return []
    from dbsurge.embedded.servers import free_port

    port = str(free_port())
    return ["--processes", str(processes), "--master-bind-port", port, "--master-port", port]


# -- pgbench -----------------------------------------------------------------------------------------


def pgbench_connection(uri: str) -> list[str]:
    """pgbench's connection arguments for a ``postgresql://user@host:port/dbname`` URI (TCP, not the socket)."""
    parts = urlsplit(uri)
    return ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432), "-U", parts.username or "postgres",
            parts.path.lstrip("/") or "postgres"]


def _pgbench_cmd(env: Env, seconds: int, tag: str) -> list[str]:
    return [str(env.pgbench), "-S", "-M", "prepared", "-c", str(env.users), "-j", "1", "-T", str(seconds), "-n",
            *pgbench_connection(env.pg_uri)]


def _pgbench_count(env: Env, output: str, tag: str) -> int:
    m = re.search(r"number of transactions actually processed: (\d+)", output)
    if not m:
        raise RuntimeError(f"pgbench printed no transaction count:\n{output[-2000:]}")
    return int(m.group(1))


# -- dbsurge -----------------------------------------------------------------------------------------


def _dbsurge_cmd(workload: str, operation: str, processes: int) -> Callable[[Env, int, str], list[str]]:
    def command(env: Env, seconds: int, tag: str) -> list[str]:
        if workload == "orders":
            target, options = env.pg_uri, [f"products={env.products}"]
        else:
            target, options = env.mongo_uri, [f"recordcount={env.records}", "requestdistribution=uniform"]
        cmd = [_python(), "-m", "dbsurge.commands.cli", "run", "--workload", workload, "--target", target,
               "--users", str(env.users), "--duration", f"{seconds}s", "--operation", operation, "--quiet",
               "--results-dir", str(env.workdir / "results"), "--run-id", tag]
        for option in options:
            cmd += ["--workload-option", option]
        return cmd + processes_args(processes)

    return command


def summary_all_row(results_dir: Path) -> dict[str, str]:
    """The ``operation=ALL`` row of a dbsurge run's summary.csv."""
    with open(results_dir / "summary.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("operation") == "ALL":
                return row
    raise RuntimeError(f"no ALL row in {results_dir / 'summary.csv'}")


def _dbsurge_count(env: Env, output: str, tag: str) -> int:
    return int(float(summary_all_row(env.workdir / "results" / tag)["count"]))


def _dbsurge_cql_cmd(env: Env, seconds: int, tag: str) -> list[str]:
    """dbsurge's YCSB-A (its default read/update half and half) at the pair's fixed rate on the CQL server."""
    if not env.cql_uri:
        raise RuntimeError("the CQL clients need a CQL server (bench/cql_pair.py starts one)")
    return [_python(), "-m", "dbsurge.commands.cli", "run", "--workload", "ycsb", "--target", env.cql_uri,
            "--shape", "constant", "--rate", str(env.cql_rate), "--duration", f"{seconds}s",
            "--workload-option", f"recordcount={env.cql_records}", "--workload-option", "requestdistribution=uniform",
            "--target-option", f"consistency={env.cql_consistency}", "--quiet",
            "--results-dir", str(env.workdir / "results"), "--run-id", tag]


def _dbsurge_ok_count(env: Env, output: str, tag: str) -> int:
    """The ALL row's successful operations; a failed one would cost differently from the bare loop's."""
    row = summary_all_row(env.workdir / "results" / tag)
    if int(float(row.get("failures") or 0)):
        raise RuntimeError(f"dbsurge run {tag} had {row['failures']} failed operations")
    return int(float(row["ok"]))


# -- plain Locust ------------------------------------------------------------------------------------


def _locust_cmd(processes: int) -> Callable[[Env, int, str], list[str]]:
    def command(env: Env, seconds: int, tag: str) -> list[str]:
        cmd = [_python(), "-m", "locust", "-f", str(BENCH_DIR / "plain_locust.py"), "--headless", "--only-summary",
               "-u", str(env.users), "-r", str(env.users), "-t", f"{seconds}s", "--host", env.pg_uri,
               "--products", str(env.products), "--csv", str(env.workdir / "locust" / tag)]
        cmd += processes_args(processes)
        (env.workdir / "locust").mkdir(parents=True, exist_ok=True)
        return cmd

    return command


def _locust_count(env: Env, output: str, tag: str) -> int:
    with open(env.workdir / "locust" / f"{tag}_stats.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Aggregated":
                if int(row["Failure Count"]):
                    raise RuntimeError(f"plain Locust had {row['Failure Count']} failures")
                return int(row["Request Count"])
    raise RuntimeError("plain Locust wrote no Aggregated row")


# -- bare driver loops -------------------------------------------------------------------------------


def _bare_cmd(loop: str) -> Callable[[Env, int, str], list[str]]:
    def command(env: Env, seconds: int, tag: str) -> list[str]:
        uri = env.mongo_uri if loop.startswith("pymongo") else env.pg_uri
        return [_python(), str(BENCH_DIR / "bare_loops.py"), loop, "--uri", uri, "--duration", str(seconds),
                "--products", str(env.products), "--records", str(env.records), "--repo", str(REPO)]

    return command


def _bare_cql_cmd(env: Env, seconds: int, tag: str) -> list[str]:
    if not env.cql_uri:
        raise RuntimeError("the CQL clients need a CQL server (bench/cql_pair.py starts one)")
    return [_python(), str(BENCH_DIR / "bare_loops.py"), "cql_gevent", "--uri", env.cql_uri, "--duration",
            str(seconds), "--rate", str(env.cql_rate), "--records", str(env.cql_records), "--consistency",
            env.cql_consistency, "--repo", str(REPO)]


def _bare_count(env: Env, output: str, tag: str) -> int:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            return int(json.loads(line)["ops"])
    raise RuntimeError(f"bare loop printed no result:\n{output[-2000:]}")


CLIENTS: dict[str, Client] = {c.key: c for c in [
    Client("pgbench", "pgbench -S -M prepared -j 1", "postgres", "16 connections", _pgbench_cmd, _pgbench_count),
    Client("dbsurge", "dbsurge product_lookup, 1 process", "postgres", "16 users",
           _dbsurge_cmd("orders", "product_lookup", 1), _dbsurge_count),
    Client("dbsurge_p2", "dbsurge product_lookup, --processes 2", "postgres", "16 users",
           _dbsurge_cmd("orders", "product_lookup", 2), _dbsurge_count),
    Client("locust", "plain Locust (docs' pattern), 1 process", "postgres", "16 users",
           _locust_cmd(1), _locust_count),
    Client("locust_p2", "plain Locust (docs' pattern), --processes 2", "postgres", "16 users",
           _locust_cmd(2), _locust_count),
    Client("bare_psycopg", "bare psycopg loop (Connection.execute)", "postgres", "1 connection",
           _bare_cmd("psycopg"), _bare_count),
    Client("bare_pq", "bare psycopg.pq loop (libpq, no type conversion)", "postgres", "1 connection",
           _bare_cmd("pq"), _bare_count),
    Client("bare_pq16", "bare psycopg.pq loop, 16 connections on one thread (epoll)", "postgres", "16 connections",
           _bare_cmd("pq16"), _bare_count),
    Client("bare_pq16_gevent", "bare psycopg.pq loop, 16 connections, a gevent greenlet each", "postgres",
           "16 connections", _bare_cmd("pq16_gevent"), _bare_count),
    Client("dbsurge_ycsb", "dbsurge YCSB read (MongoDB wire), 1 process", "mongo", "16 users",
           _dbsurge_cmd("ycsb", "read", 1), _dbsurge_count),
    Client("bare_pymongo", "bare pymongo loop (YCSB read)", "mongo", "1 connection",
           _bare_cmd("pymongo"), _bare_count),
    Client("bare_pymongo_gevent", "bare pymongo loop under gevent's monkey-patching", "mongo", "1 connection",
           _bare_cmd("pymongo_gevent"), _bare_count),
    Client("dbsurge_ycsb_cql", "dbsurge YCSB-A (CQL), 1 process, fixed rate", "cql", "open model, fixed rate",
           _dbsurge_cql_cmd, _dbsurge_ok_count),
    Client("bare_cql_gevent", "bare scylla-driver loop under gevent (YCSB-A), fixed rate", "cql",
           "16 greenlets, fixed rate", _bare_cql_cmd, _bare_count),
]}

#: The clients measured on the CQL server, apart from table 1 (bench/cql_pair.py).
CQL_CLIENTS = tuple(key for key, c in CLIENTS.items() if c.kind == "cql")


def new_tag(client: str) -> str:
    return f"{client}-{uuid.uuid4().hex[:8]}"
