"""bench/RESULTS.md: the tables, the machine, and how the numbers were taken."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

from bench.recorder_cost import BOUNDED_FILES
from bench.throughput import Sample, Spread, by_client, paired_ratio


def fmt(x: float, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.{digits}f}"


def spread(s: Spread, digits: int = 0, suffix: str = "") -> str:
    if math.isnan(s.median):
        return "n/a"
    if len(s.values) == 1:
        return f"{fmt(s.median, digits)}{suffix}"
    return f"{fmt(s.median, digits)}{suffix} ({fmt(s.low, digits)}–{fmt(s.high, digits)})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def throughput_section(samples: list[Sample], labels: dict[str, tuple[str, str]], reps: int, long_s: int,
                       short_s: int, users: int) -> str:
    groups = by_client(samples)
    rows = []
    for key, runs in groups.items():
        label, concurrency = labels[key]
        ops = Spread.of([r.ops_per_s for r in runs])
        marginal = Spread.of([r.cpu_us_marginal for r in runs])
        whole = Spread.of([r.cpu_us_whole for r in runs])
        vs_pgbench = paired_ratio(samples, key, "pgbench", "ops_per_s") if "pgbench" in groups else None
        cpu_vs_pgbench = paired_ratio(samples, key, "pgbench", "cpu_us_marginal") if "pgbench" in groups else None
        rows.append([label, concurrency, spread(ops), spread(marginal, 1), spread(whole, 1),
                     spread(vs_pgbench, 2, "x") if vs_pgbench else "n/a",
                     spread(cpu_vs_pgbench, 2, "x") if cpu_vs_pgbench else "n/a"])
    out = ["## 1. Throughput and client CPU per operation\n",
           (f"{reps} repetition(s) of {long_s} s per client (and {short_s} s for the marginal CPU), clients "
            f"alternating; {users} connections/users where the client is concurrent. Median (min–max) over "
            "repetitions; ratios are taken within a repetition.\n"),
           _table(["client", "concurrency", "ops/s", "client CPU µs/op (marginal)", "client CPU µs/op (whole run)",
                   "ops/s vs pgbench", "CPU/op vs pgbench"], rows)]
    return "\n".join(out)


def goals_section(samples: list[Sample], labels: dict[str, tuple[str, str]], long_run=None,
                  cql_samples: list[Sample] | None = None) -> str:
    groups = by_client(samples)
    rows = []
    suffixes = sorted({k.partition("@")[2] for k in groups})
    for suffix in suffixes:
        at = f"@{suffix}" if suffix else ""
        tag = f" [{suffix}]" if suffix else ""
        for p, locust in (("dbsurge", "locust"), ("dbsurge_p2", "locust_p2")):
            key = p + at
            if key not in groups:
                continue
            procs = "1 process" if p == "dbsurge" else "2 processes"
            if "pgbench" in groups:
                rows.append([f"product lookup TPS ≥ 80% of pgbench ({procs}){tag}", "≥ 0.80x",
                             spread(paired_ratio(samples, key, "pgbench", "ops_per_s"), 2, "x")])
            if locust in groups:
                rows.append([f"product lookup TPS ≥ 3x plain Locust ({procs}){tag}", "≥ 3x",
                             spread(paired_ratio(samples, key, locust, "ops_per_s"), 2, "x")])
            if "pgbench" in groups:
                rows.append([f"client CPU/op ≤ 2x pgbench's ({procs}){tag}", "≤ 2x",
                             spread(paired_ratio(samples, key, "pgbench", "cpu_us_marginal"), 2, "x")])
            if "bare_pq16" in groups:
                rows.append([f"client CPU/op ≤ 1.2x the bare psycopg.pq loop on 16 connections ({procs}){tag}",
                             "≤ 1.2x", spread(paired_ratio(samples, key, "bare_pq16", "cpu_us_marginal"), 2, "x")])
            if "bare_pq16_gevent" in groups:
                ratio = paired_ratio(samples, key, "bare_pq16_gevent", "cpu_us_marginal")
                rows.append([f"(reference) client CPU/op vs the 16-connection loop on gevent ({procs}){tag}",
                             "", spread(ratio, 2, "x")])
        if "dbsurge_ycsb" + at in groups and "bare_pymongo" in groups:
            rows.append([f"YCSB read client CPU/op ≤ 1.1x bare pymongo loop{tag}", "≤ 1.1x",
                         spread(paired_ratio(samples, "dbsurge_ycsb" + at, "bare_pymongo", "cpu_us_marginal"), 2, "x")])
        if "dbsurge_ycsb" + at in groups and "bare_pymongo_gevent" in groups:
            rows.append([f"(reference) YCSB read CPU/op vs the bare loop under gevent{tag}", "",
                         spread(paired_ratio(samples, "dbsurge_ycsb" + at, "bare_pymongo_gevent", "cpu_us_marginal"),
                                2, "x")])
    rows += _cql_goal_rows(cql_samples or [])
    if long_run is not None:
        lr = long_run
        rows.append(["12-hour run at 500 TPS: results on disk", "< 100 MB",
                     f"{fmt(lr.disk_fixed_mb + lr.disk_mb_per_h * 12, 1)} MB (projected)"])
        rows.append([(f"12-hour run at 500 TPS: memory flat, master / workers (slope over the last half of a "
                      f"{lr.seconds} s run, caches still filling: the hour of section 5 is the verdict)"), "~0 MB/h",
                     f"{fmt(lr.growth(lr.master_mb, True), 1)} / {fmt(lr.growth(lr.workers_mb, True), 1)} MB/h"])
    if not rows:
        return ""
    return "## Goals (ratios from this run)\n\n" + _table(["goal", "target", "measured: median (min–max)"], rows)


def _cql_goal_rows(samples: list[Sample]) -> list[list[str]]:
    """The CQL pair's ratio (section 1b: its own server and rate), as the pymongo pair's is given."""
    groups = by_client(samples)
    if "dbsurge_ycsb_cql" not in groups or "bare_cql_gevent" not in groups:
        return []
    return [[("(reference) YCSB-A on CQL client CPU/op vs the bare scylla-driver loop under gevent "
              "(same fixed rate, section 1b)"), "",
             spread(paired_ratio(samples, "dbsurge_ycsb_cql", "bare_cql_gevent", "cpu_us_marginal"), 2, "x")]]


_REFERENCES = {"pgbench": "pgbench -R, -j 1 (the reference)",
               "bare": "bare open loop: gevent + psycopg.pq, 1 process (the stack's floor)"}


def rates_section(results: dict[tuple[str, int], tuple], seconds: int) -> str:
    rows = []
    reference = results.get(("pgbench", 1), (None, []))[0]
    bare = results.get(("bare", 1), (None, []))[0]
    ratios = []
    order = {"pgbench": 0, "bare": 1}
    for (label, procs), (best, trials) in sorted(results.items(), key=lambda kv: (order.get(kv[0][0], 2), kv[0])):
        passed = {t.rate for t in trials if t.passed}
        failed = [t for t in trials if t.rate not in passed]  # failed every attempt
        first_fail = min(failed, key=lambda t: (t.rate, t.lag_p99_ms)) if failed else None
        if label not in _REFERENCES and best and (reference or bare):
            against = [f"{best.rate / ref.rate:.2f}x {name}" for name, ref in (("pgbench -R", reference),
                                                                               ("the bare loop", bare)) if ref]
            ratios.append(f"{procs} process{'es' if procs > 1 else ''}{f' [{label}]' if label else ''}: "
                          + ", ".join(against)
                          + (f" ({best.rate / reference.rate / procs:.2f}x pgbench -R per process)"
                             if procs > 1 and reference else ""))
        rows.append([
            _REFERENCES.get(label) or
            (str(procs) if procs > 1 else "1 (no separate master)") + (f" [{label}]" if label else ""),
            fmt(best.rate) if best else "below the first rate tried",
            f"{best.lag_p99_ms:.3f} ms" if best else "n/a",
            fmt(best.achieved_tps) if best else "n/a",
            (f"{fmt(first_fail.rate)} TPS: lag p99 {first_fail.lag_p99_ms:.3f} ms, dropped {first_fail.dropped:,}, "
             f"achieved {fmt(first_fail.achieved_tps)}") if first_fail else "none failed",
            ", ".join(f"{fmt(t.rate)}{'' if t.passed else '✗'}" for t in trials),
        ])
    return ("## 2. Highest sustained arrival rate (product lookups, open model)\n\n"
            f"`dbsurge run --shape constant --rate R --duration {seconds}s --max-lag 100ms`; a rate passes when the "
            "run's lag p99 (ALL row of summary.csv) is under 1 ms with no dropped slots and no failures. "
            "Doubling from 4,000 TPS (halving if that fails), then bisecting; a failed rate is run once more and "
            "passes if either run does. Two references are searched the same way in the same run: pgbench -R "
            "(`-S -M prepared -j 1`, the same connections, its per-transaction log's schedule lag; the goal is at "
            "least 0.5x its rate with one process), and the bare open loop (`bench/bare_loops.py pq16_open`: the "
            "same lookups on the same connections, one gevent greenlet each waiting on its own timerfd, nothing "
            "of dbsurge), which is what the stack dbsurge runs on can pace in one process.\n\n"
            + _table(["worker processes", "highest passing rate (TPS)", "lag p99 there", "achieved TPS there",
                      "lowest failing rate", "rates tried (✗ failed)"], rows)
            + ("\n\nAgainst the references: " + "; ".join(ratios) + "." if ratios else ""))


def recorder_section(cost, long_run) -> str:
    out = ["## 3. Recorder cost and the footprint of a long run\n"]
    if cost:
        first = next(iter(cost.values()))
        out.append(f"`Recorder.record` + `drain` in a loop ({first.operations:,} operations, a drain every "
                   f"{first.per_drain:,}: a worker at {first.per_drain:,} ops/s), CPU per recorded operation:\n")
        out.append(_table(["engine", "record", "drain (histograms, per op)", "total"],
                          [[label or "this checkout", f"{c.record_us:.3f} µs", f"{c.drain_us:.3f} µs",
                            f"{c.total_us:.3f} µs"] for label, c in cost.items()]))
    if long_run is not None:
        lr = long_run
        m_all, m_half = lr.growth(lr.master_mb), lr.growth(lr.master_mb, last_half=True)
        w_all, w_half = lr.growth(lr.workers_mb), lr.growth(lr.workers_mb, last_half=True)
        out.append(f"\nOpen-model runs at {fmt(lr.rate)} TPS (achieved {fmt(lr.achieved_tps)}), {lr.processes} worker "
                   f"processes, {lr.seconds} s and {lr.short_seconds} s; projected:\n")
        out.append(_table(
            ["quantity", "measured", "per hour of run", "12-hour run"],
            [["results on disk", (f"{lr.disk_bytes / 1e6:.2f} MB after {lr.seconds} s "
                                  f"({lr.disk_fixed_mb:.2f} MB whatever the length)"), f"+{lr.disk_mb_per_h:.1f} MB",
              f"{lr.disk_fixed_mb + lr.disk_mb_per_h * 12:.1f} MB"],
             ["master RSS", (f"{fmt(lr.at(lr.master_mb, lr.warmup_s), 1)} MB at {lr.warmup_s:.0f} s → "
                             f"{fmt(lr.at(lr.master_mb, lr.seconds), 1)} MB at {lr.seconds} s"),
              f"{fmt(m_all, 1)} MB/h ({fmt(m_half, 1)} over the last half)", "see the findings"],
             ["worker RSS (summed)", (f"{fmt(lr.at(lr.workers_mb, lr.warmup_s), 1)} MB at {lr.warmup_s:.0f} s → "
                                      f"{fmt(lr.at(lr.workers_mb, lr.seconds), 1)} MB at {lr.seconds} s"),
              f"{fmt(w_all, 1)} MB/h ({fmt(w_half, 1)} over the last half)", "see the findings"]]))
        grown = {n: lr.files[n] - lr.files_short.get(n, 0) for n in lr.files if n not in BOUNDED_FILES}
        per_h = sorted(((n, g / (lr.seconds - lr.short_seconds) * 3600 / 1e6) for n, g in grown.items() if g > 0),
                       key=lambda kv: -kv[1])[:6]
        out.append("\nWhat grows, per hour of run: " + ", ".join(f"`{n}` {v:.1f} MB" for n, v in per_h)
                   + ". RSS slopes are least-squares lines through 1-second samples of the load phase after "
                     f"{lr.warmup_s:.0f} s of warm-up. `timeline.png` and `report.html` (which embeds it) count as "
                     "fixed: more points in the same pixels, they stop growing (0.29 MB for a 10-minute run). A short "
                     "run cannot tell a cache that is still filling from a leak: see the findings for what fills "
                     "and where it stops.")
    return "\n".join(out)


def profile_section(profile, label: str = "") -> str:
    if profile is None:
        return ""
    head = (f"## 4. Where a worker's CPU goes{label}\n\n"
            f"py-spy, {profile.samples:,} samples over {profile.seconds:.0f} s of the worker of a closed-model "
            f"product_lookup run (16 users, `--processes 1`)"
            + (f", {fmt(profile.ops_per_s)} ops/s" if profile.ops_per_s else "")
            + ". Percent of the worker's busy samples; C code and system calls count for the Python function "
              "that called them.\n")
    if profile.worker_cpu and profile.ops_per_s:
        user, system = profile.worker_cpu
        head += (f"\nThe worker used {user + system:.2f} CPU-seconds per second while sampled ({user:.2f} user, "
                 f"{system:.2f} system): about {(user + system) / profile.ops_per_s * 1e6:.0f} µs per operation at the "
                 "run's average rate (the master's share is not in it).\n")
    head += ("\npy-spy samples a thread that is running *or waiting for a CPU*: after a send that wakes the "
             "database on this CPU the worker is runnable but not running, so the driver's send is "
             "over-represented. The perf table (on-CPU samples by binary) is the CPU-true split.\n")
    parts = _table(["part of the stack (py-spy)", "% of worker samples"],
                   [[p, f"{v:.1f}%"] for p, v in profile.parts])
    if profile.native:
        parts += "\n\n" + _table(["binary (perf, on-CPU)", "% of worker CPU"],
                                  [[f"`{b}`", f"{v:.1f}%"] for b, v in profile.native])
    incl = _table(["function (inclusive)", "%"], [[f"`{f}`", f"{v:.1f}%"] for f, v in profile.inclusive])
    self_ = _table(["function (self)", "%"], [[f"`{f}`", f"{v:.1f}%"] for f, v in profile.self_time])
    return f"{head}\n\n{parts}\n\n{incl}\n\n{self_}"


def machine_section(info: dict[str, str], load_before: str, load_after: str) -> str:
    rows = [[k, str(v)] for k, v in info.items()]
    rows.append(["load average (before → after)", f"{load_before} → {load_after}"])
    return "## Machine\n\n" + _table(["", ""], rows)


METHOD = """## How the numbers are taken

