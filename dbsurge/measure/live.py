"""Live figures for the web panel: the timeline's complete seconds, kept as they are written.

The aggregator hands `LiveFigures.add_second` every second it writes to timeline.csv: the
second's ``ALL`` cell (every operation merged) and the row it wrote from that cell. Nothing here
measures anything a second way: the figures are timeline.csv's, merged over a few seconds
(``recent``), over the last minutes (``points``, for a sparkline) and over each row of the run
(``rows``: a stage, or a stage under a rate override, see `RowKey`). ``series`` keeps the last
`SERIES_S` seconds as timeline.csv has them, one point a second (the panel's chart): bounded, so a
day-long run holds and serves no more than a short one.

    >>> from dbsurge.measure.cells import Cell
    >>> live = LiveFigures(recent_s=2)
    >>> for sec in (100, 101, 102):
    ...     c = Cell(); c.ok = 50
    ...     live.add_second(sec, (0, 0), 50.0, c, {"p99_ms": 1.5})
    >>> live.recent_stats()["achieved_tps"], live.recent_stats()["seconds"]
    (50.0, 2)
    >>> [(r.key, r.seconds) for r in live.rows]
    [((0, 0), 3)]
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from dbsurge.base.utc import utc_iso
from dbsurge.measure.cells import Cell, cell_stats

#: A row of the live table: (stage index, rate override in force: 0 for the plan's own rate, k for
#: the k-th override). A second belongs to the row in force at its start, as timeline.csv's stage column.
RowKey = tuple[int, int]

HISTORY_S = 300  # the sparkline's span: the last five minutes
RECENT_S = 5  # "now": the last five complete seconds
SERIES_S = 900  # the chart's span: the last fifteen minutes, a point a second
#: Operations with lines of their own in the chart (the first seen); the rest are in ``ALL`` only. Each
#: operation adds three numbers a second to every /dbsurge/live answer: this bounds its size too.
SERIES_OPS = 6
ALL = "ALL"


def _ms_or_none(row: dict, name: str) -> float | None:
    """A timeline row's time in ms, None when the second had no successful operation (no percentile: a gap)."""
    if not row.get("ok"):
        return None
    v = row.get(name)
    return None if v in (None, "") else float(v)


@dataclass(frozen=True)
class SeriesPoint:
    """One timeline second, as the chart draws it: the ``ALL`` row's rates and lag, each operation's percentiles."""

    sec: int
    target: float | None
    ok: int
    failures: int
    lag_p99_ms: float | None
    percentiles: dict[str, tuple[float | None, float | None, float | None]]  # operation -> p50, p95, p99 (ms)


@dataclass
class LiveRow:
    """The timeline seconds of one row, merged: their ``ALL`` cells and their planned arrivals."""

    key: RowKey
    first_s: int
    last_s: int
    seconds: int = 0
    planned: float = 0.0  # sum of the seconds' target_tps (planned arrivals in each second)
    cell: Cell = field(default_factory=Cell)

    def stats(self) -> dict:
        return merged_stats(self.cell, self.seconds, self.planned, self.first_s, self.last_s)


def merged_stats(cell: Cell, seconds: int, planned: float | None, first_s: int, last_s: int) -> dict:
    """`cell_stats` of merged seconds, with the rates per second and the span they cover."""
    out = cell_stats(cell)
    out.update({
        "seconds": seconds,
        "start_utc": utc_iso(first_s), "end_utc": utc_iso(last_s + 1),
        "target_tps": round(planned / seconds, 3) if planned is not None and seconds else None,
        "achieved_tps": round(cell.ok / seconds, 3) if seconds else 0.0,
        "failed_by_kind": dict(sorted(cell.failed.items())),
    })
    return out


