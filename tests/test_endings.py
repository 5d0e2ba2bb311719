"""Every way a run ends, at any moment: a signal from start-up to the last file, a killed Locust child, a
killed ``dbsurge run``, a full results disk (tests/test_faults.py), the web UI (tests/test_web_signal.py).

Each case asserts the verdict line, the exit code, that no traceback reached the console, and for
every run directory made: run.json finalised (its end, its exit code), no temporary file, and the
ledger balanced when the tables were written (`ledger_checks.ledger`).
"""

from __future__ import annotations

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
from ledger_checks import ledger
from runs import read_json, run_files

from dbsurge.embedded.servers import EmbeddedPostgres


def _start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    out = open(cwd / "stdout.txt", "w")
    err = open(cwd / "stderr.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "dbsurge.commands.cli", "run", *args], cwd=cwd, stdout=out, stderr=err,
                            text=True, env={**os.environ, **(env or {})})


def _command_started(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Wait until the child runs dbsurge's own code: its first line catches SIGTERM (`cli.EARLY_SIGNALS`), which
    /proc shows as bit 15 of SigCgt. A signal before that lands in Python's own start-up (site's import: "Fatal
    Python error: init_import_site"), which no program can handle: on a starved machine a child was still there
    0.2 s after its fork."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            return
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.005)


def _finish(proc: subprocess.Popen, cwd: Path, timeout: float = 90) -> tuple[int, str, str]:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_all(proc)
        raise AssertionError("the run did not end on time") from None
    return code, (cwd / "stdout.txt").read_text(), (cwd / "stderr.txt").read_text()


def _kill_all(proc: subprocess.Popen) -> None:
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for p in [*family]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.kill()
    proc.wait()


def _args(uri: str, rate: int, seconds: int, *extra: str) -> list[str]:
    return ["--workload", "orders", "--target", uri, "--shape", "constant", "--rate", str(rate), "--duration",
            f"{seconds}s", "--quiet", "--workload-option", "products=300", "--no-db-sampler", "--results-dir",
            "results", *extra]


def _run_dirs(cwd: Path) -> list[Path]:
    return [p.parent for p in run_files(cwd / "results", "run.json")]


def _time_zero(cwd: Path, timeout: float = 60) -> tuple[Path, float]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for d in _run_dirs(cwd):
            try:
                started = read_json(d / "run.json")["started_utc"]
            except (ValueError, KeyError, OSError):
                continue
            return d, datetime.fromisoformat(started).timestamp()
        time.sleep(0.05)
    raise AssertionError("no run directory appeared")


def _no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback" not in t, t[-3000:]


def assert_finalised(run: Path, code: int, tables: bool = True) -> dict:
    """run.json ended with ``code``, no temporary file, summary.md written, the ledger balanced (with tables)."""
    meta = read_json(run / "run.json")
    assert meta["exit_code"] == code and meta["ended_utc"], meta
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")], sorted(p.name for p in run.iterdir())
    assert (run / "summary.md").stat().st_size > 0
    if tables:
        total = ledger(run)
        assert total["not_sent_unaccounted"] == 0 and total["over_plan"] == 0, total
    return meta


# -- a signal at any moment -----------------------------------------------------------------------------------


