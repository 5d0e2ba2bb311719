"""The report's plots, on one time axis: seconds since the run started, with UTC along the top.

One panel per question, each left out when the run has no data for it (`panels` says which apply):

- ``latency-<operation>``: response time from the intended start, p50, p95, p99 and p99.9 of each
  second (solid), service time p50 and p99 beside it (dashed), each second's maximum (grey dots) and
  each stage's p99 from stages.csv (a wide translucent segment across the stage).
- ``counts``: successful and failed operations per second and operation: the samples each per-second
  percentile comes from.
- ``rate``: target versus achieved arrival rate, and failures.
- ``lag``: scheduling lag (p99) and dropped slots.
- ``capacity``: CloudWatch capacity units beside the cache hit ratios (database samplers, CloudWatch);
  ``cache`` when the run has hit ratios but no capacity (a local run with a database sampler).

Thin seconds. A q-th percentile needs 100 / (100 - q) samples (p95: 20, p99: 100, p99.9: 1,000) for
even one sample to lie above it; from fewer it is the maximum or next to it (HdrHistogram rounds the
rank: the p99 of 50 operations is the slowest of them, of 51 to 99 the second slowest), and any
percentile of fewer than `MIN_SAMPLES` rests on a handful of points. So a per-second percentile is
drawn as a line only from `samples_needed` (q) operations on (p50: 10, p95: 20, p99: 100, p99.9:
1,000); from a handful it is a hollow marker; below 100 / (100 - q) it is left out, and the grey dot
of the second's maximum stands for it. At 10 operations per second the p99 line is therefore absent,
which is the honest picture: the stage tables hold percentiles over whole stages.

Timeline seconds are seconds of completion, the stage figures go by intended start
(docs/measurement.md). Figures are built on matplotlib's Agg canvas (no pyplot state) with fixed
margins, so every panel image has its plot area at the same place and the panels line up on a page.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pandas as pd
from dbsurge.collectors.merge import capacity_frames, infer_period_s, series_label

from dbsurge.rundir.schema import STAGES

if TYPE_CHECKING:
    from dbsurge.collectors.report_data import ReportData

#: Fewest operations in a second for any per-second percentile to be drawn as a line.
MIN_SAMPLES = 10
#: (label, q, timeline column) of the response-time percentiles, and the service-time ones.
RESPONSE = (("p50", 50.0, "p50_ms"), ("p95", 95.0, "p95_ms"), ("p99", 99.0, "p99_ms"), ("p99.9", 99.9, "p999_ms"))
SERVICE = (("service p50", 50.0, "service_p50_ms"), ("service p99", 99.0, "service_p99_ms"))
_PCT_COLORS = {50.0: "#1f77b4", 95.0: "#2ca02c", 99.0: "#ff7f0e", 99.9: "#d62728"}
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_STAGE_SHADES = ("#eef2f7", "#ffffff")
_MAX_COLOR = "#8a8a8a"
_MARKED_EVENTS = ("error", "worker_lost", "cost_cap", "rate_change")

# Page geometry in inches. Fixed margins (not constrained layout) keep the plot area of every panel
# at the same x position whatever its legend or tick labels, so panels stacked on the page line up.
_WIDTH, _LEFT, _RIGHT = 12.0, 0.9, 2.55
_TOP_UTC, _BOTTOM, _SUPTITLE = 0.78, 0.55, 0.3
_LEGEND_GAP = 0.62  # room for a right-hand y axis between the plot and its legend
_LEGEND_CHARS = 30  # a longer legend label wraps, so that it stays inside the page


def samples_for(q: float) -> int:
    """Fewest samples with one expected above their q-th percentile: 100 / (100 - q), 100 for p99, 1,000 for p99.9."""
    return math.ceil(round(100.0 / (100.0 - q), 6))


def samples_needed(q: float) -> int:
    """Fewest operations in a second for its q-th percentile to be drawn as a line."""
    return max(MIN_SAMPLES, samples_for(q))


def split_thin(values: pd.Series, samples: pd.Series, q: float) -> tuple[pd.Series, pd.Series]:
    """Per-second values to draw as a line and as hollow markers; one from fewer than `samples_for` (q) is in neither."""
    n = samples.fillna(0)
    line = values.where(n >= samples_needed(q))
    hollow = values.where((n >= samples_for(q)) & (n < samples_needed(q)))
    return line, hollow


def ok_per_second(data: ReportData, op: str) -> pd.Series:
    """Successful operations of each second: the samples of its percentiles (histograms hold successes only)."""
    m = data.merged
    count = m.get(f"{op}.count", pd.Series(0.0, index=m.index)).fillna(0)
    failed = m.get(f"{op}.failures", pd.Series(0.0, index=m.index)).fillna(0)
    return (count - failed).clip(lower=0)


def thin_counts(data: ReportData, op: str) -> tuple[int, dict[str, int]]:
    """Seconds with successful operations, and in how many of them each percentile is drawn as a line."""
    ok = ok_per_second(data, op)
    active = ok[ok > 0]
    return len(active), {label: int((active >= samples_needed(q)).sum()) for label, q, _ in RESPONSE}


# -- the time axis ---------------------------------------------------------------------------------------


def origin(data: ReportData) -> pd.Timestamp | None:
    """Time zero of the plots: the run's start (run.json), else the first stage's, else the first second's."""
    if data.run.started is not None:
        return data.run.started
    if data.run.stages:
        return data.run.stages[0].start
    times = data.merged.get("time_utc")
    return times.min() if times is not None and not times.empty else None


