"""Merge what the clients measured with what the database and CloudWatch saw, on UTC time.

`merge_run` writes ``merged.csv``: one row per second of the run, ``[floor(started), ceil(ended))``.

- ``time_utc`` (the start of the second), ``elapsed_s``, ``stage`` (the plan's stage holding the
  second's start), ``target_tps`` (the timeline's planned arrivals in that second, else the stage's
  rate), and the totals ``achieved_tps, count, failures, dropped`` (the timeline's ``ALL`` row, else
  the sum over operations).
- ``<operation>.<column>`` for each operation and each numeric column of timeline.csv
  (``create_order.p99_ms``, ``get_product.achieved_tps``, ...).
- ``pg.<column>`` and ``mongo.<column>`` from the database samplers. A sample's deltas cover the
  interval that ends when it was read, so a sample is matched to the second its interval covers
  (``merge_asof`` on the interval's start, nearest, tolerance 0.5 s): a second without a sample
  stays blank, nothing is carried forward across a gap.
- ``cw.<preset>:<id>.<metric>.<stat>`` from CloudWatch, at its own resolution: a datapoint appears
  on the row of its own timestamp (the start of its period) and nowhere else (``merge_asof``,
  backward, tolerance under one second). Rows between datapoints are blank.

`stage_capacity` gives, per stage, the maximum and mean of each capacity series (ACU, DCU, DPU):
the study's "A2 writer ACU (max)". A datapoint belongs to the stage that contains its timestamp
(as in merged.csv); the maximum uses the ``Maximum`` statistic where it was fetched, the mean the
``Average`` (DPU: the per-period ``Sum``). A stage shorter than a period that holds no timestamp
takes the datapoints whose periods overlap it.

The functions taking frames are pure; `merge_run` and `stage_capacity` read and write the run
directory.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from dbsurge.collectors.cloudwatch import capacity_unit
from dbsurge.collectors.rundata import (
    RunInfo,
    Stage,
    format_utc,
    open_run,
    read_cloudwatch,
    read_sampler,
    read_timeline,
)

from dbsurge.rundir.schema import MERGED, MONGO_SERVER_STATUS, PG_STAT_DATABASE
from dbsurge.rundir.writer import atomic_path

SAMPLER_TOLERANCE = pd.Timedelta(milliseconds=500)
CLOUDWATCH_TOLERANCE = pd.Timedelta(milliseconds=999)
_TIMELINE_KEYS = ("time_utc", "stage", "operation")
_TOTALS = ("achieved_tps", "count", "failures", "dropped")


def seconds_index(run: RunInfo, timeline: pd.DataFrame | None) -> pd.DatetimeIndex:
    """The run's whole seconds: from run.json's start and end, else the plan's, else the timeline's."""
    window = run.window()
    if window is None and timeline is not None and not timeline.empty:
        window = (timeline["time_utc"].min(), timeline["time_utc"].max() + pd.Timedelta(seconds=1))
    if window is None:
        return pd.DatetimeIndex([], tz="UTC", name="time_utc")
    start, end = window[0].floor("s"), window[1].ceil("s")
    if end <= start:
        end = start + pd.Timedelta(seconds=1)
    return pd.date_range(start, end, freq="s", inclusive="left", name="time_utc", unit="ns")


def plan_columns(index: pd.DatetimeIndex, stages: list[Stage], started: pd.Timestamp | None) -> pd.DataFrame:
    """``elapsed_s``, ``stage`` and ``target_tps`` for each second (the stage holding the second's start)."""
    frame = pd.DataFrame(index=index)
    origin = started if started is not None else (index[0] if len(index) else None)
    frame["elapsed_s"] = ((index - origin).total_seconds()).round(3) if origin is not None else []
    names = pd.Series(pd.NA, index=index, dtype="object")
    targets = pd.Series(float("nan"), index=index)
    for stage in stages:
        inside = (index >= stage.start.floor("s")) & (index < stage.end)
        # a second belongs to the stage that holds its start; the first partial second to the first stage
        inside &= (index >= stage.start) | (index == stage.start.floor("s"))
        names[inside & names.isna()] = stage.name
        if stage.target_tps is not None:
            targets[inside & targets.isna()] = stage.target_tps
    frame["stage"] = names
    frame["target_tps"] = targets
    return frame


def timeline_wide(timeline: pd.DataFrame | None, index: pd.DatetimeIndex) -> pd.DataFrame:
    """Per-operation timeline columns (``<op>.<column>``) and totals, one row per second of ``index``."""
    frame = pd.DataFrame(index=index)
    if timeline is None or timeline.empty or "operation" not in timeline.columns:
        for column in _TOTALS:
            frame[column] = float("nan")
        return frame
    data = timeline.copy()
    data["time_utc"] = data["time_utc"].dt.floor("s")
    values = [c for c in data.columns if c not in _TIMELINE_KEYS and pd.api.types.is_numeric_dtype(data[c])]
    data["operation"] = data["operation"].astype(str)
    per_op = data[data["operation"] != "ALL"]
    operations = list(dict.fromkeys(per_op["operation"])) + (["ALL"] if (data["operation"] == "ALL").any() else [])
    wide = data.pivot_table(index="time_utc", columns="operation", values=values, aggfunc="last", dropna=False)
    ordered = [(v, op) for op in operations for v in values if (v, op) in wide.columns]
    wide = wide[ordered]
    wide.columns = [f"{op}.{v}" for v, op in ordered]
    wide = wide.reindex(index)
    # totals: the ALL row where the engine wrote one (it carries the drops), else the sum over operations
    present = [c for c in _TOTALS if c in per_op.columns]
    totals = per_op.groupby("time_utc")[present].sum(min_count=1).reindex(index)
    for column in _TOTALS:
        frame[column] = totals[column] if column in totals.columns else float("nan")
        if f"ALL.{column}" in wide.columns:
            frame[column] = wide[f"ALL.{column}"].where(wide[f"ALL.{column}"].notna(), frame[column])
    return pd.concat([frame, wide], axis=1)


def sampler_columns(index: pd.DatetimeIndex, samples: pd.DataFrame | None, prefix: str, interval_s: float = 1.0
                    ) -> pd.DataFrame:
    """A sampler's columns matched to the seconds their intervals cover (no fill across gaps)."""
    if samples is None or samples.empty:
        return pd.DataFrame(index=index)
    data = samples.sort_values("time_utc").reset_index(drop=True)
    gaps = data["time_utc"].diff().dt.total_seconds()
    covered = gaps.where(gaps.notna() & (gaps <= 2 * interval_s), interval_s)
    data["_covers"] = data["time_utc"] - pd.to_timedelta(covered, unit="s")
    data = data.drop(columns=["time_utc"]).sort_values("_covers")
    data.columns = [c if c == "_covers" else f"{prefix}.{c}" for c in data.columns]
    left = pd.DataFrame({"time_utc": index})
    merged = pd.merge_asof(
        left, data, left_on="time_utc", right_on="_covers", direction="nearest", tolerance=SAMPLER_TOLERANCE
    )
    # one sample, one second: if two seconds picked the same sample, keep the nearer
    merged["_dist"] = (merged["_covers"] - merged["time_utc"]).abs()
    dup = merged["_covers"].notna() & merged.duplicated(subset=["_covers"], keep=False)
    if dup.any():
        best = merged[dup].groupby("_covers")["_dist"].transform("min")
        loser = merged.index[dup][merged.loc[dup, "_dist"].to_numpy() > best.to_numpy()]
        merged.loc[loser, [c for c in merged.columns if c.startswith(prefix + ".")]] = pd.NA
    return merged.drop(columns=["_covers", "_dist"]).set_index("time_utc").reindex(index)


def cloudwatch_wide(index: pd.DatetimeIndex, cloudwatch: pd.DataFrame | None) -> pd.DataFrame:
    """CloudWatch series as ``cw.<preset>:<id>.<metric>.<stat>`` columns, each on its own timestamp's row."""
    if cloudwatch is None or cloudwatch.empty or not len(index):
        return pd.DataFrame(index=index)
    data = cloudwatch.copy()
    data["column"] = "cw." + data["preset"] + ":" + data["id"] + "." + data["metric"] + "." + data["stat"]
    wide = data.pivot_table(index="time_utc", columns="column", values="value", aggfunc="last").sort_index()
    wide = wide[sorted(wide.columns)]
    wide.columns.name = None
    right = wide.reset_index().rename(columns={"time_utc": "_cw_time"})
    left = pd.DataFrame({"time_utc": index})
    merged = pd.merge_asof(
        left, right, left_on="time_utc", right_on="_cw_time", direction="backward", tolerance=CLOUDWATCH_TOLERANCE
    )
    return merged.drop(columns=["_cw_time"]).set_index("time_utc")


def merge_frames(
    run: RunInfo,
    timeline: pd.DataFrame | None,
    pg: pd.DataFrame | None = None,
    mongo: pd.DataFrame | None = None,
    cloudwatch: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The merged per-second frame (``time_utc`` as timezone-aware timestamps). Pure."""
    index = seconds_index(run, timeline)
    parts = [
        plan_columns(index, run.stages, run.started),
        timeline_wide(timeline, index),
        sampler_columns(index, pg, "pg"),
        sampler_columns(index, mongo, "mongo"),
        cloudwatch_wide(index, cloudwatch),
    ]
    merged = pd.concat(parts, axis=1)
    # the engine writes each second's planned arrivals (exact across stage boundaries and ramps): prefer it
    planned = [c for c in merged.columns if c.endswith(".target_tps") and not c.startswith(("pg.", "mongo.", "cw."))]
    if planned:
        per_second = merged["ALL.target_tps"] if "ALL.target_tps" in merged else merged[planned].max(axis=1)
        merged["target_tps"] = per_second.where(per_second.notna(), merged["target_tps"])
    if merged["stage"].isna().all() and timeline is not None and "stage" in timeline.columns and len(index):
        stage_by_second = timeline.assign(time_utc=timeline["time_utc"].dt.floor("s")).groupby("time_utc")["stage"]
        merged["stage"] = stage_by_second.first().reindex(index)
    return merged.reset_index()


def merge_run(run_dir: str | Path, *, write: bool = True) -> pd.DataFrame:
    """Merge a run directory's timeline, samplers and CloudWatch rows; writes ``merged.csv``."""
    run = open_run(run_dir)
    merged = merge_frames(
        run,
        read_timeline(run.path),
        read_sampler(run.path, PG_STAT_DATABASE),
        read_sampler(run.path, MONGO_SERVER_STATUS),
        read_cloudwatch(run.path),
    )
    if write:
        out = merged.copy()
        out["time_utc"] = out["time_utc"].map(format_utc)
        out = integer_columns(out)
        with atomic_path(run.path / MERGED) as tmp:
            out.to_csv(tmp, index=False)
    return merged


def integer_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Float columns whose values are all whole numbers as nullable integers (counters print as 41, not 41.0)."""
    out = frame.copy()
    for column in out.columns:
        values = out[column]
        if pd.api.types.is_float_dtype(values) and values.notna().any():
            present = values.dropna()
            if (present == present.round()).all() and present.abs().max() < 2**53:
                out[column] = values.astype("Int64")
    return out


# -- capacity per stage -----------------------------------------------------------------------------


def capacity_frames(cloudwatch: pd.DataFrame) -> dict[tuple[str, str, str], pd.DataFrame]:
    """The capacity series, keyed by (preset, id, unit), each with columns time_utc, stat, value."""
    out: dict[tuple[str, str, str], pd.DataFrame] = {}
    if cloudwatch is None or cloudwatch.empty:
        return out
    for (preset, series_id, metric), group in cloudwatch.groupby(["preset", "id", "metric"], sort=False):
        unit = capacity_unit(str(preset), str(series_id), str(metric))
        if unit:
            out[(str(preset), str(series_id), unit)] = group[["time_utc", "stat", "value"]].reset_index(drop=True)
    return dict(sorted(out.items(), key=lambda item: _series_order(*item[0])))


def _series_order(preset: str, series_id: str, unit: str) -> tuple:
    """Cluster, then writer, then reader, as the studies list them."""
    base, _, role = series_id.partition("/")
    return (preset, base, {"": 0, "writer": 1, "reader": 2}.get(role, 3), role, unit)


def infer_period_s(times: pd.Series, default: float = 60.0) -> float:
    """A series' period: the smallest step between its distinct timestamps (60 s when there is one point)."""
    steps = times.drop_duplicates().sort_values().diff().dt.total_seconds().dropna()
    steps = steps[steps > 0]
    return float(steps.min()) if len(steps) else default


def series_label(preset: str, series_id: str, unit: str, all_keys: list[tuple[str, str, str]]) -> str:
    """``a2/writer ACU``; the preset is added only when two presets share an id."""
    shared = sum(1 for p, i, _ in all_keys if i == series_id) > 1
    return f"{preset}:{series_id} {unit}" if shared else f"{series_id} {unit}"


def _pick(series: pd.DataFrame, preferred: tuple[str, ...]) -> pd.DataFrame:
    for stat in preferred:
        chosen = series[series["stat"] == stat]
        if not chosen.empty:
            return chosen
    return series.iloc[0:0]


def stage_capacity_frame(stages: list[Stage], cloudwatch: pd.DataFrame) -> pd.DataFrame:
    """Per stage: ``<label> (max)`` and ``<label> (mean)`` for each capacity series. Pure."""
    series = capacity_frames(cloudwatch)
    keys = list(series)
    rows = []
    for stage in stages:
        row: dict = {"stage": stage.name, "start_utc": stage.start, "end_utc": stage.end}
        for key in keys:
            preset, series_id, unit = key
            data = series[key]
            label = series_label(preset, series_id, unit, keys)
            period = infer_period_s(data["time_utc"])
            high = _in_stage(_pick(data, ("Maximum", "Average", "Sum")), stage, period)
            mean = _in_stage(_pick(data, ("Average", "Sum", "Maximum")), stage, period)
            row[f"{label} (max)"] = float(high["value"].max()) if not high.empty else float("nan")
            row[f"{label} (mean)"] = float(mean["value"].mean()) if not mean.empty else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def _in_stage(data: pd.DataFrame, stage: Stage, period_s: float) -> pd.DataFrame:
    inside = data[(data["time_utc"] >= stage.start) & (data["time_utc"] < stage.end)]
    if not inside.empty or data.empty:
        return inside
    ends = data["time_utc"] + pd.Timedelta(seconds=period_s)
    return data[(data["time_utc"] < stage.end) & (ends > stage.start)]


def stage_capacity(run_dir: str | Path) -> pd.DataFrame:
    """Per stage of the run: max and mean of each capacity series (from ``metrics/cloudwatch.csv``)."""
    run = open_run(run_dir)
    return stage_capacity_frame(run.stages, read_cloudwatch(run.path))


def stage_capacity_texts(frame: pd.DataFrame | None, *, labels: bool = True, sep: str = "; ") -> dict[str, str]:
    """Per stage, the maximum of each capacity series, from `collectors.merge.stage_capacity`'s frame.

    ``labels``: ``a2/writer ACU 21; a2/reader ACU 4`` (the spike's table); without: ``21/4`` with
    ``sep="/"`` (the engine's stage table). A stage without a datapoint is left out.
    """
    out: dict[str, str] = {}
    if frame is None or len(frame) == 0:
        return out
    columns = [c for c in frame.columns if c.endswith(" (max)")]
    for _, row in frame.iterrows():
        present = [(c[: -len(" (max)")], row[c]) for c in columns if row[c] == row[c]]
        if present:
            out[str(row["stage"])] = sep.join(f"{label} {v:g}" if labels else f"{v:g}" for label, v in present)
    return out
