"""Fault injection: each case runs real dbsurge against real servers and breaks something mid-run.

Every case asserts the ledger (planned = ok + failed by kind + dropped + not sent by reason, per
stage, per operation and for the run; `ledger_checks.ledger`), the files on disk, the exit code
and that no traceback reached the console. Runs are short (10-15 s) so the suite stays fast.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from ledger_checks import ledger, timeline_seconds
from runs import read_json, run_files

from dbsurge.embedded.servers import EmbeddedMongo, EmbeddedPostgres


def _start(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.Popen:
    out = open(cwd / "stdout.txt", "w")
    err = open(cwd / "stderr.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "dbsurge.commands.cli", "run", *args], cwd=cwd, stdout=out, stderr=err,
                            env={**os.environ, **(env or {})}, text=True)


def _finish(proc: subprocess.Popen, cwd: Path, timeout: float = 90) -> tuple[int, str, str]:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the run did not end on time") from None
    return code, (cwd / "stdout.txt").read_text(), (cwd / "stderr.txt").read_text()


def _run_dir(cwd: Path, timeout: float = 60) -> tuple[Path, float]:
    """Wait for the run directory; return it and the plan's time zero (epoch seconds)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for d in run_files(cwd / "results", "run.json"):
            try:
                started = read_json(d)["started_utc"]
            except (ValueError, KeyError):
                continue
            return d.parent, datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
        time.sleep(0.05)
    raise AssertionError("no run directory appeared")


def _at(t0: float, after_s: float) -> None:
    time.sleep(max(0.0, t0 + after_s - time.time()))


def _no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback" not in t, t[-3000:]


def _pg_args(uri: str, rate: int, seconds: int, *extra: str) -> list[str]:
    return ["--workload", "orders", "--target", uri, "--shape", "constant", "--rate", str(rate), "--duration",
            f"{seconds}s", "--quiet", "--workload-option", "products=500", "--no-db-sampler", *extra]


@pytest.fixture
def own_pg(server_dir):
    server = EmbeddedPostgres(server_dir)
    server.start()
    yield server
    server.resume()
    server.stop()


def test_database_restarted_mid_run(tmp_path, own_pg):
    """pg_ctl -m immediate stop, start again 3 s later: failures by kind, a balanced ledger, every file."""
    proc = _start(_pg_args(own_pg.uri, 100, 12, "--target-option", "connect_timeout=2",
                           "--check", "failure_rate<0.1%"), tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 3.0)
    main = own_pg._main_pid()
    os.kill(main, signal.SIGQUIT)  # what pg_ctl -m immediate stop sends
    psutil.Process(main).wait(timeout=10)
    time.sleep(3.0)
    own_pg.start()
    code, out, err = _finish(proc, tmp_path)
    _no_traceback(out, err)
    total = ledger(run)
    assert total["planned"] == 1200
    assert total["failures"] > 0 and total["ok"] > 600, total
    assert total["not_sent"] == 0
    assert code == 1, (out, err)  # failure_rate<0.1% failed: the database missed its SLO
    assert (run / "summary.md").exists() and (run / "stages.csv").exists()
    assert len(timeline_seconds(run)) >= 12
    assert "check FAILED" in out


def test_database_paused_blames_the_target(tmp_path, own_pg):
    """SIGSTOP for 2 s: nothing lost, a timeline row for every second, lag blamed on the target."""
    proc = _start(_pg_args(own_pg.uri, 100, 10, "--operation", "product_lookup"), tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 3.0)
    own_pg.pause()
    time.sleep(2.0)
    own_pg.resume()
    code, out, err = _finish(proc, tmp_path)
    _no_traceback(out, err)
    total = ledger(run)
    assert total["planned"] == 1000 and total["ok"] == 1000, total
    assert code == 0, (out, err)
    seconds = timeline_seconds(run)
    assert len(seconds) == len(set(seconds)) >= 10
    assert "the target kept every user busy" in out
    assert "generator fell behind" not in out


