"""Many hosts: the plan stays exact through a partition, a cut from the database, a join, a skewed clock and a leave.

Workers are separate `locust --worker` processes; "another host" is a network namespace made for
the test (tests/faults.py), with the database inside it and the master on the root side of its
veth. Every case checks the ledger, that the achieved rate never exceeds the plan, and the words.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from ledger_checks import ledger
from runs import REPO, only_run_dir, read_csv, run_files

from dbsurge.embedded.servers import free_port

FILES = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/stages.py"


def _master(tmp_path, bind: str, port: str, target: str, stages: str, workers: int, env=None,
            extra: tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", FILES, "--master", "--headless", "--expect-workers", str(workers),
         "--master-bind-host", bind, "--master-bind-port", port, "--stages", stages, "--target", target,
         "--operation", "product_lookup", "--workload-option", "products=300", "--no-db-sampler",
         "--align-start", "1", "--results-dir", str(tmp_path / "results"), *extra],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})


def _worker_cmd(master_host: str, port: str, target: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-host", master_host,
            "--master-port", port, "--target", target, "--operation", "product_lookup",
            "--workload-option", "products=300"]


def _finish(master, workers, timeout=150) -> str:
    try:
        out, _ = master.communicate(timeout=timeout)
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
    return out


def _wait_for_timeline(results, timeout: float = 60) -> None:
    """Until the plan runs (the master writes timeline.csv from its time zero on)."""
    deadline = time.time() + timeout
    while time.time() < deadline and not run_files(results, "timeline.csv"):
        time.sleep(0.1)


def _events(run) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def _ns_worker(ns, cmd: list[str], tmp_path, name: str, token: str = "t0k3n") -> subprocess.Popen:
    """A worker on the namespace host (its own address, its own iptables), with the join token."""
    return subprocess.Popen(ns.cmd("env", f"DBSURGE_JOIN_TOKEN={token}", f"PATH={os.environ['PATH']}", *cmd),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.err", "w"))


def _never_above_plan(run, slack: int = 3) -> None:
    """By every second, the operations completed so far never exceed the arrivals planned so far.

    (Per second alone is no test: a report that arrives late is folded into the next open second.)
    """
    done = planned = 0.0
    for r in read_csv(run / "timeline.csv"):
        if r["operation"] == "ALL":
            done += int(r["count"])
            planned += float(r["target_tps"] or 0)
            assert done <= planned + slack, (r["time_utc"], done, planned)


def test_skewed_clock_is_measured_and_corrected(tmp_path, pg_uri):
    """A worker whose clock is 0.5 s ahead: its offset is measured (NTP-style) and its stages start on time."""
    port = str(free_port())
    master = _master(tmp_path, "127.0.0.1", port, pg_uri, "4s@100tps,4s@200tps", 2)
    workers = [subprocess.Popen(_worker_cmd("127.0.0.1", port, pg_uri), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "DBSURGE_TEST_CLOCK_SKEW_S": skew})
               for skew in ("0", "0.5")]
    out = _finish(master, workers)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 1200 == total["ok"], (total, out[-2000:])
    offsets = json.loads((run / "run.json").read_text())["results"]["clock_offsets"]
    assert sorted(round(o["offset_ms"] / 100) for o in offsets.values()) == [0, 5], offsets
    assert all(o["uncertainty_ms"] < 50 for o in offsets.values())
    # the stage boundary falls on the plan's second: whole seconds are 100, then 200, nothing in between
    counts = [int(r["count"]) for r in read_csv(run / "timeline.csv") if r["operation"] == "ALL"
              and r["target_tps"] not in ("", "0.0")]
    inner = [c for c in counts[1:-1]]
    assert all(abs(c - 100) <= 3 or abs(c - 200) <= 5 for c in inner), counts
    stages = {r["stage"]: r for r in read_csv(run / "stages.csv") if r["operation"] == "ALL"}
    assert int(stages["100tps"]["ok"]) == 400 and int(stages["200tps"]["ok"]) == 800
    # per-worker truth: each worker's seconds, adding up to the run
    per_worker = read_csv(run / "workers.csv")
    assert len({r["worker"] for r in per_worker}) == 2
    assert sum(int(r["ok"]) for r in per_worker) == 1200


def test_sigterm_worker_leaves_gracefully(tmp_path, pg_uri):
    """SIGTERM (a Spot interruption): the worker sends its share up to the hand-over, the other takes the rest."""
    port = str(free_port())
    master = _master(tmp_path, "127.0.0.1", port, pg_uri, "8s@100tps", 2)
    workers = [subprocess.Popen(_worker_cmd("127.0.0.1", port, pg_uri), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(2)]
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(3)
    workers[0].send_signal(signal.SIGTERM)
    workers[0].wait(timeout=15)
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 800, total
    assert total["ok"] + total["unknown"] + total["not_sent_in_flight"] == 800, (total, out[-2000:])
    assert total["not_sent_unaccounted"] == 0, total
    events = _events(run)
    assert any(e["kind"] == "worker_leaving" for e in events)
    assert not any(e["kind"] == "worker_lost" for e in events)
    _never_above_plan(run)
    assert master.returncode == 0, out[-3000:]


def test_worker_cut_from_the_master(tmp_path, netns_db):
    """A worker in another namespace loses the master for 5 s (iptables): it pauses before its share is
    given away, comes back (TCP retransmits after the cut: a few seconds), and nothing is sent twice."""
    ns = netns_db.netns
    port = str(free_port())
    master = _master(tmp_path, ns.host_ip, port, netns_db.uri, "20s@90tps", 3, env={"DBSURGE_JOIN_TOKEN": "t0k3n"})
    env = {**os.environ, "DBSURGE_JOIN_TOKEN": "t0k3n"}
    cmd = _worker_cmd(ns.host_ip, port, netns_db.uri)
    workers = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
               for _ in range(2)]
    workers.append(_ns_worker(ns, cmd, tmp_path, "cut"))
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(3)
    rule = ["OUTPUT", "-p", "tcp", "-d", ns.host_ip, "--dport", port, "-j", "DROP"]
    ns.run("iptables", "-w", "-A", *rule)
    try:
        time.sleep(5)
    finally:
        ns.run("iptables", "-w", "-D", *rule)
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 1800, total
    assert total["over_plan"] == 0 and total["not_sent_unaccounted"] == 0, (total, out[-2000:])
    assert total["not_sent_worker_lost"] > 0, total
    _never_above_plan(run)
    events = _events(run)
    assert any(e["kind"] == "worker_lost" for e in events), [e["kind"] for e in events]
    # the cut-off worker's own account of it reached the master once it was back
    assert any(e["kind"] == "worker_log" and "lease lapsed" in e["message"] for e in events)
    assert master.returncode == 3  # arrivals lost to the partition: the measurement says it is incomplete
    assert "workers lost during the run" in out


class _Imds:
    """A stand-in for the EC2 instance metadata service on 127.0.0.1 (IMDSv2), in a thread."""

    def __init__(self) -> None:
        import http.server
        import threading

        owner = self
        self.notice: dict | None = None

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_a):
                pass

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):  # noqa: N802 - the http.server naming
                self._send(200, b"tok")

            def do_GET(self):  # noqa: N802
                if self.path == "/latest/meta-data/spot/instance-action" and owner.notice:
                    self._send(200, json.dumps(owner.notice).encode())
                else:
                    self._send(404, b"not found")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_spot_interruption_notice_leaves_gracefully(tmp_path, pg_uri):
    """An interruption notice in the instance metadata: the worker leaves like on SIGTERM, nothing lost."""
    imds = _Imds()
    port = str(free_port())
    master = _master(tmp_path, "127.0.0.1", port, pg_uri, "10s@100tps", 2)
    env = {**os.environ, "DBSURGE_SPOT_WATCH": "1", "DBSURGE_IMDS_ENDPOINT": imds.endpoint}
    workers = [subprocess.Popen(_worker_cmd("127.0.0.1", port, pg_uri), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env if i == 0 else None) for i in range(2)]
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(3)
    imds.notice = {"action": "terminate", "time": "2026-12-01T12:00:00Z"}
    workers[0].wait(timeout=20)
    out = _finish(master, workers)
    imds.server.shutdown()
    run = only_run_dir(results)
    total = ledger(run)
    assert total["ok"] + total["unknown"] + total["not_sent_in_flight"] == total["planned"] == 1000, \
        (total, out[-2000:])
    events = _events(run)
    leaving = [e for e in events if e["kind"] == "worker_leaving"]
    assert leaving and "interruption" in leaving[0]["why"].lower(), leaving
    _never_above_plan(run)
    assert master.returncode == 0, out[-3000:]


def test_pool_sized_from_a_probe_holds_the_first_second_at_50ms(tmp_path, pg_server, delay_proxy):
    """50 ms between the generator and the database (a delaying proxy: no netem here): the preflight
    probe measures the service time, so the pool is big enough from the plan's first second."""
    proxy = delay_proxy("127.0.0.1", pg_server.port, delay_ms=25)
    uri = proxy.rewrite(pg_server.uri)
    proc = subprocess.run(
        [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", uri, "--shape", "constant",
         "--rate", "100", "--duration", "5s", "--operation", "product_lookup", "--workload-option", "products=300",
         "--no-db-sampler", "--quiet", "--align-start", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    run = only_run_dir(tmp_path / "results")
    rows = [r for r in read_csv(run / "timeline.csv") if r["operation"] == "ALL" and r["target_tps"] == "100.0"]
    assert rows and int(rows[0]["count"]) >= 90, [(r["time_utc"], r["count"], r["lag_p99_ms"]) for r in rows]
    assert float(rows[0]["lag_p99_ms"]) < 100, rows[0]



def test_worker_cut_from_the_database(tmp_path, netns_db):
    """A worker on the database's host loses the database for 5 s (iptables in its network stack) but not
    the master: its slots fail (timeout, then connect), under its name and address in workers.csv, the
    events and the summary; the others go on; nothing is lost or sent twice; the failure check fails (exit 1)."""
    ns = netns_db.netns
    port = str(free_port())
    token = {"DBSURGE_JOIN_TOKEN": "t0k3n"}
    master = _master(tmp_path, ns.host_ip, port, netns_db.uri, "16s@90tps", 3, env=token,
                     extra=("--op-timeout", "1s", "--target-option", "connect_timeout=1", "--check", "failure_rate<1%"))
    cmd = _worker_cmd(ns.host_ip, port, netns_db.uri)
    workers = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, **token}) for _ in range(2)]
    workers.append(_ns_worker(ns, cmd, tmp_path, "cut"))
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(3)
    # its own packets to the database, on the namespace's loopback: the master's link and the others' stay up
    rule = ["OUTPUT", "-o", "lo", "-p", "tcp", "-d", netns_db.host, "--dport", str(netns_db.port), "-j", "DROP"]
    ns.run("iptables", "-w", "-A", *rule)
    try:
        time.sleep(5)
    finally:
        ns.run("iptables", "-w", "-D", *rule)
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    assert total["planned"] == 1440 and total["over_plan"] == 0, (total, out[-3000:])
    assert total["not_sent"] == total["not_sent_in_flight"] and total["dropped"] == 0, total
    failed = total["failed_timeout"] + total["failed_connect"] + total["failed_disconnect"]
    assert failed == total["failures"] > 20, total
    _never_above_plan(run)
    # the failures are the cut worker's alone, under its own address
    per_worker = read_csv(run / "workers.csv")
    hosts = {r["worker"]: r["host"] for r in per_worker}
    assert len(hosts) == 3, hosts
    cut = next(w for w, h in hosts.items() if h.endswith(f"({ns.ip})"))
    assert sum(int(r["failed"]) for r in per_worker if r["worker"] == cut) == total["failures"]
    assert all(h.endswith(f"({ns.host_ip})") for w, h in hosts.items() if w != cut), hosts
    events = _events(run)
    failures = [e for e in events if e["kind"] == "failure"]
    assert failures and {e["worker"] for e in failures} == {cut}, failures
    assert not any(e["kind"] in ("worker_lost", "reshare") for e in events), [e["kind"] for e in events]
    # the summary says who failed, where, how and why
    finding = next(line for line in out.splitlines() if "operations failed on 1 of 3 workers" in line)
    assert f"{cut} on {hosts[cut]}" in finding and "timeout" in finding, finding
    assert "check FAILED: failure_rate<1%" in out
    assert master.returncode == 1, out[-3000:]


