"""Table 2: the highest arrival rate dbsurge sustains for product lookups, per worker process count.

"Sustains" means an open-model run at that rate (``--shape constant --rate R --max-lag 100ms``)
ends with lag p99 under 1 ms and no dropped slots (lag: how late an operation started after its
intended start; see dbsurge's pacer). The search doubles the rate from ``start`` (4,000 TPS: every
engine here passes the rates below it, and four searches of two more runs each took `make bench`
past its 20 minutes) until a run fails (or halves it, down to an eighth of ``start``, when even
``start`` fails), then bisects between the last pass and the first failure. A failing rate is run
a second time and passes if either run does: other jobs on a shared machine only ever add lag.
Each run is short, so the answer is a little optimistic for hour-long runs, and noisy on a shared
machine.

Two references are searched the same way in the same run: pgbench -R (C, libpq; the goal is
half its rate) and the bare open-model loop of bench/bare_loops.py (``pq16_open``: gevent and
``psycopg.pq`` with nothing of dbsurge), which says what the stack dbsurge's users run on can pace
in one process, and so how much of the gap to pgbench -R is dbsurge's own.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from bench.clients import Env, new_tag, processes_args, summary_all_row
from bench.measure import run_measured

LAG_P99_LIMIT_MS = 1.0


@dataclass
class Trial:
    rate: float
    achieved_tps: float
    lag_p99_ms: float
    dropped: int
    failures: int
    cpu_s: float

    @property
    def passed(self) -> bool:
        return self.lag_p99_ms < LAG_P99_LIMIT_MS and self.dropped == 0 and self.failures == 0


def trial(env: Env, rate: float, processes: int, seconds: int, *, pythonpath: str | None = None) -> Trial:
    """One open-model run at ``rate`` TPS."""
    import os

    tag = new_tag(f"rate{int(rate)}-p{processes}")
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", env.pg_uri,
           "--shape", "constant", "--rate", str(rate), "--duration", f"{seconds}s", "--max-lag", "100ms",
           "--operation", "product_lookup", "--workload-option", f"products={env.products}", "--quiet",
           "--results-dir", str(env.workdir / "results"), "--run-id", tag, *processes_args(processes)]
    run_env = None
    if pythonpath:
        run_env = {**os.environ, "PYTHONPATH": pythonpath}
    m = run_measured(cmd, cwd=str(env.workdir), env=run_env)
    # 1: the database fell behind; 3: slots dropped while the generator fell behind: both a (failing) result
    if m.returncode not in (0, 1, 3):
        raise RuntimeError(f"rate {rate} exited with {m.returncode}:\n{(m.stdout + m.stderr)[-3000:]}")
    row = summary_all_row(env.workdir / "results" / tag)
    return Trial(rate, _f(row.get("achieved_tps")), _f(row.get("lag_p99_ms")), int(_f(row.get("dropped"))),
                 int(_f(row.get("failures"))), m.cpu_s)


def pgbench_trial(env: Env, rate: float, seconds: int) -> Trial:
    """One ``pgbench -R rate`` run (the same lookups: -S -M prepared, -j 1, the same connections).

    pgbench -R schedules transactions on a Poisson timeline and logs, per transaction (``-l``), its
    schedule lag: how late it started after its scheduled time, the same quantity as dbsurge's lag.
    The lag p99 comes from those lines; pgbench drops nothing without ``-L``.
    """
    import tempfile
    from pathlib import Path

    from bench.clients import pgbench_connection

    with tempfile.TemporaryDirectory(prefix="pgbench-R-", dir=env.workdir) as tmp:
        cmd = [str(env.pgbench), "-S", "-M", "prepared", "-c", str(env.users), "-j", "1", "-R", f"{rate:g}",
               "-T", str(seconds), "-n", "-l", "--log-prefix", f"{tmp}/tx", *pgbench_connection(env.pg_uri)]
        m = run_measured(cmd, cwd=tmp)
        if m.returncode != 0:
            raise RuntimeError(f"pgbench -R {rate:g} exited with {m.returncode}:\n{(m.stdout + m.stderr)[-2000:]}")
        lags: list[int] = []
        failures = 0
        for path in sorted(Path(tmp).glob("tx*")):
            for line in path.read_text().split("\n"):
                f = line.split()
                if len(f) < 7:
                    continue
                if f[2] in ("skipped", "failed"):
                    failures += 1
                    continue
                lags.append(int(f[6]))
    lags.sort()
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] / 1000 if lags else float("nan")
    return Trial(rate, len(lags) / seconds, p99, 0, failures, m.cpu_s)


def bare_trial(env: Env, rate: float, seconds: int) -> Trial:
    """One run of bench/bare_loops.py's ``pq16_open`` at ``rate`` (the same lookups and connections as dbsurge's)."""
    import json
    from pathlib import Path

    loops = Path(__file__).resolve().parent / "bare_loops.py"
    cmd = [sys.executable, str(loops), "pq16_open", "--rate", f"{rate:g}", "--uri", env.pg_uri, "--duration",
           str(seconds), "--products", str(env.products), "--connections", str(env.users)]
    m = run_measured(cmd, cwd=str(env.workdir))
    if m.returncode != 0:
        raise RuntimeError(f"the bare open loop at {rate:g} exited with {m.returncode}:\n"
                           f"{(m.stdout + m.stderr)[-2000:]}")
    out = json.loads(m.stdout.strip().splitlines()[-1])
    return Trial(rate, float(out["achieved_tps"]), float(out["lag_p99_ms"]), 0, 0, m.cpu_s)


def _f(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else 0.0
    except ValueError:
        return float("nan")


def search(env: Env, processes: int, *, start: float = 4000.0, seconds: int = 10, bisect_steps: int = 3,
           ceiling: float = 128_000.0, retries: int = 1, pythonpath: str | None = None, reference: str | None = None,
           log=print) -> tuple[Trial | None, list[Trial]]:
    """The best passing trial (None if even ``start`` fails) and every trial run.

    ``reference``: None searches dbsurge with ``processes`` worker processes; ``"pgbench"`` searches
    pgbench -R, ``"bare"`` the bare open-model loop (`bare_trial`). A failing rate is run again up to
    ``retries`` times; it passes if any run passes.
    """
    if reference not in (None, "pgbench", "bare"):
        raise ValueError(f"unknown reference {reference!r}")
    trials: list[Trial] = []
    who = {"pgbench": "pgbench -R", "bare": "bare loop"}.get(reference or "", f"{processes} process(es)")

    def run(rate: float) -> Trial:
        # Other jobs on the machine can only add lag, never remove it: a failed rate gets a second
        # chance, and a pass in either run counts.
        for _attempt in range(1 + retries):
            if reference == "pgbench":
                t = pgbench_trial(env, rate, seconds)
            elif reference == "bare":
                t = bare_trial(env, rate, seconds)
            else:
                t = trial(env, rate, processes, seconds, pythonpath=pythonpath)
            trials.append(t)
            log(f"  {who} rate {rate:8.0f}: achieved {t.achieved_tps:8.0f}  lag p99 "
                f"{t.lag_p99_ms:7.3f} ms  dropped {t.dropped:6d}  {'pass' if t.passed else 'FAIL'}")
            if t.passed:
                break
        return t

    best: Trial | None = None
    rate = start
    failed: float | None = None
    while rate <= ceiling:
        t = run(rate)
        if not t.passed:
            failed = rate
            break
        best = t
        rate *= 2
    floor = start / 8
    while best is None and rate / 2 >= floor:  # even the start failed: halve, a few times, to find a pass
        rate /= 2
        t = run(rate)
        if t.passed:
            best = t
        else:
            failed = rate
    if best is None:
        return None, trials
    if failed is None:
        return best, trials
    low, high = best.rate, failed
    for _ in range(bisect_steps):
        mid = round((low + high) / 2, -2)
        if mid in (low, high):
            break
        t = run(mid)
        if t.passed:
            best, low = t, mid
        else:
            high = mid
    return best, trials
