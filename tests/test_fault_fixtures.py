"""Smoke tests of the fault-injection fixtures (tests/faults.py, tests/conftest.py): each does what it says.

Every test here is short (a few seconds). The namespace tests need root, `ip` and `iptables`, and
skip without them; the tmpfs test needs root.
"""

from __future__ import annotations

import errno
import os
import signal
import statistics
import threading
import time
from pathlib import Path

import faults
import psutil
import psycopg
import pytest
from faults import NetnsHost, NetnsPostgres

# The namespaces and server processes the fixtures made in this module, checked after their teardown.
_made: list[tuple[str, list[int]]] = []


def _running(pid: int) -> bool:
    """True if `pid` runs (a zombie does not: its parent, maybe a pid 1 that never reaps, has yet to wait)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class _Query(threading.Thread):
    """`select 1` on an existing connection, in a thread, so that a hang can be observed without hanging the test."""

    def __init__(self, conn: psycopg.Connection) -> None:
        super().__init__(daemon=True)
        self.conn = conn
        self.result: object = None
        self.error: BaseException | None = None
        self.took = 0.0

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.result = self.conn.execute("select 1").fetchone()
        except BaseException as err:  # noqa: BLE001 - reported to the test thread
            self.error = err
        self.took = time.monotonic() - started


def _round_trip_ms(conn: psycopg.Connection, n: int = 7) -> float:
    """The median time of `n` `select 1`s on `conn`, in ms."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        conn.execute("select 1").fetchone()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def test_netns_db_reachable_from_the_root_namespace(netns_db):
    assert netns_db.host.startswith("10.231.") and netns_db.uri.startswith(f"postgresql://postgres@{netns_db.host}:")
    with psycopg.connect(netns_db.uri, connect_timeout=5, autocommit=True) as conn:
        # the server really is the one in the namespace: it sees our connection arrive on the veth address
        assert conn.execute("select host(inet_server_addr()), host(inet_client_addr())").fetchone() == (
            netns_db.host, netns_db.netns.host_ip)
    # and it runs inside the namespace (compared on the postmaster: backends come and go meanwhile)
    postmaster = netns_db.pids()[0]
    assert os.stat(f"/proc/{postmaster}/ns/net").st_ino == os.stat(f"/run/netns/{netns_db.netns.name}").st_ino
    assert postmaster in netns_db.netns.pids()
    _made.append((netns_db.netns.name, netns_db.pids()))
    # the namespace's own client ports lie apart from the root side's, where free_port() picks a master's port
    low, high = faults.NS_EPHEMERAL
    assert low <= netns_db.port <= high
    inside = netns_db.netns.run("cat", "/proc/sys/net/ipv4/ip_local_port_range").stdout.split()
    assert tuple(map(int, inside)) == faults.NS_EPHEMERAL
    root_low, root_high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert high < root_low or low > root_high


def test_netns_db_blackhole_hangs_clients_and_restore_heals(netns_db):
    hanging = psycopg.connect(netns_db.uri, connect_timeout=5, autocommit=True)
    # A client that bounds how long unacknowledged data may wait (libpq's tcp_user_timeout, ms): how a
    # test can make the hang fail fast instead.
    bounded = psycopg.connect(netns_db.uri, connect_timeout=5, autocommit=True, tcp_user_timeout=1000)
    try:
        hanging.execute("select 1")
        bounded.execute("select 1")
        netns_db.blackhole()
        query = _Query(hanging)
        query.start()
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError) as err:
            bounded.execute("select 1")
        assert time.monotonic() - started < 5
        assert "refused" not in str(err.value).lower() and "reset" not in str(err.value).lower(), err.value
        # A new connection does not get refused either: the SYN vanishes, so connect_timeout (>= 2 s) expires.
        with pytest.raises(psycopg.OperationalError) as err:
            psycopg.connect(netns_db.uri, connect_timeout=2)
        assert "timeout" in str(err.value).lower(), err.value
        query.join(max(0.0, 2.0 - (time.monotonic() - started)))
        assert query.is_alive(), f"select 1 returned during the black hole: {query.result!r} {query.error!r}"
        netns_db.restore()
        # Packets were dropped, not refused: the connection survived, and the query completes with the next
        # retransmission (TCP's backoff puts that a few seconds out).
        query.join(15)
        assert not query.is_alive() and query.error is None and query.result == (1,), query.error
        with psycopg.connect(netns_db.uri, connect_timeout=5) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        netns_db.restore()
        hanging.close()
        bounded.close()
    _made.append((netns_db.netns.name, netns_db.pids()))


def test_netns_db_pause_resume(netns_db):
    with psycopg.connect(netns_db.uri, connect_timeout=5, autocommit=True) as conn:
        netns_db.pause()
        try:
            query = _Query(conn)
            query.start()
            query.join(1.0)
            assert query.is_alive()
        finally:
            netns_db.resume()
        query.join(10)
        assert query.result == (1,), query.error


def test_namespaces_and_servers_gone_after_teardown():
    if not _made:
        pytest.skip("no netns_db test ran before this one")
    names = faults.list_namespaces()
    links = faults._sh("ip", "-o", "link", "show").stdout
    for name, pids in _made:
        assert name not in names
        assert f"{name}-r" not in links
        assert not any(_running(pid) for pid in pids), pids


