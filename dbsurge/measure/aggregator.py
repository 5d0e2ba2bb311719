"""The master's side of measurement: merge worker payloads, write the timeline, build the tables.

Workers ship what they recorded once a second. The aggregator adds each payload into

- per (operation, stage) cells, for stages.csv and the end-of-run tables, and
- per (UTC second, operation) cells, written to timeline.csv and the interval histogram log once
  the second is older than ``grace_s`` (every worker has reported it by then).

A second that arrives after it was written (a worker that stalled longer than the grace) is
folded into the oldest second still open, so no operation is lost, only placed a little late.
Every second of the plan gets a timeline row, zeros included: a second in which the database
answered nothing is data.

The per-(stage, operation) cells also hold the ledger (ok, failed by kind, dropped, not sent by
reason); `dbsurge.ledger` sets it against what the plan called for.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field

from dbsurge.base.utc import utc_iso
from dbsurge.measure.cells import Cell, WorkerSecond, cell_stats
from dbsurge.measure.cells import us_to_ms as _ms
from dbsurge.measure.live import LiveFigures
from dbsurge.plan.stage_plan import Schedule

ALL = "ALL"


def _no_overrides() -> list[float]:
    return []


@dataclass
class Flush:
    """What `Aggregator.flush` hands the run directory's writer (`RunDirectory.write_flush`).

    ``rows``: final timeline rows; ``intervals``: (operation, second, max ms, encoded histogram) for the
    interval log; ``open_rows``: provisional rows of the seconds still open (None on the final flush);
    ``failures``: (kind, first message, worker) of failure kinds seen for the first time.
    """

    rows: list[dict] = field(default_factory=list)
    intervals: list[tuple[str, int, float, bytes]] = field(default_factory=list)
    open_rows: list[dict] | None = None
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    base_s: float = 0.0
    worker_rows: list[dict] = field(default_factory=list)  # workers.csv: per worker and second
    logs: list[tuple[str, dict]] = field(default_factory=list)  # (worker, log record) shipped by workers


class Aggregator:
    """Merges worker payloads into cells, and gives back rows and live figures; it writes nothing."""

    def __init__(self, *, stage_names: list[str], grace_s: float = 1.5):
        self.stage_names = stage_names
        self.grace_s = grace_s
        self._schedule_source = lambda: None
        self.start_epoch_s: float | None = None
        self.end_epoch_s: float | None = None
        self.stop_epoch_s: float | None = None  # when slots stopped being issued (interrupt, disk full)
        self.connects: Counter[str] = Counter()  # the users' connection attempts by outcome (ok, refused:<code>)
        # per worker and (operation, stage): operations it issued, and those whose outcome it reported
        self.issued_by_source: dict[str, Counter] = defaultdict(Counter)
        self.done_by_source: dict[str, Counter] = defaultdict(Counter)
        self.written_off_by_source: dict[str, Counter] = defaultdict(Counter)  # its dropped, not sent, unknown
        # what live workers wrote off as unknown at the end (sent, still in flight), by reason: ``in_flight``
        # (past the drain) or ``interrupted`` (the run was); a lost worker's are booked by the ledger
        self.unknown_at_end: Counter[str] = Counter()
        self.stage_cells: dict[tuple[str, int], Cell] = defaultdict(Cell)
        self.open_seconds: dict[int, dict[str, Cell]] = defaultdict(lambda: defaultdict(Cell))
        # an open second's provisional rows, made once and again only when a report added to it
        self._open_rows: dict[int, list[dict]] = {}
        self.errors: dict[str, int] = defaultdict(int)  # failures by kind, whole run
        self.first_errors: dict[str, str] = {}
        self.last_written = -1
        self.recent: deque[tuple[int, int, float]] = deque(maxlen=10)  # (second, ok, mean service us)
        self.operations: list[str] = []
        self.per_source: dict[str, int] = defaultdict(int)  # arrivals each worker accounted for
        self.failed_by_source: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # worker -> kind -> n
        self.first_errors_by_source: dict[str, dict[str, str]] = defaultdict(dict)  # worker -> kind -> first message
        self.loop_lag_us: dict[int, int] = defaultdict(int)  # stage -> worst event-loop stall on any worker
        self.planned: dict[tuple[str, int], int] | None = None  # set by the ledger at the end
        self.warnings: list[str] = []
        self._new_failures: list[tuple[str, str, str]] = []
        self.worker_seconds: dict[int, dict[str, WorkerSecond]] = defaultdict(lambda: defaultdict(WorkerSecond))
        self._logs: list[tuple[str, dict]] = []
        # the plan times (s) of the run's live rate overrides so far (set by the master: the run's own list)
        self.override_times = _no_overrides
        self.live = LiveFigures()  # the web panel's figures: the seconds written to the timeline
        # per (operation, stage): the successes whose completion fell in the stage's window, counted by the
        # workers against the plan's edges (`Recorder.set_stage_windows`): the stage's delivered rate
        self.completed_in_stage: Counter[tuple[str, int]] = Counter()
        self.share_counts: list[tuple[float, int]] = []  # (from epoch s, workers sharing the plan): `note_shares`
        self.worker_label = lambda worker: ""  # a worker's host and address (set by the master: dbsurge.engine.hosts)

    # -- input ------------------------------------------------------------------------------------

    def set_schedule(self, schedule, start_epoch_s: float) -> None:
        """The plan's schedule (or a callable giving the run's current one: live rate changes) and time zero."""
        self._schedule_source = schedule if callable(schedule) else (lambda: schedule)
        self.start_epoch_s = start_epoch_s

    @property
    def schedule(self) -> Schedule | None:
        return self._schedule_source()

    @property
    def dropped(self) -> dict[int, int]:
        """Dropped slots per stage index."""
        out: dict[int, int] = defaultdict(int)
        for (_, st), c in self.stage_cells.items():
            out[st] += c.dropped
        return out

    def unreported(self, sources: list[str],
                   leased: dict[str, dict[tuple[str, int], int]] | None = None) -> dict[tuple[str, int], int]:
        """Per (operation, stage): what these workers issued but never reported the outcome of.

        From each worker's last report of what it had issued (less the outcomes it reported), or,
        when larger, from ``leased``: the arrivals its shares held up to the end of its last lease
        (it could have issued any of them), less everything it accounted for.
        """
        out: dict[tuple[str, int], int] = defaultdict(int)
        for s in set(sources):
            done, written_off = self.done_by_source.get(s, {}), self.written_off_by_source.get(s, {})
            issued = self.issued_by_source.get(s, {})
            held = (leased or {}).get(s, {})
            for key in set(issued) | set(held):
                gap = max(issued.get(key, 0) - done.get(key, 0),
                          held.get(key, 0) - done.get(key, 0) - written_off.get(key, 0))
                if gap > 0:
                    out[key] += gap
        return dict(out)

    def merge(self, payload: dict, source: str = "local") -> None:
        """Add one payload of `Recorder.drain` (a worker's second, or a final report)."""
        ops = payload["ops"]
        for name in ops:
            if name not in self.operations:
                self.operations.append(name)
        self._merge_stages(ops, payload["stages"], source)
        for stage, op, n in payload.get("completed", []):
            self.completed_in_stage[(ops[op], int(stage))] += int(n)
        for sec, op, wire in payload["intervals"]:
            sec = max(sec, self.last_written + 1)
            self.open_seconds[sec][ops[op]].add_wire(wire)
            self._open_rows.pop(sec, None)
            self.worker_seconds[sec][source].add_wire(wire)
        self._logs += [(source, rec) for rec in payload.get("logs", [])]
        for outcome, n in payload.get("connects", {}).items():
            self.connects[outcome] += int(n)
        self._merge_ledger(ops, payload.get("ledger", []), payload.get("dropped_secs", []), source)
        for stage, us in payload.get("loop_lag_us", []):
            self.loop_lag_us[int(stage)] = max(self.loop_lag_us[int(stage)], int(us))
        for kind, message in payload.get("errors", {}).items():
            self.first_errors_by_source[source].setdefault(kind, message)
            if kind not in self.first_errors:
                self.first_errors[kind] = message
                self._new_failures.append((kind, message, source))

    def _merge_stages(self, ops: list[str], stages: list, source: str) -> None:
        for op, stage, wire in stages:
            cell = self.stage_cells[(ops[op], stage)]
            before = cell.count
            cell.add_wire(wire)
            self.per_source[source] += cell.count - before
            self.done_by_source[source][(ops[op], stage)] += cell.count - before
            for kind, n in wire[6].items():
                self.errors[kind] += int(n)
                self.failed_by_source[source][kind] += int(n)

    def _merge_ledger(self, ops: list[str], ledger: list, dropped_secs: list, source: str) -> None:
        """Dropped, not-sent and unknown arrivals per (stage, operation); dropped ones also per second of their slot."""
        for stage, op, column, n in ledger:
            if column == "issued":
                self.issued_by_source[source][(ops[op], int(stage))] += int(n)
                continue
            cell = self.stage_cells[(ops[op], int(stage))]
            self.written_off_by_source[source][(ops[op], int(stage))] += int(n)
            if column == "dropped":
                cell.dropped += int(n)
            elif column.startswith("unknown:"):  # sent, still in flight when its worker closed the account
                cell.unknown += int(n)
                self.unknown_at_end[column.split(":", 1)[1]] += int(n)
            else:
                cell.not_sent[column.split(":", 1)[1]] += int(n)
            self.per_source[source] += int(n)
        for sec, op, n in dropped_secs:
            sec = max(int(sec), self.last_written + 1)
            self.open_seconds[sec][ops[op]].dropped += int(n)
            self._open_rows.pop(sec, None)
            self.worker_seconds[sec][source].dropped += int(n)

    # -- timeline -----------------------------------------------------------------------------------

    def _stage_index_at(self, epoch_s: float) -> int | None:
        """The stage of the second starting at epoch_s; None after the plan's end."""
        if self.schedule is None or self.start_epoch_s is None:
            return 0
        # a second that straddles time zero or the end belongs to the stage it overlaps
        t = max(epoch_s - self.start_epoch_s, 0.0)
        if t >= self.schedule.end_s and epoch_s + 1 - self.start_epoch_s > self.schedule.end_s + 1:
            return None
        return self.schedule.stage_at(min(t, self.schedule.end_s - 1e-9))

    def _stage_name_at(self, epoch_s: float) -> str:
        i = self._stage_index_at(epoch_s)
        if i is None:
            return ""
        return self.stage_names[i] if self.stage_names else "run"

    def _row_key(self, sec: int) -> tuple[int, int] | None:
        """The live table's row of a second: its stage and how many rate overrides were in force at its start."""
        stage = self._stage_index_at(sec)
        if stage is None:
            return None
        t = sec - (self.start_epoch_s or sec)
        return stage, sum(1 for at_s in self.override_times() if at_s <= t)

    def target_tps_at(self, epoch_s: float) -> float | None:
        """Planned arrivals in the second starting at epoch_s (None without a plan)."""
        if self.schedule is None or self.start_epoch_s is None:
            return None
        t = epoch_s - self.start_epoch_s
        return round(self.schedule.cumulative(t + 1.0) - self.schedule.cumulative(t), 3)

    def _plan_seconds_until(self, limit: int) -> list[int]:
        """Seconds of the plan (from its time zero, up to its end or the stop) up to ``limit``."""
        if self.start_epoch_s is None:
            return []
        first = int(self.start_epoch_s)
        end = self.start_epoch_s + (self.schedule.end_s if self.schedule is not None else math.inf)
        if self.stop_epoch_s is not None:
            end = min(end, self.stop_epoch_s)
        if not math.isfinite(end):
            end = self.end_epoch_s or time.time()
        last = min(limit, math.ceil(end) - 1)
        return list(range(max(first, self.last_written + 1), last + 1))

    def flush(self, now: float | None = None, final: bool = False, between_seconds=None) -> Flush:
        """The seconds old enough to be complete (every second of the plan, empty ones too); all when ``final``.

        timeline.csv waits ``grace_s`` for late reports; the seconds still open come back as
        provisional ``open_rows`` (timeline.open.csv), so a killed master loses at most the last report.
        ``between_seconds`` is called after each second's rows, and within a second after each
        operation's rows and histogram and before the workers' rows (a local run lets its pacer run
        there: one second of one operation was 2-4 ms in one piece at 8,000 TPS, every slot due
        meanwhile late).
        """
        now = time.time() if now is None else now
        limit = math.inf if final else now - self.grace_s - 1
        ready = {s for s in self.open_seconds if s <= limit}
        ready.update(self._plan_seconds_until(int(now) if final else int(limit)))
        out = Flush(base_s=self.start_epoch_s or 0.0)
        for sec in sorted(ready):
            cells = self.open_seconds.pop(sec, {})
            self._open_rows.pop(sec, None)
            out.rows.extend(self._second_rows(sec, cells, intervals=out.intervals, pause=between_seconds))
            if between_seconds is not None:
                between_seconds()
            out.worker_rows.extend(self._worker_rows(sec, self.worker_seconds.pop(sec, {})))
            self.last_written = max(self.last_written, sec)
            if between_seconds is not None:
                between_seconds()
        if not final:
            out.open_rows = []
            for sec in sorted(self.open_seconds):
                rows = self._open_rows.get(sec)
                if rows is None:
                    rows = self._open_rows[sec] = self._second_rows(sec, self.open_seconds[sec], provisional=True,
                                                                    pause=between_seconds)
                    if between_seconds is not None:
                        between_seconds()
                out.open_rows.extend(rows)
        out.failures, self._new_failures = self._new_failures, []
        out.logs, self._logs = self._logs, []
        return out

    def note_shares(self, from_epoch_s: float, count: int) -> None:
        """From ``from_epoch_s`` on, ``count`` workers share the plan (a join, a loss or a leave moves the shares)."""
        self.share_counts.append((from_epoch_s, max(1, count)))

    def share_count_at(self, epoch_s: float) -> int:
        """How many workers shared the plan at ``epoch_s`` (1 when nobody said: a local run)."""
        count = self.share_counts[0][1] if self.share_counts else 1
        for since, n in self.share_counts:
            if since <= epoch_s:
                count = n
        return count

    def _worker_rows(self, sec: int, cells: dict[str, WorkerSecond]) -> list[dict]:
        """Per worker in this second: its share of the plan, what it sent and how it went."""
        target = self.target_tps_at(sec)
        share = round(target / self.share_count_at(sec), 3) if target is not None else ""
        return [{"time_utc": utc_iso(sec), "worker": w, "host": self.worker_label(w), "assigned": share,
                 "sent": c.count, "ok": c.ok, "failed": c.failures, "dropped": c.dropped,
                 "lag_p99_ms": _ms(c.lag_p99_us()), "p99_ms": _ms(c.response_p99_us())}
                for w, c in sorted(cells.items())]

    def _second_rows(self, sec: int, cells: dict[str, Cell], provisional: bool = False,
                     intervals: list | None = None, pause=None) -> list[dict]:
        stage = self._stage_name_at(sec)
        target = self.target_tps_at(sec)
        # a second of one operation (the usual run): its ALL row is that operation's cell, read once. Adding
        # it into a new cell and reading that too (four 23,552-bucket histograms) was 0.8 ms of one piece.
        single = len(cells) == 1
        total = next(iter(cells.values())) if single else Cell()
        rows = []
        for op in sorted(cells):
            cell = cells[op]
            if not single:
                total.add(cell)
            rows.append(self._timeline_row(sec, stage, op, target, cell))
            if pause is not None:
                pause()
            if intervals is not None and cell.ok:
                intervals.append((op, sec, cell.response.max_value / 1000.0, cell.response.to_hdr().encode()))
                if pause is not None:
                    pause()
        if single:
            all_row = {**rows[0], "operation": ALL, "target_tps": "" if target is None else target}
        else:
            all_row = self._timeline_row(sec, stage, ALL, target, total)
            if pause is not None:
                pause()
        rows.append(all_row)
        if not provisional:
            self.live.add_second(sec, self._row_key(sec), target, total, all_row, rows)
            # failed operations count too: a database that times out every operation ties users up
            # as long as a slow one, and the pool must be sized for that
            n = total.ok + total.failures
            busy_us = total.service.total_us + total.failed_response.total_us
            self.recent.append((sec, n, busy_us / n if n else 0.0))
        return rows

    @staticmethod
    def _timeline_row(sec, stage, op, target, cell: Cell) -> dict:
        st = cell_stats(cell)
        return {
            "time_utc": utc_iso(sec), "stage": stage, "operation": op,
            "target_tps": "" if target is None or op != ALL else target, "achieved_tps": cell.ok, **st,
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
        """Successful operations per second over the most recent complete seconds.

        The second that has just ended is not one yet: its last reports (a local run's drain, a worker's
        once-a-second report) may still be on their way, and counting it read 80 TPS in a 100 TPS run.
        """
        secs = sorted(self.open_seconds)
        now = int(time.time())
        window = [s for s in secs if now - 4 <= s < now - 1]
        if window:
            return sum(c.ok for s in window for c in self.open_seconds[s].values()) / len(window)
        if self.recent:
            return sum(ok for _, ok, _ in list(self.recent)[-3:]) / min(3, len(self.recent))
        return 0.0

    # -- end of run tables --------------------------------------------------------------------------

    def stage_rows(self) -> list[dict]:
        """One row per stage and operation, plus ``ALL`` per stage; achieved rate by intended start.

        ``delivered_tps`` is the successes that completed inside the stage's window, per second of it: the rate
        the database delivered in the stage (the studies' "successful TPS": 1,960 of 2,000), where
        ``achieved_tps`` counts the successes of the stage's arrivals by intended start, late ones included.
        Exact to the completion: each worker counts a success in the window that holds its completion time
        (`Recorder.set_stage_windows`), not by whole seconds. A stage cut short by an interrupt divides by the
        time that actually ran (and the workers' windows end at the stop too).
        """
        rows = []
        # grouped by stage once: a plan of thousands of stages would otherwise scan every cell per stage
        cells_of: dict[int, dict[str, Cell]] = defaultdict(dict)
        for (op, st), c in self.stage_cells.items():
            cells_of[st][op] = c
        done_of: dict[int, dict[str, int]] = defaultdict(dict)  # completed inside each stage's window, by operation
        for (op, st), n in self.completed_in_stage.items():
            done_of[st][op] = n
            done_of[st][ALL] = done_of[st].get(ALL, 0) + n
        planned_of: dict[int, dict[str, int]] = defaultdict(dict)
        for (op, st), n in (self.planned or {}).items():
            planned_of[st][op] = n
        for i in range(len(self.stage_names)):
            start, end, target = self._stage_window(i)
            ran_end = end
            if self.stop_epoch_s is not None and end is not None:
                ran_end = max(start, min(end, self.stop_epoch_s))
            duration = (ran_end - start) if (start is not None and ran_end is not None) else None
            cells = cells_of.get(i, {})
            planned_here = planned_of.get(i, {})
            planned_all = sum(planned_here.values()) if self.planned is not None else None
            if not cells and not planned_all:
                continue
            total = Cell()
            for c in cells.values():
                total.add(c)
            # an operation whose late successes completed here has a row too, though none of its arrivals was due here
            names = sorted(set(cells) | set(planned_here) | (set(done_of.get(i, {})) - {ALL}))
            entries = [(op, cells.get(op, Cell())) for op in names] + [(ALL, total)]
            for op, cell in entries:
                rows.append({
                    "stage": self.stage_names[i], "operation": op,
                    "start_utc": utc_iso(start) if start is not None else "",
                    "end_utc": utc_iso(ran_end) if ran_end is not None else "",
                    "duration_s": round(duration, 3) if duration else "",
                    "target_tps": round(target, 3) if target is not None and op == ALL else "",
                    "achieved_tps": round(cell.ok / duration, 3) if duration else "",
                    "delivered_tps": round(done_of.get(i, {}).get(op, 0) / duration, 3) if duration else "",
                    "loop_lag_max_ms": _ms(self.loop_lag_us.get(i, 0)) if op == ALL else "",
                    **cell_stats(cell, None if self.planned is None
                                 else planned_all if op == ALL else planned_here.get(op, 0)),
                })
        return rows

    def _stage_window(self, i: int) -> tuple[float | None, float | None, float | None]:
        if self.schedule is None or self.start_epoch_s is None:
            end = self.stop_epoch_s or self.end_epoch_s or time.time()
            return self.start_epoch_s, end, None
        plan = self.schedule.plan
        s0 = plan.starts[i]
        s1 = s0 + plan.stages[i].duration_s
        if not math.isfinite(s1):
            s1 = (self.stop_epoch_s or self.end_epoch_s or time.time()) - self.start_epoch_s
        arrivals = self.schedule.cumulative(s1) - self.schedule.cumulative(s0)
        dur = s1 - s0
        return self.start_epoch_s + s0, self.start_epoch_s + s1, (arrivals / dur if dur > 0 else 0.0)

    def planned_arrivals(self) -> int | None:
        """Arrivals the plan called for (exact, once the ledger has counted them)."""
        if self.planned is None:
            return None
        return sum(self.planned.values())

    def summary_rows(self) -> list[dict]:
        """One row per operation over the whole run, plus ``ALL``."""
        per_op: dict[str, Cell] = defaultdict(Cell)
        for (op, _), c in self.stage_cells.items():
            per_op[op].add(c)
        for op, _ in self.planned or {}:
            per_op.setdefault(op, Cell())
        total = Cell()
        for c in per_op.values():
            total.add(c)
        start = self.start_epoch_s
        end = self.end_epoch_s or time.time()
        if self.schedule is not None and math.isfinite(self.schedule.end_s) and start is not None:
            end = start + self.schedule.end_s
        if self.stop_epoch_s is not None:
            end = min(end, self.stop_epoch_s)
        duration = (end - start) if start else None
        rows = []
        for op, cell in [(op, per_op[op]) for op in sorted(per_op)] + [(ALL, total)]:
            planned = None
            if self.planned is not None:
                planned = sum(n for (o, _), n in self.planned.items() if op in (ALL, o))
            rows.append({
                "stage": "", "operation": op,
                "start_utc": utc_iso(start) if start else "", "end_utc": utc_iso(end),
                "duration_s": round(duration, 3) if duration else "",
                "achieved_tps": round(cell.ok / duration, 3) if duration else "",
                "target_tps": round(planned / duration, 3) if (op == ALL and planned is not None and duration) else "",
                **cell_stats(cell, planned),
            })
        return rows

    def tables(self) -> tuple[list[dict], list[dict]]:
        """stages.csv and summary.csv rows."""
        return self.stage_rows(), self.summary_rows()