def elapsed(data: ReportData, when: Any) -> float:
    """Seconds since time zero."""
    zero = origin(data)
    return 0.0 if zero is None else (pd.Timestamp(when) - zero).total_seconds()


def second_starts(data: ReportData) -> pd.Series:
    """Where each per-second row starts on the elapsed axis (merged.csv's ``elapsed_s``, from the same zero)."""
    m, zero = data.merged, origin(data)
    if zero is None or m.empty:
        return pd.Series(dtype=float)
    return (m["time_utc"] - zero).dt.total_seconds()


def _x_limits(data: ReportData) -> tuple[float, float] | None:
    starts = second_starts(data)
    if not starts.empty:
        return float(starts.min()), float(starts.max()) + 1.0
    if data.run.stages:
        return elapsed(data, data.run.stages[0].start), elapsed(data, data.run.stages[-1].end)
    return None


def utc_clock(epoch_s: float) -> str:
    return datetime.fromtimestamp(round(epoch_s, 3), tz=UTC).strftime("%H:%M:%S")


#: Tick steps for a time axis, in seconds: whole seconds, then the steps a clock is read in.
_TIME_STEPS = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)


def time_step(span_s: float, most_ticks: int = 9) -> float:
    """The smallest clock-like tick step that puts at most ``most_ticks`` ticks on a span of seconds."""
    return next((step for step in _TIME_STEPS if span_s / step <= most_ticks), _TIME_STEPS[-1])


def _shade_stages(ax: Any, data: ReportData, label: bool) -> None:
    for i, stage in enumerate(data.run.stages):
        start, end = elapsed(data, stage.start), elapsed(data, stage.end)
        ax.axvspan(start, end, color=_STAGE_SHADES[i % 2], zorder=0, lw=0)
        if label:  # above the UTC tick labels
            ax.annotate(stage.name, xy=((start + end) / 2, 1), xycoords=("data", "axes fraction"), xytext=(0, 17),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8, color="#333333",
                        annotation_clip=False)
    for stage in data.run.stages[1:]:
        ax.axvline(elapsed(data, stage.start), color="#9aa7b8", lw=0.8, zorder=1)


