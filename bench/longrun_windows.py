"""``python bench/longrun_windows.py``: what building a 12-hour run's windows costs (time, memory, state).

A real 12-hour run takes 12 hours; the window build only reads intervals.hlog, so this writes the
log such a run would leave (one line per second and operation, as `RunDirectory.hlog_interval`
writes it) and times `dbsurge.scenarios.windows.build_windows` on it. Each second's histogram is
one of a few built once from ``--ops`` operations per second and operation with a spread of
latencies (a lognormal around 2 ms, and now and then a slow second), so the log has a realistic
number of filled buckets per line at the study's rate (500 kOps/s: 250,000 reads and 250,000
updates a second).

Measured: the first build from an empty state (seconds, lines per second, peak RSS), the state
file's size, and a second build after one more minute of log (reads only the new lines).

    python bench/longrun_windows.py                         # 12 h, 1m and 10m windows
    python bench/longrun_windows.py --hours 1 --ops 5000    # a quick look
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from dbsurge.measure.histogram import Histogram
from dbsurge.rundir import RunDirectory
from dbsurge.scenarios.windows import STATE_NAME, build_windows

BASE = 1_800_000_000.356


def _encoded(ops: int, rng: np.random.Generator, slow: bool) -> tuple[float, str]:
    h = Histogram()
    values = rng.lognormal(np.log(2000 if not slow else 9000), 0.5, size=ops).astype(np.int64) + 50
    h.record_many(values)
    return h.max_value / 1000, h.to_hdr().encode().decode()


def write_log(run: Path, seconds: int, ops: int, variants: int = 8) -> None:
    rng = np.random.default_rng(7)
    normal = [_encoded(ops, rng, False) for _ in range(variants)]
    slow = [_encoded(ops, rng, True) for _ in range(2)]
    rd = RunDirectory(run.parent, run.name)
    try:
        for sec in range(seconds + 1):
            for op in ("read", "update"):
                max_ms, enc = slow[sec % 2] if sec % 3607 < 20 else normal[(sec * 7 + len(op)) % variants]
                rd.hlog_interval(op, int(BASE) + sec, 1.0, max_ms, enc, BASE)
    finally:
        rd.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hours", type=float, default=12.0)
    p.add_argument("--ops", type=int, default=250_000, help="operations per second and operation (reads, updates)")
    p.add_argument("--windows", default="60,600")
    a = p.parse_args()
    windows = [float(w) for w in a.windows.split(",")]
    seconds = int(a.hours * 3600)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t = time.perf_counter()
        write_log(run, seconds, a.ops)
        hlog = run / "intervals.hlog"
        print(f"log: {seconds:,} s x 2 operations, {hlog.stat().st_size / 2**20:.1f} MB, written in "
              f"{time.perf_counter() - t:.1f} s")
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t = time.perf_counter()
        hw = build_windows(run, windows, float(seconds + 60), ended=False)  # the run's last minute is to come
        first = time.perf_counter() - t
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"first build: {hw.lines:,} lines in {first:.1f} s ({hw.lines / first:,.0f} lines/s); peak RSS "
              f"{rss1:.0f} MB (before: {rss0:.0f} MB); open windows "
              f"{sum(len(w.open) for w in hw.windows.values())}, closed {sum(len(w.closed) for w in hw.windows.values())}")
        print(f"state: {(run / STATE_NAME).stat().st_size / 1024:.0f} kB")
        rd = RunDirectory(run.parent, run.name)  # one more minute of log, then the build again
        try:
            rng = np.random.default_rng(8)
            for sec in range(seconds + 1, seconds + 61):
                for op in ("read", "update"):
                    max_ms, enc = _encoded(1000, rng, False)
                    rd.hlog_interval(op, int(BASE) + sec, 1.0, max_ms, enc, BASE)
        finally:
            rd.close()
        t = time.perf_counter()
        again = build_windows(run, windows, float(seconds + 60), ended=True)
        print(f"again after one more minute: {again.lines - hw.lines} new lines read in {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
