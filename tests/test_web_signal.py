"""Ctrl-C ends a web-UI run as it ends a headless one: the ledger closed, the tables written, exit 130.

The UI's Stop button stops the test and leaves the UI up for the next one; a signal to the process
ends the process. The interrupted open-ended plan is cut where it stopped: what the users held past
the cut was never planned, so nothing shows as "sent beyond the plan".
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

from faults import kill_process_tree
from ledger_checks import ledger
from runs import only_run_dir, read_csv, read_json

from dbsurge.embedded import free_port


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
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
    cmd = [sys.executable, "-m", "dbsurge.cli", "run", "--workload", "orders", "--target", pg_uri, "--shape",
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