def _mark_events(ax: Any, data: ReportData) -> None:
    for event in data.events:
        if event.get("kind") in _MARKED_EVENTS and event.get("time_utc"):
            try:
                when = pd.Timestamp(event["time_utc"])
            except ValueError:
                continue
            when = when.tz_convert("UTC") if when.tzinfo else when.tz_localize("UTC")
            ax.axvline(elapsed(data, when), color="#d62728", lw=0.8, ls=":", zorder=2)


def format_time_axis(ax: Any, data: ReportData, utc: bool, bottom: bool) -> None:
    """Elapsed seconds along the bottom; along the top the same instants in UTC, ticked at whole UTC seconds."""
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    limits = _x_limits(data)
    if limits:
        ax.set_xlim(*limits)
    # one step for both axes; on the top it falls on whole UTC seconds and minutes (multiples of epoch seconds)
    step = time_step(limits[1] - limits[0]) if limits else 10
    ax.xaxis.set_major_locator(MultipleLocator(step))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, axis="y", color="#dddddd", lw=0.6)
    zero = origin(data)
    if bottom:
        at = f" (t = 0 at {zero.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC)" if zero is not None else ""
        ax.set_xlabel(f"seconds since the run started{at}", fontsize=9)
    else:
        ax.tick_params(axis="x", labelbottom=False)
    if utc and zero is not None:
        base = zero.value / 1e9
        top = ax.secondary_xaxis("top", functions=(lambda x: x + base, lambda u: u - base))
        top.xaxis.set_major_locator(MultipleLocator(step))
        top.xaxis.set_major_formatter(FuncFormatter(lambda u, _: utc_clock(u)))
        top.tick_params(labelsize=7.5, colors="#555555")
        ax.annotate("UTC", xy=(1, 1), xycoords="axes fraction", xytext=(30, 3.5), textcoords="offset points",
                    ha="left", va="bottom", fontsize=7.5, color="#555555")


def _legend(ax: Any, twin: bool = False) -> None:
    """The legend beside the plot, right of a second y axis if there is one, so it covers no data."""
    handles, labels = ax.get_legend_handles_labels()
    for other in ax.figure.axes:  # a twin (same place, its own y axis) joins its entries to this legend
        if other is not ax and other.get_position().bounds == ax.get_position().bounds:
            more = other.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
    if not handles:
        return
    labels = [textwrap.fill(label, _LEGEND_CHARS, subsequent_indent="  ") for label in labels]
    width_in = ax.get_position().width * ax.figure.get_figwidth()
    offset = 1.0 + ((_LEGEND_GAP if twin else 0.12) / width_in)
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(offset, 1.0), fontsize=7.5, framealpha=0.9,
              borderaxespad=0.0)


def _line(ax: Any, x: pd.Series, y: pd.Series, **style: Any) -> None:
    """A line through the per-second values, with a dot on each value that has no neighbour to join."""
    ax.plot(x, y, **style)
    y = pd.Series(list(y))
    alone = y.notna() & y.shift(1).isna() & y.shift(-1).isna()
    if alone.any():
        ax.plot(pd.Series(list(x))[alone], y[alone], ls="none", marker="o", ms=2.5, color=style.get("color"),
                zorder=style.get("zorder", 2))


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777", fontsize=9)


