"""Exactly once across hosts, counted at the database: a stalled, killed or refused worker never makes the
database commit more than the plan, nor any arrival twice.

The database lives in a network namespace made for the test (tests/faults.py), the master on the root
side of its veth, one worker inside the namespace ("another host") and the others beside the master.
Every operation creates an order; the orders table (created before the run) stamps each row with the
client's address and the server's clock (``inet_client_addr()``, ``clock_timestamp()``), so the test
counts what the database really committed, per second and per host, and checks it against the plan and
the ledger: committed <= ok + failed + unknown, and no second above the plan's rate plus the catch-up
bound of docs/architecture.md ("The lease").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime

import faults
import psycopg
import pytest
from ledger_checks import ledger
from runs import REPO, only_run_dir, run_files

from dbsurge.embedded.servers import free_port

FILES = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/stages.py"
TOKEN = "t0k3n-exactly-once"
COMMON = ("--operation", "order_create", "--workload-option", "products=300", "--workload-option", "items_min=1",
          "--workload-option", "items_max=1")
ORDERS_DDL = ("create table orders (id uuid primary key, created_at timestamptz not null, customer_id integer not "
              "null, total numeric(12,2) not null, source inet default inet_client_addr(), "
              "committed timestamptz default clock_timestamp())")


def _orders_table(uri: str) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(ORDERS_DDL)


def _committed(uri: str, since_epoch_s: float) -> tuple[int, dict[int, int], dict[str, int]]:
    """(rows, rows per whole second of the server's clock, rows per client address) committed since time zero
    (the master's probe of the service time runs a few operations before it, outside the ledger)."""
    since = "committed >= to_timestamp(%s)"
    with psycopg.connect(uri) as conn:
        per_second = dict(conn.execute("select extract(epoch from date_trunc('second', committed))::bigint, count(*) "
                                       f"from orders where {since} group by 1", (since_epoch_s,)).fetchall())
        per_source = {str(a): n for a, n in conn.execute(f"select host(source), count(*) from orders where {since} "
                                                         "group by 1", (since_epoch_s,))}
    return sum(per_second.values()), per_second, per_source


def _master(tmp_path, bind: str, port: str, uri: str, stages: str, workers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", FILES, "--master", "--headless", "--expect-workers", str(workers),
         "--master-bind-host", bind, "--master-bind-port", port, "--stages", stages, "--target", uri, *COMMON,
         "--no-db-sampler", "--align-start", "1", "--results-dir", str(tmp_path / "results")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "DBSURGE_JOIN_TOKEN": TOKEN})


def _worker_cmd(master_host: str, port: str, uri: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-host", master_host, "--master-port",
            port, "--target", uri, *COMMON]


def _local_worker(cmd: list[str], tmp_path, token: str = TOKEN) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "DBSURGE_JOIN_TOKEN": token})


