"""Ctrl-C ends a web-UI run as it ends a headless one: the ledger closed, the tables written, exit 130.

The UI's Stop button stops the test and leaves the UI up for the next one; a signal to the process
ends the process. The interrupted open-ended plan is cut where it stopped: what the users held past
the cut was never planned, so nothing shows as "sent beyond the plan".
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from faults import kill_process_tree
from ledger_checks import ledger
from runs import REPO, only_run_dir, read_csv, read_json

from dbsurge.embedded.servers import free_port


def _get(url: str, timeout: float = 5) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except OSError:
        return None


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigint_ends_a_web_ui_run_with_its_tables(tmp_path, pg_uri):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", pg_uri, "--shape",
           "constant", "--rate", "40", "--web", "--web-port", str(port), "--operation", "product_lookup",
           "--no-db-sampler", "--workload-option", "products=300", "--results-dir", str(results)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: _get(base + "/dbsurge/plan"), 30, "the web UI")
        start = urllib.request.Request(base + "/swarm", data=b"user_count=1&spawn_rate=1", method="POST",
                                       headers={"Origin": base})
        with urllib.request.urlopen(start, timeout=5) as r:
            assert json.loads(r.read())["success"]
        _wait_for(lambda: (_get(base + "/dbsurge/plan") or {}).get("achieved_tps", 0) >= 30, 20, "40 TPS")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)  # the process ends: the UI does not keep it alive
    finally:
        if proc.poll() is None:  # the Locust child too: it has its own process group
            kill_process_tree(proc)
            proc.communicate()
    assert proc.returncode == 130, out[-3000:]
    assert "INTERRUPTED (SIGINT)" in out and "sent beyond the plan" not in out, out[-3000:]
    run = only_run_dir(results)
    total = ledger(run)
    assert total["over_plan"] == 0 and total["not_sent_unaccounted"] == 0, total
    assert total["ok"] >= 40 and total["planned"] == total["ok"] + total["not_sent"], total
    meta = read_json(run / "run.json")
    assert meta["exit_code"] == 130 and meta["interrupted"]["signal"] == "SIGINT", meta
    assert read_csv(run / "stages.csv") and (run / "summary.md").is_file()


def _web_run(tmp_path, pg_uri, seconds: int, *extra: str):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", pg_uri, "--shape",
           "constant", "--rate", "20", "--duration", f"{seconds}s", "--web", "--web-port", str(port), "--operation",
           "product_lookup", "--no-db-sampler", "--workload-option", "products=300", "--results-dir", str(results),
           *extra]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: _get(base + "/dbsurge/plan"), 30, "the web UI")
    if extra:  # --processes: the workers must be there before the start (admitted: Locust's worker_count counts
        # only the workers dbsurge admitted, dbsurge.engine.admission)
        _wait_for(lambda: (_get(base + "/stats/requests") or {}).get("worker_count") == int(extra[-1]), 30,
                  "the workers")
    _post(base, "/swarm", b"user_count=1&spawn_rate=1")
    return proc, base, results


def _post(base: str, path: str, body: bytes = b"") -> None:
    req = urllib.request.Request(base + path, data=body, method="POST", headers={"Origin": base})
    with urllib.request.urlopen(req, timeout=5) as r:
        r.read()


@contextlib.contextmanager
def _ended(proc):
    """The process and its children are gone at the block's end, whatever the block did."""
    try:
        yield
    finally:
        if proc.poll() is None:
            kill_process_tree(proc)
            proc.communicate()


def _no_temp_files(run) -> None:
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")], sorted(p.name for p in run.iterdir())


@pytest.mark.slow
def test_start_at_once_after_stop_begins_a_test_every_time(tmp_path, pg_uri):
    """Stop, then Start at once, six times in one process: each Start begins its test (before the fix, the last
    test's users still on their way out made the new test's start fail, in 13 to 16 of 20 such cycles: a leftover
    ended while another's kill was waited for, and its emptied greenlet args raised IndexError in test_start)."""
    cycles = 6
    proc, base, results = _web_run(tmp_path, pg_uri, 600)

    def plan() -> dict:
        return _get(base + "/dbsurge/plan") or {}

    with _ended(proc):
        for i in range(cycles):
            _wait_for(lambda: plan().get("results") is None and plan().get("achieved_tps", 0) >= 5, 30,
                      f"test {i + 1} sending")
            _post(base, "/stop")
            _post(base, "/swarm", b"user_count=1&spawn_rate=1")  # at once: the stopped test's users still end
            _wait_for(lambda: plan().get("results") is None and plan().get("closing") is None, 20,
                      f"test {i + 2} to begin")
        _wait_for(lambda: plan().get("achieved_tps", 0) >= 5, 30, "the last test sending")
        _post(base, "/stop")
        _wait_for(lambda: (plan().get("results") or {}).get("state") == "done", 60, "the last results")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 4 and "Traceback" not in out and "Uncaught exception" not in out, out[-3000:]
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    assert len(runs) == cycles + 1, runs
    for run in runs:
        total = ledger(run)
        assert total["ok"] > 0 and total["not_sent_unaccounted"] == 0 and total["unknown"] == 0, (run.name, total)