def _log_ms_axis(ax: Any) -> None:
    """A log axis labelled 0.1, 1, 10, 100, 1,000 (ms), with 2 and 5 between when the range is narrow."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    low, high = ax.get_ylim()
    decades = math.log10(high / low) if low > 0 and high > low else 0
    subs = (1.0, 2.0, 5.0) if decades < 2.5 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _ms_label(v)))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(s for s in range(2, 10) if s not in subs)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _ms_label(value: float) -> str:
    if value <= 0:
        return ""
    return f"{value:,.0f}" if value >= 1 else f"{value:.3g}"


# -- panels ----------------------------------------------------------------------------------------------


def draw_latency(ax: Any, data: ReportData, op: str) -> None:
    """One operation: response-time percentiles, service time, the per-second maximum and the stages' p99."""
    m = data.merged
    x = second_starts(data) + 0.5  # a per-second value sits in the middle of its second
    ok = ok_per_second(data, op)
    drawn = False
    if f"{op}.max_ms" in m and m[f"{op}.max_ms"].notna().any():
        ax.plot(x, m[f"{op}.max_ms"].where(ok > 0), ls="none", marker=".", ms=4, color=_MAX_COLOR,
                label="max of the second", zorder=3)
        drawn = True
    for label, q, column in RESPONSE:
        if f"{op}.{column}" not in m:
            continue
        line, hollow = split_thin(m[f"{op}.{column}"], ok, q)
        color = _PCT_COLORS[q]
        if line.notna().any():
            _line(ax, x, line, color=color, lw=1.3, label=f"{label} (≥ {samples_needed(q):,} ops)", zorder=4)
            drawn = True
        if hollow.notna().any():
            ax.plot(x, hollow, ls="none", marker="o", ms=4.5, mfc="none", mec=color, mew=1.0, zorder=4,
                    label=f"{label} of < {MIN_SAMPLES} ops (hollow)")
            drawn = True
    for label, q, column in SERVICE:
        if f"{op}.{column}" in m:
            line, _ = split_thin(m[f"{op}.{column}"], ok, q)
            if line.notna().any():
                _line(ax, x, line, color=_PCT_COLORS[q], lw=1.0, ls="--", zorder=4, label=f"{label} (dashed)")
    drawn = _stage_p99(ax, data, op) or drawn
    if drawn:
        _log_ms_axis(ax)
    else:
        _empty(ax, f"no successful {op} operations")
    ax.set_ylabel("milliseconds")
    ax.set_title(f"{op}: response time from the intended start (solid), service time (dashed)", fontsize=10,
                 loc="left", pad=30)


def _stage_p99(ax: Any, data: ReportData, op: str) -> bool:
    """Each stage's p99 (stages.csv, by intended start) across its stage, where the stage had 100 operations."""
    stages = data.stages_csv
    if stages is None or stages.empty or "operation" not in stages:
        return False
    need = samples_for(99.0)
    labelled = False
    for _, row in stages[stages["operation"].astype(str) == op].iterrows():
        if pd.isna(row.get("p99_ms")) or stage_ok(row) < need:
            continue
        ax.hlines(float(row["p99_ms"]), elapsed(data, row["start_utc"]), elapsed(data, row["end_utc"]),
                  color=_PCT_COLORS[99.0], lw=5, alpha=0.3, zorder=2,
                  label=None if labelled else f"stage p99 ({STAGES})")
        labelled = True
    return labelled


def stage_ok(row: Any) -> float:
    """Successful operations of a stages.csv or summary.csv row (files before the ledger have no ``ok``)."""
    ok = row.get("ok")
    if ok not in (None, "") and pd.notna(ok):
        return float(ok)
    return float(row.get("count") or 0) - float(row.get("failures") or 0)


def draw_counts(ax: Any, data: ReportData) -> None:
    """Successful (solid) and failed (dotted) operations per second and operation, with the lines' sample needs."""
    starts = second_starts(data)
    top = 0.0
    for i, op in enumerate(data.operations):
        color = _COLORS[i % len(_COLORS)]
        ok = ok_per_second(data, op)
        _steps(ax, starts, ok, color=color, lw=1.2, label=f"{op} ok")
        top = max(top, float(ok.max()) if len(ok) else 0.0)
        failed = data.merged.get(f"{op}.failures")
        if failed is not None and failed.fillna(0).gt(0).any():
            _steps(ax, starts, failed.fillna(0), color=color, lw=1.2, ls=":", label=f"{op} failed")
            top = max(top, float(failed.max()))
    if top <= 0:
        _empty(ax, "no operations completed")
    ax.set_ylim(bottom=0)
    # a line per distinct need that falls in view, so a reader sees which percentiles a second supports
    needs: dict[int, list[str]] = {}
    for label, q, _ in RESPONSE:
        needs.setdefault(samples_needed(q), []).append(label)
    for need, labels in needs.items():
        if 0.04 * top <= need <= 2.0 * top:
            ax.set_ylim(0, max(ax.get_ylim()[1], need * 1.1))
            ax.axhline(need, color="#999999", lw=0.7, ls="--", zorder=1)
            ax.annotate(f"{'/'.join(labels)} line from {need:,}", xy=(1, need), xycoords=("axes fraction", "data"),
                        xytext=(-3, 2), textcoords="offset points", ha="right", va="bottom", fontsize=7,
                        color="#666666")
    ax.set_ylabel("operations/s")
    ax.set_title("Operations completed per second (the samples behind each per-second percentile)", fontsize=10,
                 loc="left", pad=30)


