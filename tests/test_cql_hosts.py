"""The CQL driver across hosts: Apache Cassandra in a network namespace, a Locust worker beside it, another outside.

Issue 41: the driver's gevent integration under Locust was tested on one host only (``--processes 2``,
tests/test_cql_contract.py). Here, as tests/test_many_hosts.py does for PostgreSQL, "another host" is a network
namespace made for the test (tests/faults.py): a real Cassandra (`embedded-cassandra`'s JVM, 512 MiB heap) listens
on the namespace's own address only, the master listens on the root side of the veth with a join token, and of
its two workers one runs in the namespace and one in the root namespace, each reaching Cassandra on that address.

A module of its own, serial (tests/conftest.py's SERIAL_MODULES): one Cassandra JVM at a time, so never beside
test_cql_contract.py's server; skips where namespaces cannot be made, like every other namespace test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra_checks import need_java_and_jars, session_cassandra_running
from faults import FaultSetupError, NetnsCassandra, NetnsHost
from ledger_checks import ledger
from runs import REPO, dbsurge, explain, only_run_dir, read_csv, read_json

from dbsurge.embedded.servers import free_port

#: serial: a JVM and two Locust workers on two cores, and the run asserts its rate. 900 s: a cold JVM on busy cores
#: takes minutes at worst (EmbeddedCassandra waits 180 s, the namespace's start script 300 s).
pytestmark = [pytest.mark.serial, pytest.mark.timeout(900)]
pytest.importorskip("cassandra", reason="scylla-driver is not installed (pip install 'dbsurge[cql]')")

FILES = f"{REPO}/locustfiles/ycsb.py,{REPO}/shapes/constant.py"
RECORDS = 1000
KEYSPACE = "dbsurge_hosts"
RATE, SECONDS = 100, 6


@pytest.fixture
def netns_cassandra(netns_host: NetnsHost, server_dir: Path) -> Iterator[NetnsCassandra]:
    """A fresh Cassandra inside `netns_host` on its address (``cql://10.231.x.y:PORT``), killed at teardown.

    Skips without Java or Maven (fails so in CI, like the `cql_uri` fixture), and when the session's own Cassandra
    runs: one JVM at a time.
    """
    need_java_and_jars()
    if session_cassandra_running():
        pytest.skip("the session's Cassandra already runs: one JVM at a time")
    server = NetnsCassandra(netns_host, server_dir, heap="512M")
    try:
        try:
            server.start()
        except FaultSetupError as err:
            pytest.fail(f"Cassandra did not start in {netns_host.name}: {err}")
        yield server
    finally:
        server.stop()


def _ns_worker(ns: NetnsHost, cmd: list[str], tmp_path: Path, token: str) -> subprocess.Popen:
    """A worker on the namespace host (its own address and network stack), with the join token."""
    return subprocess.Popen(ns.cmd("env", f"DBSURGE_JOIN_TOKEN={token}", f"PATH={os.environ['PATH']}", *cmd),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "ns-worker.err", "w"))


def _finish(master: subprocess.Popen, workers: list[subprocess.Popen], timeout: float = 180) -> str:
    """The master's output once it ends; it and the workers are killed if still there (also when it hangs)."""
    try:
        out, _ = master.communicate(timeout=timeout)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
    return out


def test_ycsb_a_across_namespace_hosts(tmp_path: Path, netns_cassandra: NetnsCassandra) -> None:
    """YCSB-A at a constant rate from a worker on Cassandra's host and one outside it: the ledger balances, every
    planned arrival is ok, both workers (the namespace's under its own address) carried operations, and what the
    load and the run wrote is in the server, read back with the driver across the veth."""
    ns, uri = netns_cassandra.netns, netns_cassandra.uri
    # the JVM listens on the namespace's address alone (CQL and the storage port), not on its loopback
    listening = {line.split()[3] for line in ns.run("ss", "-Hltn").stdout.splitlines()}
    assert len(listening) == 2 and {a.rsplit(":", 1)[0] for a in listening} == {ns.ip}, listening
    assert f"{ns.ip}:{netns_cassandra.port}" in listening, listening
    workload = ["--workload-option", f"recordcount={RECORDS}", "--workload-option", f"keyspace={KEYSPACE}"]
    load = dbsurge("load", "--workload", "ycsb", "--target", uri, *workload, "--workload-option", "batchsize=20",
                   "--quiet", cwd=tmp_path, timeout=300)
    assert load.returncode == 0, explain(load)
    token = "join-" + os.urandom(8).hex()
    port = str(free_port())
    # --drain 10: on busy cores a fresh JVM put the run over a second behind (lag max 1.16 s), and with the default
    # 2 s drain and reports once a second, one run here ended with 110 arrivals (1.1 s) written off as not sent.
    # The master ends as soon as every arrival is reported: the longer drain costs nothing when it keeps up.
    common = ["--target", uri, *workload, "--no-load", "--no-db-sampler", "--drain", "10"]
    started_us = int(time.time() * 1e6)
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", FILES, "--master", "--headless", "--expect-workers", "2",
         "--master-bind-host", ns.host_ip, "--master-bind-port", port, "--rate", str(RATE), "-t", f"{SECONDS}s",
         "--results-dir", str(tmp_path / "results"), *common],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "DBSURGE_JOIN_TOKEN": token})
    worker_cmd = [sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-host", ns.host_ip,
                  "--master-port", port, *common]
    workers = [_ns_worker(ns, worker_cmd, tmp_path, token),
               subprocess.Popen(worker_cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "DBSURGE_JOIN_TOKEN": token})]
    out = _finish(master, workers)
    assert master.returncode == 0, out[-3000:] + (tmp_path / "ns-worker.err").read_text()[-2000:]
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == RATE * SECONDS == total["ok"], (total, out[-3000:])
    meta = read_json(run / "run.json")
    assert meta["target"]["kind"] == "cql" and meta["target"]["server_release"].startswith("5.0."), meta["target"]
    # both workers sent, and the one on Cassandra's host is known by the namespace's address
    per_worker = meta["results"]["operations_per_worker"]
    hosts = {r["worker"]: r["host"] for r in read_csv(run / "workers.csv")}
    assert len(hosts) == 2, hosts
    inside = [w for w, h in hosts.items() if h.endswith(f"({ns.ip})")]
    assert len(inside) == 1 and per_worker.get(inside[0], 0) > 0, (hosts, per_worker)
    assert len([n for n in per_worker.values() if n > 0]) == 2 and sum(per_worker.values()) == RATE * SECONDS, \
        per_worker
    updates = int(next(r for r in read_csv(run / "summary.csv") if r["operation"] == "update")["ok"])
    _read_back(netns_cassandra, started_us, updates)


