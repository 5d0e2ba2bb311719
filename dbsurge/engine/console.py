"""What a person reads in the terminal while a run goes: stage lines, a progress line, and a quiet Locust.

``dbsurge run`` tells its Locust child how to talk through ``DBSURGE_CONSOLE``:

- ``normal`` (the default): Locust's INFO chatter and its whole-millisecond tables are gone
  (``dbsurge run`` adds ``--loglevel WARNING --only-summary``); dbsurge's own lines stay, in a
  short form (``12:00:15Z probe: ...``); a line at each stage change; a progress line every
  `PROGRESS_EVERY_S` seconds; dbsurge's tables once at the end.
- ``quiet``: the same without the progress lines.
- ``verbose``: Locust as it is (its log lines and tables) plus dbsurge's lines.

A scenario that runs the engine (`dbsurge.scenarios.engine_run`) sets ``DBSURGE_FINAL_TABLES=0``:
the engine prints its checks and verdict, the scenario its table, each once.

Without ``DBSURGE_CONSOLE`` (``locust -f locustfiles/...`` run by hand) Locust's output is left alone and
dbsurge adds the stage and progress lines to it (progress only when headless).

The progress line reports the seconds since the last line, from the rows the run writes to
timeline.csv (the same figures, not a second computation): the mean achieved and target rate,
failures and drops summed, and the worst second's p99 and lag p99 (a p99 over five seconds
would need the histograms; the worst second is the honest summary of per-second values).
"""

from __future__ import annotations

import logging
import math
import os
import time
from bisect import bisect_right
from collections.abc import Callable

from dbsurge.base.utc import parse_utc
from dbsurge.plan.segments import override_text

log = logging.getLogger("dbsurge")

MODES = ("quiet", "normal", "verbose")
PROGRESS_EVERY_S = 5.0


def mode() -> str | None:
    """``DBSURGE_CONSOLE`` (set by ``dbsurge run``), or None under a hand-run ``locust``."""
    value = os.environ.get("DBSURGE_CONSOLE")
    return value if value in MODES else None


class ShortFormatter(logging.Formatter):
    """``12:00:15Z message`` for INFO lines; warnings and errors keep their level and logger."""

    converter = time.gmtime

    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%H:%M:%SZ")
        if record.levelno == logging.INFO:
            text = f"{stamp} {record.getMessage()}"
        else:
            text = f"{stamp} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def set_up_logging() -> None:
    """At Locust's ``init`` (after Locust configured logging): dbsurge's lines in short form.

    ``dbsurge run`` passes ``--loglevel WARNING`` so that Locust's own INFO lines, from the very
    first ("Starting Locust"), are never emitted; dbsurge's logger is set to INFO here so that its
    lines still reach Locust's console handler.
    """
    if mode() in ("quiet", "normal"):
        log.setLevel(logging.INFO)
        for handler in logging.getLogger().handlers:
            if type(handler) is logging.StreamHandler:  # the console, not Locust's in-memory log reader
                handler.setFormatter(ShortFormatter())


def hide_locust_tables() -> None:
    """At ``quitting``: Locust's final tables (whole milliseconds) would repeat dbsurge's, rounded."""
    if mode() in ("quiet", "normal"):
        logging.getLogger("locust.stats_logger").setLevel(logging.WARNING)


def final_tables() -> bool:
    """False when a scenario runs the engine (``DBSURGE_FINAL_TABLES=0``): it prints the study's table itself."""
    return os.environ.get("DBSURGE_FINAL_TABLES") != "0"


def stage_line(plan, index: int, start_epoch_s: float, schedule=None, changes: list | None = None) -> str:
    """``stage 2/4 200%: 400 TPS from 12:00:20Z`` (a ramp: ``100→400 TPS``; an open end: ``until stopped``).

    With the run's `Schedule` and its rate overrides (``[at_s, rate_tps, scale]``), the rate is the
    one in force, and the override that makes it is named:
    ``stage 3/4 100%: 400 TPS (plan 200 TPS; override 1: plan x2) from ...``.
    """
    stage = plan.stages[index]
    st = plan.starts[index]
    planned = (f"{_tps(stage.start_tps)}→{_tps(stage.end_tps)} TPS" if stage.is_ramp else f"{_tps(stage.mean_tps)} TPS")
    rate = planned
    n = _override_in_force(changes or [], st)
    if schedule is not None and n:
        first = schedule.rate_at(st)
        last = schedule.rate_at(st + stage.duration_s - 1e-6) if math.isfinite(stage.duration_s) else first
        shown = f"{_tps(first)}→{_tps(last)} TPS" if abs(first - last) > 1e-9 else f"{_tps(first)} TPS"
        _at, rate_tps, scale = changes[n - 1]
        rate = f"{shown} (plan {planned}; override {n}: {override_text(rate_tps, scale)})"
    length = f" for {_seconds(stage.duration_s)}" if math.isfinite(stage.duration_s) else " until stopped"
    return (f"stage {index + 1}/{len(plan.stages)} {stage.name}: {rate} from "
            f"{time.strftime('%H:%M:%SZ', time.gmtime(start_epoch_s + st))}{length}")