def _steps(ax: Any, starts: pd.Series, values: pd.Series, **style: Any) -> None:
    """A per-second series as steps that cover each whole second."""
    if starts.empty:
        return
    xs = list(starts) + [float(starts.iloc[-1]) + 1.0]
    ys = list(values) + [values.iloc[-1]]
    ax.step(xs, ys, where="post", **style)


def draw_rate(ax: Any, data: ReportData) -> None:
    """Target (plan) versus achieved operations per second, and failures."""
    m = data.merged
    starts = second_starts(data)
    if m["target_tps"].notna().any():
        _steps(ax, starts, m["target_tps"], color="#555555", lw=1.2, ls="--", label="target")
    if m["achieved_tps"].notna().any():
        _steps(ax, starts, m["achieved_tps"], color=_COLORS[0], lw=1.2, label="achieved")
    if "failures" in m and m["failures"].fillna(0).gt(0).any():
        ax.bar(starts, m["failures"].fillna(0), width=1.0, align="edge", color=_COLORS[1], label="failures/s",
               zorder=3)
    if not (m["target_tps"].notna().any() or m["achieved_tps"].notna().any()):
        _empty(ax, "no rate data")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("operations/s")
    ax.set_title("Arrival rate: target vs achieved (successful operations)", fontsize=10, loc="left", pad=30)


def draw_lag(ax: Any, data: ReportData) -> None:
    """Scheduling lag (worst operation's p99) and dropped slots per second."""
    m = data.merged
    lag_columns = [f"{op}.lag_p99_ms" for op in data.operations if f"{op}.lag_p99_ms" in m]
    if lag_columns and m[lag_columns].notna().any().any():
        _line(ax, second_starts(data) + 0.5, m[lag_columns].max(axis=1), color=_COLORS[4], lw=1.2,
              label="lag p99 (worst operation)")
        ax.set_ylim(bottom=0)
    else:
        _empty(ax, "no lag data")
    ax.set_ylabel("lag p99 (ms)")
    if "dropped" in m and m["dropped"].fillna(0).gt(0).any():
        twin = ax.twinx()
        twin.bar(second_starts(data), m["dropped"].fillna(0), width=1.0, align="edge", color=_COLORS[1], alpha=0.7,
                 label="dropped slots/s (right)")
        twin.set_ylabel("dropped slots/s")
    ax.set_title("Lag behind the schedule and dropped slots", fontsize=10, loc="left", pad=30)


_HIT_COLUMNS = (("pg.buffer_hit_ratio", "PostgreSQL buffer hit % (1 s)", "#2ca02c"),
                ("mongo.cache_hit_ratio", "MongoDB cache hit % (1 s)", "#17becf"))


def has_capacity(data: ReportData) -> bool:
    return bool(capacity_frames(data.cloudwatch))


def has_cache_hits(data: ReportData) -> bool:
    m = data.merged
    if any(column in m and m[column].notna().any() for column, _, _ in _HIT_COLUMNS):
        return True
    return not _cloudwatch_hits(data).empty


