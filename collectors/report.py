"""The run report: ``report.html`` (self-contained), ``timeline.png`` and ``summary.md``.

`build_report` merges the run (``merged.csv``), estimates its cost (``cost.csv``) and draws, on
one UTC time axis with the stages shaded:

1. response-time percentiles per operation (p50 and p99, from the intended start),
2. target versus achieved arrival rate, with failures,
3. scheduling lag (p99) and dropped slots,
4. capacity units (CloudWatch, as steps over each period) beside the cache hit ratio (the
   PostgreSQL sampler's 1-second buffer hit ratio, MongoDB's cache hit ratio, CloudWatch's
   BufferCacheHitRatio), which is where a 60-second average hides a cold cache (study 000).

The HTML embeds every plot as a base64 PNG and uses no script and no network, so a browser opens
it from disk. ``timeline.png`` holds the four panels in one picture for pasting into a document.
``summary.md`` has the same tables for a terminal or a pull request. Plots use matplotlib's Agg
canvas directly (no pyplot state), so building a report is safe inside a running engine.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dbsurge.errors import UserError

from .cost import CostReport, estimate_cost
from .merge import capacity_frames, infer_period_s, merge_run, series_label, stage_capacity_frame
from .rundata import RunInfo, format_utc, open_run, read_cloudwatch, read_events, read_stages

_STAGE_SHADES = ("#eef2f7", "#ffffff")
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
SCENARIO_MARK = "<!-- dbsurge scenario table -->"  # dbsurge.scenarios.scenario_run.SECTION_MARK
_MARKED_EVENTS = ("error", "worker_lost", "cost_cap", "rate_change")


@dataclass
class ReportData:
    """Everything the plots and tables read."""

    run: RunInfo
    merged: pd.DataFrame
    cloudwatch: pd.DataFrame
    stages_csv: pd.DataFrame | None
    capacity: pd.DataFrame
    cost: CostReport | None
    cost_error: str | None
    events: list[dict]

    @property
    def operations(self) -> list[str]:
        ops = []
        for column in self.merged.columns:
            if column.endswith(".p99_ms") and not column.startswith(("pg.", "mongo.", "cw.", "ALL.")):
                ops.append(column[: -len(".p99_ms")])
        return ops


def load_report_data(run_dir: str | Path) -> ReportData:
    """Merge the run, estimate its cost, and read what the report shows."""
    run = open_run(run_dir)
    merged = merge_run(run.path)
    cloudwatch = read_cloudwatch(run.path)
    cost, cost_error = None, None
    try:
        cost = estimate_cost(run.path)
    except UserError as exc:
        cost_error = str(exc)
    return ReportData(
        run=run,
        merged=merged,
        cloudwatch=cloudwatch,
        stages_csv=read_stages(run.path),
        capacity=stage_capacity_frame(run.stages, cloudwatch),
        cost=cost,
        cost_error=cost_error,
        events=read_events(run.path),
    )


# -- plots -------------------------------------------------------------------------------------------


def _naive(times: Any) -> Any:
    """UTC timestamps without a zone, which matplotlib plots as they are."""
    if isinstance(times, pd.Timestamp):
        return times.tz_convert("UTC").tz_localize(None).to_pydatetime()
    return pd.DatetimeIndex(times).tz_convert("UTC").tz_localize(None)


def _x_limits(data: ReportData) -> tuple[Any, Any] | None:
    times = data.merged["time_utc"]
    if times.empty:
        return None
    return _naive(times.min()), _naive(times.max() + pd.Timedelta(seconds=1))


def _shade_stages(ax: Any, data: ReportData, label: bool) -> None:
    for i, stage in enumerate(data.run.stages):
        ax.axvspan(_naive(stage.start), _naive(stage.end), color=_STAGE_SHADES[i % 2], zorder=0, lw=0)
        if label:
            ax.text(_naive(stage.start + (stage.end - stage.start) / 2), 1.01, stage.name,
                    transform=ax.get_xaxis_transform(), ha="center", va="bottom", fontsize=8, color="#333333")
    for stage in data.run.stages[1:]:
        ax.axvline(_naive(stage.start), color="#9aa7b8", lw=0.8, zorder=1)


def _mark_events(ax: Any, data: ReportData) -> None:
    for event in data.events:
        if event.get("kind") in _MARKED_EVENTS and event.get("time_utc"):
            try:
                when = pd.Timestamp(event["time_utc"])
            except ValueError:
                continue
            ax.axvline(_naive(when.tz_convert("UTC") if when.tzinfo else when.tz_localize("UTC")), color="#d62728",
                       lw=0.8, ls=":", zorder=2)


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#777777", fontsize=9)


def _mid(data: ReportData) -> Any:
    """The middle of each second: where a per-second value is drawn."""
    return _naive(data.merged["time_utc"] + pd.Timedelta(milliseconds=500))


def draw_latency(ax: Any, data: ReportData) -> None:
    """Response-time p50 and p99 per operation, log scale."""
    x = _mid(data)
    drawn = False
    for i, op in enumerate(data.operations):
        color = _COLORS[i % len(_COLORS)]
        for stat, width, style in (("p50_ms", 1.0, "-"), ("p99_ms", 1.4, "--")):
            column = f"{op}.{stat}"
            if column in data.merged and data.merged[column].notna().any():
                ax.plot(x, data.merged[column], color=color, lw=width, ls=style, label=f"{op} {stat[:3]}")
                drawn = True
    if drawn:
        ax.set_yscale("log")
        ax.legend(loc="upper left", fontsize=7, ncol=2, framealpha=0.8)
    else:
        _empty(ax, "no latency data (timeline.csv)")
    ax.set_ylabel("response time (ms)")
    ax.set_title("Response time from the intended start", fontsize=10, loc="left", pad=16)


def draw_rate(ax: Any, data: ReportData) -> None:
    """Target (plan) versus achieved operations per second, and failures."""
    m = data.merged
    x = _naive(m["time_utc"])
    if m["target_tps"].notna().any():
        ax.step(x, m["target_tps"], where="post", color="#555555", lw=1.2, ls="--", label="target")
    if m["achieved_tps"].notna().any():
        ax.step(x, m["achieved_tps"], where="post", color=_COLORS[0], lw=1.2, label="achieved")
    if "failures" in m and m["failures"].fillna(0).gt(0).any():
        ax.bar(x, m["failures"].fillna(0), width=1 / 86400, align="edge", color=_COLORS[1], label="failures/s",
               zorder=3)
    if m["target_tps"].notna().any() or m["achieved_tps"].notna().any():
        ax.legend(loc="upper left", fontsize=7, framealpha=0.8)
    else:
        _empty(ax, "no rate data")
    ax.set_ylabel("operations/s")
    ax.set_title("Arrival rate: target vs achieved", fontsize=10, loc="left", pad=16)


def draw_lag(ax: Any, data: ReportData) -> None:
    """Scheduling lag (worst operation's p99) and dropped slots per second."""
    m = data.merged
    x = _naive(m["time_utc"])
    mid = _mid(data)
    lag_columns = [f"{op}.lag_p99_ms" for op in data.operations if f"{op}.lag_p99_ms" in m]
    if lag_columns and m[lag_columns].notna().any().any():
        ax.plot(mid, m[lag_columns].max(axis=1), color=_COLORS[4], lw=1.2, label="lag p99 (ms)")
        ax.legend(loc="upper left", fontsize=7, framealpha=0.8)
    else:
        _empty(ax, "no lag data")
    ax.set_ylabel("lag p99 (ms)")
    if "dropped" in m and m["dropped"].fillna(0).gt(0).any():
        twin = ax.twinx()
        twin.bar(x, m["dropped"].fillna(0), width=1 / 86400, align="edge", color=_COLORS[1], alpha=0.7,
                 label="dropped/s")
        twin.set_ylabel("dropped slots/s")
        twin.legend(loc="upper right", fontsize=7, framealpha=0.8)
    ax.set_title("Lag behind the schedule and dropped slots", fontsize=10, loc="left", pad=16)


def draw_capacity(ax: Any, data: ReportData) -> None:  # noqa: C901 - one series per preset, flat
    """Capacity units as steps over their periods, and cache hit ratios on the right axis."""
    frames = capacity_frames(data.cloudwatch)
    keys = list(frames)
    drawn = False
    for i, key in enumerate(keys):
        series = frames[key]
        for stat in ("Average", "Sum", "Maximum"):
            chosen = series[series["stat"] == stat].sort_values("time_utc")
            if not chosen.empty:
                break
        period = pd.Timedelta(seconds=infer_period_s(chosen["time_utc"]))
        x = list(_naive(chosen["time_utc"])) + [_naive(chosen["time_utc"].iloc[-1] + period)]
        y = list(chosen["value"]) + [chosen["value"].iloc[-1]]
        label = f"{series_label(*key, keys)} ({stat.lower()})"
        ax.step(x, y, where="post", color=_COLORS[i % len(_COLORS)], lw=1.6, label=label)
        drawn = True
    ax.set_ylabel("capacity units")
    twin = ax.twinx()
    hit = False
    m = data.merged
    x = _mid(data)
    for column, label, color in (("pg.buffer_hit_ratio", "PostgreSQL buffer hit % (1 s)", "#2ca02c"),
                                 ("mongo.cache_hit_ratio", "MongoDB cache hit % (1 s)", "#17becf")):
        if column in m and m[column].notna().any():
            twin.plot(x, m[column], color=color, lw=0.9, label=label)
            hit = True
    cw = data.cloudwatch[data.cloudwatch["metric"] == "BufferCacheHitRatio"] if not data.cloudwatch.empty else None
    if cw is not None and not cw.empty:
        for series_id, group in cw.groupby("id", sort=False):
            group = group.sort_values("time_utc")
            period = pd.Timedelta(seconds=infer_period_s(group["time_utc"]))
            xs = list(_naive(group["time_utc"])) + [_naive(group["time_utc"].iloc[-1] + period)]
            twin.step(xs, list(group["value"]) + [group["value"].iloc[-1]], where="post", color="#8c564b", lw=1.0,
                      ls="--", label=f"{series_id} BufferCacheHitRatio (60 s)")
            hit = True
    if hit:
        twin.set_ylabel("cache hit ratio (%)")
        low = min(float(v) for v in _hit_values(m, cw))
        twin.set_ylim(max(0.0, min(90.0, low - 2)), 100.5)
        twin.legend(loc="lower right", fontsize=7, framealpha=0.8)
    else:
        twin.set_yticks([])
    if drawn:
        ax.legend(loc="upper left", fontsize=7, framealpha=0.8)
        ax.set_ylim(bottom=0)
    elif not hit:
        _empty(ax, "no capacity or cache data (run with --cloudwatch, or a database sampler)")
    else:
        ax.text(0.5, 0.3, "no CloudWatch capacity series (run with --cloudwatch, or dbsurge collect)",
                transform=ax.transAxes, ha="center", va="center", color="#777777", fontsize=9)
    ax.set_title("Capacity units and cache hit ratio", fontsize=10, loc="left", pad=16)


def _hit_values(merged: pd.DataFrame, cw: pd.DataFrame | None) -> list[float]:
    values: list[float] = []
    for column in ("pg.buffer_hit_ratio", "mongo.cache_hit_ratio"):
        if column in merged:
            values += [float(v) for v in merged[column].dropna()]
    if cw is not None and not cw.empty:
        values += [float(v) for v in cw["value"].dropna()]
    return values or [0.0]


_PANELS = (
    ("latency", "Response-time percentiles over time", draw_latency),
    ("rate", "Target vs achieved rate", draw_rate),
    ("lag", "Lag and dropped slots", draw_lag),
    ("capacity", "Capacity units and cache hit ratio", draw_capacity),
)


def _format_axis(ax: Any, data: ReportData, bottom: bool) -> None:
    from matplotlib.dates import AutoDateLocator, DateFormatter

    limits = _x_limits(data)
    if limits:
        ax.set_xlim(*limits)
    ax.xaxis.set_major_locator(AutoDateLocator(minticks=4, maxticks=10))
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
    ax.grid(True, axis="y", color="#dddddd", lw=0.6)
    if bottom:
        ax.set_xlabel("time (UTC)")


def _figure(height: float, rows: int) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    return fig, list(axes)


def render_panel(data: ReportData, name: str) -> bytes:
    """One panel as PNG bytes."""
    draw = {key: fn for key, _, fn in _PANELS}[name]
    fig, (ax,) = _figure(3.2, 1)
    _shade_stages(ax, data, label=True)
    _mark_events(ax, data)
    draw(ax, data)
    _format_axis(ax, data, bottom=True)
    return _png(fig)


def render_timeline(data: ReportData) -> bytes:
    """All panels stacked on one time axis, as PNG bytes."""
    fig, axes = _figure(12.5, len(_PANELS))
    for i, (ax, (_, _, draw)) in enumerate(zip(axes, _PANELS)):
        _shade_stages(ax, data, label=i == 0)
        _mark_events(ax, data)
        draw(ax, data)
        _format_axis(ax, data, bottom=i == len(_PANELS) - 1)
    fig.suptitle(f"dbsurge {data.run.run_id}", fontsize=11)
    return _png(fig)


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


# -- tables ------------------------------------------------------------------------------------------


def _num(value: Any, digits: int = 1) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "" if value is None else str(value)
    if math.isnan(number):
        return ""
    if abs(number) >= 100:
        return f"{number:,.0f}"
    return f"{number:,.{digits}f}".rstrip("0").rstrip(".") if digits else f"{number:,.0f}"


def _ms(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    if math.isnan(number):
        return ""
    return f"{number:.1f}" if number >= 10 else f"{number:.2f}" if number >= 1 else f"{number:.3f}"


def _usd(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    if math.isnan(number):
        return ""
    return f"${number:,.2f}" if abs(number) >= 100 else f"${number:.4f}"


def _pct(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    return "" if math.isnan(number) else f"{100 * number:.4g}%"


def stage_table(data: ReportData) -> tuple[list[str], list[list[str]]]:
    """The per-stage table: rates, failure rate, p95/p99 per operation, lag, drops, capacity max/mean."""
    ops = data.operations
    capacity_columns = [c for c in data.capacity.columns if c.endswith(("(max)", "(mean)"))]
    headers = ["Stage", "Target TPS", "Achieved TPS", "Failure rate"]
    headers += [f"{op} p95 / p99 (ms)" for op in ops]
    headers += ["Lag p99 (ms)", "Dropped"] + capacity_columns
    rows = []
    stages = data.stages_csv
    names = [s.name for s in data.run.stages] or (list(dict.fromkeys(stages["stage"].astype(str))) if stages is not None else [])
    for name in names:
        sel = stages[stages["stage"].astype(str) == name] if stages is not None else pd.DataFrame()
        every = _row_of(sel, "ALL")
        plan = next((s for s in data.run.stages if s.name == name), None)
        target = every.get("target_tps") if every else (plan.target_tps if plan else None)
        row = [name, _num(target if target is not None else (plan.target_tps if plan else None)),
               _num(every.get("achieved_tps")) if every else "", _pct(every.get("failure_rate")) if every else ""]
        for op in ops:
            one = _row_of(sel, op)
            row.append(f"{_ms(one.get('p95_ms'))} / {_ms(one.get('p99_ms'))}" if one else "")
        row += [_ms(every.get("lag_p99_ms")) if every else "", _num(every.get("dropped"), 0) if every else ""]
        cap = data.capacity[data.capacity["stage"] == name] if not data.capacity.empty else pd.DataFrame()
        for column in capacity_columns:
            row.append(_num(cap[column].iloc[0], 2) if not cap.empty else "")
        rows.append(row)
    return headers, rows


def _row_of(frame: pd.DataFrame, operation: str) -> dict:
    if frame is None or frame.empty or "operation" not in frame.columns:
        return {}
    sel = frame[frame["operation"].astype(str) == operation]
    if sel.empty and operation == "ALL" and len(frame["operation"].unique()) == 1:
        sel = frame
    return sel.iloc[0].to_dict() if not sel.empty else {}


def cost_tables(cost: CostReport) -> tuple[tuple[list[str], list[list[str]]], tuple[list[str], list[list[str]]]]:
    """The bill (items and total) and the per-stage cost table."""
    items = [[i.name, f"{_num(i.usage, 4)} {i.unit}", _usd(i.unit_price_usd) if i.unit_price_usd is not None else "",
              _usd(i.cost_usd), i.note] for i in cost.items]
    items.append(["Total", f"{cost.window_s:.1f} s", "", _usd(cost.total_usd),
                  _ops_note(cost.operations, cost.ops_per_usd)])
    stages = [[s.stage, f"{s.duration_s:.1f}", _usd(s.cost_usd), _num(s.operations, 0), _num(s.ops_per_usd, 0)]
              for s in cost.stages.itertuples(index=False)]
    return (["Item", "Usage", "Unit price", "Cost", "Note"], items), (
        ["Stage", "Duration (s)", "Cost", "Operations", "Ops per $"], stages)


_NUMERIC = re.compile(r"^[-+$]?[\d,.]+(%| s| ms|[ A-Za-z-]*hours| GB-months| DPUs| million requests)?$|^[\d.]+ / [\d.]+$")


def _ops_note(operations: int | None, per_usd: float | None) -> str:
    if not operations:
        return ""
    return f"{_num(operations, 0)} operations" + (f", {_num(per_usd, 0)} per $" if per_usd else "")


def html_table(headers: list[str], rows: list[list[str]]) -> str:
    """An HTML table; numeric cells are right-aligned, text cells left-aligned."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)

    def cell(value: str) -> str:
        text = str(value)
        align = ' class="num"' if _NUMERIC.match(text.strip()) else ""
        return f"<td{align}>{html.escape(text)}</td>"

    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" if i == 0 else cell(c) for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def completeness(data: ReportData) -> str | None:
    """None for a run that finished; otherwise one sentence saying it did not, with the time of its last data."""
    meta = data.run.meta
    if meta.get("ended_utc"):
        if meta.get("interrupted"):
            i = meta["interrupted"]
            return f"interrupted at t = {i.get('at_s')} s ({i.get('signal')}): the tables cover the time that ran"
        if meta.get("stop_reason"):
            return f"stopped early: {meta['stop_reason']}"
        return None
    last = None
    for name in ("timeline.open.csv", "timeline.csv"):
        rows = _read_rows(data.run.path / name)
        if rows:
            last = rows[-1].get("time_utc")
            break
    return ("INCOMPLETE: the run did not finish (its process was killed or crashed); "
            f"last data at {last or 'unknown'}. Tables hold what was written until then.")


def _read_rows(path: Path) -> list[dict]:
    import csv

    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def ledger_rows(data: ReportData) -> tuple[list[str], list[list[str]]]:
    """The ledger per stage from stages.csv (or the run from summary.csv)."""
    from dbsurge.tables import ledger_table

    rows = _read_rows(data.run.path / "stages.csv") or _read_rows(data.run.path / "summary.csv")
    if not rows or "planned" not in rows[0]:
        return [], []
    return ledger_table(rows)


def _facts(data: ReportData) -> list[tuple[str, str]]:
    run = data.run
    window = run.window()
    facts = [("Run", run.run_id), ("Target", run.target), ("Workload", run.workload), ("Plan", run.plan_text)]
    status = completeness(data)
    if status:
        facts.insert(0, ("Status", status))
    verdict = (run.meta.get("results") or {}).get("verdict")
    if verdict:
        facts.insert(1 if status else 0, ("Verdict", verdict))
    if window:
        seconds = (window[1] - window[0]).total_seconds()
        facts.append(("Window (UTC)", f"{format_utc(window[0])} to {format_utc(window[1])} ({seconds:.1f} s)"))
    facts.append(("CloudWatch", ", ".join(run.cloudwatch) or "none"))
    return [(k, v) for k, v in facts if v]


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1150px;
color:#1d2733;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #d5dbe3}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;font-size:.9em}dt{font-weight:600}dd{margin:0}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}th,td{border:1px solid #d5dbe3;padding:.3em .6em;
text-align:left}th{background:#eef2f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #e3e7ed}figcaption{font-size:.8em;color:#555}
.note{font-size:.85em;color:#555}
"""


def render_html(data: ReportData, panels: dict[str, bytes]) -> str:
    """The report page (plots given as PNG bytes)."""
    title = f"dbsurge report: {data.run.run_id}"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in _facts(data)) + "</dl>",
        "<h2>Timeline</h2>",
    ]
    for name, caption, _ in _PANELS:
        encoded = base64.b64encode(panels[name]).decode()
        parts.append(f'<figure id="plot-{name}"><img src="data:image/png;base64,{encoded}" alt="{html.escape(caption)}">'
                     f"<figcaption>{html.escape(caption)}. Shaded bands are the plan's stages.</figcaption></figure>")
    headers, rows = stage_table(data)
    parts += ["<h2>Per stage</h2>", html_table(headers, rows)]
    lh, lr = ledger_rows(data)
    if lh:
        parts += ["<h2>Ledger</h2>", '<p class="note">planned = ok + failed (by kind) + dropped + not sent '
                  "(by reason)</p>", html_table(lh, lr)]
    parts.append('<p class="note">Capacity per stage: CloudWatch datapoints whose timestamp (the start of their '
                 "period) falls in the stage; max from the Maximum statistic, mean from the Average.</p>")
    parts.append("<h2>Cost</h2>")
    if data.cost is not None:
        (ih, ir), (sh, sr) = cost_tables(data.cost)
        parts += [html_table(ih, ir), html_table(sh, sr)]
        notes = [data.cost.prices.note, *data.cost.notes]
        parts.append('<p class="note">Prices: ' + html.escape("; ".join(notes)) + "</p>")
    else:
        parts.append(f'<p class="note">No cost estimate: {html.escape(data.cost_error or "")}</p>')
    shown = [e for e in data.events if e.get("kind") not in ("stage",)]
    if shown:
        rows = [[str(e.get("time_utc", "")), str(e.get("kind", "")),
                 ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("time_utc", "kind"))] for e in shown]
        parts += ["<h2>Events</h2>", html_table(["Time (UTC)", "Kind", "Details"], rows)]
    parts.append('<p class="note">Files: merged.csv (one row per second), cost.csv, timeline.png, summary.md, '
                 "metrics/.</p></body></html>")
    return "\n".join(parts)


def render_markdown(data: ReportData) -> str:
    """summary.md: the facts, the per-stage table and the cost tables."""
    lines = [f"# dbsurge run {data.run.run_id}", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(data)]
    headers, rows = stage_table(data)
    lines += ["", "## Per stage", "", markdown_table(headers, rows), ""]
    lh, lr = ledger_rows(data)
    if lh:
        lines += ["## Ledger", "", "planned = ok + failed (by kind) + dropped + not sent (by reason)", "",
                  markdown_table(lh, lr), ""]
    lines += ["## Cost", ""]
    if data.cost is not None:
        (ih, ir), (sh, sr) = cost_tables(data.cost)
        lines += [markdown_table(ih, ir), "", markdown_table(sh, sr), "", "Prices: " + "; ".join(
            [data.cost.prices.note, *data.cost.notes]), ""]
    else:
        lines += [f"No cost estimate: {data.cost_error}", ""]
    lines += _generator_lines(data.run.meta.get("results") or {})
    errors = [e for e in data.events if e.get("kind") in _MARKED_EVENTS]
    if errors:
        lines += ["## Events", ""]
        lines += [f"- {e.get('time_utc', '')} {e.get('kind')}: {_event_text(e)}".rstrip() for e in errors]
        lines.append("")
    lines += ["Plots: report.html and timeline.png beside this file.", ""]
    return "\n".join(lines)


def _event_text(event: dict) -> str:
    """An event's one line: an error's message, a rate override's label (``override 2: 80 TPS from ...``)."""
    return event.get("message") or event.get("label") or event.get("source") or ""


def _generator_lines(results: dict) -> list[str]:
    """The engine's own verdict from run.json: did the generator keep to the plan, and the checks."""
    if not results:
        return []
    lines = ["## Generator", ""]
    planned = results.get("planned_operations")
    if planned is not None:
        lines.append(f"- planned {planned}, sent {results.get('operations')}, dropped {results.get('dropped')}, "
                     f"not sent {results.get('not_sent')}")
    behind = results.get("behind_plan") or []
    lines += [f"- {b}" for b in behind] or ["- kept to the plan: no stage lagged or dropped slots"]
    checks = results.get("checks") or []
    if checks:
        lines += ["", "## Checks", ""]
        lines += [f"- {'passed' if c['passed'] else 'FAILED'}: {c['check']} (measured {c['value']})" for c in checks]
    return lines + [""]


def build_report(run_dir: str | Path) -> Path:
    """Write ``report.html``, ``timeline.png`` and ``summary.md`` (and ``merged.csv``, ``cost.csv``)."""
    data = load_report_data(run_dir)
    panels = {name: render_panel(data, name) for name, _, _ in _PANELS}
    path = data.run.path
    (path / "timeline.png").write_bytes(render_timeline(data))
    summary = path / "summary.md"
    kept = ""
    if summary.exists():  # a scenario's own table (`dbsurge scenario`) follows its marker: keep it
        old = summary.read_text()
        if SCENARIO_MARK in old:
            kept = "\n" + old[old.index(SCENARIO_MARK):]
    summary.write_text(render_markdown(data) + kept)
    out = path / "report.html"
    out.write_text(render_html(data, panels))
    return out