- **Servers**: dbsurge's embedded PostgreSQL (`shared_buffers=512MB`, everything cached) and the
  secantusdb MongoDB-wire server, both on this machine, both started by the benchmark. pgbench runs
  `-S -M prepared -c 16 -j 1` on its accounts table (`pgbench -i -s SCALE`); dbsurge, plain Locust and
  the bare psycopg loops run the orders workload's product lookup (`select id, sku, name, price, stock
  from products where id = %s`, a UUID key), the YCSB clients `find_one({"_id": key})` with uniform keys.
- **Client CPU** is the kernel's count (user + system) for each client's whole process tree, from
  `getrusage(RUSAGE_CHILDREN)` deltas around the run; the benchmark is a child subreaper, so Locust
  workers their master did not wait for are still counted. *Marginal* CPU per operation is
  `(cpu(long run) − cpu(short run)) / (ops(long) − ops(short))`: fixed costs (starting Python, imports,
  connecting, writing results) cancel. *Whole run* divides the long run's CPU by its operations.
- **ops/s** is operations completed in the long run divided by its duration.
- The server's CPU is not in any client's figure. On 2 cores the client and the server share the CPU,
  so a client that needs less CPU per operation leaves more to the server and gets more throughput.
- Bare loops run one connection, one operation after another (no concurrency, no framework): the floor
  for the CPU per operation of a Python client on that driver, not a throughput reference.
- **The CQL pair** (section 1b) is the exception: dbsurge's YCSB-A and the bare scylla-driver loop under
  gevent run at the same fixed arrival rate on an embedded Apache Cassandra started after table 1 (its JVM
  would otherwise take CPU from the other clients), so that the server does the same work for both.
"""


def write(path: Path, *, command: str, started: float, finished: float, machine: str, sections: list[str],
          findings: str | None, notes: list[str] | None = None) -> None:
    when = datetime.fromtimestamp(started, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = ["# dbsurge benchmark: generator efficiency against pgbench, plain Locust and bare driver loops\n",
             (f"Written by `{command}` on {when} ({(finished - started) / 60:.1f} minutes). Numbers from one shared "
              "2-core machine: read the spreads, not just the medians.\n")]
    parts += [f"{note}\n" for note in notes or []]
    parts += [s for s in sections if s]
    parts.append(machine)
    parts.append(METHOD)
    if findings:
        parts.append(findings)
    path.write_text("\n\n".join(p.rstrip() for p in parts) + "\n")