def _cloudwatch_hits(data: ReportData) -> pd.DataFrame:
    cw = data.cloudwatch
    return cw[cw["metric"] == "BufferCacheHitRatio"] if not cw.empty else cw


def draw_capacity(ax: Any, data: ReportData) -> None:
    """Capacity units as steps over their periods (left) and cache hit ratios (right; left without capacity)."""
    capacity = has_capacity(data)
    if capacity:
        _draw_capacity_units(ax, data)
    if has_cache_hits(data):
        _draw_hits(ax.twinx() if capacity else ax, data)
    what = " and ".join(w for w, shown in (("Capacity units", capacity), ("cache hit ratio", has_cache_hits(data)))
                        if shown)
    ax.set_title(what[0].upper() + what[1:], fontsize=10, loc="left", pad=30)


def _draw_capacity_units(ax: Any, data: ReportData) -> None:
    frames = capacity_frames(data.cloudwatch)
    keys = list(frames)
    for i, key in enumerate(keys):
        series = frames[key]
        for stat in ("Average", "Sum", "Maximum"):
            chosen = series[series["stat"] == stat].sort_values("time_utc")
            if not chosen.empty:
                break
        period = infer_period_s(chosen["time_utc"])
        xs = [elapsed(data, t) for t in chosen["time_utc"]]
        xs.append(xs[-1] + period)
        ys = list(chosen["value"]) + [chosen["value"].iloc[-1]]
        ax.step(xs, ys, where="post", color=_COLORS[i % len(_COLORS)], lw=1.6,
                label=f"{series_label(*key, keys)} ({stat.lower()})")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("capacity units")


def _draw_hits(ax: Any, data: ReportData) -> None:
    m = data.merged
    values: list[float] = []
    for column, label, color in _HIT_COLUMNS:
        if column in m and m[column].notna().any():
            _line(ax, second_starts(data) + 0.5, m[column], color=color, lw=0.9, label=label)
            values += [float(v) for v in m[column].dropna()]
    for series_id, group in _cloudwatch_hits(data).groupby("id", sort=False):
        group = group.sort_values("time_utc")
        period = infer_period_s(group["time_utc"])
        xs = [elapsed(data, t) for t in group["time_utc"]]
        ax.step(xs + [xs[-1] + period], list(group["value"]) + [group["value"].iloc[-1]], where="post",
                color="#8c564b", lw=1.0, ls="--", label=f"{series_id} BufferCacheHitRatio (60 s)")
        values += [float(v) for v in group["value"].dropna()]
    low = min(values) if values else 0.0
    ax.set_ylim(max(0.0, min(90.0, low - 2)), 100.5)
    ax.set_ylabel("cache hit ratio (%)")


#: The database's own seconds (the 1-second samplers): rates on the left axis, connections on the right.
_DB_RATES = (("pg.commits_per_s", "PostgreSQL commits/s", "#1f77b4"),
             ("pg.rollbacks_per_s", "PostgreSQL rollbacks/s", "#d62728"),
             ("pg.blks_read_per_s", "PostgreSQL blocks read/s (from disk or the OS cache)", "#ff7f0e"),
             ("mongo.ops_per_s", "MongoDB operations/s (opcounters)", "#9467bd"))
_MONGO_OPCOUNTERS = ("insert", "query", "update", "delete", "getmore", "command")
_DB_CONNECTIONS = (("pg.numbackends", "PostgreSQL backends (right)", "#2ca02c"),
                   ("mongo.connections.current", "MongoDB connections (right)", "#17becf"))


def _has(m: pd.DataFrame, column: str) -> bool:
    return column in m and pd.to_numeric(m[column], errors="coerce").notna().any()


def has_database_seconds(data: ReportData) -> bool:
    """Whether a database sampler wrote rates or connections (pg_stat_database.csv, server_status.csv)."""
    m = data.merged
    return any(_has(m, c) for c, _, _ in _DB_RATES + _DB_CONNECTIONS)