def test_netns_teardown_after_a_failing_body(server_dir):
    """What the fixtures do on a failing test: the namespace, its veth and its server still go."""
    reason = faults.netns_unavailable()
    if reason:
        pytest.skip(reason)
    with pytest.raises(RuntimeError, match="the test failed"), NetnsHost() as host:
        server = NetnsPostgres(host, server_dir)
        try:
            server.start()
            pids = server.pids()
            assert pids
            raise RuntimeError("the test failed")
        finally:
            server.stop()
    assert host.name not in faults.list_namespaces(faults.NS_PREFIX)
    assert not (faults.STATE_DIR / f"{host.name}.json").exists()
    assert not any(_running(pid) for pid in pids), pids


def test_netns_mongo_reachable_and_blackholed(netns_mongo):
    import pymongo
    import pymongo.errors

    ms = {"serverSelectionTimeoutMS": 1500, "connectTimeoutMS": 1500, "socketTimeoutMS": 1500}
    with pymongo.MongoClient(netns_mongo.uri, **ms) as client:
        assert client.admin.command("ping")["ok"] == 1
        netns_mongo.blackhole()
        started = time.monotonic()
        with pytest.raises(pymongo.errors.PyMongoError) as err:
            client.admin.command("ping")
        # a timeout after ~1.5 s, not an instant refusal
        assert time.monotonic() - started >= 1.0 and "refused" not in str(err.value).lower(), err.value
        netns_mongo.restore()
    with pymongo.MongoClient(netns_mongo.uri, **ms) as client:
        assert client.admin.command("ping")["ok"] == 1


def test_small_disk_is_2mb_and_fills_up(small_disk: Path):
    st = os.statvfs(small_disk)
    assert st.f_blocks * st.f_frsize == 2 * 1024 * 1024
    with pytest.raises(OSError) as err, open(small_disk / "big", "wb") as f:
        f.write(b"x" * (3 * 1024 * 1024))
        f.flush()
    assert err.value.errno == errno.ENOSPC
    (small_disk / "big").unlink()
    # fill_disk leaves the asked-for room (to a page), and the next larger write fails
    filler = faults.fill_disk(small_disk, leave_kb=64)
    free = faults.disk_free_bytes(small_disk)
    assert 60 * 1024 <= free <= 68 * 1024, free
    with pytest.raises(OSError) as err, open(small_disk / "more", "wb") as f:
        f.write(b"x" * (128 * 1024))
        f.flush()
    assert err.value.errno == errno.ENOSPC
    filler.unlink()
    assert faults.disk_free_bytes(small_disk) > 1900 * 1024


def test_delay_proxy_adds_its_delay_each_way(pg_server, delay_proxy):
    proxy = delay_proxy("127.0.0.1", pg_server.port, delay_ms=20)
    with psycopg.connect(pg_server.uri, autocommit=True) as direct, \
            psycopg.connect(proxy.rewrite(pg_server.uri), autocommit=True, connect_timeout=5) as slow:
        base = _round_trip_ms(direct)
        delayed = _round_trip_ms(slow)
        print(f"select 1 round trip: direct {base:.2f} ms, through a 20 ms proxy {delayed:.2f} ms")
        assert delayed >= 40, (base, delayed)
        assert delayed < 40 + base + 25, (base, delayed)  # 20 ms each way, not per chunk on top of that
        proxy.set_delay(0)
        assert _round_trip_ms(slow) < base + 10
        # blackhole: bytes held, the connection stays open, and they flow on when it lifts
        proxy.blackhole(True)
        query = _Query(slow)
        query.start()
        query.join(1.0)
        assert query.is_alive()
        proxy.blackhole(False)
        query.join(5)
        assert query.result == (1,), query.error
        # reset: the connection breaks at once
        proxy.reset()
        with pytest.raises(psycopg.OperationalError):
            slow.execute("select 1")


def test_delay_proxy_refuses_other_targets():
    with pytest.raises(ValueError, match="neither 127"):
        faults.DelayProxy("192.0.2.1", 5432)


def test_background_run_workers_and_kill(tmp_path, pg_server):
    run = faults.start_run(["run", "--workload", "orders", "--target", pg_server.uri, "--shape", "constant",
                            "--rate", "20", "--duration", "60s", "--operation", "product_lookup", "--quiet",
                            "--workload-option", "products=2000", "--no-db-sampler", "--processes", "2"], tmp_path)
    try:
        procs = faults.locust_processes(run, workers=2, timeout=30)
        assert procs.master.parent().pid == run.pid
        assert len(procs.workers) == 2 and all(w.parent().pid == procs.master.pid for w in procs.workers)
        victim = procs.workers[0]
        timer = faults.signal_at(lambda: victim, signal.SIGKILL, 0.3)
        timer.join(5)
        victim.wait(5)  # gone: only the master can reap it, so wait on psutil, not on a Popen
        assert not _running(victim.pid)
        assert run.poll() is None, run.explain()
    finally:
        killed = faults.kill_process_tree(run)
    assert run.returncode == -signal.SIGKILL
    assert run.stderr_path.exists() and run.stdout_path.exists()
    assert not any(_running(pid) for pid in killed), killed
