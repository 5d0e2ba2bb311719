"""The user's own operation bound (op_timeout + 1 s), the last resort behind the drivers' timeouts.

The drivers normally fail an operation first (tests/test_target_timeouts.py). Here pymongo's own
timeouts are taken out of the way, so only the user's bound can end an operation on a stalled server.
Not a timing test: the stall lasts twice the bound, and nothing asserts how late anything ends.
"""

from __future__ import annotations

import threading
import time

from ledger_checks import ledger
from runs import dbsurge, explain, only_run_dir, run_files


def test_the_users_bound_fires_when_the_driver_would_wait_on(tmp_path, mongo_server):
    """secantusdb is stalled for 3 s once the load runs; pymongo would wait a minute. The user's bound books
    every stalled operation as a timeout, and the users go on once the server is back."""
    results = tmp_path / "results"

    def stall() -> None:
        deadline = time.monotonic() + 120
        while not run_files(results, "timeline.csv") and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        mongo_server.pause()
        try:
            time.sleep(3.0)
        finally:
            mongo_server.resume()

    staller = threading.Thread(target=stall)
    staller.start()
    try:
        done = dbsurge("run", "--workload", "ycsb", "--target", mongo_server.uri, "--shape", "constant",
                       "--rate", "20", "--duration", "14s", "--quiet", "--no-db-sampler",
                       "--workload-option", "recordcount=200", "--workload-option", "table=ut_user_bound",
                       "--target-option", "op_timeout=500ms", "--target-option", "timeout_ms=none",
                       "--target-option", "socket_timeout_ms=60000", "--results-dir", str(results),
                       cwd=tmp_path, timeout=180)
    finally:
        staller.join()
    run_dir = only_run_dir(results)
    total = ledger(run_dir)
    assert int(total["planned"]) == 280, total
    assert int(total["failed_timeout"]) >= 1 and int(total["ok"]) >= 150, total
    # failed operations are the database's answer (0); slots dropped while every user waited would be 1
    assert done.returncode in (0, 1), explain(done)
    texts = " ".join(p.read_text(errors="replace") for p in run_dir.rglob("*")
                     if p.is_file() and p.suffix in (".csv", ".json", ".jsonl", ".md"))
    assert "no answer within 1.5s (the user's bound)" in texts, "the timeouts did not come from the user's bound"