#: A wait before time zero at least this long gets a line (`start_line`): the default --start-delay (1 s) does not.
START_LINE_AFTER_S = 5.0


def start_line(start_epoch_s: float, now_s: float, *, align_s: float | None = None,
               delay_s: float | None = None) -> str | None:
    """``load begins at 12:01:00Z, in 42 s (--align-start 60)``, or None for a wait under `START_LINE_AFTER_S`.

    A long --align-start or --start-delay used to wait without a word: the run looked hung.

        >>> start_line(3600 * 12 + 60, 3600 * 12 + 18, align_s=60, delay_s=1)
        'load begins at 12:01:00Z, in 42 s (--align-start 60)'
        >>> start_line(100.0, 99.0, delay_s=1) is None
        True
    """
    wait = start_epoch_s - now_s
    if not wait >= START_LINE_AFTER_S:
        return None
    why = f"--align-start {align_s:g}" if align_s else f"--start-delay {delay_s:g}"
    return f"load begins at {time.strftime('%H:%M:%SZ', time.gmtime(start_epoch_s))}, in {_seconds(wait)} ({why})"


def failure_line(kind: str, message: str, where: str = "") -> str:
    """The line a failure kind gets the first time it happens, with its message (pgbench prints the SQL error).

        >>> failure_line("server:42P01", 'UndefinedTable: relation "orders" does not exist')
        'first failure server:42P01: UndefinedTable: relation "orders" does not exist (the next ones are counted)'
    """
    text = " ".join(str(message or "").split())
    if len(text) > FAILURE_LINE_LIMIT:
        text = text[: FAILURE_LINE_LIMIT - 1] + "…"
    on = f" from {where}" if where else ""
    return f"first failure {kind}{on}: {text or '(no message)'} (the next ones are counted)"


def say_failures(run, failures: list[tuple[str, str, str]]) -> None:
    """Log `failure_line` for each (kind, message, worker) a flush saw for the first time (`Aggregator.flush`)."""
    for kind, message, worker in failures:
        where = run.hosts.name(worker) if run.has_workers else ""
        log.warning(failure_line(kind, message, where))


#: A failure's message on the console: the error and the start of the statement, not a page of it.
FAILURE_LINE_LIMIT = 200


def _override_in_force(changes: list, t: float) -> int:
    """The number (1, 2, ...) of the last override made at or before ``t`` seconds; 0 for none."""
    return sum(1 for at_s, _rate, _scale in changes if at_s <= t + 1e-9)


def _tps(x: float) -> str:
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"


def _seconds(s: float) -> str:
    """``6 s``, ``3.5 s`` (a stage of 3.5 s is not "4 s"), ``2.5 min``."""
    return (f"{s:.0f} s" if abs(s - round(s)) < 0.05 else f"{s:.1f} s") if s < 120 else f"{s / 60:.1f} min"