class LiveFigures:
    """What the panel shows, from the seconds written to timeline.csv (see the module docstring)."""

    def __init__(self, history_s: int = HISTORY_S, recent_s: int = RECENT_S, series_s: int = SERIES_S,
                 series_ops: int = SERIES_OPS):
        self.points: deque[tuple[int, float | None, int, float]] = deque(maxlen=history_s)
        self.recent: deque[tuple[int, float | None, Cell]] = deque(maxlen=recent_s)
        self.series_points: deque[SeriesPoint] = deque(maxlen=series_s)
        self.series_ops = series_ops
        self.operations: list[str] = []  # the operations with lines of their own, in the order first seen
        self.operations_left_out: set[str] = set()
        self.rows: list[LiveRow] = []

    def add_second(self, sec: int, key: RowKey | None, target: float | None, cell: Cell, row: dict,
                   op_rows: list[dict] | None = None) -> None:
        """One complete second: ``cell`` is its ``ALL`` cell, ``row`` the timeline row written from it,
        ``op_rows`` the rows written per operation (for the chart's percentiles per operation).

        ``key`` None: a second after the plan's end (the drain), in no row of the table.
        """
        self.points.append((sec, target, cell.ok, float(row.get("p99_ms") or 0.0)))
        self.series_points.append(self._series_point(sec, target, cell, row, op_rows or []))
        self.recent.append((sec, target, cell))
        if key is None:
            return
        if not self.rows or self.rows[-1].key != key:
            self.rows.append(LiveRow(key, sec, sec))
        r = self.rows[-1]
        r.last_s = sec
        r.seconds += 1
        r.planned += target or 0.0
        r.cell.add(cell)

    def recent_stats(self) -> dict | None:
        """The last few complete seconds merged (None before the first)."""
        if not self.recent:
            return None
        total = Cell()
        for _, _, c in self.recent:
            total.add(c)
        targets = [t for _, t, _ in self.recent]
        planned = None if any(t is None for t in targets) else sum(targets)
        return merged_stats(total, len(self.recent), planned, self.recent[0][0], self.recent[-1][0])

    def sparkline(self) -> dict:
        """Per second over the last minutes: planned and achieved TPS and p99 (ms), for a small chart."""
        pts = list(self.points)
        return {"time_s": [p[0] for p in pts], "target_tps": [p[1] for p in pts],
                "achieved_tps": [p[2] for p in pts], "p99_ms": [p[3] for p in pts]}

    def _series_point(self, sec: int, target: float | None, cell: Cell, row: dict, op_rows: list[dict]) -> SeriesPoint:
        pct = {ALL: (_ms_or_none(row, "p50_ms"), _ms_or_none(row, "p95_ms"), _ms_or_none(row, "p99_ms"))}
        for r in op_rows:
            op = r.get("operation")
            if op in (None, ALL):
                continue
            if op not in self.operations:
                if len(self.operations) >= self.series_ops:
                    self.operations_left_out.add(op)
                    continue
                self.operations.append(op)
            pct[op] = (_ms_or_none(r, "p50_ms"), _ms_or_none(r, "p95_ms"), _ms_or_none(r, "p99_ms"))
        lag = row.get("lag_p99_ms")
        return SeriesPoint(sec, target, cell.ok, cell.failures, None if lag in (None, "") or not cell.count
                           else float(lag), pct)

    def series(self, since: int | None = None) -> dict:
        """The chart's points, column by column: per second of the last `SERIES_S`, timeline.csv's figures;
        with ``since`` (an epoch second), only the seconds after it.

        The panel asks for the seconds after its last (``since``): a second's answer is then a point,
        not 900. Serialising all of them was 12 ms of the master's loop (70 ms as Flask's indented JSON),
        every second, per open page.

        ``target_tps`` is the planned arrivals of each second (None after the plan: the drain),
        ``achieved_tps`` the successful operations, ``failures`` the failed ones, ``lag_p99_ms`` the
        arrival lag's p99; ``operations`` maps ``ALL`` and each operation (at most `SERIES_OPS`) to its
        ``p50_ms``, ``p95_ms`` and ``p99_ms`` (None in a second without a success of that operation).
        """
        pts = list(self.series_points)
        if since is not None:
            first = next((i for i in range(len(pts) - 1, -1, -1) if pts[i].sec <= since), -1) + 1
            pts = pts[first:]
        ops = [ALL] + self.operations if len(self.operations) > 1 or self.operations_left_out else [ALL]
        return {
            "span_s": self.series_points.maxlen,
            "since": since,
            "time_s": [p.sec for p in pts],
            "target_tps": [p.target for p in pts],
            "achieved_tps": [p.ok for p in pts],
            "failures": [p.failures for p in pts],
            "lag_p99_ms": [p.lag_p99_ms for p in pts],
            # one operation: its lines are ALL's (the same row), drawn once
            "operations": {op: {name: [p.percentiles.get(op, (None, None, None))[i] for p in pts]
                                for i, name in enumerate(("p50_ms", "p95_ms", "p99_ms"))} for op in ops},
            "operation_names": list(self.operations),
            "operations_left_out": sorted(self.operations_left_out),
        }