@pytest.mark.parametrize("extra", [(), ("--processes", "2")], ids=["local", "processes-2"])
def test_a_web_ui_run_ends_by_itself_at_the_plans_end(tmp_path, pg_uri, extra):
    """`dbsurge run --web`: at the plan's end the tables are written (and printed, by a master too), the results
    set, and the process exits by the verdict (0), without a signal."""
    proc, _base, results = _web_run(tmp_path, pg_uri, 4, *extra)
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            kill_process_tree(proc)
            proc.communicate()
    assert proc.returncode == 0, out[-3000:]
    assert "OK: the plan was delivered" in out and "Traceback" not in out, out[-3000:]
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 80 and total["ok"] == 80, total
    meta = read_json(run / "run.json")
    assert meta["exit_code"] == 0 and meta["complete"] is True and meta["results"]["verdict"].startswith("OK")
    _no_temp_files(run)


def test_the_page_is_sent_the_ending_before_the_process_exits(tmp_path, pg_uri):
    """`dbsurge run --web` says where its UI is, in one line, once it listens. At the plan's end it serves on until
    a page that polls (as the panel does, once a second; Locust's page polls /stats/requests) has been sent the
    ending: the verdict, the run directory and the report, and Locust's state stopped. Before, the process was
    gone before the next poll, and the page stayed on RUNNING with no verdict."""
    proc, base, results = _web_run(tmp_path, pg_uri, 3)
    last_live, last_stats = None, None
    with _ended(proc):
        deadline = time.time() + 60
        while time.time() < deadline:
            # as a browser's fetch, no short timeout: the process answers nothing while it builds the report
            live, stats = _get(base + "/dbsurge/live", 60), _get(base + "/stats/requests", 60)
            if live is None and proc.poll() is not None:
                break
            last_live, last_stats = live or last_live, stats or last_stats
            time.sleep(1.0)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:]
    port = base.rsplit(":", 1)[1]
    assert len([line for line in out.splitlines() if f"web UI at http://127.0.0.1:{port}/" in line]) == 1, \
        out[:2000]
    ending = last_live["plan"]["results"]
    run = only_run_dir(results)
    assert ending is not None and ending["state"] == "done" and ending["process_exits"] is True, last_live["plan"]
    assert ending["verdict"].startswith("OK: the plan was delivered") and ending["run_dir"] == str(run), ending
    assert ending["report_url"] == "./dbsurge/report" and ending["report_path"] == str(run / "report.html"), ending
    assert (run / "report.html").is_file() and last_stats["state"] == "stopped", last_stats.get("state")


def test_the_web_uis_stop_is_an_interruption(tmp_path, pg_uri):
    """POST /stop 3 s into a 30 s plan: INTERRUPTED (web UI Stop), exit code 4 in the results and run.json, the
    UI stays up; a signal then ends the process with that code."""
    proc, base, results = _web_run(tmp_path, pg_uri, 30)
    try:
        _wait_for(lambda: (_get(base + "/dbsurge/plan") or {}).get("achieved_tps", 0) >= 15, 20, "20 TPS")
        _post(base, "/stop")
        state = _wait_for(lambda: ((_get(base + "/dbsurge/plan") or {}).get("results") or {}).get("state") == "done"
                          and _get(base + "/dbsurge/plan")["results"], 60, "the results")
        assert state["exit_code"] == 4 and state["verdict"].startswith("INTERRUPTED (web UI Stop)"), state
        assert proc.poll() is None  # the UI stays up for the next test
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            kill_process_tree(proc)
            proc.communicate()
    assert proc.returncode == 4, out[-3000:]
    assert "INTERRUPTED (web UI Stop)" in out and "Traceback" not in out, out[-3000:]
    run = only_run_dir(results)
    total = ledger(run)
    assert total["not_sent_interrupted"] > 300 and total["not_sent_unaccounted"] == 0, total
    assert total["unknown"] == 0, total  # the slot a user was on when Stop came finished (--drain, as for a signal)
    meta = read_json(run / "run.json")
    assert meta["exit_code"] == 4 and meta["complete"] is False and meta["interrupted"]["by"] == "web UI Stop"
    _no_temp_files(run)