def draw_database(ax: Any, data: ReportData) -> None:
    """The database's seconds: commits, rollbacks and blocks read per second (PostgreSQL), operations per second by
    opcounter (MongoDB) on the left; backends or connections on the right."""
    m = data.merged
    x = second_starts(data) + 0.5
    for column, label, color in _DB_RATES:
        if _has(m, column):
            _line(ax, x, pd.to_numeric(m[column], errors="coerce"), color=color, lw=1.0, label=label)
    for i, kind in enumerate(_MONGO_OPCOUNTERS):  # cumulative counters: their per-second differences
        column = f"mongo.opcounters.{kind}"
        if _has(m, column):
            rate = pd.to_numeric(m[column], errors="coerce").diff().clip(lower=0)
            if rate.fillna(0).gt(0).any():
                _line(ax, x, rate, color=_COLORS[i % len(_COLORS)], lw=0.8, ls=":", label=f"MongoDB {kind}/s")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("per second")
    shown = [(c, label, color) for c, label, color in _DB_CONNECTIONS if _has(m, c)]
    if shown:
        twin = ax.twinx()
        for column, label, color in shown:
            twin.step(x, pd.to_numeric(m[column], errors="coerce"), where="mid", color=color, lw=1.2, label=label)
        twin.set_ylim(bottom=0)
        twin.set_ylabel("connections")
    ax.set_title("The database's own seconds (1-second samplers)", fontsize=10, loc="left", pad=30)


def database_caption(data: ReportData) -> str:
    m = data.merged
    parts = []
    if any(_has(m, c) for c in ("pg.commits_per_s", "pg.numbackends")):
        parts.append("PostgreSQL's pg_stat_database each second: commits, rollbacks and blocks read per second, "
                     "and backends (connections) on the right axis; its buffer hit ratio is in the cache panel")
    if any(_has(m, c) for c in ("mongo.ops_per_s", "mongo.connections.current")):
        parts.append("MongoDB's serverStatus each second: operations per second in all and by opcounter (dotted), "
                     "and current connections on the right axis")
    return "; ".join(parts) + ". These are the server's counts, beside the client's achieved rate above."


# -- figures ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    """One plot of the report: its id in the page, its caption, how to draw it and its height in inches."""

    name: str
    caption: str
    draw: Callable[[Any, ReportData], None]
    height: float = 2.1
    twin: bool = False


def panels(data: ReportData) -> list[Panel]:
    """The panels this run has data for, in page order (none for a run without a timeline)."""
    m = data.merged
    out = [Panel(f"latency-{op}", latency_caption(data, op), _latency_of(op), height=2.5)
           for op in data.operations]
    if data.operations:
        out.append(Panel("counts", "Operations completed per second and operation, successful (solid) and failed "
                         "(dotted): the samples each per-second percentile above is drawn from", draw_counts))
    if m["achieved_tps"].notna().any():  # the plan alone, with nothing measured, is in the facts
        out.append(Panel("rate", "Target vs achieved arrival rate (successful operations per second), failures as "
                         "red bars", draw_rate))
    if any(f"{op}.lag_p99_ms" in m and m[f"{op}.lag_p99_ms"].notna().any() for op in data.operations):
        dropped = bool("dropped" in m and m["dropped"].fillna(0).gt(0).any())
        out.append(Panel("lag", "Scheduling lag (p99 of the worst operation) and dropped slots", draw_lag,
                         twin=dropped))
    if has_database_seconds(data):
        connections = any(_has(m, c) for c, _, _ in _DB_CONNECTIONS)
        out.append(Panel("database", database_caption(data), draw_database, twin=connections))
    capacity, hits = has_capacity(data), has_cache_hits(data)
    if capacity or hits:  # named for what it shows: a local run's panel has no capacity in it
        out.append(Panel("capacity" if capacity else "cache", capacity_caption(data), draw_capacity,
                         twin=capacity and hits))
    return out


