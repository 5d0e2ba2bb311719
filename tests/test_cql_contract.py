"""The CQL binding against a real CQL server: Apache Cassandra 5.0 started by dbsurge itself (`embedded-cassandra`),
or the server ``DBSURGE_TEST_CQL_URI`` names (the compose ``scylla`` profile gives a ScyllaDB)::

    .venv/bin/python -m pytest -q tests/test_cql_contract.py        # Java 17 and Maven: a real Cassandra
    DBSURGE_TEST_CQL_URI=cql://127.0.0.1:9042 .venv/bin/python -m pytest -q tests/test_cql_contract.py

One server serves the whole module (the session fixture `cql_uri`, tests/conftest.py); without Java or Maven every
test here skips and says what to install, except in CI, where they fail. Serial: the runs assert delivered rates,
and one Cassandra JVM is all two cores can spare. The same driver across network-namespace hosts, with a server of
its own: tests/test_cql_hosts.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from cassandra_checks import need_java_and_jars, session_cassandra_running
from ledger_checks import ledger
from runs import dbsurge, explain, only_run_dir, read_csv, read_json, run_files

#: serial: one JVM at a time, and the runs assert rates. 900 s: the first test may fetch Cassandra's jars (once per
#: machine) and start a JVM on busy cores before its own work.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(900)]
pytest.importorskip("cassandra", reason="scylla-driver is not installed (pip install 'dbsurge[cql]')")

RECORDS = 2000
KEYSPACE = "dbsurge_contract"
EMBEDDED = not os.environ.get("DBSURGE_TEST_CQL_URI", "").strip()


@pytest.fixture(scope="module")
def target(cql_uri: str) -> str:
    """What the runs pass as --target: the name `embedded-cassandra` (resolved to the kept server), or the URI."""
    return "embedded-cassandra" if EMBEDDED else cql_uri


def _session(cql_uri: str):
    """A plain driver session on the server, to read back what the runs wrote (closed by the caller)."""
    from cassandra.cluster import Cluster

    from dbsurge.targets import open_target

    target = open_target(cql_uri)
    cluster = Cluster(["127.0.0.1"] if EMBEDDED else list(target.hosts), port=target.port)
    return cluster, cluster.connect()


def _kept_server() -> dict:
    home = Path(os.environ["DBSURGE_HOME"]) / "embedded"
    return json.loads((home / "state.json").read_text())["cassandra"]


@pytest.mark.skipif(not EMBEDDED, reason="an embedded server of its own, with PasswordAuthenticator")
def test_password_authentication_end_to_end(server_dir: Path, tmp_path: Path) -> None:
    """First in the module: its own JVM, stopped before the session's server starts (one JVM at a time)."""
    from dbsurge.embedded.servers import EmbeddedCassandra

    need_java_and_jars()
    if session_cassandra_running():
        pytest.skip("the session's Cassandra already runs: one JVM at a time (run this test first, or alone)")
    secret = "s3cret-Pw-4-dbsurge"
    server = EmbeddedCassandra(server_dir, password_auth=True, delete_on_stop=True)
    server.start()  # ready once the default superuser cassandra/cassandra answers
    try:
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import Cluster

        cluster = Cluster(["127.0.0.1"], port=server.port,
                          auth_provider=PlainTextAuthProvider("cassandra", "cassandra"))
        try:
            cluster.connect().execute(f"CREATE ROLE dbsurge_app WITH PASSWORD = '{secret}' AND LOGIN = true "
                                      "AND SUPERUSER = true")
        finally:
            cluster.shutdown()
        uri = f"cql://dbsurge_app@127.0.0.1:{server.port}"
        wrong = dbsurge("load", "--workload", "ycsb", "--target", uri, cwd=tmp_path, timeout=120,
                        env={"DBSURGE_TARGET_PASSWORD": "not-the-password"})
        assert wrong.returncode == 2 and "authentication failed" in wrong.stderr, explain(wrong)
        assert "Traceback" not in wrong.stderr and "not-the-password" not in wrong.stderr + wrong.stdout
        proc = dbsurge("run", "--workload", "ycsb", "--target", uri, "--shape", "constant", "--rate", "50",
                       "--duration", "3s", "--workload-option", "recordcount=500", "--workload-option",
                       f"keyspace={KEYSPACE}_auth", "--results-dir", str(tmp_path / "results"), cwd=tmp_path,
                       timeout=300, env={"DBSURGE_TARGET_PASSWORD": secret})
        assert proc.returncode == 0, explain(proc)
        run = only_run_dir(tmp_path / "results")
        total = ledger(run)
        assert total["planned"] == 150 and total["ok"] == 150
        assert read_json(run / "run.json")["target"]["user"] == "dbsurge_app"
        for path in [p for p in run.rglob("*") if p.is_file()]:  # the password is nowhere in the run's files
            assert secret.encode() not in path.read_bytes(), path
        assert secret not in proc.stdout + proc.stderr
    finally:
        server.stop()
    assert not server.is_running() and not server_dir.exists()