def test_a_second_start_from_the_web_ui_is_a_run_of_its_own(tmp_path, pg_uri):
    """Stop, then Start again: each test has its own run directory and its own ending (nothing of the last one's
    stop carries over: not its interruption, its close, its signals, its users); a signal then ends the process
    with the last test's code. The third Start comes right after the second's Stop, while that test still writes
    its results: it waits for them, and neither test's files take anything of the other's."""
    proc, base, results = _web_run(tmp_path, pg_uri, 30)

    def plan() -> dict:
        return _get(base + "/dbsurge/plan") or {}

    def at_15_tps() -> None:
        _wait_for(lambda: plan().get("achieved_tps", 0) >= 15, 20, "15 TPS")

    def new_test_running() -> None:
        _wait_for(lambda: plan().get("results") is None and plan().get("closing") is None, 20, "the next test")

    with _ended(proc):
        at_15_tps()
        _post(base, "/stop")
        first = _wait_for(lambda: (plan().get("results") or {}).get("state") == "done" and plan()["results"], 60,
                          "the results")
        _post(base, "/swarm", b"user_count=1&spawn_rate=1")
        new_test_running()
        at_15_tps()
        _post(base, "/stop")
        _post(base, "/swarm", b"user_count=1&spawn_rate=1")  # at once: the second test is still writing its files
        new_test_running()
        at_15_tps()
        _post(base, "/stop")
        third = _wait_for(lambda: (plan().get("results") or {}).get("state") == "done" and plan()["results"], 60,
                          "the results")
        assert first["exit_code"] == third["exit_code"] == 4, (first, third)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 4 and "Traceback" not in out, out[-3000:]
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    assert len(runs) == 3, runs
    for run in runs:
        total = ledger(run)
        assert total["ok"] > 0 and total["not_sent_unaccounted"] == 0 and total["unknown"] == 0, (run.name, total)
        assert total["planned"] == total["ok"] + total["not_sent"], (run.name, total)
        meta = read_json(run / "run.json")
        assert meta["exit_code"] == 4 and meta["interrupted"]["by"] == "web UI Stop", (run.name, meta["interrupted"])
        assert meta["interrupted"]["at_s"] < 15, meta["interrupted"]  # each test's own moment, from its own start
        assert meta["ended_utc"] and (run / "summary.md").is_file(), run.name
        _no_temp_files(run)


def test_a_signal_after_a_delivered_plan_interrupts_nothing(tmp_path, pg_uri):
    """A hand-run Locust web UI stays up after the plan's end; a SIGINT then ends the process by the run's own
    verdict (0), never INTERRUPTED."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    files = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py"
    cmd = [sys.executable, "-m", "locust", "-f", files, "--target", pg_uri, "--rate", "20", "-t", "3s",
           "--web-port", str(port), "--web-host", "127.0.0.1", "--operation", "product_lookup", "--no-db-sampler",
           "--workload-option", "products=300", "--results-dir", str(results)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with _ended(proc):
        _wait_for(lambda: _get(base + "/dbsurge/plan"), 30, "the web UI")
        _post(base, "/swarm", b"user_count=1&spawn_rate=1")
        _wait_for(lambda: ((_get(base + "/dbsurge/plan") or {}).get("results") or {}).get("state") == "done",
                  60, "the results")
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:]
    assert "INTERRUPTED" not in out and "Traceback" not in out, out[-3000:]
    run = only_run_dir(results)
    assert ledger(run)["ok"] == 60
    meta = read_json(run / "run.json")
    assert meta["exit_code"] == 0 and meta["interrupted"] is None


@pytest.mark.parametrize("sig, expected", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_before_any_test_from_the_web_ui(tmp_path, pg_uri, sig, expected):
    """The UI is up, no test was started: a signal ends the process in one line, 130/143, no run directory."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", pg_uri, "--shape",
           "constant", "--rate", "20", "--web", "--web-port", str(port), "--no-db-sampler", "--workload-option",
           "products=300", "--results-dir", str(results)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: _get(base + "/dbsurge/plan"), 30, "the web UI")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            kill_process_tree(proc)
            proc.communicate()
    assert proc.returncode == expected, out[-3000:]
    name = signal.Signals(sig).name
    assert f"dbsurge: {name} while no test was running: nothing was sent (exit {expected})" in out, out[-3000:]
    assert "Traceback" not in out
    assert not results.exists() or not any(results.iterdir())
