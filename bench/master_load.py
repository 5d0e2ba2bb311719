"""``python bench/master_load.py``: what a dbsurge master costs at 50, 100 and 200 workers.

The studies' harnesses ran up to 16 x 200 threads, and Locust's own master becomes CPU-bound near
1,000 workers. Starting 200 real workers on one 2-core machine would measure the workers, not the
master, so the master here is real (``locust --master`` with dbsurge's locustfile and shape, on the
embedded PostgreSQL) and the workers are *synthetic*: ZMQ clients (Locust's own RPC client) in a
few fleet processes that speak the worker's side of the protocol the master sees:

- Locust's: ``client_ready`` (and its ack), ``heartbeat`` every 0.5 s, ``spawning`` /
  ``spawning_complete`` for each spawn, ``stats`` once a second, ``quit``;
- dbsurge's: the hello and the join challenge's proof (`dbsurge.engine.membership`), a lease renewal every
  0.25 s (`dbsurge.engine.lease`), answers to clock pings, the final account at ``dbsurge:close``.

The once-a-second ``stats`` payload is the real thing at a realistic size: built by dbsurge's own
`Recorder` from ``--ops-per-worker`` operations (default 2,500 a second: 200 workers are study
002's 500 kOps/s) with a spread of service times, lags and a few failures, and Locust's own
``RequestStats`` of the same operations; a fleet builds a few such payloads once and sends them
with each second's timestamps, so the fleet's own CPU stays low and the master merges exactly what
a worker at that rate sends. The synthetic workers send no database load, so the run's ledger is
not the point here (the plan's arrivals end as not sent); the master's work per report is.

Measured per worker count: the master's CPU (cores) over the steady part of the run, its RSS,
its event loop's worst stall (run.json ``master_loop_stall_max_ms``, from its own 0.25 s wake-ups),
the lease renewals' round trip seen by the synthetic workers (p50 / p99 / max: what a real
worker's lease would feel), and the end of run: from the plan's end to the master's exit.

    python bench/master_load.py                       # 50, 100, 200 workers, 30 s each
    python bench/master_load.py --workers 20 --seconds 10 --json /tmp/m.json   # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO = Path(__file__).resolve().parent.parent
OPERATIONS = ("product_lookup", "order_create", "order_status")
TEMPLATES = 4  # distinct payloads per fleet process, sent in turn


def log(message: str) -> None:
    print(f"[master-load {time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- the synthetic workers (a fleet process) ------------------------------------------------------------

def build_templates(ops_per_s: int, seed: int) -> list[dict]:
    """Real once-a-second reports of a worker doing ``ops_per_s`` operations: dbsurge's and Locust's parts."""
    from locust.stats import RequestStats

    from dbsurge.measure.recorder import Recorder

    rng = random.Random(seed)
    out = []
    for _ in range(TEMPLATES):
        rec = Recorder()
        stats = RequestStats(use_response_times_cache=False)
        ids = [rec.op_id(name) for name in OPERATIONS]
        timeout = rec.kind_id("timeout")
        t0 = time.perf_counter_ns()
        for i in range(ops_per_s):
            k = i % len(OPERATIONS)
            intended = t0 + i * (1_000_000_000 // ops_per_s)
            start = intended + int(rng.expovariate(1 / 40_000))  # lag: tens of µs
            service = int(rng.lognormvariate(math.log(800_000), 0.6))  # ~0.8 ms, a long tail
            kind = timeout if rng.random() < 0.001 else 0
            rec.record(ids[k], 0, intended, start, start + service, kind, 0)
            stats.log_request("orders", OPERATIONS[k], (start + service - intended) / 1e6, 0)
            if kind:
                stats.log_error("orders", OPERATIONS[k], "OperationTimeout")
        out.append({"dbsurge": rec.drain(), "stats": stats.serialize_stats(),
                    "stats_total": stats.total.get_stripped_report(), "errors": stats.serialize_errors()})
    return out


def restamp(template: dict, second: int, user_classes_count: dict | None = None) -> dict:
    """``template`` as this second's report: its interval rows dated ``second``, the worker's users named."""
    d = dict(template["dbsurge"])
    d["intervals"] = [[second, op, wire] for _sec, op, wire in d["intervals"]]
    users = user_classes_count or {}
    return {**template, "dbsurge": d, "user_count": sum(users.values()), "user_classes_count": users}


class SyntheticWorker:
    def __init__(self, host: str, port: int, token: str | None, templates: list[dict], index: int):
        import socket
        import uuid

        from locust.rpc import rpc

        self.id = f"{socket.gethostname()}_synthetic{index}_{uuid.uuid4().hex[:8]}"
        self.client = rpc.Client(host, port, self.id)
        self.token = token
        self.templates = templates
        self.index = index
        self.state = "ready"
        self.user_classes_count: dict = {}
        self.renew_rtt_us: list[int] = []
        self.sent_reports = 0
        self.done = False
        self.acked = None

    def send(self, kind: str, data) -> None:
        from locust.rpc import Message

        self.client.send(Message(kind, data, self.id))

    def run(self) -> None:
        import gevent
        from gevent.event import Event
        from locust import __version__

        self.acked = Event()
        receiver = gevent.spawn(self.receive)
        while not self.acked.is_set():  # Locust's handshake: client_ready until the master's ack
            self.send("client_ready", __version__)
            self.acked.wait(5)
        from dbsurge.engine.hosts import hello_fields

        self.send("dbsurge:hello", hello_fields("127.0.0.1", 0))
        loops = [gevent.spawn(self.every, 0.5, self.heartbeat), gevent.spawn(self.every, 0.25, self.renew),
                 gevent.spawn(self.every, 1.0, self.report)]
        receiver.join()
        gevent.killall(loops)

    def every(self, period: float, fn) -> None:
        import gevent

        gevent.sleep(random.random() * period)  # the workers' timers are not in phase
        while not self.done:
            fn()
            gevent.sleep(period)

    def heartbeat(self) -> None:
        self.send("heartbeat", {"state": self.state, "current_cpu_usage": 5.0, "current_memory_usage": 80_000_000})

    def renew(self) -> None:
        self.send("dbsurge:renew", {"sent_ns": time.perf_counter_ns()})

    def report(self) -> None:
        if self.state != "running":
            return
        self.sent_reports += 1
        self.send("stats", restamp(self.templates[self.sent_reports % len(self.templates)], int(time.time()),
                                   self.user_classes_count))

    def receive(self) -> None:  # noqa: C901 - one branch per message the master sends
        from dbsurge.engine.clocks import wall_ns
        from dbsurge.engine.membership import proof

        while not self.done:
            msg = self.client.recv()
            t = msg.type
            if t == "ack":
                self.acked.set()
            elif t == "dbsurge:challenge":
                self.send("dbsurge:proof", {"proof": proof(self.token, msg.data["nonce"], self.id) if self.token
                                            else None})
            elif t == "dbsurge:lease":
                sent = (msg.data or {}).get("sent_ns")
                if isinstance(sent, int):
                    self.renew_rtt_us.append((time.perf_counter_ns() - sent) // 1000)
            elif t == "dbsurge:clock":
                t2 = wall_ns()
                self.send("dbsurge:clock", {"t1": msg.data["t1"], "t2": t2, "t3": wall_ns()})
            elif t == "spawn":
                self.send("spawning", None)
                self.user_classes_count = msg.data["user_classes_count"]
                self.state = "running"
                self.send("spawning_complete", {"user_classes_count": self.user_classes_count,
                                                "user_count": sum(self.user_classes_count.values())})
            elif t == "dbsurge:close":
                last = restamp(self.templates[0], int(time.time()))["dbsurge"]
                self.send("dbsurge:final", {"payload": last, "in_flight": 0, "oldest_s": 0.0,
                                            "reason": msg.data.get("in_flight_reason")})
            elif t == "stop":
                self.state = "stopped"
                self.send("client_stopped", None)
                self.send("client_ready", __import__("locust").__version__)
            elif t in ("quit", "dbsurge:refused"):
                self.done = True
                if t == "dbsurge:refused":
                    print(f"refused: {msg.data}", file=sys.stderr, flush=True)


def fleet_main(host: str, port: int, count: int, first: int, ops_per_s: int) -> int:
    """A fleet process: ``count`` synthetic workers; prints their lease round trips as one JSON line."""
    import gevent

    templates = build_templates(ops_per_s, seed=first)
    token = os.environ.get("DBSURGE_JOIN_TOKEN")
    workers = [SyntheticWorker(host, port, token, templates, first + i) for i in range(count)]
    greenlets = [gevent.spawn(w.run) for w in workers]
    gevent.joinall(greenlets)
    size = len(__import__("msgpack").packb(restamp(templates[0], int(time.time())), use_bin_type=True))
    rtts = sorted(x for w in workers for x in w.renew_rtt_us)
    print(json.dumps({"workers": count, "reports": sum(w.sent_reports for w in workers), "report_bytes": size,
                      "renew_rtt_us": _percentiles(rtts)}), flush=True)
    return 0


def _percentiles(values: list[int]) -> dict:
    if not values:
        return {"n": 0}

    def q(p: float) -> int:
        return values[min(len(values) - 1, int(p * len(values)))]

    return {"n": len(values), "p50": q(0.5), "p99": q(0.99), "max": values[-1]}


# -- the master and the measurement ---------------------------------------------------------------------

def one_count(pg_uri: str, products: int, workers: int, seconds: int, ops_per_worker: int, fleets: int,
              workdir: Path) -> dict:
    import psutil

    from dbsurge.embedded.servers import free_port

    port = free_port()
    token = "bench-" + os.urandom(8).hex()
    env = {**os.environ, "DBSURGE_JOIN_TOKEN": token, "PYTHONUNBUFFERED": "1"}
    results = workdir / f"results-{workers}"
    rate = workers * ops_per_worker
    master_cmd = [sys.executable, "-m", "locust", "-f", f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py",
                  "--master", "--headless", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                  "--expect-workers", str(workers), "--target", pg_uri, "--rate", str(rate), "-t", f"{seconds}s",
                  "--operation", "product_lookup", "--workload-option", f"products={products}", "--no-db-sampler",
                  "--results-dir", str(results), "--loglevel", "WARNING"]
    master_log = open(workdir / f"master-{workers}.log", "w+")  # noqa: SIM115 - read back at the end
    master = subprocess.Popen(master_cmd, cwd=workdir, env=env, stdout=master_log, stderr=subprocess.STDOUT,
                              text=True)
    per = [workers // fleets + (1 if i < workers % fleets else 0) for i in range(fleets)]
    fleet_procs = []
    first = 0
    for n in per:
        fleet_procs.append(subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--fleet", f"127.0.0.1:{port}:{n}:{first}",
             "--ops-per-worker", str(ops_per_worker)], cwd=workdir, env=env, stdout=subprocess.PIPE,
            stderr=open(workdir / f"fleet-{workers}-{first}.log", "w"), text=True))  # noqa: SIM115
        first += n
    mp = psutil.Process(master.pid)
    started = time.monotonic()
    cpu_series: list[tuple[float, float, float]] = []  # (s since start, master CPU s, RSS MB)
    while master.poll() is None and time.monotonic() - started < seconds + 600:
        broken = next((f for f in fleet_procs if f.poll() not in (None, 0)), None)
        if broken is not None:  # a fleet that died leaves the master waiting for --expect-workers forever
            master.kill()
            raise RuntimeError(f"a fleet process exited with {broken.returncode} (its log: {workdir}/fleet-*.log)")
        try:
            ct = mp.cpu_times()
            cpu_series.append((time.monotonic() - started, ct.user + ct.system, mp.memory_info().rss / 1e6))
        except psutil.Error:
            break
        time.sleep(0.5)
    master.wait(timeout=60)
    master_log.seek(0)
    out = master_log.read()
    ended = time.monotonic()
    fleet_out = []
    for p in fleet_procs:
        try:
            o, e = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
        fleet_out.append(next((json.loads(x) for x in o.splitlines() if x.startswith("{")), {"error": "no line"}))
    run_json = next(iter(sorted(results.glob("*/run.json"))), None)
    meta = json.loads(run_json.read_text()) if run_json else {}
    res = meta.get("results") or {}
    # the plan's start and end from run.json's stages; the steady part leaves out its first and last 5 s
    plan = meta.get("plan") or {}
    t_start = _plan_start_offset(meta, started)
    steady = [(t, c, r) for t, c, r in cpu_series if t_start + 5 <= t <= t_start + seconds - 3]
    cores = (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) if len(steady) >= 2 else float("nan")
    rtts = [f["renew_rtt_us"] for f in fleet_out if "renew_rtt_us" in f]
    return {
        "workers": workers, "seconds": seconds, "ops_per_worker": ops_per_worker, "rate": rate,
        "master_exit": master.returncode, "master_cores": round(cores, 3),
        "master_rss_mb": round(max((r for _, _, r in cpu_series), default=float("nan")), 1),
        "master_cpu_total_s": round(cpu_series[-1][1], 2) if cpu_series else None,
        "master_loop_stall_max_ms": res.get("master_loop_stall_max_ms"),
        "end_of_run_s": round(ended - started - t_start - seconds, 2) if t_start is not None else None,
        "start_s": round(t_start, 2) if t_start is not None else None,
        "report_bytes": next((f.get("report_bytes") for f in fleet_out if f.get("report_bytes")), None),
        "reports_sent": sum(f.get("reports", 0) for f in fleet_out),
        "renew_rtt_p50_ms": _worst(rtts, "p50"), "renew_rtt_p99_ms": _worst(rtts, "p99"),
        "renew_rtt_max_ms": _worst(rtts, "max"),
        "workers_in_run": len(res.get("operations_per_worker") or {}), "plan_stages": len(plan.get("stages") or []),
        "output_tail": out[-1500:],
    }


def _worst(rtts: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rtts if key in r]
    return round(max(vals) / 1000, 1) if vals else None


def _plan_start_offset(meta: dict, started_mono: float) -> float | None:
    """Seconds from the master's start to the plan's start (run.json started_utc, on this host's clock)."""
    from datetime import datetime

    s = meta.get("started_utc")
    if not s:
        return None
    epoch = datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    return epoch - (time.time() - (time.monotonic() - started_mono))


def section(rows: list[dict], when: float, command: str) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when))
    lines = ["## 6. The master at 50, 100 and 200 workers\n",
             (f"`{command}` on {stamp}: a real master (`locust --master`, dbsurge's orders locustfile and constant "
              "shape, the embedded PostgreSQL) and synthetic workers (ZMQ clients speaking the worker's side of "
              "Locust's and dbsurge's protocol: heartbeats every 0.5 s, lease renewals every 0.25 s, clock answers, "
              "the final account) that send once a second the report a real worker sends at the given rate (built "
              "by dbsurge's Recorder and Locust's RequestStats). Goals: 200 workers under half a core, the "
              "master's loop stall under 50 ms.\n"),
             "| workers | their rate (ops/s) | report size | master CPU, steady (cores) | master RSS | "
             "master loop stall, worst | lease renewal round trip p50 / p99 / max | end of run | exit |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workers']} | {r['rate']:,} | {(r['report_bytes'] or 0) / 1000:.1f} kB | "
                     f"{r['master_cores']:.2f} | {r['master_rss_mb']:.0f} MB | {r['master_loop_stall_max_ms']} ms | "
                     f"{r['renew_rtt_p50_ms']} / {r['renew_rtt_p99_ms']} / {r['renew_rtt_max_ms']} ms | "
                     f"{r['end_of_run_s']} s | {r['master_exit']} |")
    lines.append("\nThe round trip is seen by the synthetic workers, whose fleet processes share the machine's two "
                 "cores with the master: it bounds the master's answer time from above. The exit code is the "
                 "master's verdict on a run whose workers sent no database load (their arrivals end as not sent), "
                 "so it is not 0 by design.\n")
    return "\n".join(lines)