class Progress:
    """Collects the timeline's ALL rows as they are written; every few seconds, one line.

    A line names the stage its seconds belong to. With the plan's stage starts (seconds from time
    zero), a second that straddles a stage boundary is named by both stages
    (``stage 1→2/4 20%→200%``) and gets a line of its own, so a line never mixes two stages'
    rates under one stage's name. With ``changes`` (the run's live rate overrides,
    ``[at_s, rate_tps, scale]``), a line whose seconds ran under an override says which one.
    `finish` gives the last stage its line at the end of the run.
    """

    def __init__(self, start_epoch_s: float, stage_names: list[str], every_s: float = PROGRESS_EVERY_S,
                 stage_starts: list[float] | None = None, changes: Callable[[], list] | None = None,
                 plan_end_s: float | None = None):
        self.start_epoch_s = start_epoch_s
        self.stage_names = stage_names
        self.stage_starts = stage_starts
        self.plan_end_s = plan_end_s  # seconds from time zero (None: no plan, or an open end)
        self.changes = changes or list
        self.every_s = every_s
        self.rows: list[dict] = []
        self.last_line_at = time.monotonic()
        self.failed_so_far = 0

    def add(self, rows: list[dict]) -> list[str]:
        """The final rows of one flush; the lines due: one when a stage's last second is in, one every few seconds."""
        lines = []
        for row in rows:
            if row.get("operation") != "ALL":
                continue
            if self.rows and self._key(row) != self._key(self.rows[-1]):
                lines.append(self._take())  # a line never mixes two stages' rates
            self.rows.append(row)
        if self.rows and time.monotonic() - self.last_line_at >= self.every_s:
            lines.append(self._take())
        return lines

    def finish(self, rows: list[dict]) -> list[str]:
        """The run's last rows (the final flush): their lines, and one for whatever is left."""
        lines = self.add(rows) if rows else []
        if self.rows:
            lines.append(self._take())
        return lines

    def _key(self, row: dict) -> tuple:
        """What a line may not mix: the stages the row's second overlaps, and the override in force."""
        return self._stages_of(row), self._override_of(row)

    def _offset(self, row: dict) -> float | None:
        try:
            return parse_utc(row.get("time_utc")) - self.start_epoch_s
        except (TypeError, ValueError):
            return None

    def _stages_of(self, row: dict) -> tuple:
        """(first, last) index of the stages the row's second overlaps; by its label without the plan."""
        t = self._offset(row)
        stage = row.get("stage")
        if self.stage_starts is None or t is None or not stage or len(self.stage_starts) != len(self.stage_names):
            return (stage, stage)
        # by time, not by name: two stages may share a name (``10s@100%,10s@200%,10s@100%``)
        own = max(0, bisect_right(self.stage_starts, max(t, 0.0)) - 1)
        last = own
        while last + 1 < len(self.stage_starts) and self.stage_starts[last + 1] < t + 1.0 - 1e-6:
            last += 1
        return (own, last)

    def _override_of(self, row: dict) -> int:
        t = self._offset(row)
        return 0 if t is None else _override_in_force(self.changes(), t + 1.0 - 1e-6)

    def _take(self) -> str:
        self.last_line_at = time.monotonic()
        line, self.rows = self.line(self.rows), []
        return line

    def line(self, rows: list[dict]) -> str:
        last = rows[-1]
        seconds = len(rows)
        # The seconds in which time zero and the plan's end fall are only partly in the run: their rates are
        # that part's share (a 20 TPS stage read "18.3/18.3 TPS" at its first line, a 60 TPS last stage
        # "53.0/53.0 TPS" at its last). Rates come from whole seconds of the plan when any.
        whole = [r for r in rows if self._whole(r)] or rows
        achieved = sum(_num(r.get("achieved_tps")) for r in whole) / len(whole)
        targets = [_num(r.get("target_tps")) for r in whole if r.get("target_tps") not in (None, "")]
        failed = sum(int(_num(r.get("failures"))) for r in rows)
        dropped = sum(int(_num(r.get("dropped"))) for r in rows)
        self.failed_so_far += failed
        # the percentiles are of successes: seconds in which every operation failed have none (not 0.000 ms)
        p99 = max((_num(r.get("p99_ms"), math.nan) for r in rows if _succeeded(r)), default=math.nan, key=_nan_low)
        lag = max((_num(r.get("lag_p99_ms"), math.nan) for r in rows), default=math.nan, key=_nan_low)
        elapsed = _elapsed(last.get("time_utc"), self.start_epoch_s)
        rate = f"{achieved:.1f}/{sum(targets) / len(targets):.1f} TPS" if targets else f"{achieved:.1f} ops/s"
        where = self._where(rows)
        return (f"t={elapsed} {where}: {rate}, p99 {_ms(p99)}, lag p99 {_ms(lag)}, "
                f"{failed} failed ({self.failed_so_far} in all), {dropped} dropped (last {seconds} s)")

    def _whole(self, row: dict) -> bool:
        """Whether the row's second lies wholly inside the plan (from time zero to its end)."""
        t = self._offset(row) or 0.0
        end = self.plan_end_s
        return t >= -1e-6 and (end is None or not math.isfinite(end) or t + 1.0 <= end + 1e-6)

    def _where(self, rows: list[dict]) -> str:
        """``stage 2/4 200%``, ``stage 1→2/4 20%→200%`` (a straddling second), ``... under override 1: plan x2``."""
        first, last = self._stages_of(rows[0])[0], self._stages_of(rows[-1])[1]
        names = self.stage_names
        if isinstance(first, int) and isinstance(last, int) and first != last:
            where = f"stage {first + 1}→{last + 1}/{len(names)} {names[first]}→{names[last]}"
        elif isinstance(last, int) and len(names) > 1:
            where = f"stage {last + 1}/{len(names)} {names[last]}"
        else:
            where = _where(rows[-1].get("stage"), names)
        n = self._override_of(rows[-1])
        if n:
            _at, rate_tps, scale = self.changes()[n - 1]
            where += f" under override {n}: {override_text(rate_tps, scale)}"
        return where


def _where(stage: str | None, names: list[str]) -> str:
    """``stage 2/4 200%``; a one-stage plan or a closed-model run: just its name; after the plan's end: say so."""
    if stage in names and len(names) > 1:
        return f"stage {names.index(stage) + 1}/{len(names)} {stage}"
    return str(stage) if stage else "after the plan"


def _num(value, default: float = 0.0) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default


def _succeeded(row: dict) -> bool:
    """Whether an operation of the timeline row succeeded (a row without counts: assume so)."""
    if row.get("count") in (None, ""):
        return True
    return _num(row.get("count")) - _num(row.get("failures")) > 0


def _nan_low(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f} ms"


def _elapsed(time_utc: str | None, start_epoch_s: float) -> str:
    try:
        return f"{max(0.0, parse_utc(time_utc) + 1.0 - start_epoch_s):.0f}s"  # the row's second has ended
    except (TypeError, ValueError):
        return "?"