@pytest.mark.skipif(not EMBEDDED, reason="a run's own embedded server")
def test_a_runs_own_cassandra_goes_with_the_run_even_when_interrupted(tmp_path: Path) -> None:
    """Before the module's server starts (one JVM at a time): `--target embedded-cassandra` with no kept server
    starts one for the run; SIGINT mid-run ends the run, and the JVM and its directory with it."""
    if session_cassandra_running():
        pytest.skip("the module's Cassandra already runs: one JVM at a time (run this test first, or alone)")
    out, err = open(tmp_path / "stdout.txt", "w"), open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "ycsb", "--target", "embedded-cassandra",
         "--shape", "constant", "--rate", "50", "--duration", "120s", "--workload-option", "recordcount=200",
         "--results-dir", str(tmp_path / "results")], cwd=tmp_path, stdout=out, stderr=err, text=True)
    try:
        run, _ = _run_started(tmp_path, timeout=300)
        jvms = [p for p in psutil.Process(proc.pid).children(recursive=True)
                if "org.apache.cassandra.service.CassandraDaemon" in p.cmdline()]
        assert len(jvms) == 1
        jvm, data_dir = jvms[0], Path(jvms[0].cwd())
        assert (data_dir / "cassandra.log").exists()
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        code, text = _finished(proc, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code != 0 and "SIGINT" in text, text[-2000:]
    assert not jvm.is_running() or jvm.status() == psutil.STATUS_ZOMBIE
    assert not data_dir.exists()
    assert read_json(run / "run.json")["target_name"] == "embedded-cassandra"


@pytest.mark.skipif(not EMBEDDED, reason="the embedded server's own checks")
def test_embedded_cassandra_is_one_jvm_on_loopback_answering_cql(cql_uri: str, tmp_path: Path) -> None:
    from dbsurge.embedded.cassandra_jvm import CASSANDRA_VERSION

    cluster, session = _session(cql_uri)
    try:
        assert session.execute("SELECT release_version FROM system.local").one().release_version == CASSANDRA_VERSION
    finally:
        cluster.shutdown()
    kept = _kept_server()
    jvm = psutil.Process(kept["pid"])
    cmdline = jvm.cmdline()
    assert "org.apache.cassandra.service.CassandraDaemon" in cmdline and "-Xmx512m" in cmdline
    assert any(arg.startswith("-javaagent:") and "/jamm-" in arg for arg in cmdline)
    listening = {(c.laddr.ip, c.laddr.port) for c in jvm.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    # CQL and the storage port, both on loopback; no JMX port
    assert len(listening) == 2 and {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    assert ("127.0.0.1", kept["port"]) in listening
    log = Path(kept["data_dir"]) / "cassandra.log"
    assert "Startup complete" in log.read_text()
    status = dbsurge("embedded", "status", "cassandra", cwd=tmp_path, timeout=60)
    assert status.stdout.strip() == f"cassandra: running {cql_uri}", explain(status)


def test_check_and_a_bad_consistency_fail_or_pass_in_one_line(cql_uri: str, target: str, tmp_path: Path) -> None:
    from dbsurge.targets import open_target

    checked = open_target(cql_uri)
    checked.check()
    assert checked.server["release_version"] and checked.server["protocol_version"] >= 4
    older = open_target(cql_uri, {"protocol_version": "4"})  # asked for: the driver keeps to it
    older.check()
    assert older.server["protocol_version"] == 4 and older.describe()["negotiated_protocol_version"] == 4
    proc = dbsurge("load", "--workload", "ycsb", "--target", target, "--target-option", "consistency=MOST",
                   cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "consistency" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("batch", "table"), [("1", "ut_contract_single"), ("20", "ut_contract_batch")])
def test_ycsb_load_with_and_without_unlogged_batches(cql_uri: str, target: str, tmp_path: Path, batch: str,
                                                     table: str) -> None:
    proc = dbsurge("scenario", "ycsb-load", "--target", target, "--records", str(RECORDS), "--clients", "4",
                   "--batch-size", batch, "--drop", "--workload-option", f"table={table}",
                   "--workload-option", f"keyspace={KEYSPACE}", "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, explain(proc)
    row = read_csv(only_run_dir(tmp_path / "results") / "ycsb-load.csv")[0]
    assert row["inserted"] == str(RECORDS) and row["failures"] == "0", row
    assert row["calls"] == str(RECORDS // int(batch))
    cluster, session = _session(cql_uri)
    try:  # every record is in the server, with YCSB's ten fields
        assert session.execute(f"SELECT count(*) FROM {KEYSPACE}.{table}").one()[0] == RECORDS
        record = session.execute(f"SELECT * FROM {KEYSPACE}.{table} LIMIT 1").one()
        assert len(record) == 11 and all(len(getattr(record, f"field{i}")) == 100 for i in range(10))
    finally:
        cluster.shutdown()


def test_a_batch_over_the_servers_threshold_is_one_line(target: str, tmp_path: Path) -> None:
    # Cassandra refuses a batch over batch_size_fail_threshold (50 KiB by default): 100 YCSB records are ~100 KiB
    proc = dbsurge("load", "--workload", "ycsb", "--target", target, "--workload-option", "recordcount=200",
                   "--workload-option", "batchsize=100", "--workload-option", f"keyspace={KEYSPACE}",
                   "--workload-option", "table=ut_too_big", "--quiet", cwd=tmp_path, timeout=120)
    if "Batch too large" not in proc.stderr and proc.returncode == 0:
        pytest.skip("this server takes 100 KiB batches (ScyllaDB's threshold is 1 MiB)")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, explain(proc)
    assert "batch_size_fail_threshold" in proc.stderr and "lower --workload-option batchsize" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.fixture(scope="module")
def loaded(target: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The module's keyspace loaded once (RECORDS rows) for the runs that read and update it: a second load of the
    same rows only finds them in place, so each test need not start a process to find that out."""
    _load(target, tmp_path_factory.mktemp("load"), KEYSPACE)


def _load(target: str, tmp_path: Path, keyspace: str, *extra: str, records: int = RECORDS) -> None:
    load = dbsurge("load", "--workload", "ycsb", "--target", target, "--workload-option", f"recordcount={records}",
                   "--workload-option", f"keyspace={keyspace}", "--workload-option", "batchsize=20", *extra,
                   "--quiet", cwd=tmp_path, timeout=600)
    assert load.returncode == 0, explain(load)


@pytest.mark.parametrize(("consistency", "seconds"), [("ONE", 5), ("QUORUM", 5)])
@pytest.mark.usefixtures("loaded")
def test_ycsb_a_run_at_a_constant_rate(cql_uri: str, target: str, tmp_path: Path, consistency: str,
                                       seconds: int) -> None:
    started_us = int(time.time() * 1e6)
    proc = dbsurge("run", "--workload", "ycsb", "--target", target, "--shape", "constant", "--rate", "200",
                   "--duration", f"{seconds}s", "--workload-option", f"recordcount={RECORDS}",
                   "--workload-option", f"keyspace={KEYSPACE}", "--target-option", f"consistency={consistency}",
                   "--results-dir", str(tmp_path / "results"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 200 * seconds and total["ok"] == 200 * seconds
    meta = read_json(run / "run.json")
    described = meta["target"]
    assert described["kind"] == "cql" and described["consistency"] == consistency
    assert described["routing"].startswith("token-aware")
    if EMBEDDED:  # Cassandra advertises no SCYLLA_* extensions: no shard awareness; protocol v5 negotiated
        assert meta["target_name"] == "embedded-cassandra"
        assert described["shard_aware"] is False and described["negotiated_protocol_version"] == 5
        assert described["server_release"].startswith("5.0.")
    updates = next(r for r in read_csv(run / "summary.csv") if r["operation"] == "update")
    cluster, session = _session(cql_uri)
    try:  # the run's updates are in the server: fields written since the run started, at most one per update
        fields = [f"field{i}" for i in range(10)]
        written = sum(1 for row in session.execute(
            f"SELECT {', '.join(f'writetime({f})' for f in fields)} FROM {KEYSPACE}.usertable")
            for stamp in row if stamp is not None and stamp >= started_us)
        assert 0.3 * int(updates["ok"]) <= written <= int(updates["ok"]), (written, updates["ok"])
    finally:
        cluster.shutdown()


def test_the_consistency_scenario_on_a_keyspace_not_loaded_yet(target: str, tmp_path: Path) -> None:
    """Study 002's command: one run per level after the run's own load; the first run's look for its data on a
    table that does not exist yet is quiet (the driver logged a failed PREPARE there as an ERROR)."""
    proc = dbsurge("scenario", "ycsb-run", "--target", target, "--quick", "--consistency", "ONE,QUORUM",
                   "--workload-option", "keyspace=dbsurge_scenario", "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, explain(proc)
    assert "ERROR" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr, explain(proc)
    rows = read_csv(only_run_dir(tmp_path / "results") / "ycsb-run.csv")
    assert [r["consistency"] for r in rows] == ["ONE", "QUORUM"]
    assert all(r["failures"] == "0" and int(r["operations"]) > 0 for r in rows), rows


@pytest.mark.skipif(not EMBEDDED, reason="needs a single-node server: QUORUM of 3 replicas cannot be met there")
def test_quorum_on_one_node_with_replication_factor_3_is_unavailable_and_booked(target: str, tmp_path: Path) -> None:
    # ONE: one replica is enough for the load; 200 records: every read and update fails alike, whatever the key
    _load(target, tmp_path, "dbsurge_rf3", "--workload-option", "replicationfactor=3", records=200)
    proc = dbsurge("run", "--workload", "ycsb", "--target", target, "--shape", "constant", "--rate", "50",
                   "--duration", "3s", "--workload-option", "recordcount=200", "--workload-option",
                   "keyspace=dbsurge_rf3", "--target-option", "consistency=QUORUM", "--no-load",
                   "--results-dir", str(tmp_path / "results"), cwd=tmp_path, timeout=300)
    # every arrival accounted for, each failed: failures with no --check exit 1 (Locust's --exit-code-on-error)
    assert "Traceback" not in proc.stderr and proc.returncode == 1, explain(proc)
    assert "FAILED: every arrival accounted for, 150 operations failed" in proc.stdout, explain(proc)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 150 and total["failures"] == 150 and total["ok"] == 0
    assert total["failed_server"] == 150 and "server:Unavailable" in total["failed_detail"], total
    assert read_json(run / "run.json")["results"]["failed_by_kind"] == {"server:Unavailable": 150}


@pytest.mark.usefixtures("loaded")
def test_two_processes_each_with_its_own_driver_session(target: str, tmp_path: Path) -> None:
    proc = dbsurge("run", "--workload", "ycsb", "--target", target, "--shape", "constant", "--rate", "200",
                   "--duration", "5s", "--processes", "2", "--workload-option", f"recordcount={RECORDS}",
                   "--workload-option", f"keyspace={KEYSPACE}", "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 1000 and total["ok"] == 1000
    per_worker = read_json(run / "run.json")["results"]["operations_per_worker"]
    assert len(per_worker) == 2 and all(n > 0 for n in per_worker.values()), per_worker


def _in_keyspace(cql_uri: str, keyspace: str) -> str:
    """The module's server URI naming ``keyspace`` as its path (``cql://host:port/KEYSPACE``)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(cql_uri)
    return urlunsplit((parts.scheme, parts.netloc, f"/{keyspace}", parts.query, ""))


def test_the_uris_keyspace_is_the_one_the_run_uses(cql_uri: str, tmp_path: Path) -> None:
    """``cql://host/KEYSPACE``: with --no-load and no such keyspace, one line and exit 2 before any load (it ran 150
    operations against ycsb.usertable and exit 0, naming the other keyspace in run.json); without --no-load, the load
    creates the URI's keyspace and the run reads and updates the rows there."""
    missing = dbsurge("run", "--workload", "ycsb", "--target", _in_keyspace(cql_uri, "dbsurge_nosuchks"), "--shape",
                      "constant", "--rate", "50", "--duration", "3s", "--workload-option", "recordcount=200",
                      "--no-load", "--results-dir", str(tmp_path / "missing"), cwd=tmp_path, timeout=300)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, explain(missing)
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "keyspace dbsurge_nosuchks does not exist" in lines[0], explain(missing)
    assert not run_files(tmp_path / "missing", "run.json"), "a run directory before any load"
    target = _in_keyspace(cql_uri, "dbsurge_uri_ks")
    proc = dbsurge("run", "--workload", "ycsb", "--target", target, "--shape", "constant", "--rate", "50",
                   "--duration", "3s", "--workload-option", "recordcount=200", "--workload-option", "batchsize=20",
                   "--results-dir", str(tmp_path / "results"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 150 == total["ok"], total
    meta = read_json(run / "run.json")
    assert meta["target"]["keyspace"] == "dbsurge_uri_ks"
    started_us = int(datetime.fromisoformat(meta["started_utc"].replace("Z", "+00:00")).timestamp() * 1e6)
    updates = int(next(r for r in read_csv(run / "summary.csv") if r["operation"] == "update")["ok"])
    fields = [f"field{i}" for i in range(10)]
    cluster, session = _session(cql_uri)
    try:  # the load's rows are in the URI's keyspace, and so are the run's updates
        assert session.execute("SELECT count(*) FROM dbsurge_uri_ks.usertable").one()[0] == 200
        written = sum(1 for row in session.execute(
            f"SELECT {', '.join(f'writetime({f})' for f in fields)} FROM dbsurge_uri_ks.usertable")
            for stamp in row if stamp is not None and stamp >= started_us)
        assert updates > 0 and 0.3 * updates <= written <= updates, (written, updates)
    finally:
        cluster.shutdown()


# --- the server frozen and killed under load (a kept server: these act on the session's JVM; the kill is last) ---

def _counts(total: dict) -> dict:
    """The ledger's non-zero counts and failure details, for an assertion's message."""
    return {k: v for k, v in total.items() if (isinstance(v, int) and v) or k == "failed_detail"}


def _background_run(target: str, tmp_path: Path, rate: int, seconds: int, *extra: str) -> subprocess.Popen:
    out, err = open(tmp_path / "stdout.txt", "w"), open(tmp_path / "stderr.txt", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "ycsb", "--target", target, "--shape", "constant",
         "--rate", str(rate), "--duration", f"{seconds}s", "--workload-option", f"recordcount={RECORDS}",
         "--workload-option", f"keyspace={KEYSPACE}", "--no-load", "--results-dir", str(tmp_path / "results"),
         *extra], cwd=tmp_path, stdout=out, stderr=err, text=True)


def _run_started(tmp_path: Path, timeout: float = 120) -> tuple[Path, float]:
    """The run directory once run.json names its time zero, and that time (epoch seconds)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in run_files(tmp_path / "results", "run.json"):
            with contextlib.suppress(ValueError, KeyError):
                started = read_json(path)["started_utc"]
                return path.parent, datetime.fromisoformat(started).timestamp()
        time.sleep(0.05)
    raise AssertionError("no run directory appeared")


def _finished(proc: subprocess.Popen, tmp_path: Path) -> tuple[int, str]:
    try:
        code = proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the run did not end on time") from None
    text = (tmp_path / "stdout.txt").read_text() + (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in text, text[-3000:]
    return code, text


@pytest.mark.skipif(not EMBEDDED, reason="freezes the embedded server's JVM")
@pytest.mark.usefixtures("loaded")
def test_a_frozen_jvm_books_timeouts_then_recovers(target: str, tmp_path: Path) -> None:
    from dbsurge.embedded.servers import EmbeddedCassandra

    server = EmbeddedCassandra(Path(_kept_server()["data_dir"]))
    proc = _background_run(target, tmp_path, 50, 12, "--target-option", "op_timeout=1s")
    run, t0 = _run_started(tmp_path)
    time.sleep(max(0.0, t0 + 3 - time.time()))
    server.pause()  # SIGSTOP: the JVM answers nothing, its sockets stay open
    try:
        time.sleep(3)
    finally:
        server.resume()
    code, text = _finished(proc, tmp_path)
    total = ledger(run)
    assert total["planned"] == 600 and total["ok"] + total["failures"] == 600, total
    # the operations in flight when it froze waited out op_timeout (the driver's OperationTimedOut); the arrivals
    # behind them waited for a free user and went through after the resume (the lag, blamed on the target)
    assert total["failed_timeout"] >= 1 and total["failures"] == total["failed_timeout"], _counts(total)
    assert total["ok"] >= 400, _counts(total)
    assert "the target kept every user busy" in text
    assert code == 1, text[-3000:]  # timeouts with no --check: Locust's --exit-code-on-error, not a pass


@pytest.mark.skipif(not EMBEDDED, reason="kills the embedded server's JVM")
@pytest.mark.usefixtures("loaded")
def test_a_killed_jvm_books_connect_failures_and_the_ledger_balances(target: str, tmp_path: Path) -> None:
    from dbsurge.embedded.servers import EmbeddedCassandra, embedded_main

    kept = _kept_server()
    proc = _background_run(target, tmp_path, 50, 8, "--target-option", "op_timeout=2s", "--target-option",
                           "connect_timeout=1s")
    run, t0 = _run_started(tmp_path)
    time.sleep(max(0.0, t0 + 3 - time.time()))
    os.kill(kept["pid"], signal.SIGKILL)
    try:
        _finished(proc, tmp_path)  # no traceback; the exit code is the verdict on the failures, not asserted here
        total = ledger(run)
        assert total["planned"] == 400 and total["ok"] >= 100, total
        lost = total["failures"] + total["not_sent"]
        assert lost >= 150 and total["failed_connect"] + total["failed_disconnect"] >= 100, total
        assert total["failed_other"] == 0, total
    finally:  # the session's server again, on its port and data (the tests after this one find it as before)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            embedded_main(["start", "cassandra"])
        assert out.getvalue().strip() == f"cql://127.0.0.1:{kept['port']}"
        assert EmbeddedCassandra(Path(kept["data_dir"])).ping()