def measure(pg_uri: str, products: int, counts: list[int], seconds: int, ops_per_worker: int, fleets: int,
            workdir: Path, log=log) -> list[dict]:
    """One row per worker count (`one_count`), logged as it goes (`bench/run.py`'s section ``master`` too)."""
    rows = []
    for n in counts:
        log(f"{n} synthetic workers at {ops_per_worker:,} ops/s each, {seconds} s")
        row = one_count(pg_uri, products, n, seconds, ops_per_worker, fleets, workdir)
        log(f"  master {row['master_cores']:.2f} cores, RSS {row['master_rss_mb']:.0f} MB, loop stall "
            f"{row['master_loop_stall_max_ms']} ms, renewal p99 {row['renew_rtt_p99_ms']} ms, end of run "
            f"{row['end_of_run_s']} s, {row['workers_in_run']} workers in run.json")
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/master_load.py", description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="50,100,200", help="comma list of worker counts (default 50,100,200)")
    p.add_argument("--seconds", type=int, default=30, help="the plan's length per count (default 30)")
    p.add_argument("--ops-per-worker", type=int, default=2500, help="operations a second per worker (default 2500)")
    p.add_argument("--fleets", type=int, default=2, help="fleet processes hosting the synthetic workers (default 2)")
    p.add_argument("--pg-uri", help="use this PostgreSQL instead of starting the embedded one")
    p.add_argument("--json", type=Path, help="also write every number here")
    p.add_argument("--output", type=Path, default=REPO / "bench" / "RESULTS.md",
                   help="the report whose section 6 is rewritten (default bench/RESULTS.md)")
    p.add_argument("--fleet", help=argparse.SUPPRESS)  # HOST:PORT:COUNT:FIRST, a fleet process
    args = p.parse_args(argv)
    if args.fleet:
        host, port, count, first = args.fleet.rsplit(":", 3)
        return fleet_main(host, int(port), int(count), int(first), args.ops_per_worker)
    counts = [int(x) for x in args.workers.split(",") if x.strip()]
    if not counts or min(counts) < 1 or args.seconds < 10 or args.ops_per_worker < 1 or args.fleets < 1:
        p.error("--workers needs positive counts, --seconds at least 10, --ops-per-worker and --fleets at least 1")
    import tempfile
    from contextlib import nullcontext

    from bench.measure import become_subreaper
    from bench.servers import embedded_servers, load_data, servers_from_uris

    become_subreaper()
    when = time.time()
    command = "python bench/master_load.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    ctx = nullcontext(servers_from_uris(args.pg_uri, None)) if args.pg_uri else embedded_servers(None, mongo=False)
    keep = os.environ.get("DBSURGE_BENCH_KEEP")  # a directory to keep the logs in (development)
    with (nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="dbsurge-master-load-")) as tmp, \
            ctx as servers:
        load_data(servers, scale=1, products=10_000, records=0, log=lambda m: log("  " + m))
        rows = measure(servers.pg_uri, 10_000, counts, args.seconds, args.ops_per_worker, args.fleets, Path(tmp))
    if args.json:
        args.json.write_text(json.dumps({"started": when, "command": command, "rows": rows}, indent=1))
    from bench.soak import splice

    text = args.output.read_text() if args.output.exists() else ""
    args.output.write_text(splice(text, section(rows, when, command), start="## 6. The master"))
    log(f"wrote section 6 of {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
