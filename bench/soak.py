"""``python bench/soak.py`` (``make soak``): an hour of the orders mix, watching memory and disk.

A 12-hour run (study 002 held its load for 12 hours) must not be judged from a minute: this runs
``dbsurge run --workload orders --rate 500 --duration 60m --processes 2`` against the embedded
PostgreSQL and, every ``--sample-seconds`` (default 60), records the resident set size of the
Locust master and of the workers (summed) and the size of the run directory. At the end it writes

- ``bench/soak.json``: every sample and the run's ALL row (its ledger), which `bench/run.py` folds into
  bench/RESULTS.md (section 5) whenever it writes that report;
- section 5 of bench/RESULTS.md at once (the rest of the report is kept as it is).

The verdict per series: *flat* when the least-squares slope over the last half of the run
(``--judge-minutes``, default 30) is within noise (under 2 MB/h for memory, or under its own
standard error times 3), else *grows* with its slope; a 12-hour projection follows from the
last-half slopes.

    python bench/soak.py                          # 60 minutes (make soak)
    python bench/soak.py --minutes 5 --sample-seconds 10 --judge-minutes 2   # a check of the script
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine
from bench.clients import REPO, new_tag, processes_args, summary_all_row
from bench.measure import least_squares

FLAT_MB_PER_H = 2.0  # memory: a slope below this over the judged window is "flat" whatever its error
SOAK_JSON = REPO / "bench" / "soak.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/soak.py", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60.0, help="length of the run (default 60)")
    p.add_argument("--rate", type=float, default=500.0, help="arrivals per second (default 500)")
    p.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--sample-seconds", type=float, default=60.0, help="sampling interval (default 60)")
    p.add_argument("--judge-minutes", type=float, help="the window the verdict is judged on (default: the last half)")
    p.add_argument("--products", type=int, default=100_000, help="orders products (default 100000)")
    p.add_argument("--json", type=Path, default=SOAK_JSON, help="the samples (default bench/soak.json)")
    p.add_argument("--output", type=Path, default=REPO / "bench" / "RESULTS.md",
                   help="the report whose section 5 is rewritten (default bench/RESULTS.md)")
    p.add_argument("--render-json", type=Path, metavar="PATH", help="measure nothing: rewrite section 5 from PATH")
    args = p.parse_args(argv)
    for name in ("minutes", "rate", "sample_seconds"):
        value = getattr(args, name)
        if not math.isfinite(value) or value <= 0:
            p.error(f"--{name.replace('_', '-')} must be a positive number (got {value})")
    if args.processes < 1:
        p.error("--processes must be at least 1")
    return args


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- sampling ---------------------------------------------------------------------------------------------

def _roles(cli_pid: int) -> tuple[int | None, list[int]]:
    """The Locust master (the CLI's child) and the workers (the master's children) of a ``dbsurge run`` tree."""
    import psutil

    try:
        kids = psutil.Process(cli_pid).children()
    except psutil.Error:
        return None, []
    master = next((k for k in kids if "locust" in " ".join(_cmdline(k))), kids[0] if kids else None)
    if master is None:
        return None, []
    try:
        return master.pid, [w.pid for w in master.children()]
    except psutil.Error:
        return master.pid, []


def _cmdline(proc) -> list[str]:
    import psutil

    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _rss_mb(pid: int | None) -> float | None:
    import psutil

    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss / 1e6
    except psutil.Error:
        return None


def _connections_to(pid: int, port: int) -> int | None:
    """The process's TCP connections to ``port``: a worker holds one per user, so this is its user pool
    (dbsurge's pool only grows during a plan, when the measured service time asks for more users)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        listing = getattr(proc, "net_connections", None) or proc.connections  # psutil < 6 has only the latter
        return sum(1 for c in listing("tcp")
                   if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)
    except psutil.Error:
        return None


def _dir_mb(path: Path) -> float:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total / 1e6


def _sampler(cli_pid: int, rundir: Path, db_port: int, interval: float, out: list[dict],
             stop: threading.Event) -> None:
    started = time.monotonic()
    while not stop.wait(interval):
        master, workers = _roles(cli_pid)
        if _rss_mb(master) is None:
            continue  # Locust not started yet, or the run is ending: no sample of a half-built tree
        worker_mb = [_rss_mb(w) for w in workers]
        conns = [_connections_to(w, db_port) for w in workers]
        out.append({"t_s": round(time.monotonic() - started, 1), "master_mb": _rss_mb(master),
                    "workers_mb": round(sum(w for w in worker_mb if w), 3) if workers else None,
                    "workers": len(workers), "rundir_mb": round(_dir_mb(rundir), 3) if rundir.exists() else 0.0,
                    "db_connections": sum(c for c in conns if c) if workers else None})
        last = out[-1]
        log(f"t={last['t_s'] / 60:.1f} min  master {last['master_mb'] or 0:.1f} MB  "
            f"workers {last['workers_mb'] or 0:.1f} MB ({last['db_connections']} database connections)  "
            f"run directory {last['rundir_mb']:.2f} MB")


# -- the verdict --------------------------------------------------------------------------------------------

def slope_per_h(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope in units per hour and its standard error (nan with fewer than 3 points)."""
    slope, se = least_squares(points)
    return slope * 3600, se * 3600


def judge(samples: list[dict], key: str, window_s: float) -> dict:
    """The series' slope over the last ``window_s`` seconds and whether it is flat."""
    pts = [(s["t_s"], s[key]) for s in samples if s.get(key) is not None]
    if not pts:
        return {"slope_per_h": None, "stderr_per_h": None, "flat": None, "first": None, "last": None}
    end = pts[-1][0]
    window = [(t, v) for t, v in pts if t >= end - window_s]
    slope, se = slope_per_h(window)
    flat = None if math.isnan(slope) else (abs(slope) < FLAT_MB_PER_H or abs(slope) < 3 * se)
    return {"slope_per_h": None if math.isnan(slope) else round(slope, 3),
            "stderr_per_h": None if math.isnan(se) else round(se, 3), "flat": flat,
            "first": pts[0][1], "last": pts[-1][1], "window_s": window_s}


# -- the run ------------------------------------------------------------------------------------------------

def measure(args: argparse.Namespace) -> dict:
    import tempfile

    from bench.measure import become_subreaper
    from bench.servers import embedded_servers, load_data

    become_subreaper()
    raw: dict = {"started": time.time(), "minutes": args.minutes, "rate": args.rate, "processes": args.processes,
                 "sample_seconds": args.sample_seconds, "load_before": machine.load_average()}
    with tempfile.TemporaryDirectory(prefix="dbsurge-soak-") as tmp, embedded_servers(None, mongo=False) as servers:
        work = Path(tmp)
        load_data(servers, scale=1, products=args.products, records=0, log=lambda m: log("  " + m))
        raw["machine"] = machine.describe(servers.pgbench)
        tag = new_tag("soak")
        rundir = work / "results" / tag
        seconds = int(args.minutes * 60)
        cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", servers.pg_uri,
               "--shape", "constant", "--rate", f"{args.rate:g}", "--duration", f"{seconds}s",
               "--workload-option", f"products={args.products}", "--quiet", "--results-dir", str(work / "results"),
               "--run-id", tag, *processes_args(args.processes)]
        raw["command"] = " ".join(cmd[1:]).replace(servers.pg_uri, "PG_URI")
        log(f"{args.minutes:g} minutes at {args.rate:g} TPS (orders mix), {args.processes} worker processes; "
            f"a sample every {args.sample_seconds:g} s")
        proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        samples: list[dict] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sampler, daemon=True,
                                   args=(proc.pid, rundir, servers.pg_port, args.sample_seconds, samples, stop))
        sampler.start()
        out, _ = proc.communicate()
        stop.set()
        sampler.join()
        raw["exit_code"] = proc.returncode
        raw["output_tail"] = out[-2000:]
        raw["samples"] = samples
        raw["final_rundir_mb"] = _dir_mb(rundir) if rundir.exists() else None
        raw["files"] = {p.name: p.stat().st_size for p in sorted(rundir.rglob("*")) if p.is_file()} \
            if rundir.exists() else {}
        try:
            raw["summary"] = summary_all_row(rundir)
        except (OSError, RuntimeError) as e:
            raw["summary"] = {"error": str(e)}
    raw["finished"] = time.time()
    raw["load_after"] = machine.load_average()
    return raw


