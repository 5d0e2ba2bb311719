"""Windows of a long run: per-window throughput and exact per-window percentiles from intervals.hlog.

The engine writes one HdrHistogram per second and operation (successful operations, response time
from the intended start, microseconds) to ``intervals.hlog``. A window's P99 here is the P99 of the
merge of its seconds' histograms, which is exact to the histogram's 0.1%; an average of per-second
P99s is not a P99 at all, and a 12-hour run's whole-run P99 hides the minutes that went wrong.

Bounded for a 12-hour run: the log is read once, line by line, and only the windows still open (the
newest two per window size) keep a histogram; a window two windows behind the newest line is closed
to its numbers (count, P99, max). The state (the byte offset reached, the closed windows' numbers,
the open windows' sparse counts) is saved in ``longrun.state.json``, so building the tables again
(``--from``, or during the run) reads only the lines added since: the work after the first build is
bounded by the new lines and the number of windows, not by the operations of the whole run.

Which window a second belongs to: the log's seconds are epoch seconds, the plan starts at
``BaseTime`` (a fraction into one), so a line starts at ``t0 + j`` seconds from the plan start
(``-1 < t0 <= 0``). The line goes to the window holding its midpoint; lines after the plan's end go to
the last window. A window's span is from its first second's start (the plan start for the first) to
the next window's first second (the plan end for the last), so its throughput is its successes over
the seconds its lines cover, without a one-second error at each edge.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram

from dbsurge.base.errors import UserError
from dbsurge.measure.histogram import COUNTS_LEN, highest_equivalent_of, percentile_rank
from dbsurge.plan.stage_plan import parse_duration
from dbsurge.rundir.hlog import base_time, parse_line
from dbsurge.rundir.schema import INTERVALS, LONGRUN_STATE
from dbsurge.rundir.writer import write_text

STATE_NAME = LONGRUN_STATE
STATE_VERSION = 1
#: How many windows behind the newest line a window stays open (lines of one second arrive together,
#: and seconds in order; two windows of slack is far more than the engine's reordering).
OPEN_BEHIND = 2


def parse_windows(text: str) -> list[float]:
    """``"1m,10m"`` -> ``[60.0, 600.0]``; `UserError` for anything but positive whole seconds."""
    out: list[float] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        try:
            w = parse_duration(part)
        except UserError as e:
            raise UserError(f"--windows '{text}': {e}") from None
        if w < 1 or w != int(w):
            raise UserError(f"--windows '{text}': each window must be a whole number of seconds, at least 1s")
        if w not in out:
            out.append(float(w))
    if not out:
        raise UserError(f"--windows '{text}': expected window lengths such as 1m,10m")
    return out


def window_label(seconds: float) -> str:
    """60 -> ``1m``, 600 -> ``10m``, 30 -> ``30s``, 3600 -> ``1h`` (file names and table rows)."""
    s = int(seconds)
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


# -- percentiles of merged counts ---------------------------------------------------------------------------


def percentile_us(counts: np.ndarray, p: float) -> int:
    """HdrHistogram's value at percentile ``p`` of these counts (the highest value of the bucket reached)."""
    total = int(counts.sum())
    if total == 0:
        return 0
    cum = np.cumsum(counts)
    return highest_equivalent_of(int(np.searchsorted(cum, percentile_rank(p, total))))


def max_us(counts: np.ndarray) -> int:
    nz = np.flatnonzero(counts)
    return highest_equivalent_of(int(nz[-1])) if nz.size else 0


def decode_counts(encoded: str) -> np.ndarray:
    """One line's histogram as int64 counts in the engine's layout (`dbsurge.measure.histogram`)."""
    h = HdrHistogram.decode(encoded)
    counts = np.ctypeslib.as_array(h.counts, shape=(h.counts_len,)).astype(np.int64)
    if counts.size != COUNTS_LEN:
        raise UserError(f"{INTERVALS}: a histogram of {counts.size} buckets, not the engine's {COUNTS_LEN}")
    return counts


# -- the windows of one length ------------------------------------------------------------------------------