def test_users_that_cannot_connect_fail_each_slot_with_backoff(tmp_path, own_pg):
    """The database goes away after the preflight: every slot is a `connect` failure, none vanish."""
    proc = _start(_pg_args(own_pg.uri, 50, 8, "--operation", "product_lookup", "--target-option",
                           "connect_timeout=1", "--start-delay", "2"), tmp_path)
    _run_dir(tmp_path)
    own_pg.stop()
    code, out, err = _finish(proc, tmp_path)
    _no_traceback(out, err)
    run, _ = _run_dir(tmp_path)
    total = ledger(run)
    assert total["planned"] == 400
    # users connect before their first slot: the few that had a connection when it went away fail
    # as `disconnect`, then every slot is a `connect` failure (retried with backoff)
    assert total["failed_connect"] + total["failed_disconnect"] + total["ok"] + total["not_sent"] == 400
    assert total["failed_connect"] > 300, total
    # accounted for, but a database gone is no pass: failures with no --check exit 1 (Locust's --exit-code-on-error)
    assert code == 1, (out, err)
    assert "FAILED: every arrival accounted for" in out
    assert "connect=" in out


@pytest.fixture
def own_mongo(server_dir):
    server = EmbeddedMongo(server_dir)
    server.start()
    yield server
    server.stop()


def test_mongo_killed_for_a_while(tmp_path, own_mongo):
    """The MongoDB-wire server is killed and restarted: failures keep their latency beside the successes'."""
    proc = _start(["--workload", "ycsb", "--target", own_mongo.uri, "--shape", "constant", "--rate", "100",
                   "--duration", "12s", "--quiet", "--workload-option", "recordcount=300", "--no-db-sampler",
                   "--target-option", "server_selection_timeout_ms=1000", "--target-option", "op_timeout=2s"],
                  tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 3.0)
    own_mongo._stop()
    time.sleep(3.0)
    own_mongo.start()
    code, out, err = _finish(proc, tmp_path)
    _no_traceback(out, err)
    total = ledger(run)
    assert total["planned"] == 1200 and total["failures"] > 0, total
    assert total["failed_p99_ms"] != "" and float(total["failed_p99_ms"]) > 0
    assert code in (0, 1, 3)  # what matters: the account; not_sent only for what was in flight at the end
    assert total["not_sent"] == total["not_sent_in_flight"]


