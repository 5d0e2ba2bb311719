"""Read a run directory (``results/<run-id>/``) into plain objects and pandas frames.

The side collector reads what the engine wrote (``run.json``, ``timeline.csv``, ``stages.csv``,
``events.jsonl``) and what the collectors wrote under ``metrics/``. Every reader tolerates a file
that is missing or empty (a run that crashed early, a run without CloudWatch): it returns ``None``
or an empty frame, and the caller decides what that means. Times are parsed into timezone-aware
UTC ``pandas.Timestamp`` values; `format_utc` writes them back in the run directory's one format,
ISO 8601 UTC with milliseconds and a ``Z`` (``2026-09-29T08:43:07.250Z``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dbsurge.base.errors import UserError, clip
from dbsurge.rundir import writer
from dbsurge.rundir.reader import damaged, read_meta
from dbsurge.rundir.reader import read_events as read_events_of
from dbsurge.rundir.schema import CLOUDWATCH, CLOUDWATCH_COLUMNS, CLOUDWATCH_KEY, METRICS, STAGES, SUMMARY_CSV, TIMELINE


def parse_utc(value: Any) -> pd.Timestamp:
    """A timezone-aware UTC timestamp from ISO 8601 text, epoch seconds, a datetime or a Timestamp."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return pd.Timestamp(round(value * 1e9), unit="ns", tz="UTC")
    ts = pd.Timestamp(value)
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    return ts.as_unit("ns")


def format_utc(value: Any) -> str:
    """ISO 8601 UTC with millisecond precision and a Z, the run directory's time format."""
    ts = parse_utc(value)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def to_utc(series: pd.Series) -> pd.Series:
    """Parse a column of ISO 8601 times (any precision, with Z or an offset) into UTC timestamps."""
    return pd.to_datetime(series, utc=True, format="ISO8601").dt.as_unit("ns")


def epoch_s(value: Any) -> float:
    """Seconds since the epoch for anything `parse_utc` accepts."""
    return parse_utc(value).value / 1e9


@dataclass(frozen=True)
class Stage:
    """One stage of the plan with absolute UTC boundaries, ``[start, end)``."""

    name: str
    start: pd.Timestamp
    end: pd.Timestamp
    target_tps: float | None = None

    @property
    def duration_s(self) -> float:
        return (self.end - self.start).total_seconds()

    def contains(self, ts: pd.Timestamp) -> bool:
        return self.start <= ts < self.end


@dataclass
class RunInfo:
    """What ``run.json`` says about a run, with times parsed.

    ``started`` and ``ended`` are ``None`` when the file does not give them (``ended`` is missing
    while the run is still going).
    """

    path: Path
    meta: dict
    started: pd.Timestamp | None
    ended: pd.Timestamp | None
    stages: list[Stage] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id") or self.path.name)

    @property
    def cloudwatch(self) -> list[str]:
        value = self.meta.get("cloudwatch") or []
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]

    @property
    def workload(self) -> str:
        value = self.meta.get("workload")
        if isinstance(value, dict):
            return str(value.get("name", ""))
        if isinstance(value, (list, tuple)):
            return ", ".join(str(v) for v in value)
        return "" if value is None else str(value)

    @property
    def target(self) -> str:
        value = self.meta.get("target")
        if isinstance(value, dict):
            return str(value.get("display") or value.get("uri") or "")
        return "" if value is None else str(value)

    @property
    def plan_text(self) -> str:
        plan = self.meta.get("plan")
        return str(plan.get("text", "")) if isinstance(plan, dict) else ""

    def window(self, now: pd.Timestamp | None = None) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        """The run's ``[start, end)``: run.json's times, else the plan's, else ``None``."""
        start = self.started or (self.stages[0].start if self.stages else None)
        end = self.ended or now or (self.stages[-1].end if self.stages else None)
        if start is None or end is None:
            return None
        return start, max(start, end)

    def stage_at(self, ts: pd.Timestamp) -> Stage | None:
        for stage in self.stages:
            if stage.contains(ts):
                return stage
        return None


def open_run(run_dir: str | Path) -> RunInfo:
    """Read ``run.json``; a missing directory or file is a `UserError` with one line."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory: give a run directory such as results/<run-id>")
    meta = read_meta(path)
    started = _maybe_time(meta.get("started_utc"))
    ended = _maybe_time(meta.get("ended_utc"))
    return RunInfo(path=path, meta=meta, started=started, ended=ended, stages=_stages(meta, ended))


def _maybe_time(value: Any) -> pd.Timestamp | None:
    if value in (None, ""):
        return None
    try:
        return parse_utc(value)
    except (ValueError, TypeError):
        return None


def _stages(meta: dict, ended: pd.Timestamp | None) -> list[Stage]:
    plan = meta.get("plan")
    raw = plan.get("stages") if isinstance(plan, dict) else None
    stages: list[Stage] = []
    for i, item in enumerate(raw or []):
        if not isinstance(item, dict):
            continue
        start, end = _maybe_time(item.get("start_utc")), _maybe_time(item.get("end_utc"))
        if end is None and start is not None and ended is not None and ended > start:
            end = ended  # an open-ended last stage lasts until the run ended
        if start is None or end is None:
            continue
        tps = item.get("target_tps")
        stages.append(
            Stage(
                name=str(item.get("name") or f"stage {i + 1}"),
                start=start,
                end=end,
                target_tps=None if tps in (None, "") else float(tps),
            )
        )
    return stages


def read_csv(path: Path, time_columns: tuple[str, ...] = ("time_utc",)) -> pd.DataFrame | None:
    """A CSV file as a frame with its time columns parsed; ``None`` when missing or empty."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    except (pd.errors.ParserError, OSError, ValueError) as exc:  # ValueError: not UTF-8
        raise UserError(f"{path} cannot be read: {clip(exc, 120)}") from None
    for column in time_columns:
        if column in frame.columns:
            frame[column] = _times(path, frame[column])
    return frame


