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


def stage_line(plan, index: int, start_epoch_s: float) -> str:
    """``stage 2/4 200%: 400 TPS from 12:00:20Z`` (a ramp: ``100→400 TPS``; an open end: ``until stopped``)."""
    stage = plan.stages[index]
    rate = (f"{_tps(stage.start_tps)}→{_tps(stage.end_tps)} TPS" if stage.is_ramp else f"{_tps(stage.mean_tps)} TPS")
    at = start_epoch_s + plan.starts[index]
    length = f" for {_seconds(stage.duration_s)}" if math.isfinite(stage.duration_s) else " until stopped"
    return (f"stage {index + 1}/{len(plan.stages)} {stage.name}: {rate} from "
            f"{time.strftime('%H:%M:%SZ', time.gmtime(at))}{length}")


def _tps(x: float) -> str:
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


class Progress:
    """Collects the timeline's ALL rows as they are written; every few seconds, one line."""

    def __init__(self, start_epoch_s: float, stage_names: list[str], every_s: float = PROGRESS_EVERY_S):
        self.start_epoch_s = start_epoch_s
        self.stage_names = stage_names
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
            if self.rows and row.get("stage") != self.rows[-1].get("stage"):
                lines.append(self._take())  # a line never mixes two stages' rates
            self.rows.append(row)
        if self.rows and time.monotonic() - self.last_line_at >= self.every_s:
            lines.append(self._take())
        return lines

    def _take(self) -> str:
        self.last_line_at = time.monotonic()
        line, self.rows = self.line(self.rows), []
        return line

    def line(self, rows: list[dict]) -> str:
        last = rows[-1]
        seconds = len(rows)
        achieved = sum(_num(r.get("achieved_tps")) for r in rows) / seconds
        targets = [_num(r.get("target_tps")) for r in rows if r.get("target_tps") not in (None, "")]
        failed = sum(int(_num(r.get("failures"))) for r in rows)
        dropped = sum(int(_num(r.get("dropped"))) for r in rows)
        self.failed_so_far += failed
        p99 = max((_num(r.get("p99_ms"), math.nan) for r in rows), default=math.nan, key=_nan_low)
        lag = max((_num(r.get("lag_p99_ms"), math.nan) for r in rows), default=math.nan, key=_nan_low)
        elapsed = _elapsed(last.get("time_utc"), self.start_epoch_s)
        rate = f"{achieved:.1f}/{sum(targets) / len(targets):.1f} TPS" if targets else f"{achieved:.1f} ops/s"
        where = _where(last.get("stage"), self.stage_names)
        return (f"t={elapsed} {where}: {rate}, p99 {_ms(p99)}, lag p99 {_ms(lag)}, "
                f"{failed} failed ({self.failed_so_far} in all), {dropped} dropped (last {seconds} s)")


def _where(stage: str | None, names: list[str]) -> str:
    """``stage 2/4 200%``; a one-stage plan or a closed-model run: just its name."""
    if stage in names and len(names) > 1:
        return f"stage {names.index(stage) + 1}/{len(names)} {stage}"
    return str(stage)


def _num(value, default: float = 0.0) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default


def _nan_low(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f} ms"


def _elapsed(time_utc: str | None, start_epoch_s: float) -> str:
    from .utc import parse_utc

    try:
        return f"{max(0.0, parse_utc(time_utc) + 1.0 - start_epoch_s):.0f}s"  # the row's second has ended
    except (TypeError, ValueError):
        return "?"
