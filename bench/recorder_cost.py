"""Table 3: what recording costs, per operation and over a long run.

- `recorder_cost`: `Recorder.record` in a loop, with a `drain` (the once-a-second conversion to
  histograms) after every ``per_drain`` records, as a worker doing ``per_drain`` operations per
  second would. CPU time (``time.process_time``) per recorded operation, record and drain apart.
- `long_run`: an open-model run at a fixed rate (default 60 s at 500 TPS, master and 2 workers),
  with the resident set size of the master and of the workers sampled every second (psutil), and a
  run a third as long: the difference of their run directories is what a run writes per second,
  projected to hours. Memory should not grow once the run is warm; its growth per hour is the
  slope of a least-squares line through the samples after a warm-up, and over the last half of
  the load alone (a cache that is still filling shows as growth early and less later).
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass

from bench.clients import Env, new_tag, processes_args, summary_all_row
from bench.measure import least_squares, run_measured


@dataclass
class RecorderCost:
    record_us: float
    drain_us: float
    operations: int
    per_drain: int

    @property
    def total_us(self) -> float:
        return self.record_us + self.drain_us


def recorder_cost(operations: int = 1_000_000, per_drain: int = 10_000, n_ops: int = 2, seed: int = 1) -> RecorderCost:
    """CPU µs per recorded operation: `Recorder.record`, and `drain` spread over the records."""
    from dbsurge.measure.recorder import Recorder

    rec = Recorder()
    op_ids = [rec.op_id(f"op{i}") for i in range(n_ops)]
    failed = rec.kind_id("other")
    rng = random.Random(seed)
    # realistic values: 0.3-5 ms service times, a little lag, a failure now and then
    now = time.perf_counter_ns()
    rows = []
    for i in range(per_drain):
        start = now + i * 100_000
        lag = rng.randrange(0, 50_000)
        rows.append((op_ids[i % n_ops], 0, start - lag, start, start + rng.randrange(300_000, 5_000_000),
                     0 if rng.random() > 0.001 else failed, 0))
    record = rec.record
    record_s = drain_s = 0.0
    done = 0
    while done < operations:
        t0 = time.process_time()
        for op, stage, intended, start, end, kind, retries in rows:
            record(op, stage, intended, start, end, kind, retries)
        t1 = time.process_time()
        rec.drain()
        t2 = time.process_time()
        record_s += t1 - t0
        drain_s += t2 - t1
        done += len(rows)
    return RecorderCost(record_s / done * 1e6, drain_s / done * 1e6, done, per_drain)


def recorder_cost_in(pythonpath: str | None, **kwargs) -> RecorderCost:
    """`recorder_cost` of this checkout's engine, or of the engine at ``pythonpath`` (in a child process)."""
    if pythonpath is None:
        return recorder_cost(**kwargs)
    import json
    import os
    import subprocess

    from bench.clients import REPO

    code = ("import json, dataclasses; from bench.recorder_cost import recorder_cost; "
            f"print(json.dumps(dataclasses.asdict(recorder_cost(**{kwargs!r}))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([pythonpath, str(REPO)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    return RecorderCost(**json.loads(out.strip().splitlines()[-1]))


BOUNDED_FILES = ("timeline.png", "report.html")


@dataclass
class LongRun:
    seconds: int
    short_seconds: int
    rate: float
    processes: int
    achieved_tps: float
    disk_bytes: int
    files: dict[str, int]
    files_short: dict[str, int]
    master_mb: list[tuple[float, float]]  # (s since Locust started, RSS MB), every second
    workers_mb: list[tuple[float, float]]  # summed over the workers
    warmup_s: float

    @property
    def disk_mb_per_h(self) -> float:
        """Growth of the run directory per hour of run: the slope between the short and the long run.

        The plot (`timeline.png`) and the report that embeds it are left out: a longer run draws
        more points into the same pixels, so they grow at first and then stop (a 10-minute run's
        report.html is 0.29 MB); they count in `disk_fixed_mb` at their size in the long run.
        """
        grown = sum(self.files[n] - self.files_short.get(n, 0) for n in self.files if n not in BOUNDED_FILES)
        return grown / 1e6 / (self.seconds - self.short_seconds) * 3600

    @property
    def disk_fixed_mb(self) -> float:
        """What a run writes whatever its length (run.json, the report's fixed part, ...)."""
        return max(sum(self.files.values()) / 1e6 - self.disk_mb_per_h * self.seconds / 3600, 0.0)

    def growth(self, series: list[tuple[float, float]], last_half: bool = False) -> float:
        """RSS growth in MB per hour: least-squares slope after the warm-up (or over the load's last half)."""
        pts = [(t, v) for t, v in series if self.warmup_s <= t <= self.seconds + 1]
        if last_half and pts:
            middle = (pts[0][0] + pts[-1][0]) / 2
            pts = [(t, v) for t, v in pts if t >= middle]
        return _slope(pts) * 3600

    def at(self, series: list[tuple[float, float]], t: float) -> float:
        """RSS (MB) at the sample nearest to ``t`` seconds."""
        return min(series, key=lambda p: abs(p[0] - t))[1] if series else float("nan")


def long_run(env: Env, *, seconds: int = 60, rate: float = 500.0, processes: int = 2, warmup_s: float = 15.0,
             log=print) -> LongRun:
    """A ``seconds``-long open-model run sampling RSS, and one a third as long for the disk growth rate."""
    short = max(seconds // 3, 5)
    long_files, series = _one_run(env, seconds, rate, processes, sample=True)
    short_files, _ = _one_run(env, short, rate, processes, sample=False)
    rundir_row, samples = series
    master, workers = _split_roles(samples)
    def mb(pts: list[tuple[float, int]]) -> list[tuple[float, float]]:
        return [(round(t, 2), round(v / 1e6, 3)) for t, v in pts]

    return LongRun(seconds, short, rate, processes, float(rundir_row["achieved_tps"] or 0), sum(long_files.values()),
                   long_files, short_files, mb(master), mb(workers), warmup_s)


def _one_run(env: Env, seconds: int, rate: float, processes: int, *, sample: bool):
    tag = new_tag("longrun")
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", env.pg_uri,
           "--shape", "constant", "--rate", str(rate), "--duration", f"{seconds}s", "--operation", "product_lookup",
           "--workload-option", f"products={env.products}", "--quiet", "--results-dir", str(env.workdir / "results"),
           "--run-id", tag, *processes_args(processes)]
    m = run_measured(cmd, cwd=str(env.workdir), rss_interval_s=1.0 if sample else None)
    if m.returncode not in (0, 1):
        raise RuntimeError(f"long run exited with {m.returncode}:\n{(m.stdout + m.stderr)[-3000:]}")
    rundir = env.workdir / "results" / tag
    files = {p.name: p.stat().st_size for p in sorted(rundir.rglob("*")) if p.is_file()}
    return files, (summary_all_row(rundir), m.rss)


def _split_roles(samples: list[tuple[float, dict[int, tuple[int, int]]]], root: int | None = None) -> tuple[list, list]:
    """(t, master RSS) and (t, summed worker RSS) series from samples of the ``dbsurge run`` tree.

    The tree is ``dbsurge`` CLI -> Locust master -> workers (the CLI itself is left out). Time 0
    is the master's first sample, about when Locust starts.
    """
    if not samples:
        return [], []
    pids = {pid: ppid for _, s in samples for pid, (ppid, _) in s.items()}
    cli = root if root is not None else next(p for p, pp in pids.items() if pp not in pids)
    masters = [p for p, pp in pids.items() if pp == cli]
    if not masters:
        return [], []
    master = masters[0]
    workers = {p for p, pp in pids.items() if pp == master}
    t0 = next(t for t, s in samples if master in s)
    m_series = [(t - t0, s[master][1]) for t, s in samples if master in s]
    w_series = [(t - t0, sum(s[p][1] for p in workers)) for t, s in samples if workers and all(p in s for p in workers)]
    return m_series, w_series


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope (units per second)."""
    return least_squares(points)[0]