@pytest.mark.parametrize("sig, expected", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_gracefully(tmp_path, pg_uri, sig, expected):
    """The first SIGINT/SIGTERM: stop issuing, drain, every file, tables marked interrupted, exit 130/143."""
    proc = _start(_pg_args(pg_uri, 100, 20, "--operation", "product_lookup"), tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 4.0)
    proc.send_signal(sig)
    code, out, err = _finish(proc, tmp_path, timeout=30)
    _no_traceback(out, err)
    assert code == expected, (out, err)
    total = ledger(run)
    assert total["planned"] == 2000
    assert 300 <= total["ok"] <= 600 and total["not_sent_interrupted"] >= 1400, total
    assert "interrupted at t = " in out
    # rates over the time that ran, not the planned 20 s
    assert 90 <= float(total["achieved_tps"]) <= 110, total
    meta = read_json(run / "run.json")
    assert meta["interrupted"]["signal"] == signal.Signals(sig).name and meta["complete"] is False
    assert "interrupted at t =" in (run / "summary.md").read_text()


def test_worker_sigkilled(tmp_path, pg_uri):
    """--processes 2, one worker SIGKILLed: what it may have issued and never reported is `unknown`, the rest of its
    share `worker_lost`; named, exit 3."""
    proc = _start(_pg_args(pg_uri, 100, 12, "--operation", "product_lookup", "--processes", "2"), tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 4.0)
    locust = [c for c in psutil.Process(proc.pid).children(recursive=True) if "locust" in " ".join(c.cmdline())]
    master = next(p for p in locust if p.parent().pid == proc.pid)
    workers = master.children()
    assert len(workers) == 2
    workers[0].kill()
    code, out, err = _finish(proc, tmp_path)
    _no_traceback(out)
    total = ledger(run)
    assert total["planned"] == 1200
    assert total["not_sent_worker_lost"] > 0 and total["not_sent_unaccounted"] == 0, total
    assert total["unknown"] > 0, total
    assert total["ok"] + total["unknown"] + total["not_sent_worker_lost"] + total["not_sent_in_flight"] == 1200
    assert code == 3, (out, err)
    assert "workers lost during the run" in out
    assert "INCOMPLETE" in out


def test_master_sigkilled(tmp_path, pg_uri):
    """The master dies: workers stop sending within 3 s and exit; the timeline ends within ~1 s of the kill;
    `dbsurge report` marks the run incomplete."""
    proc = _start(_pg_args(pg_uri, 100, 20, "--operation", "product_lookup", "--processes", "2"), tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 5.0)
    locust = [c for c in psutil.Process(proc.pid).children(recursive=True) if "locust" in " ".join(c.cmdline())]
    master = next(p for p in locust if p.parent().pid == proc.pid)
    workers = master.children()
    killed_at = time.time()
    master.kill()
    gone, alive = psutil.wait_procs(workers, timeout=20)
    assert not alive, "workers outlived their master"
    # they stop sending when their lease lapses (1.25 s), and give up (exit 3) after 15 s: a partition may heal
    assert time.time() - killed_at < 20
    _finish(proc, tmp_path)
    seconds = timeline_seconds(run)
    last = datetime.fromisoformat(seconds[-1].replace("Z", "+00:00")).timestamp()
    open_rows = (run / "timeline.open.csv").exists()
    assert killed_at - (last + 1) < 3.0 or open_rows
    report = subprocess.run([sys.executable, "-m", "dbsurge.commands.cli", "report", str(run)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "incomplete" in (run / "summary.md").read_text().lower()


def test_database_blackholed(tmp_path, netns_db):
    """iptables DROP on the database's port (in a network namespace): operations time out, the run ends on time."""
    args = ["--workload", "orders", "--target", netns_db.uri, "--shape", "constant", "--rate", "50", "--duration",
            "10s", "--quiet", "--workload-option", "products=500", "--no-db-sampler", "--operation",
            "product_lookup", "--op-timeout", "2s", "--target-option", "connect_timeout=2",
            "--check", "p99<50ms,failure_rate<1%"]
    proc = _start(args, tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 3.0)
    started = time.time()
    netns_db.blackhole()
    code, out, err = _finish(proc, tmp_path, timeout=60)
    assert time.time() - started < 7 + 10, "the run did not end on time"
    _no_traceback(out, err)
    total = ledger(run)
    assert total["planned"] == 500
    # the pool grows to meet the slots that time out; whatever it could not send is named, never silent
    assert total["failed_timeout"] + total["failed_connect"] + total["failed_disconnect"] > 10, total
    assert total["not_sent"] == (total["not_sent_users_exhausted"] + total["not_sent_target_silent"]
                                 + total["not_sent_in_flight"])
    assert code == 1, (out, err)
    assert "check FAILED: failure_rate<1%" in out
    assert len(timeline_seconds(run)) >= 10


def test_results_disk_full(tmp_path, pg_uri, small_disk):
    """The results disk fills up mid-run: the load stops within a second or two, one clear line, exit 3; the space
    kept back at the start holds the final files: stages.csv, summary.csv, summary.md, run.json finalised, no
    temporary file, the ledger balanced."""
    from faults import fill_disk

    proc = _start(_pg_args(pg_uri, 200, 20, "--operation", "product_lookup", "--results-dir", str(small_disk)),
                  tmp_path)
    deadline = time.time() + 60
    while time.time() < deadline and not run_files(small_disk, "run.json"):
        time.sleep(0.05)
    time.sleep(3.0)
    filled = time.time()
    fill_disk(small_disk, leave_kb=0)
    code, out, err = _finish(proc, tmp_path, timeout=60)
    assert time.time() - filled < 15
    _no_traceback(out, err)
    assert code == 3, (out, err)
    assert "cannot write results" in err
    assert [line for line in err.splitlines() if "cannot write results" in line][0].startswith("dbsurge:")
    assert "planned" in out and "STOPPED" in out  # the tables it held in memory were printed
    run = next(small_disk.glob("*/run.json")).parent
    meta = read_json(run / "run.json")
    assert meta["exit_code"] == 3 and meta["ended_utc"] and meta["complete"] is False, meta
    assert "cannot write results" in meta["stop_reason"]
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")], sorted(p.name for p in run.iterdir())
    assert "STOPPED" in (run / "summary.md").read_text()
    total = ledger(run)
    assert total["not_sent_interrupted"] > 0 and total["not_sent_unaccounted"] == 0, total


def test_results_directory_made_unwritable(tmp_path, pg_uri):
    """Write permission taken from the run directory mid-run (`chattr +i`: EPERM, even for root): the load stops
    within seconds (it went on unrecorded for 20 s, with three tracebacks and exit 1 after printing "exit 3"),
    one line, exit 3, and the parent says run.json could not be finalised instead of a second, contradictory
    verdict."""
    import shutil
    import subprocess as sp

    if shutil.which("chattr") is None:
        pytest.skip("chattr not found")
    results = tmp_path / "results"
    proc = _start(_pg_args(pg_uri, 100, 20, "--operation", "product_lookup", "--results-dir", str(results)),
                  tmp_path)
    deadline = time.time() + 60
    while time.time() < deadline and not run_files(results, "run.json"):
        time.sleep(0.05)
    time.sleep(3.0)
    run = next(results.glob("*/run.json")).parent
    locked = [str(p) for p in run.iterdir()] + [str(run)]
    if sp.run(["chattr", "+i", *locked], capture_output=True).returncode != 0:
        proc.kill()
        pytest.skip("chattr +i is not supported on this file system")
    try:
        taken = time.time()
        code, out, err = _finish(proc, tmp_path, timeout=60)
        assert time.time() - taken < 12
    finally:
        sp.run(["chattr", "-i", *locked], capture_output=True)
    _no_traceback(out, err)
    assert code == 3, (out, err)
    assert "cannot write results" in err and "Operation not permitted" in err, err
    assert "STOPPED" in out and "KILLED" not in out + err, (out, err)
    assert "run.json could not be finalised" in err, err


def _blackhole_args(uri: str, seconds: int, *extra: str) -> list[str]:
    return ["--workload", "orders", "--target", uri, "--shape", "constant", "--rate", "50", "--duration",
            f"{seconds}s", "--quiet", "--workload-option", "products=500", "--no-db-sampler", "--operation",
            "product_lookup", *extra]


def test_database_silent_to_the_end_is_the_targets_failure(tmp_path, netns_db):
    """Blackholed for the rest of the run, operations bounded only by the default 30 s: every user waits on the
    database, so what could not be issued is `target_silent` (exit 1, FAILED), not the tool's (exit 3)."""
    proc = _start(_blackhole_args(netns_db.uri, 8), tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 3.0)
    netns_db.blackhole()
    code, out, err = _finish(proc, tmp_path, timeout=60)
    _no_traceback(out, err)
    total = ledger(run)
    assert total["planned"] == 400
    assert total["not_sent_target_silent"] > 100 and total["not_sent_users_exhausted"] == 0, total
    # the operations still out at the end were sent: their outcome is unknown, not "not sent"
    assert total["unknown"] > 0 and total["not_sent_in_flight"] == 0, total
    assert f"{total['unknown']} planned arrivals have an unknown outcome: sent to the database, still in flight" in out
    assert code == 1, (out, err)
    assert "FAILED" in out and "INCOMPLETE" not in out, out[-3000:]
    meta = read_json(run / "run.json")
    assert meta["exit_code"] == 1
    assert meta["results"]["unknown_at_end"] == {"in_flight": int(total["unknown"])}, meta["results"]


@pytest.mark.parametrize("processes", [None, 2])
def test_second_sigint_during_a_blackhole_books_nothing_unaccounted(tmp_path, netns_db, processes):
    """SIGINT while the database is blackholed, and again before the drain ends: exit 130 at once, the operations
    in flight booked as interrupted (not `unaccounted`), the ledger balanced, run.json finalised, no temp file."""
    extra = ["--processes", str(processes)] if processes else []
    proc = _start(_blackhole_args(netns_db.uri, 20, "--drain", "5", *extra), tmp_path)
    run, t0 = _run_dir(tmp_path)
    _at(t0, 3.0)
    netns_db.blackhole()
    _at(t0, 5.0)
    proc.send_signal(signal.SIGINT)
    _at(t0, 6.0)
    proc.send_signal(signal.SIGINT)
    code, out, err = _finish(proc, tmp_path, timeout=30)
    _no_traceback(out, err)
    assert code == 130, (out, err)
    assert "SIGINT again: stopping now" in err
    total = ledger(run)
    assert total["not_sent_unaccounted"] == 0 and total["not_sent_interrupted"] > 0, total
    assert "a bug in dbsurge" not in out
    meta = read_json(run / "run.json")
    if processes is None:  # the operations out on the blackholed database were sent: unknown, not "not sent"
        assert total["unknown"] > 0 and meta["results"]["unknown_at_end"] == {"interrupted": int(total["unknown"])}, \
            (total, meta["results"])
    assert meta["exit_code"] == 130 and meta["ended_utc"], meta
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