def section(raw: dict) -> str:
    """Section 5 of bench/RESULTS.md: the curve, the verdicts and the 12-hour projection."""
    samples = raw.get("samples") or []
    total_s = samples[-1]["t_s"] if samples else 0.0
    window = (raw.get("judge_minutes") or 0) * 60 or total_s / 2
    verdicts = {k: judge(samples, k, window) for k in ("master_mb", "workers_mb", "rundir_mb")}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(raw.get("started", 0)))
    lines = [f"## 5. Soak: {raw['minutes']:g} minutes of the orders mix\n",
             (f"`python bench/soak.py` (`make soak`) on {when}: `dbsurge run --workload orders --shape constant "
              f"--rate {raw['rate']:g} --duration {raw['minutes'] * 60:g}s --processes {raw['processes']}` against "
              f"the embedded PostgreSQL, exit code {raw.get('exit_code')}; resident set sizes (master; workers "
              f"summed) and the run directory's size every {raw['sample_seconds']:g} s. Judged on the last "
              f"{window / 60:.0f} minutes: *flat* when the least-squares slope is under {FLAT_MB_PER_H:g} MB/h "
              "or under 3 standard errors.\n")]
    s = raw.get("summary") or {}
    if "count" in s:
        def n(col: str) -> str:
            return f"{int(float(s.get(col) or 0)):,}"

        lines.append(f"The ledger: planned {n('planned')} = ok {n('ok')} + failed {n('failures')} + dropped "
                     f"{n('dropped')} + not sent {n('not_sent')} + unknown {n('unknown')}; achieved "
                     f"{float(s.get('achieved_tps') or 0):,.1f} TPS, lag p99 {s.get('lag_p99_ms') or 'n/a'} ms.\n")
    rows = []
    for key, label in (("master_mb", "master RSS"), ("workers_mb", "worker RSS (summed)"),
                       ("rundir_mb", "run directory")):
        v = verdicts[key]
        if v["slope_per_h"] is None:
            rows.append([label, "n/a", "n/a", "n/a", "n/a", "n/a"])
            continue
        word = "flat" if v["flat"] else "grows"
        twelve = v["last"] + v["slope_per_h"] * (12 - total_s / 3600) if key == "rundir_mb" or not v["flat"] \
            else v["last"]
        rows.append([label, f"{v['first']:.1f} MB", f"{v['last']:.1f} MB",
                     f"{v['slope_per_h']:+.2f} ± {v['stderr_per_h']:.2f} MB/h", word, f"{twelve:,.0f} MB"])
    lines.append("| series | first sample | last sample | slope, judged window | verdict | at 12 hours |")
    lines.append("|---|---|---|---|---|---|")
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines.append("\nThe run directory is expected to grow (the per-second timeline and histograms); memory to be "
                 "flat. A 12-hour figure is the last sample plus the judged slope times the remaining hours "
                 "(memory judged flat stays at its last sample).\n")
    growth = pool_growth(samples)
    if growth:
        lines.append("The user pool (the workers' connections to the database; dbsurge's pool only grows, when "
                     "the measured service time asks for more users) grew at minute " + ", ".join(
                         f"{t / 60:.0f} ({a} → {b})" for t, a, b in growth) + ": a step in the workers' "
                     "RSS at one of those minutes may be the new users; look there before calling it a leak.\n")
    lines.append("| minute | master MB | workers MB | database connections | run directory MB |")
    lines.append("|---|---|---|---|---|")
    step = max(1, len(samples) // 30)
    for smp in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        conns = smp.get("db_connections")
        lines.append(f"| {smp['t_s'] / 60:.1f} | {smp['master_mb'] or 0:.1f} | {smp['workers_mb'] or 0:.1f} | "
                     f"{'n/a' if conns is None else conns} | {smp['rundir_mb']:.2f} |")
    return "\n".join(lines)


def pool_growth(samples: list[dict]) -> list[tuple[float, int, int]]:
    """(when, before, after) for each sample at which the workers held more database connections than
    at the one before (samples of a half-started or finishing tree, with fewer workers, are skipped)."""
    full = max((s.get("workers") or 0 for s in samples), default=0)
    seen = [(s["t_s"], s["db_connections"]) for s in samples
            if s.get("db_connections") is not None and s.get("workers") == full]
    return [(t, a, b) for (_, a), (t, b) in zip(seen, seen[1:]) if b > a]


SECTION_START = "## 5. Soak"


def splice(report_text: str, new_section: str, start: str = SECTION_START) -> str:
    """``report_text`` with the section whose heading begins with ``start`` replaced by ``new_section``
    (added before the machine section if absent)."""
    lines = report_text.splitlines()
    heading = start
    start = next((i for i, x in enumerate(lines) if x.startswith(heading)), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = new_section.splitlines() + [""]
    else:
        at = next((i for i, x in enumerate(lines) if x.startswith("## ") and "achine" in x), len(lines))
        lines[at:at] = new_section.splitlines() + [""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render_json:
        raw = json.loads(args.render_json.read_text())
    else:
        raw = measure(args)
        raw["judge_minutes"] = args.judge_minutes
        args.json.write_text(json.dumps(raw, indent=1, default=str))
        log(f"wrote {args.json}")
    text = args.output.read_text() if args.output.exists() else ""
    args.output.write_text(splice(text, section(raw)))
    log(f"wrote section 5 of {args.output}")
    return 0 if raw.get("exit_code") in (0, None) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
