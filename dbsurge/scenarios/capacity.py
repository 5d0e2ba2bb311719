"""CloudWatch capacity for the scenarios (and the engine's tables): check, fetch, read at a moment, per stage.

The engine's runs get their CloudWatch data from the collector (``--cloudwatch`` on ``dbsurge run``,
``dbsurge collect``). An in-process scenario asks the same collector once, at its end, for its own
window and writes ``metrics/cloudwatch.csv`` the same way, so ``dbsurge collect results/<run>``
can fetch the late datapoints again and ``dbsurge scenario NAME --from results/<run>`` reprints
the table with them. Without ``--cloudwatch`` nothing is fetched and the capacity cells are blank.

`cloudwatch_collector` is the one check of ``--cloudwatch`` before any load (scenarios and
``dbsurge run``); `stage_capacity_texts` the one text of the capacity per stage (the spike's table
and the engine's stage table).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from dbsurge.base.errors import UserError
from dbsurge.collectors.cloudwatch import cloudwatch_collector  # noqa: F401 - the scenarios' import
from dbsurge.collectors.merge import capacity_frames, infer_period_s, series_label, stage_capacity, stage_capacity_texts
from dbsurge.collectors.rundata import read_cloudwatch, write_cloudwatch
from dbsurge.rundir.schema import CLOUDWATCH, METRICS


def fetch_capacity(run_dir: Path, collector: Any, start_s: float, end_s: float, margin_s: float = 120.0) -> str:
    """Fetch the window into ``metrics/cloudwatch.csv``; returns a sentence for the output."""
    try:
        fetched = collector.fetch(start_s - margin_s, end_s + margin_s)
    except UserError as e:
        return f"CloudWatch not read ({e}); run `dbsurge collect {run_dir}` later."
    existing = read_cloudwatch(run_dir)
    frames = [f for f in (existing, fetched) if not f.empty]
    if frames:
        write_cloudwatch(run_dir, pd.concat(frames, ignore_index=True))
    return (f"CloudWatch: {len(fetched)} datapoints; standard metrics arrive minutes late: run `dbsurge collect "
            f"{run_dir}` later, then `--from {run_dir}` to print the table again.")


def capacity_at(run_dir: Path, epoch_s: float) -> dict[str, float]:
    """Each capacity series' value for the period that holds ``epoch_s`` (Average, else Maximum/Sum)."""
    path = Path(run_dir) / METRICS / CLOUDWATCH
    if not path.is_file():
        return {}
    series = capacity_frames(read_cloudwatch(Path(run_dir)))
    keys = list(series)
    at = pd.Timestamp(epoch_s, unit="s", tz="UTC")
    out: dict[str, float] = {}
    for key, frame in series.items():
        period = infer_period_s(frame["time_utc"])
        for stat in ("Average", "Maximum", "Sum"):
            points = frame[frame["stat"] == stat]
            inside = points[(points["time_utc"] <= at) & (points["time_utc"] + pd.Timedelta(seconds=period) > at)]
            if not inside.empty:
                out[series_label(*key, keys)] = float(inside["value"].iloc[-1])
                break
    return out


def metric_at(run_dir: Path, metric: str, epoch_s: float, stat: str = "Average") -> dict[str, float]:
    """One CloudWatch metric's value (per preset id) for the period that holds ``epoch_s``."""
    if not (Path(run_dir) / METRICS / CLOUDWATCH).is_file():
        return {}
    frame = read_cloudwatch(Path(run_dir))
    frame = frame[(frame["metric"] == metric) & (frame["stat"] == stat)]
    at = pd.Timestamp(epoch_s, unit="s", tz="UTC")
    out: dict[str, float] = {}
    for series_id, points in frame.groupby("id"):
        period = infer_period_s(points["time_utc"])
        inside = points[(points["time_utc"] <= at) & (points["time_utc"] + pd.Timedelta(seconds=period) > at)]
        if not inside.empty:
            out[str(series_id)] = float(inside["value"].iloc[-1])
    return out


def capacity_text(values: dict[str, float]) -> str:
    """``a2/writer ACU 10.5; a2/reader ACU 4`` or blank."""
    return "; ".join(f"{label} {value:g}" for label, value in values.items())


def stage_capacity_text(run_dir: Path) -> dict[str, str]:
    """Per stage, the labelled maximum capacity from metrics/cloudwatch.csv (empty without one)."""
    if not (Path(run_dir) / METRICS / CLOUDWATCH).is_file():
        return {}

    return stage_capacity_texts(stage_capacity(Path(run_dir)))