@dataclass
class OpNumbers:
    """One operation in one window: successes, P99 and max (microseconds)."""

    count: int
    p99_us: int
    max_us: int


@dataclass
class WindowGrid:
    """Where each window of one length starts and ends (seconds from the plan start)."""

    window_s: float
    duration_s: float
    t0: float

    @property
    def count(self) -> int:
        return max(1, math.ceil(self.duration_s / self.window_s - 1e-9))

    def index(self, start_s: float, length_s: float) -> int:
        mid = start_s + length_s / 2
        return min(max(int(mid // self.window_s), 0), self.count - 1)

    def boundary(self, k: int) -> float:
        """The start of window ``k``'s first second (0 for the first, the plan end after the last)."""
        if k <= 0:
            return 0.0
        if k >= self.count:
            return self.duration_s
        j = math.ceil(k * self.window_s - self.t0 - 0.5)
        return min(max(self.t0 + j, 0.0), self.duration_s)

    def span(self, k: int) -> tuple[float, float]:
        return self.boundary(k), self.boundary(k + 1)


@dataclass
class Windows:
    """Windows of one length: the closed ones' numbers, the open ones' merged counts per operation."""

    grid: WindowGrid
    closed: dict[int, dict[str, OpNumbers]] = field(default_factory=dict)
    open: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    late_lines: int = 0

    def add(self, op: str, start_s: float, length_s: float, counts: np.ndarray) -> None:
        k = self.grid.index(start_s, length_s)
        if k in self.closed:  # a second far out of order: its window is already summed up
            self.late_lines += 1
            return
        ops = self.open.setdefault(k, {})
        if op in ops:
            ops[op] += counts
        else:
            ops[op] = counts.copy()
        for old in [i for i in self.open if i <= k - OPEN_BEHIND]:
            self.close(old)

    def close(self, k: int) -> None:
        self.closed[k] = {op: numbers_of(c) for op, c in self.open.pop(k).items()}

    def numbers(self) -> dict[int, dict[str, OpNumbers]]:
        """Every window with data: the closed ones' numbers and the open ones' as they stand."""
        out = dict(self.closed)
        for k, ops in self.open.items():
            out[k] = {op: numbers_of(c) for op, c in ops.items()}
        return dict(sorted(out.items()))

    # -- the saved state --------------------------------------------------------------------------------

    def to_state(self) -> dict:
        return {"window_s": self.grid.window_s, "late_lines": self.late_lines,
                "closed": {str(k): {op: [n.count, n.p99_us, n.max_us] for op, n in ops.items()}
                           for k, ops in self.closed.items()},
                "open": {str(k): {op: _sparse(c) for op, c in ops.items()} for k, ops in self.open.items()}}

    @classmethod
    def from_state(cls, grid: WindowGrid, state: dict) -> Windows:
        w = cls(grid, late_lines=int(state.get("late_lines", 0)))
        w.closed = {int(k): {op: OpNumbers(*map(int, v)) for op, v in ops.items()}
                    for k, ops in state["closed"].items()}
        w.open = {int(k): {op: _dense(v) for op, v in ops.items()} for k, ops in state["open"].items()}
        return w


def numbers_of(counts: np.ndarray) -> OpNumbers:
    return OpNumbers(int(counts.sum()), percentile_us(counts, 99.0), max_us(counts))


def _sparse(counts: np.ndarray) -> list[list[int]]:
    nz = np.flatnonzero(counts)
    return [nz.tolist(), counts[nz].tolist()]


def _dense(pairs: list[list[int]]) -> np.ndarray:
    counts = np.zeros(COUNTS_LEN, dtype=np.int64)
    if pairs[0]:
        counts[np.asarray(pairs[0], dtype=np.int64)] = np.asarray(pairs[1], dtype=np.int64)
    return counts


# -- reading intervals.hlog once (and again from where it stopped) ------------------------------------------


@dataclass
class HlogWindows:
    """All window lengths of one run, fed from intervals.hlog; saved and resumed through `STATE_NAME`."""

    windows: dict[float, Windows]
    base_s: float | None = None
    offset: int = 0
    lines: int = 0
    operations: list[str] = field(default_factory=list)

    def feed(self, path: Path) -> int:
        """Read the complete lines added to ``path`` since `offset`; returns how many interval lines were new."""
        if not path.is_file():
            return 0
        new = 0
        with open(path, "rb") as f:
            f.seek(self.offset)
            for raw in f:
                if not raw.endswith(b"\n"):  # a line still being written: the next build reads it
                    break
                self.offset += len(raw)
                line = raw.decode("ascii", "replace").strip()
                base = base_time(line)
                if base is not None:
                    self.base_s = base
                if self._add_line(line):
                    new += 1
        self.lines += new
        return new

    def _add_line(self, line: str) -> bool:
        """One interval line (`hlog.parse_line`, as the checker reads it) into every window length; False for a
        header line. An untagged interval is refused, as the checker refuses it, never skipped."""
        try:
            interval = parse_line(line)
        except ValueError as e:
            raise UserError(f"{INTERVALS}: a line that {e}: '{line[:40]}'") from None
        if interval is None:
            return False
        op, start, length = interval.tag, interval.start_s, interval.length_s
        try:
            counts = decode_counts(interval.histogram)
        except (ValueError, TypeError) as e:
            raise UserError(f"{INTERVALS}: a line that does not decode ({e}): '{line[:40]}'") from None
        if op not in self.operations:
            self.operations.append(op)
        for w in self.windows.values():
            if math.isnan(w.grid.t0):  # the plan starts a fraction into the log's first second
                w.grid.t0 = -((-start) % 1.0)
            w.add(op, start, length, counts)
        return True

    def close_all(self) -> None:
        """The run has ended: every window is final."""
        for w in self.windows.values():
            for k in list(w.open):
                w.close(k)

    def to_state(self, key: dict) -> dict:
        return {"version": STATE_VERSION, "key": key, "offset": self.offset, "lines": self.lines,
                "base_s": self.base_s, "operations": self.operations,
                "t0": next(iter(self.windows.values())).grid.t0,
                "windows": [w.to_state() for w in self.windows.values()]}


def build_windows(run_dir: Path, window_lengths: Iterable[float], duration_s: float, *, ended: bool,
                  resume: bool = True) -> HlogWindows:
    """The windows of ``run_dir`` from its intervals.hlog, resuming from (and updating) `STATE_NAME`.

    ``ended``: the run is over, so the open windows are closed too. A saved state made for other window
    lengths or another plan duration is ignored and the log read from its start.
    """
    lengths = list(window_lengths)
    key = {"windows": lengths, "duration_s": duration_s}
    state_path = run_dir / STATE_NAME
    hw: HlogWindows | None = None
    if resume and state_path.is_file():
        try:
            state = json.loads(state_path.read_text())
            hlog = run_dir / INTERVALS
            size = hlog.stat().st_size if hlog.is_file() else 0
            # a state of other settings, or of a log that has since been replaced by a shorter one, is not reused
            if state.get("version") == STATE_VERSION and state.get("key") == key and int(state["offset"]) <= size:
                t0 = state.get("t0")
                t0 = float("nan") if t0 is None else float(t0)
                hw = HlogWindows({s["window_s"]: Windows.from_state(WindowGrid(s["window_s"], duration_s, t0), s)
                                  for s in state["windows"]}, base_s=state.get("base_s"), offset=int(state["offset"]),
                                 lines=int(state.get("lines", 0)), operations=list(state.get("operations") or []))
        except (ValueError, KeyError, TypeError, IndexError):
            hw = None  # a damaged state file costs one full read, nothing more
    if hw is None:
        hw = HlogWindows({w: Windows(WindowGrid(w, duration_s, float("nan"))) for w in lengths})
    hw.feed(run_dir / INTERVALS)
    if ended:
        hw.close_all()
    with contextlib.suppress(OSError):  # a full results disk: the tables are still built, the next build reads again
        write_text(state_path, json.dumps(hw.to_state(key)))
    return hw


# -- the tables' numbers (pure) -------------------------------------------------------------------------


def target_over(stages: list[dict], start_s: float, end_s: float) -> float | None:
    """The plan's mean target rate between two moments (stages ramp linearly from start_tps to end_tps)."""
    if end_s <= start_s:
        return None
    total = 0.0
    covered = 0.0
    for st in stages:
        s0 = float(st.get("start_s") or 0.0)
        d = float(st.get("duration_s") or 0.0)
        a, b = max(start_s, s0), min(end_s, s0 + d)
        if b <= a or d <= 0:
            continue
        r0 = float(st.get("start_tps") if st.get("start_tps") is not None else st.get("target_tps") or 0.0)
        r1 = float(st.get("end_tps") if st.get("end_tps") is not None else r0)
        rate_a = r0 + (r1 - r0) * (a - s0) / d
        rate_b = r0 + (r1 - r0) * (b - s0) / d
        total += (rate_a + rate_b) / 2 * (b - a)
        covered += b - a
    return total / covered if covered else None


def window_rows(windows: Windows, operations: list[str], stages: list[dict], factor: float, *,
                end_s: float | None = None) -> list[dict]:
    """One row per window: span, target and achieved throughput, per operation count, P99, max and spike flag.

    ``end_s``: where a run that stopped before its plan's end stopped (its last window ends there)."""
    grid = windows.grid
    numbers = windows.numbers()
    thresholds = spike_thresholds(numbers, operations, factor)
    rows = []
    for k in range(grid.count):
        ops = numbers.get(k)
        start, end = grid.span(k)
        if end_s is not None:
            end = max(min(end, end_s), start)
        if ops is None and k > max(numbers, default=-1):
            break  # the run ended (or has got) no further
        seconds = end - start
        ok = sum(n.count for n in (ops or {}).values())
        row: dict = {"window": k + 1, "start_s": round(start, 3), "end_s": round(end, 3),
                     "seconds": round(seconds, 3), "target_tps": _round(target_over(stages, start, end), 3),
                     "throughput_ops_s": round(ok / seconds, 3) if seconds > 0 else None, "ok": ok}
        row["pct_of_target"] = (round(100.0 * row["throughput_ops_s"] / row["target_tps"], 2)
                                if row["target_tps"] and row["throughput_ops_s"] is not None else None)
        for op in operations:
            n = (ops or {}).get(op)
            p99 = n.p99_us / 1000.0 if n and n.count else None
            row[f"{op}_count"] = n.count if n else 0
            row[f"{op}_p99_ms"] = p99
            row[f"{op}_max_ms"] = n.max_us / 1000.0 if n and n.count else None
            row[f"{op}_spike"] = bool(p99 is not None and thresholds[op] is not None and p99 > thresholds[op])
        rows.append(row)
    return rows


def spike_thresholds(numbers: dict[int, dict[str, OpNumbers]], operations: list[str],
                     factor: float) -> dict[str, float | None]:
    """Per operation: ``factor`` x the median window P99 (ms), over the windows with successes of it."""
    out: dict[str, float | None] = {}
    for op in operations:
        p99s = [ops[op].p99_us / 1000.0 for ops in numbers.values() if op in ops and ops[op].count]
        out[op] = factor * statistics.median(p99s) if p99s else None
    return out


def p99_summary(rows: list[dict], op: str, factor: float) -> dict:
    """The run's window P99s of one operation: average, median, max, the spike threshold and the spikes."""
    p99s = [r[f"{op}_p99_ms"] for r in rows if r[f"{op}_p99_ms"] is not None]
    if not p99s:
        return {"windows": 0, "avg_p99_ms": None, "median_p99_ms": None, "max_p99_ms": None,
                "spike_threshold_ms": None, "spikes": 0}
    median = statistics.median(p99s)
    return {"windows": len(p99s), "avg_p99_ms": round(statistics.fmean(p99s), 3), "median_p99_ms": median,
            "max_p99_ms": max(p99s), "spike_threshold_ms": round(factor * median, 3),
            "spikes": sum(1 for r in rows if r[f"{op}_spike"])}


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)