def _read_back(server: NetnsCassandra, started_us: int, updates: int) -> None:
    """The loaded records, and the run's updates (fields written since the master started, at most one per
    update), through a plain driver session from the root namespace."""
    from cassandra.cluster import Cluster

    cluster = Cluster([server.host], port=server.port, connect_timeout=10)
    try:
        session = cluster.connect()
        local = session.execute("SELECT rpc_address, listen_address FROM system.local", timeout=30).one()
        assert str(local.rpc_address) == str(local.listen_address) == server.host, local  # what clients are told
        assert session.execute(f"SELECT count(*) FROM {KEYSPACE}.usertable", timeout=30).one()[0] == RECORDS
        fields = [f"field{i}" for i in range(10)]
        written = sum(1 for row in session.execute(
            f"SELECT {', '.join(f'writetime({f})' for f in fields)} FROM {KEYSPACE}.usertable", timeout=30)
            for stamp in row if stamp is not None and stamp >= started_us)
        # plus the master's probe before time zero (dbsurge.engine.preflight.probe_service_time: each operation 3 times,
        # outside the ledger)
        assert 0.3 * updates <= written <= updates + 3, (written, updates)
    finally:
        cluster.shutdown()



def test_a_node_on_another_address_is_configured_and_reached_there(tmp_path: Path) -> None:
    """Nothing starts: the address given is where the node listens, seeds itself and is reached (its URI and
    readiness checks); without one it stays on the loopback."""
    from dbsurge.embedded import cassandra_jvm
    from dbsurge.embedded.servers import EmbeddedCassandra

    server = EmbeddedCassandra(tmp_path / "ns", 19042, host="10.231.0.2")
    assert server.uri == "cql://10.231.0.2:19042" and server._check_host == "10.231.0.2"
    cassandra_jvm.write_config(server.data_dir, 19042, 17000, address=server.host)
    lines = (server.data_dir / "cassandra.yaml").read_text().splitlines()
    for line in ("listen_address: 10.231.0.2", "rpc_address: 10.231.0.2", '      - seeds: "10.231.0.2:17000"'):
        assert line in lines, line
    assert not any("127.0.0.1" in line for line in lines)
    plain = EmbeddedCassandra(tmp_path / "lo", 19043)
    assert plain.uri == "cql://127.0.0.1:19043" and plain._check_host == "127.0.0.1"
