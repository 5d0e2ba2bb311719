"""The master's side of measurement: merge worker payloads, write the timeline, build the tables.

Workers ship what they recorded once a second. The aggregator adds each payload into

- per (operation, stage) cells, for stages.csv and the end-of-run tables, and
- per (UTC second, operation) cells, written to timeline.csv and the interval histogram log once
  the second is older than ``grace_s`` (every worker has reported it by then).

A second that arrives after it was written (a worker that stalled longer than the grace) is
folded into the oldest second still open, so no operation is lost, only placed a little late.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque

from .recorder import Cell
from .rundir import STAGE_COLUMNS, RunDirectory, utc_iso
from .stage_plan import Schedule

ALL = "ALL"


def _ms(us: float) -> float:
    return round(us / 1000.0, 3)


def cell_stats(cell: Cell) -> dict:
    """Percentiles and counts of a cell, in milliseconds with microsecond precision."""
    r, s, lag = cell.response, cell.service, cell.lag
    p50, p95, p99, p999 = r.percentiles([50, 95, 99, 99.9])
    sp50, sp95, sp99 = s.percentiles([50, 95, 99])
    return {
        "count": cell.count,
        "failures": cell.failures,
        "retries": cell.retries,
        "failure_rate": round(cell.failures / cell.count, 6) if cell.count else 0.0,
        "p50_ms": _ms(p50), "p95_ms": _ms(p95), "p99_ms": _ms(p99), "p999_ms": _ms(p999),
        "max_ms": _ms(r.max_value), "mean_ms": _ms(r.mean),
        "service_p50_ms": _ms(sp50), "service_p95_ms": _ms(sp95), "service_p99_ms": _ms(sp99),
        "lag_p99_ms": _ms(lag.percentile(99)), "lag_max_ms": _ms(lag.max_value),
    }


class Aggregator:
    """Merges worker payloads and writes the run directory's measurement files."""

    def __init__(self, rundir: RunDirectory | None, *, stage_names: list[str], grace_s: float = 3.0):
        self.rundir = rundir
        self.stage_names = stage_names
        self.grace_s = grace_s
        self.schedule: Schedule | None = None
        self.start_epoch_s: float | None = None
        self.end_epoch_s: float | None = None
        self.stage_cells: dict[tuple[str, int], Cell] = defaultdict(Cell)
        self.open_seconds: dict[int, dict[str, Cell]] = defaultdict(lambda: defaultdict(Cell))
        self.dropped: dict[int, int] = defaultdict(int)
        self._dropped_open: dict[int, int] = defaultdict(int)
        self.errors: dict[str, int] = defaultdict(int)
        self.last_written = -1
        self.recent: deque[tuple[int, int, float]] = deque(maxlen=10)  # (second, ok, mean service us)
        self.operations: list[str] = []
        self.per_source: dict[str, int] = defaultdict(int)  # operations recorded by each worker
        self.issued = 0  # slots the pacers handed out or dropped

    # -- input ------------------------------------------------------------------------------------

    def set_schedule(self, schedule: Schedule | None, start_epoch_s: float) -> None:
        self.schedule = schedule
        self.start_epoch_s = start_epoch_s

    def merge(self, payload: dict, source: str = "local") -> None:
        ops = payload["ops"]
        for name in ops:
            if name not in self.operations:
                self.operations.append(name)
        for op, stage, wire in payload["stages"]:
            self.stage_cells[(ops[op], stage)].add_wire(wire)
            self.per_source[source] += int(wire[3]) + int(wire[4])
        for sec, op, wire in payload["intervals"]:
            if sec <= self.last_written:
                sec = self.last_written + 1
            self.open_seconds[sec][ops[op]].add_wire(wire)
        self.issued += int(payload.get("issued", 0))
        now_sec = int(time.time())
        for stage, n in payload["dropped"]:
            self.dropped[int(stage)] += n
            self._dropped_open[max(now_sec, self.last_written + 1)] += n
        for kind, n in payload["errors"].items():
            first = kind not in self.errors
            self.errors[kind] += n
            if first and self.rundir:
                self.rundir.event("error", kind=kind)

    # -- timeline -----------------------------------------------------------------------------------

    def _stage_name_at(self, epoch_s: float) -> str:
        if self.schedule is None or self.start_epoch_s is None:
            return self.stage_names[0] if self.stage_names else "run"
        # a second that straddles time zero or the end belongs to the stage it overlaps
        t = max(epoch_s - self.start_epoch_s, 0.0)
        if t >= self.schedule.end_s and epoch_s + 1 - self.start_epoch_s > self.schedule.end_s + 1:
            return ""
        return self.stage_names[self.schedule.stage_at(min(t, self.schedule.end_s - 1e-9))]

    def target_tps_at(self, epoch_s: float) -> float | None:
        """Planned arrivals in the second starting at epoch_s (None without a plan)."""
        if self.schedule is None or self.start_epoch_s is None:
            return None
        t = epoch_s - self.start_epoch_s
        return round(self.schedule.cumulative(t + 1.0) - self.schedule.cumulative(t), 3)

    def flush(self, now: float | None = None, final: bool = False) -> list[dict]:
        """Write the seconds old enough to be complete; everything when ``final``."""
        now = time.time() if now is None else now
        ready = sorted(s for s in self.open_seconds if final or s < now - self.grace_s)
        ready += [s for s in self._dropped_open if (final or s < now - self.grace_s) and s not in ready]
        rows: list[dict] = []
        for sec in sorted(set(ready)):
            cells = self.open_seconds.pop(sec, {})
            dropped = self._dropped_open.pop(sec, 0)
            rows.extend(self._second_rows(sec, cells, dropped))
            self.last_written = max(self.last_written, sec)
        if rows and self.rundir:
            self.rundir.timeline_rows(rows)
        return rows

    def _second_rows(self, sec: int, cells: dict[str, Cell], dropped: int) -> list[dict]:
        stage = self._stage_name_at(sec)
        target = self.target_tps_at(sec)
        total = Cell()
        rows = []
        for op in sorted(cells):
            cell = cells[op]
            total.add(cell)
            rows.append(self._timeline_row(sec, stage, op, target, cell, 0))
            if self.rundir and cell.ok:
                self.rundir.hlog_interval(op, sec, 1.0, cell.response.max_value / 1000.0,
                                          cell.response.to_hdr().encode(), self.start_epoch_s or sec)
        if len(cells) != 1 or dropped:
            rows.append(self._timeline_row(sec, stage, ALL, target, total, dropped))
        else:
            rows[-1]["dropped"] = dropped
        self.recent.append((sec, total.ok, total.service.mean))
        return rows

    @staticmethod
    def _timeline_row(sec, stage, op, target, cell: Cell, dropped: int) -> dict:
        st = cell_stats(cell)
        return {
            "time_utc": utc_iso(sec), "stage": stage, "operation": op,
            "target_tps": "" if target is None else target, "achieved_tps": cell.ok, "dropped": dropped, **st,
        }

    # -- live figures for the shape and the web UI ------------------------------------------------------

    def recent_service_s(self) -> float | None:
        """Mean service time over the last written seconds, in seconds (None before any)."""
        pts = [(ok, m) for _, ok, m in self.recent if ok]
        if not pts:
            # not yet written: look at what is open
            cells = [c for sec in self.open_seconds.values() for c in sec.values() if c.ok]
            if not cells:
                return None
            n = sum(c.ok for c in cells)
            return sum(c.service.total_us for c in cells) / n / 1e6
        n = sum(ok for ok, _ in pts)
        return sum(ok * m for ok, m in pts) / n / 1e6

    def recent_achieved_tps(self) -> float:
        """Successful operations per second over the most recent complete seconds."""
        secs = sorted(self.open_seconds)
        now = int(time.time())
        window = [s for s in secs if now - 4 <= s < now]
        if window:
            return sum(c.ok for s in window for c in self.open_seconds[s].values()) / len(window)
        if self.recent:
            return sum(ok for _, ok, _ in list(self.recent)[-3:]) / min(3, len(self.recent))
        return 0.0

    # -- end of run tables --------------------------------------------------------------------------

    def stage_rows(self) -> list[dict]:
        """One row per stage and operation, plus ``ALL`` per stage; achieved rate by intended start."""
        rows = []
        n_stages = len(self.stage_names)
        for i in range(n_stages):
            start, end, target = self._stage_window(i)
            duration = (end - start) if (start is not None and end is not None) else None
            cells = {op: c for (op, st), c in self.stage_cells.items() if st == i}
            if not cells and not self.dropped.get(i):
                continue
            total = Cell()
            for c in cells.values():
                total.add(c)
            entries = [(op, cells[op]) for op in sorted(cells)] + [(ALL, total)]
            for op, cell in entries:
                row = {
                    "stage": self.stage_names[i], "operation": op,
                    "start_utc": utc_iso(start) if start is not None else "",
                    "end_utc": utc_iso(end) if end is not None else "",
                    "duration_s": round(duration, 3) if duration else "",
                    "target_tps": round(target, 3) if target is not None and op == ALL else "",
                    "achieved_tps": round(cell.ok / duration, 3) if duration else "",
                    "dropped": self.dropped.get(i, 0) if op == ALL else "",
                    **cell_stats(cell),
                }
                rows.append(row)
        return rows

    def _stage_window(self, i: int) -> tuple[float | None, float | None, float | None]:
        if self.schedule is None or self.start_epoch_s is None:
            end = self.end_epoch_s or time.time()
            return self.start_epoch_s, end, None
        plan = self.schedule.plan
        s0 = plan.starts[i]
        s1 = s0 + plan.stages[i].duration_s
        if not math.isfinite(s1):
            s1 = (self.end_epoch_s or time.time()) - self.start_epoch_s
        arrivals = self.schedule.cumulative(s1) - self.schedule.cumulative(s0)
        dur = s1 - s0
        return self.start_epoch_s + s0, self.start_epoch_s + s1, (arrivals / dur if dur > 0 else 0.0)

    def planned_arrivals(self) -> float | None:
        if self.schedule is None or not math.isfinite(self.schedule.end_s):
            return None
        return self.schedule.total()

    def summary_rows(self) -> list[dict]:
        """One row per operation over the whole run, plus ``ALL``."""
        per_op: dict[str, Cell] = defaultdict(Cell)
        for (op, _), c in self.stage_cells.items():
            per_op[op].add(c)
        total = Cell()
        for c in per_op.values():
            total.add(c)
        start = self.start_epoch_s
        end = self.end_epoch_s or time.time()
        if self.schedule is not None and math.isfinite(self.schedule.end_s) and start is not None:
            end = start + self.schedule.end_s
        duration = (end - start) if start else None
        rows = []
        for op, cell in [(op, per_op[op]) for op in sorted(per_op)] + [(ALL, total)]:
            rows.append({
                "stage": "", "operation": op,
                "start_utc": utc_iso(start) if start else "", "end_utc": utc_iso(end),
                "duration_s": round(duration, 3) if duration else "",
                "achieved_tps": round(cell.ok / duration, 3) if duration else "",
                "target_tps": round(self.planned_arrivals() / duration, 3)
                if (op == ALL and self.planned_arrivals() is not None and duration) else "",
                "dropped": sum(self.dropped.values()) if op == ALL else "",
                **cell_stats(cell),
            })
        return rows

    def write_tables(self) -> tuple[list[dict], list[dict]]:
        stages, summary = self.stage_rows(), self.summary_rows()
        if self.rundir:
            self.rundir.write_csv("stages.csv", STAGE_COLUMNS, stages)
            self.rundir.write_csv("summary.csv", [c for c in STAGE_COLUMNS], summary)
        return stages, summary

