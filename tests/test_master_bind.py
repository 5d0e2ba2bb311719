"""Locust's habit for a distributed run works: ``locust --master`` here, ``locust --worker --master-host`` there.

A master the user asks for listens where Locust's does (every address) and will not start without a
join token; it says where it listens and how to join. A worker refused for its token is told why
and ends; a worker that cannot reach its master says, after 10 s, where it is trying and what to check.

The master runs inside a network namespace made for the test, beside the database, so that "every
address" is the namespace's own; the worker runs on the root side and dials the namespace's address.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ledger_checks import ledger
from runs import REPO, only_run_dir, read_json

from dbsurge.embedded.servers import free_port

FILES = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py"
COMMON = ["--operation", "product_lookup", "--workload-option", "products=300", "--no-db-sampler"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DBSURGE_JOIN_TOKEN", "DBSURGE_INSECURE_JOIN")}
    return {**env, **extra}


def _ns_master(netns_db, tmp_path, port: str, *extra: str, token: str | None) -> subprocess.Popen:
    """Plain ``locust --master`` with no --master-bind-host, inside the database's namespace."""
    env = [f"PATH={os.environ['PATH']}", f"DBSURGE_HOME={os.environ['DBSURGE_HOME']}"]
    if token:
        env.append(f"DBSURGE_JOIN_TOKEN={token}")
    cmd = [sys.executable, "-m", "locust", "-f", FILES, "--master", "--headless", "--master-bind-port", port,
           "--target", netns_db.uri, "--results-dir", str(tmp_path / "results"), *COMMON, *extra]
    return subprocess.Popen(netns_db.netns.cmd("env", *env, *cmd), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _worker(master_host: str, port: str, tmp_path, target: str, token: str | None) -> subprocess.Popen:
    env = _env(**({"DBSURGE_JOIN_TOKEN": token} if token else {}))
    return subprocess.Popen([sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-host", master_host,
                             "--master-port", port, "--target", target, *COMMON], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def test_a_master_listens_everywhere_and_a_worker_on_another_host_joins(tmp_path, netns_db):
    port, token = str(free_port()), "join-" + os.urandom(8).hex()
    master = _ns_master(netns_db, tmp_path, port, "--expect-workers", "1", "--rate", "40", "-t", "4s", token=token)
    worker = _worker(netns_db.netns.ip, port, tmp_path, netns_db.uri, token)
    try:
        out, _ = master.communicate(timeout=120)
    finally:
        _stop(master, worker)
    assert master.returncode == 0, out[-3000:]
    assert f"master listening on every address port {port}" in out, out[-3000:]
    assert f"--master-port {port}` with the same DBSURGE_JOIN_TOKEN" in out
    assert "proved the join token" in out  # a worker from another host is news
    run_dir = only_run_dir(tmp_path / "results")
    total = ledger(run_dir)
    assert total["planned"] == 160 and total["ok"] == 160, total  # the worker on the other host carried it
    stall = read_json(run_dir / "run.json")["results"]["master_loop_stall_max_ms"]  # the master's own loop
    assert isinstance(stall, float) and 0 <= stall < 60_000, stall


def test_a_master_without_a_token_refuses_to_start(tmp_path, netns_db):
    master = _ns_master(netns_db, tmp_path, str(free_port()), "--rate", "10", "-t", "2s", token=None)
    try:
        out, _ = master.communicate(timeout=90)
    finally:
        _stop(master)
    assert master.returncode == 2, out[-3000:]
    lines = [x for x in out.splitlines() if x.startswith("dbsurge:")]
    assert len(lines) == 1 and "every address (*)" in lines[0], out[-3000:]
    assert "DBSURGE_JOIN_TOKEN" in lines[0] and "--insecure-join" in lines[0]
    assert "Traceback" not in out and not (tmp_path / "results").exists()


def test_a_worker_with_the_wrong_token_is_told_and_ends(tmp_path, netns_db):
    port = str(free_port())
    master = _ns_master(netns_db, tmp_path, port, "--expect-workers", "1", "--rate", "10", "-t", "30s",
                        token="the-right-token")
    worker = _worker(netns_db.netns.ip, port, tmp_path, netns_db.uri, "a-wrong-token")
    try:
        _, err = worker.communicate(timeout=60)
    finally:
        _stop(master, worker)
    assert worker.returncode == 2, err[-3000:]
    line = [x for x in err.splitlines() if x.startswith("dbsurge:")][-1]
    assert f"the master at {netns_db.netns.ip}:{port} refused this worker (wrong join token)" in line, err[-3000:]
    assert "DBSURGE_JOIN_TOKEN" in line


def test_a_worker_that_cannot_reach_its_master_says_why_after_10_s(tmp_path, pg_uri):
    port = str(free_port())  # nobody listens there
    worker = _worker("127.0.0.1", port, tmp_path, pg_uri, None)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and worker.poll() is None:
            time.sleep(0.5)
            if time.monotonic() > deadline - 16:  # about 14 s in: the hint is due at 10 s
                break
    finally:
        _stop(worker)
    err = worker.stderr.read()
    hint = [x for x in err.splitlines() if "still waiting for the master" in x]
    assert hint and f"127.0.0.1:{port}" in hint[0], err[-3000:]
    assert "--master-bind-host" in hint[0] and f"TCP port {port}" in hint[0] and "DBSURGE_JOIN_TOKEN" in hint[0]