def _times(path: Path, column: pd.Series) -> pd.Series:
    """`to_utc` of a file's column, or the one line `check_run_dir` gives for a cell that is not a time
    (pandas' DateParseError, a ValueError, was a traceback from ``dbsurge report`` and ``cost``)."""
    try:
        return to_utc(column)
    except (ValueError, TypeError, OverflowError):
        parsed = pd.to_datetime(column, utc=True, format="ISO8601", errors="coerce")
        bad = column[parsed.isna() & column.notna()]
        where = f"line {int(bad.index[0]) + 2}, column {column.name}: '{clip(bad.iloc[0], 30)}'" if len(bad) else \
            f"column {column.name}: a cell"
        raise damaged(path, f"{where} is not an ISO 8601 time") from None


def read_timeline(run_dir: Path) -> pd.DataFrame | None:
    """``timeline.csv``: one row per second and operation."""
    return read_csv(Path(run_dir) / TIMELINE)


def read_stages(run_dir: Path) -> pd.DataFrame | None:
    """``stages.csv``: one row per stage and operation (plus ``operation=ALL``)."""
    return read_csv(Path(run_dir) / STAGES, ("start_utc", "end_utc"))


def read_summary(run_dir: Path) -> pd.DataFrame | None:
    """``summary.csv``: one row per operation over the whole run."""
    return read_csv(Path(run_dir) / SUMMARY_CSV, ())


def read_sampler(run_dir: Path, filename: str) -> pd.DataFrame | None:
    """A database sampler's CSV under ``metrics/``, sorted by time."""
    frame = read_csv(Path(run_dir) / METRICS / filename)
    if frame is None or "time_utc" not in frame.columns:
        return None
    return frame.dropna(subset=["time_utc"]).sort_values("time_utc", kind="stable").reset_index(drop=True)


def read_cloudwatch(run_dir: Path) -> pd.DataFrame:
    """``metrics/cloudwatch.csv`` in long form, deduplicated (the last row of a key wins), sorted."""
    frame = read_csv(Path(run_dir) / METRICS / CLOUDWATCH)
    return normalize_cloudwatch(frame)


def normalize_cloudwatch(frame: pd.DataFrame | None) -> pd.DataFrame:
    """Long-form CloudWatch rows with typed columns, one row per key (the last one wins), sorted."""
    if frame is None or frame.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in CLOUDWATCH_COLUMNS}).astype(
            {"value": "float64", "time_utc": "datetime64[ns, UTC]"}
        )
    frame = frame[CLOUDWATCH_COLUMNS].copy()
    if pd.api.types.is_datetime64_any_dtype(frame["time_utc"]):
        frame["time_utc"] = frame["time_utc"].dt.tz_convert("UTC").dt.as_unit("ns")
    else:
        frame["time_utc"] = to_utc(frame["time_utc"])
    for column in ("preset", "id", "metric", "stat"):
        frame[column] = frame[column].astype(str)
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    frame = frame.drop_duplicates(subset=CLOUDWATCH_KEY, keep="last")
    return frame.sort_values(CLOUDWATCH_KEY, kind="stable").reset_index(drop=True)


def write_cloudwatch(run_dir: Path, frame: pd.DataFrame) -> Path:
    """Rewrite ``metrics/cloudwatch.csv`` from a long-form frame (atomically)."""
    path = writer.metrics_path(run_dir, CLOUDWATCH)
    out = normalize_cloudwatch(frame)
    out["time_utc"] = out["time_utc"].map(format_utc)
    with writer.atomic_path(path) as tmp:
        out.to_csv(tmp, index=False)
    return path


def read_events(run_dir: Path) -> list[dict]:
    """``events.jsonl`` as a list of dicts; lines that are not JSON objects are skipped."""
    return read_events_of(run_dir)


def append_event(run_dir: Path, event: dict, clock: Callable[[], float] = time.time) -> None:
    """Append one event to ``events.jsonl`` (adding ``time_utc`` when absent), through the run directory's writer."""
    row = {"time_utc": format_utc(clock()), **event} if "time_utc" not in event else dict(event)
    writer.append_event(run_dir, row)


#: Rewrite ``run.json`` atomically with some top-level fields changed (secrets removed): the writer's.
update_run_json = writer.update_run_json


def floor_s(ts: pd.Timestamp) -> pd.Timestamp:
    return ts.floor("s")


def ceil_s(ts: pd.Timestamp) -> pd.Timestamp:
    return ts.ceil("s")


def finite(value: Any) -> float | None:
    """A float, or ``None`` for blanks, NaN and infinities."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