@pytest.mark.parametrize("after_s", [0.2, 0.9, 1.8, 3.0, 5.0])
@pytest.mark.parametrize("sig, expected", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_at_any_moment_ends_in_one_verdict(tmp_path, pg_uri, sig, expected, after_s):
    """From the parent's start-up to the load: one line or the interrupted tables, exit 130/143, nothing half-made."""
    proc = _start(_args(pg_uri, 50, 8, "--operation", "product_lookup"), tmp_path)
    _command_started(proc)  # the moments count from the command's first line, not from Python's own start-up
    time.sleep(after_s)
    proc.send_signal(sig)
    code, out, err = _finish(proc, tmp_path, timeout=60)
    _no_traceback(out, err)
    assert code == expected, (out, err)
    name = signal.Signals(sig).name
    dirs = _run_dirs(tmp_path)
    if not dirs:
        assert f"dbsurge: {name} before the load started: nothing was sent (exit {expected})" in err, (out, err)
        assert len(err.strip().splitlines()) <= 2, err  # one line (the parent's or the child's), no chatter
        return
    for run in dirs:
        meta = assert_finalised(run, expected, tables=(run / "stages.csv").exists())
        assert meta["complete"] is False
    if (dirs[0] / "stages.csv").exists():
        assert f"INTERRUPTED ({name})" in out, out[-2000:]


def test_a_signal_that_lands_in_a_callback_ends_the_command_without_a_traceback():
    """A signal during the command's start-up can land in a callback where Python cannot raise (the import
    system's module-lock callback: CI, 2026-12-05, SIGINT at 0.2 s): it is recorded, the command ends in its
    one line, and Python's "Exception ignored ... Traceback" for it is not printed."""
    script = (
        "import sys, weakref\n"
        "sys.argv = ['dbsurge', '--version']\n"
        "from dbsurge.commands.cli import EARLY_SIGNALS, Signalled, main\n"
        "main()\n"
        "class Held: pass\n"
        "held = Held()\n"
        "def callback(_):\n"
        "    EARLY_SIGNALS.append(2)\n"
        "    raise Signalled(2)  # what the handler raises, inside a callback\n"
        "ref = weakref.ref(held, callback)\n"
        "del held\n"
        "def other(_):\n"
        "    raise ValueError('not a signal')\n"
        "held = Held()\n"
        "ref2 = weakref.ref(held, other)\n"
        "del held\n"
        "print('recorded', EARLY_SIGNALS, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "recorded [2]" in out.stdout, out
    assert "Signalled" not in out.stderr, out.stderr  # dropped: the command ends by EARLY_SIGNALS
    assert "ValueError: not a signal" in out.stderr  # anything else is still reported


def test_a_signal_after_the_plan_ended_interrupts_nothing(tmp_path, pg_uri):
    """SIGINT while the results of a delivered plan are written: not INTERRUPTED, exit by the verdict (0)."""
    proc = _start(_args(pg_uri, 50, 3, "--operation", "product_lookup"), tmp_path)
    run, t0 = _time_zero(tmp_path)
    time.sleep(max(0.0, t0 + 3.15 - time.time()))
    proc.send_signal(signal.SIGINT)
    code, out, err = _finish(proc, tmp_path)
    _no_traceback(out, err)
    assert code == 0, (out, err)
    assert "INTERRUPTED" not in out and "stopping the run" not in err, (out, err)
    meta = assert_finalised(run, 0)
    assert meta["complete"] is True and meta["interrupted"] is None
    assert ledger(run)["ok"] == 150


def test_a_sigterm_with_a_long_plan_is_honoured_promptly(tmp_path, pg_uri):
    """A plan of 10,000 stages: SIGTERM at 3 s ends the run within seconds, the stages never reached named."""
    stages = ",".join(["1s@20tps"] * 10000)
    proc = _start(["--workload", "orders", "--target", pg_uri, "--shape", "stages", "--stages", stages, "--quiet",
                   "--workload-option", "products=300", "--no-db-sampler", "--operation", "product_lookup",
                   "--results-dir", "results"], tmp_path, env={"DBSURGE_MAX_STAGES": "10000"})  # past the bound
    run, t0 = _time_zero(tmp_path, timeout=90)
    time.sleep(max(0.0, t0 + 3.0 - time.time()))
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    code, out, err = _finish(proc, tmp_path, timeout=120)
    assert time.time() - sent < 30, "SIGTERM was not honoured promptly"
    _no_traceback(out, err)
    assert code == 143, (out, err)
    meta = assert_finalised(run, 143)
    assert meta["interrupted"]["by"] == "SIGTERM"
    assert "stages not reached" in out and len(meta["results"]["stages_not_reached"]) > 9900


def test_a_second_sigterm_ends_the_process_within_a_second_or_two(tmp_path, pg_uri):
    """A plan of 10,000 stages, SIGTERM at 3 s, SIGTERM again while it writes its tables: the process ends within
    the second signal's deadline (it went on for 5 s and then built the report), exit 143, no traceback, no
    temporary file, and run.json finalised by someone (the run itself, or `dbsurge run` from what is there)."""
    stages = ",".join(["1s@20tps"] * 10000)
    proc = _start(["--workload", "orders", "--target", pg_uri, "--shape", "stages", "--stages", stages, "--quiet",
                   "--workload-option", "products=300", "--no-db-sampler", "--operation", "product_lookup",
                   "--results-dir", "results"], tmp_path, env={"DBSURGE_MAX_STAGES": "10000"})
    run, t0 = _time_zero(tmp_path, timeout=90)
    time.sleep(max(0.0, t0 + 3.0 - time.time()))
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.4)
    again = time.time()
    proc.send_signal(signal.SIGTERM)
    code, out, err = _finish(proc, tmp_path, timeout=60)
    assert time.time() - again < 4.0, f"a second SIGTERM took {time.time() - again:.1f} s\n{err[-2000:]}"
    _no_traceback(out, err)
    assert code == 143, (out, err)
    assert "again" in err, err
    meta = read_json(run / "run.json")
    assert meta.get("ended_utc") and meta.get("exit_code") in (143, 3), meta.get("exit_code")
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")], sorted(p.name for p in run.iterdir())


# -- the Locust child killed, dbsurge run killed ----------------------------------------------------------------


def _locust_master(proc: subprocess.Popen) -> psutil.Process:
    return next(c for c in psutil.Process(proc.pid).children() if "locust" in " ".join(c.cmdline()))


@pytest.mark.parametrize("processes", [None, 2])
def test_the_locust_child_killed(tmp_path, pg_uri, processes):
    """kill -9 of Locust: dbsurge run ends its process group (no worker left), finalises the run directory
    (run.json stopped, summary.md from the timeline, no temporary file) and says so in one line, exit 3."""
    extra = ["--processes", str(processes)] if processes else []
    proc = _start(_args(pg_uri, 50, 20, "--operation", "product_lookup", *extra), tmp_path)
    run, t0 = _time_zero(tmp_path)
    time.sleep(max(0.0, t0 + 3.0 - time.time()))
    master = _locust_master(proc)
    group = [master, *master.children(recursive=True)]
    master.kill()
    code, out, err = _finish(proc, tmp_path)
    _no_traceback(out, err)
    assert code == 3, (out, err)
    assert "dbsurge: KILLED: the Locust process was killed by SIGKILL" in err, err
    _gone, alive = psutil.wait_procs(group, timeout=5)
    assert not alive, f"left running: {alive}"
    meta = assert_finalised(run, 3, tables=False)
    assert meta["complete"] is False and "killed by SIGKILL" in meta["stop_reason"]
    assert "INCOMPLETE: the run did not finish (the Locust process was killed by SIGKILL)" in \
        (run / "summary.md").read_text()


def _orders(uri: str) -> int:
    import psycopg

    with psycopg.connect(uri, connect_timeout=5) as conn:
        return conn.execute("select count(*) from orders").fetchone()[0]


@pytest.fixture
def own_pg(server_dir):
    server = EmbeddedPostgres(server_dir)
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("processes", [None, 2])
def test_dbsurge_run_killed_stops_the_load(tmp_path, own_pg, processes):
    """kill -9 of dbsurge run: its Locust processes stop inserting orders within ~2 s (counted at the database),
    and the Locust child finalises its run directory as for a SIGTERM, saying who was gone."""
    extra = ["--processes", str(processes)] if processes else []
    proc = _start(_args(own_pg.uri, 100, 30, "--operation", "order_create", *extra), tmp_path)
    run, t0 = _time_zero(tmp_path)
    time.sleep(max(0.0, t0 + 3.0 - time.time()))
    family = psutil.Process(proc.pid).children(recursive=True)
    assert family
    before = _orders(own_pg.uri)
    proc.kill()
    proc.wait()
    killed = time.time()
    time.sleep(2.5)
    settled = _orders(own_pg.uri)
    time.sleep(2.5)
    later = _orders(own_pg.uri)
    assert later == settled, f"orders kept growing after dbsurge run died: {before} -> {settled} -> {later}"
    _gone, alive = psutil.wait_procs(family, timeout=30)
    assert not alive, f"left running: {alive}"
    assert time.time() - killed < 35
    meta = assert_finalised(run, 143)
    assert meta["interrupted"]["by"] == "SIGTERM: dbsurge run was gone", meta["interrupted"]
    assert meta["results"]["verdict"].startswith("INTERRUPTED (SIGTERM: dbsurge run was gone) at t = ")
    assert ledger(run)["ok"] >= 200


# -- refused connections ----------------------------------------------------------------------------------------


def test_refused_connections_name_the_server_and_its_reason(tmp_path, server_dir):
    """max_connections=8 and 20 users: the refusals keep SQLSTATE 53300 and the whole message, the slots of users
    left without a connection are booked under it, and the run says how many of how many were refused."""
    server = EmbeddedPostgres(server_dir, settings={"max_connections": "8", "superuser_reserved_connections": "0"})
    server.start()
    try:
        proc = _start(["--workload", "orders", "--target", server.uri, "--users", "20", "--duration", "4s",
                       "--quiet", "--workload-option", "products=300", "--no-db-sampler", "--operation",
                       "product_lookup", "--results-dir", "results"], tmp_path,
                      env={"DBSURGE_MAX_CONNECTIONS": "20"})  # past the check before load: refused on purpose
        code, out, err = _finish(proc, tmp_path)
    finally:
        server.stop()
    _no_traceback(out, err)
    run = _run_dirs(tmp_path)[0]
    results = read_json(run / "run.json")["results"]
    connections = results["connections"]
    assert connections["refused"].get("53300", 0) >= 10 and connections["asked"] >= 20, connections
    assert results["failed_by_kind"].get("connect:53300", 0) > 0, results["failed_by_kind"]
    first = results["first_errors"]["connect:53300"]
    assert "too many clients" in first, first
    assert f"the server refused {connections['refused']['53300']} of the {connections['asked']} connections" in out
    assert code in (0, 1), (out, err)
    summary = json.dumps(read_json(run / "run.json"))
    assert "FATAL:  the " not in summary


@pytest.mark.parametrize("message, code", [
    ('connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  sorry, too many clients already',
     "53300"),
    ("FATAL:  remaining connection slots are reserved for roles with the SUPERUSER attribute", "53300"),
    ('FATAL:  too many connections for role "app"', "53300"),
    ("FATAL:  the database system is starting up", "57P03"),
    ("FATAL:  the database system is shutting down", "57P03"),
    ("connection refused because too many open connections: 819", "maxIncomingConnections"),
    ('connection to server at "127.0.0.1", port 5432 failed: Connection refused', None),
    ("timeout expired", None),
])
def test_a_refusal_keeps_the_servers_reason(message, code):
    """The server's own reason for refusing a connection, from its message (libpq gives no SQLSTATE), also
    through the exception a binding wraps it in; a connection nobody answered is no refusal."""
    from dbsurge.load.refusals import ConnectFailure, as_connect_error, describe, refusal_code

    inner = OSError(message)
    outer = RuntimeError("target postgresql://127.0.0.1:5432/postgres: connect failed")
    outer.__cause__ = inner
    assert refusal_code(inner) == code and refusal_code(outer) == code
    err = as_connect_error(outer)
    assert isinstance(err, ConnectFailure) and err.kind == (f"connect:{code}" if code else "connect")
    long = OSError("x" * 150 + " " + message)
    assert message.split()[-1] in describe(long)  # not cut at 160 characters