def test_worker_joining_mid_run(tmp_path, netns_db):
    """A fourth worker, on another host, joins 4 s into the plan: Locust gives it users, dbsurge a share from
    an arrival nobody has sent yet; the others hand that share over; nothing is sent twice."""
    ns = netns_db.netns
    port = str(free_port())
    token = {"DBSURGE_JOIN_TOKEN": "t0k3n"}
    master = _master(tmp_path, ns.host_ip, port, netns_db.uri, "16s@90tps", 3, env=token)
    cmd = _worker_cmd(ns.host_ip, port, netns_db.uri)
    workers = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, **token}) for _ in range(3)]
    results = tmp_path / "results"
    _wait_for_timeline(results)
    time.sleep(4)
    workers.append(_ns_worker(ns, cmd, tmp_path, "joined"))
    out = _finish(master, workers)
    run = only_run_dir(results)
    total = ledger(run)
    # every arrival sent once: none twice (the joiner starts at the hand-over), none lost
    assert total["planned"] == 1440 and total["over_plan"] == 0, (total, out[-3000:])
    assert total["ok"] + total["unknown"] + total["not_sent_in_flight"] == 1440, total
    _never_above_plan(run)
    events = _events(run)
    joins = [e for e in events if e["kind"] == "worker_join"]
    assert len(joins) == 4 and all(e.get("address") for e in joins), joins
    late = joins[-1]
    assert late["address"] == ns.ip and late["count"] == 4 and late["from_arrival"] > 300, late
    assert any(e["kind"] == "clock" and e["worker"] == late["worker"] for e in events)  # measured before its share
    assert not any(e["kind"] in ("worker_refused", "worker_lost") for e in events), [e["kind"] for e in events]
    # it sent its share: a quarter of the rate from the hand-over on
    per_worker = read_csv(run / "workers.csv")
    sent = sum(int(r["sent"]) for r in per_worker if r["worker"] == late["worker"])
    assert sent >= (1440 - late["from_arrival"]) // 4 - 3, (sent, late)
    assert {r["host"] for r in per_worker if r["worker"] == late["worker"]} == {f"{late['host']} ({ns.ip})"}
    assert master.returncode == 0, out[-3000:]