def _ns_worker(ns, cmd: list[str], tmp_path, name: str, token: str = TOKEN) -> subprocess.Popen:
    return subprocess.Popen(ns.cmd("env", f"DBSURGE_JOIN_TOKEN={token}", f"PATH={os.environ['PATH']}", *cmd),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.err", "w"))


def _finish(master, workers, timeout=120) -> str:
    try:
        out, _ = master.communicate(timeout=timeout)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
    return out


def _wait_for_timeline(results, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and not run_files(results, "timeline.csv"):
        time.sleep(0.1)


def _events(run) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


#: The catch-up bound (docs/architecture.md, "The lease"): a worker sends its own late arrivals as soon as a
#: user is free, so a second may hold more than the plan's rate (the tests allow half a second's backlog),
#: but by the end of any second the database never holds more than the arrivals due by then.
CATCH_UP = 0.5


def _check_database(run, uri: str, rate: float, total: dict, backlog: float | None = None) -> dict[str, int]:
    """What the database committed is bounded by the ledger; by every second, no more than was due by then
    (none twice, none early); no second above the plan's rate plus the catch-up bound (``backlog``: the most
    arrivals a slow worker may owe and send late, by default half a second of the plan)."""
    backlog = rate * CATCH_UP if backlog is None else backlog
    started = datetime.fromisoformat(json.loads((run / "run.json").read_text())["started_utc"].replace("Z", "+00:00"))
    t0 = started.timestamp()
    committed, per_second, per_source = _committed(uri, t0)
    reported = total["ok"] + total["failures"] + total.get("unknown", 0)
    assert total["ok"] <= committed <= reported, (committed, per_source, {k: v for k, v in total.items() if v})
    assert total["over_plan"] == 0, total
    done = 0
    for t, n in sorted(per_second.items()):
        done += n
        due = min(rate * (t + 1 - t0), total["planned"])
        assert done <= due + 2, ("more committed than was due", t - t0, done, due, sorted(per_second.items()))
        if t - t0 >= 2:  # the first seconds catch up on the pools' warm-up on a loaded machine, before any fault
            assert n <= rate + backlog, ("a second above the catch-up bound", t - t0, sorted(per_second.items()))
    return per_source


def _two_here_one_there(tmp_path, netns_db, name: str):
    """A 14 s plan at 90 TPS on three workers, the third on the database's host; 4 s into the load: the master,
    the workers, the results folder and the pids of the third (its Locust and children), for the fault."""
    ns = netns_db.netns
    _orders_table(netns_db.uri)
    port = str(free_port())
    master = _master(tmp_path, ns.host_ip, port, netns_db.uri, "14s@90tps", 3)
    cmd = _worker_cmd(ns.host_ip, port, netns_db.uri)
    workers = [_local_worker(cmd, tmp_path) for _ in range(2)]
    workers.append(_ns_worker(ns, cmd, tmp_path, name))
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(4)
    third = workers[-1].pid
    pids = [third] + [int(p) for p in subprocess.run(["pgrep", "-P", str(third)], capture_output=True,
                                                     text=True).stdout.split()]
    return master, workers, results, pids


def test_stalled_worker_stops_before_its_share_is_given_away(tmp_path, netns_db):
    """A worker on another host is stopped for 2.6 s (SIGSTOP, SIGCONT): its lease lapses before the master
    gives it up, so when it wakes it sends nothing of the old share; nothing twice, no second above the plan."""
    master, workers, results, pids = _two_here_one_there(tmp_path, netns_db, "stalled")
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(2.6)
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 1260 and total["not_sent_unaccounted"] == 0, (total, out[-3000:])
    _check_database(run, netns_db.uri, 90, total)
    events = _events(run)
    assert any(e["kind"] == "worker_lost" for e in events), [e["kind"] for e in events]
    assert any(e["kind"] == "worker_log" and "lease lapsed" in e["message"] for e in events), \
        [e for e in events if e["kind"] == "worker_log"]
    assert master.returncode == 3, out[-3000:]  # arrivals lost to the stall: incomplete, and it says so


def test_cpu_starved_worker_sends_nothing_twice(tmp_path, netns_db):
    """A worker on another host starved of CPU for 3 s (it and two busy loops capped at 1% of a core: it runs,
    slowly, nothing signalled), the way a loaded machine stalled one unannounced: whether it keeps its lease or
    loses it, the database gets nothing twice and no second above the plan, and the ledger says what happened."""
    reason = faults.cpu_starving_unavailable()
    if reason:
        pytest.skip(reason)
    master, workers, results, pids = _two_here_one_there(tmp_path, netns_db, "starved")
    began = time.monotonic()
    with faults.cpu_starved(pids, share=0.01, hogs=2):
        time.sleep(3)
    starved_s = time.monotonic() - began  # 3 s and the group's set-up and tear-down (a throttled hog dies slowly)
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 1260 and total["not_sent_unaccounted"] == 0, (total, out[-3000:])
    # Slowed but alive, it may keep its lease (renewals still come and go, late): it then owes what came due
    # meanwhile and sends it as soon as it runs again, late (the lag says so). The bound: its share (30 TPS)
    # for as long as it was starved, plus half a second; never another worker's share, never an arrival twice.
    _check_database(run, netns_db.uri, 90, total, backlog=30 * (starved_s + CATCH_UP))
    events = _events(run)
    logs = [e["message"] for e in events if e["kind"] == "worker_log"]
    lapsed = any("lease lapsed" in m for m in logs)
    if int(total["not_sent_worker_lost"]) > 0:
        # its lease lapsed for longer than the catch-up allowance (or the master gave it up): what came due
        # meanwhile is booked not sent, never sent late, and the run says it is incomplete
        assert lapsed, logs
        assert master.returncode == 3 and "lease had lapsed" in out, out[-3000:]
    else:
        # it kept its lease, or lost it for no longer than pacer.LAPSE_CATCH_UP_S (which may still go, late):
        # every arrival sent once, and the lag shows it
        assert not any(e["kind"] == "worker_lost" for e in events), logs
        assert total["not_sent"] == 0 and master.returncode in (0, 1), (total, out[-3000:])
        assert float(total["lag_max_ms"]) > 1000, total
        if lapsed:
            assert any("renewed this worker's lease" in m for m in logs), logs
    assert not list(faults.CPU_CGROUP_ROOT.glob(f"{faults.CPU_PREFIX}{os.getpid()}-*"))  # the group is gone


def test_partition_heals_without_a_hole_or_a_burst(tmp_path, netns_db):
    """A worker on another host is cut from the master for 10 s, then healed: given up after 2 s, it takes a share
    back only once it has acknowledged the offer (its messages may still sit in TCP's backoff), so the seconds after
    the heal are neither short (a hole) nor above the plan (a burst); the rejoin is an event with its figures."""
    ns = netns_db.netns
    _orders_table(netns_db.uri)
    port = str(free_port())
    master = _master(tmp_path, ns.host_ip, port, netns_db.uri, "24s@90tps", 3)
    cmd = _worker_cmd(ns.host_ip, port, netns_db.uri)
    workers = [_local_worker(cmd, tmp_path) for _ in range(2)]
    workers.append(_ns_worker(ns, cmd, tmp_path, "cut"))
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(3)
    rule = ["OUTPUT", "-p", "tcp", "-d", ns.host_ip, "--dport", port, "-j", "DROP"]
    ns.run("iptables", "-w", "-A", *rule)
    try:
        time.sleep(10)
    finally:
        ns.run("iptables", "-w", "-D", *rule)
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 2160 and total["not_sent_unaccounted"] == 0, (total, out[-3000:])
    _check_database(run, netns_db.uri, 90, total)
    events = _events(run)
    lost = next(e for e in events if e["kind"] == "worker_lost")
    rejoins = [e for e in events if e["kind"] == "worker_join" and e["worker"] == lost["worker"] and "waited_s" in e]
    assert rejoins, [e for e in events if e["kind"] in ("worker_join", "worker_lost", "reshare")]
    rejoin = rejoins[-1]
    assert rejoin["attempts"] >= 1 and rejoin["lead_s"] >= 0.5 and rejoin["from_arrival"] > lost["from_arrival"]
    # from the second after the hand-over to the last whole second: the plan's rate, no hole
    started = datetime.fromisoformat(json.loads((run / "run.json").read_text())["started_utc"].replace("Z", "+00:00"))
    _, per_second, _ = _committed(netns_db.uri, started.timestamp())
    back = rejoin["from_arrival"] / 90 + started.timestamp()
    after = [n for t, n in sorted(per_second.items()) if back + 1 <= t < started.timestamp() + 23]
    # the old way left a third of the plan unsent for seconds (the others had narrowed, the rejoined one not started)
    assert len(after) >= 3 and min(after) >= 0.8 * 90 and sum(after) >= 90 * (len(after) - 0.25), \
        (rejoin, sorted(per_second.items()))
    assert master.returncode == 3, out[-3000:]


def test_killed_worker_leaves_unknown_outcomes_not_unsent_ones(tmp_path, netns_db):
    """A worker on another host is SIGKILLed mid-stage: what it may have issued and never reported is `unknown`
    (bounded by its last lease), not `not sent`; ok + failed + unknown bounds what the database committed."""
    ns = netns_db.netns
    _orders_table(netns_db.uri)
    port = str(free_port())
    master = _master(tmp_path, ns.host_ip, port, netns_db.uri, "12s@90tps", 3)
    cmd = _worker_cmd(ns.host_ip, port, netns_db.uri)
    workers = [_local_worker(cmd, tmp_path) for _ in range(2)]
    workers.append(_ns_worker(ns, cmd, tmp_path, "killed"))
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(4.3)
    os.kill(workers[-1].pid, signal.SIGKILL)
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 1080 and total["not_sent_unaccounted"] == 0, (total, out[-3000:])
    assert 0 < total["unknown"] <= 90 // 3 * 3, total  # at most its share's arrivals over a lease and a report
    per_source = _check_database(run, netns_db.uri, 90, total)
    reported = json.loads((run / "run.json").read_text())["results"]
    assert reported["unknown"] == total["unknown"] and reported["lost_workers"], reported
    killed = reported["lost_workers"][0]
    assert per_source.get(ns.ip, 0) >= reported["operations_per_worker"].get(killed, 0)
    assert f"{total['unknown']} planned arrivals have an unknown outcome" in out, out[-3000:]
    assert master.returncode == 3, out[-3000:]


def test_wrong_token_does_not_count_toward_expect_workers(tmp_path, netns_db):
    """--expect-workers 2 with a refused worker connected first: the plan waits for two admitted workers, starts
    on them from arrival 0 (no re-split), and the refused one is named and sends nothing."""
    ns = netns_db.netns
    _orders_table(netns_db.uri)
    port = str(free_port())
    master = _master(tmp_path, ns.host_ip, port, netns_db.uri, "6s@60tps", 2)
    cmd = _worker_cmd(ns.host_ip, port, netns_db.uri)
    workers = [_ns_worker(ns, cmd, tmp_path, "refused", token="not-the-token"), _local_worker(cmd, tmp_path)]
    time.sleep(6)  # the refused worker and one member are connected: Locust alone would start now
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").glob("*/timeline.csv"))
    workers.append(_local_worker(cmd, tmp_path))
    out = _finish(master, workers)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 360 == total["ok"], (total, out[-3000:])
    per_source = _check_database(run, netns_db.uri, 60, total)
    assert ns.ip not in per_source, per_source  # the refused worker's host committed nothing
    events = _events(run)
    joins = [e for e in events if e["kind"] == "worker_join"]
    assert len(joins) == 2 and {e["count"] for e in joins} == {2} and not any("from_arrival" in e for e in joins), joins
    assert not any(e["kind"] == "reshare" for e in events), [e["kind"] for e in events]
    refused = [e for e in events if e["kind"] == "worker_refused"]
    assert refused and "wrong join token" in refused[0]["reason"] and refused[0]["address"] == ns.ip, refused
    assert "refused" in out and "wrong join token" in out
    assert master.returncode == 0, out[-3000:]


def test_closed_model_processes_collects_every_final_account(tmp_path, pg_uri):
    """``dbsurge run --users 4 --duration 4s --processes 2``: both workers' final accounts arrive; none is lost."""
    proc = subprocess.run(
        [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", pg_uri, "--users", "4",
         "--duration", "4s", "--processes", "2", "--operation", "product_lookup", "--workload-option",
         "products=300", "--no-db-sampler"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert "sent no final account" not in out and "workers lost" not in out, out[-3000:]
    assert proc.returncode == 0, out[-3000:]
    assert "proved the join token" not in out  # its own children: said only of a worker from elsewhere
    meta = json.loads((only_run_dir(tmp_path / "results") / "run.json").read_text())
    assert meta["results"]["lost_workers"] == [] and len(meta["results"]["operations_per_worker"]) == 2, meta["results"]
    assert sum(meta["results"]["operations_per_worker"].values()) == meta["results"]["operations"] > 0
