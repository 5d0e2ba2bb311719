"""Live figures for the web panel: the timeline's complete seconds, kept as they are written.

The aggregator hands `LiveFigures.add_second` every second it writes to timeline.csv: the
second's ``ALL`` cell (every operation merged) and the row it wrote from that cell. Nothing here
measures anything a second way: the figures are timeline.csv's, merged over a few seconds
(``recent``), over the last minutes (``points``, for a sparkline) and over each row of the run
(``rows``: a stage, or a stage under a rate override, see `RowKey`).

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

from ..utc import utc_iso
from .cells import Cell

#: A row of the live table: (stage index, rate override in force: 0 for the plan's own rate, k for
#: the k-th override). A second belongs to the row in force at its start, as timeline.csv's stage column.
RowKey = tuple[int, int]

HISTORY_S = 300  # the sparkline's span: the last five minutes
RECENT_S = 5  # "now": the last five complete seconds


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
    from .cells import cell_stats

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

    def __init__(self, history_s: int = HISTORY_S, recent_s: int = RECENT_S):
        self.points: deque[tuple[int, float | None, int, float]] = deque(maxlen=history_s)
        self.recent: deque[tuple[int, float | None, Cell]] = deque(maxlen=recent_s)
        self.rows: list[LiveRow] = []

    def add_second(self, sec: int, key: RowKey | None, target: float | None, cell: Cell, row: dict) -> None:
        """One complete second: ``cell`` is its ``ALL`` cell, ``row`` the timeline row written from it.

        ``key`` None: a second after the plan's end (the drain), in no row of the table.
        """
        self.points.append((sec, target, cell.ok, float(row.get("p99_ms") or 0.0)))
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