def _latency_of(op: str) -> Callable[[Any, ReportData], None]:
    return lambda ax, data: draw_latency(ax, data, op)


def latency_caption(data: ReportData, op: str) -> str:
    """What the latency panel of one operation shows, and how many of its seconds are thin."""
    seconds, lines = thin_counts(data, op)
    drawn = ", ".join(f"{label} in {n}" for label, n in lines.items())
    needs = ", ".join(f"{label} from {samples_needed(q):,}" for label, q, _ in RESPONSE)
    return (f"{op}: response time from the intended start (solid) and service time (dashed), ms on a log scale. "
            f"Thin seconds: a per-second percentile is drawn as a line only where the second completed enough "
            f"successful operations ({needs}); of the {seconds} seconds with {op} operations it is a line in: "
            f"{drawn}. Hollow markers are percentiles of fewer than {MIN_SAMPLES} operations. A percentile of fewer "
            f"than 100 / (100 − q) operations is their maximum or next to it and is left out: the grey dots, each "
            f"second's maximum, stand for it. Wide translucent segments: each stage's p99 over the whole stage "
            f"({STAGES}, by intended start) where the stage had at least 100 operations.")


def capacity_caption(data: ReportData) -> str:
    parts = []
    if has_capacity(data):
        parts.append("CloudWatch capacity units as steps over each period")
    if has_cache_hits(data):
        parts.append("cache hit ratio (the database sampler's 1-second ratio; CloudWatch's BufferCacheHitRatio is a "
                     "60-second average that hides a cold cache)")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:]


def _panel_figure(height: float) -> tuple[Any, Any]:
    """A figure with one plot area of ``height`` inches, at the fixed left and right margins, room above for
    the UTC axis and the stage names and below for the elapsed seconds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    total = _TOP_UTC + height + _BOTTOM
    fig = Figure(figsize=(_WIDTH, total), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((_LEFT / _WIDTH, _BOTTOM / total, (_WIDTH - _LEFT - _RIGHT) / _WIDTH, height / total))
    return fig, ax


def _draw(ax: Any, data: ReportData, panel: Panel) -> None:
    _shade_stages(ax, data, label=True)
    _mark_events(ax, data)
    panel.draw(ax, data)
    format_time_axis(ax, data, utc=True, bottom=True)
    _legend(ax, twin=panel.twin)


def render_images(data: ReportData) -> tuple[dict[str, bytes], bytes | None]:
    """Each panel as PNG bytes (report.html), and timeline.png: the same pictures stacked under the run's title.

    Each panel is drawn once, with its own elapsed and UTC axes and stage names, and timeline.png is
    its pixels stacked, not a second figure drawn again: drawing is most of a report's cost (a short
    run's report took 0.95 s drawing the panels twice, 0.62 s this way). timeline.png is None when
    the run has no panel to draw (no timeline).
    """
    chosen = panels(data)
    images: dict[str, bytes] = {}
    pixels = []
    for panel in chosen:
        fig, ax = _panel_figure(panel.height)
        _draw(ax, data, panel)
        rgb = _pixels(fig)
        images[panel.name] = _encode(rgb)
        pixels.append(rgb)
    if not pixels:
        return images, None
    import numpy as np

    return images, _encode(np.vstack([_pixels(_title_figure(f"dbsurge {data.run.run_id}")), *pixels]))


def _title_figure(title: str) -> Any:
    """A strip as wide as the panels with the title at their plot areas' left edge (timeline.png's top)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_WIDTH, _SUPTITLE + 0.1), dpi=100)
    FigureCanvasAgg(fig)
    fig.text(_LEFT / _WIDTH, 0.5, title, fontsize=11, ha="left", va="center")
    return fig


def _pixels(fig: Any) -> Any:
    """The figure drawn on its Agg canvas, as an RGB array (the figures are opaque)."""
    import numpy as np

    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[:, :, :3].copy()


def _encode(rgb: Any) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="png", dpi=(100, 100))
    return buffer.getvalue()
