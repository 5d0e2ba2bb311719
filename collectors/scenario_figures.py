"""The scenarios' own figures for report.html: one function per scenario kind, from its run directory's files.

A scenario's study table lives in its ``Report`` (`dbsurge.scenarios.report`); the figures here draw the raw
data behind that table, so a reader sees what the percentiles summarise:

- ``cache``: warm vs cold P50, P95, P99, MAX and mean as bars (log ms), and every read of both snapshots
  against its index in the snapshot (the first reads of a cold cache stand out);
- ``rewarm``: P50, mean and P99 of each bucket over the run, every read as a grey dot, the buckets shaded;
  and every read of the first window (latency per read against the time it started);
- ``longscan``: each batch's throughput (documents per second) against the time it ended, the first,
  middle and last segments shaded with their throughput as a line;
- ``idle``: first connection, first query and the p50 of the next lookups per probe run, each lookup a dot;
- ``ycsb-load``: records inserted per second, in all and per client, and the latency of the insert calls per
  second (p50, p99, max);
- ``ycsb-run``: throughput and read/update p99 of a single run, or per consistency level (``--consistency``),
  or throughput per worker count against the linear ideal (``--scale-workers``).

Each function returns a `ScenarioView`: a one-line result for the page's facts and the figures. A scenario
that draws its own adds a function to `VIEWS` under its name (`register_view`); one without gets its tables
only. Figures are drawn on matplotlib's Agg canvas (no pyplot state) and embedded as PNG bytes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dbsurge.rundir.schema import BATCHES, INSERTS, PROBES, SNAPSHOTS, TRACE

WARM, COLD = "#1f77b4", "#d62728"
P50, P99, MEAN, MAX = "#1f77b4", "#ff7f0e", "#2ca02c", "#8a8a8a"
BANDS = ("#eef2f7", "#ffffff")
SEGMENTS = {"first": "#dbe9f6", "middle": "#e6f2e1", "last": "#fbe3d6"}
_WIDTH = 12.0
#: At most this many points in a scatter of every read or insert (a 10-minute trace has 60,000 reads).
MAX_DOTS = 20_000


@dataclass
class Figure:
    """One picture of a scenario's report: its id in the page, its caption and its PNG bytes."""

    name: str
    caption: str
    png: bytes


@dataclass
class ScenarioView:
    """What a scenario adds to the page beside its tables: the result in one line, and its figures."""

    result: str = ""
    figures: list[Figure] = field(default_factory=list)


#: scenario name -> view(run_dir, run.json, the scenario's Report) -> ScenarioView
VIEWS: dict[str, Callable[[Path, dict, Any], ScenarioView]] = {}


def register_view(name: str) -> Callable:
    """Decorator: ``name``'s figures and result line (a scenario's own module may register one too)."""

    def add(view: Callable[[Path, dict, Any], ScenarioView]) -> Callable[[Path, dict, Any], ScenarioView]:
        VIEWS[name] = view
        return view

    return add


def scenario_view(run_dir: Path, meta: dict, report: Any) -> ScenarioView:
    """The registered view of the run's scenario; an empty one for a scenario without figures."""
    view = VIEWS.get(str(meta.get("scenario") or ""))
    return view(Path(run_dir), meta, report) if view is not None else ScenarioView()


# -- drawing helpers ---------------------------------------------------------------------------------------


def _figure(height: float = 3.2, columns: int = 1) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(_WIDTH, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, columns, i + 1) for i in range(columns)]
    return fig, axes


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, facecolor="white")
    return buffer.getvalue()


def _log_ms(ax: Any, values: list[float]) -> None:
    """A log latency axis labelled in plain milliseconds (0.5, 1, 2, 5, 10 ...), when the values allow one."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    positive = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not positive:
        return
    ax.set_yscale("log")
    low, high = min(positive), max(positive)
    ax.set_ylim(low / 1.6, high * 1.6)
    decades = math.log10(high * 1.6 / (low / 1.6))
    subs = (1.0, 2.0, 5.0) if decades < 3 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:.3g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _legend(ax: Any) -> None:
    """The legend outside the plot, on its right, so that it never hides a point or a bar's label."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)


def _grid(ax: Any) -> None:
    ax.grid(True, axis="y", color="#e3e7ed", linewidth=0.8)
    ax.set_axisbelow(True)


def _bars(ax: Any, groups: list[str], series: list[tuple[str, list[float | None], str]], unit: str) -> None:
    """Grouped bars, each labelled with its value; a missing value is a gap labelled ``-``."""
    width = 0.8 / max(1, len(series))
    for k, (label, values, color) in enumerate(series):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(groups))]
        heights = [v if v is not None else 0 for v in values]
        bars = ax.bar(xs, heights, width=width * 0.92, color=color, label=label)
        for bar, v in zip(bars, values):
            text = "-" if v is None else (f"{v:,.3f}" if unit == "ms" and v < 100 else f"{v:,.1f}")
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, max(bar.get_height(), 1e-9)), xytext=(0, 2),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7.5)
    ax.set_xticks(range(len(groups)), groups)
    _grid(ax)


def _float(v: Any) -> float | None:
    try:
        number = float(v)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _csv(run_dir: Path, name: str, columns: list[str]) -> pd.DataFrame:
    """A raw CSV's columns (empty frame when the file is missing or empty)."""
    path = run_dir / name
    try:
        return pd.read_csv(path, usecols=lambda c: c in columns)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return pd.DataFrame(columns=columns)


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    if "ok" not in frame:
        return frame
    return frame[frame["ok"].astype(str).str.lower().isin(("1", "true", "1.0"))]


def _thin(frame: pd.DataFrame, most: int = MAX_DOTS) -> pd.DataFrame:
    """Every n-th row so that at most ``most`` are drawn (the slowest rows are kept)."""
    if len(frame) <= most:
        return frame
    step = math.ceil(len(frame) / most)
    keep = frame.iloc[::step]
    top = frame.nlargest(min(200, len(frame)), "latency_ms") if "latency_ms" in frame else frame.iloc[:0]
    return pd.concat([keep, top]).drop_duplicates()


# -- cache (study 000, experiment 1) ------------------------------------------------------------------------


@register_view("cache")
def cache_view(run_dir: Path, meta: dict, report: Any) -> ScenarioView:
    rows = {r["metric"]: r for r in report.tables[0].csv_rows} if report.tables else {}
    labels = [m for m in ("P50", "P95", "P99", "MAX", "MEAN") if m in rows]
    warm = [_float(rows[m]["warm"]) for m in labels]
    cold = [_float(rows[m]["cold"]) for m in labels]
    figures = []
    if labels and any(v is not None for v in warm + cold):
        fig, (ax,) = _figure(3.4)
        _bars(ax, labels, [("WARM", warm, WARM), ("COLD", cold, COLD)], "ms")
        _log_ms(ax, [v for v in warm + cold if v])
        ax.set_ylabel("latency (ms, log)")
        ax.set_title(f"The same {meta.get('reads', '')} seeded reads by id, warm then cold", fontsize=10)
        _legend(ax)
        figures.append(Figure("cache-percentiles", "Warm vs cold latency percentiles of the snapshots (ms, log "
                              "scale); each bar is labelled with its value; the table gives the change.",
                              _png(fig)))
    snaps = _ok(_csv(run_dir, SNAPSHOTS, ["snapshot", "index", "latency_ms", "ok"]))
    if not snaps.empty:
        fig, (ax,) = _figure(3.0)
        for name, color in (("warm", WARM), ("cold", COLD)):
            part = snaps[snaps["snapshot"] == name]
            ax.plot(part["index"], part["latency_ms"], ".", markersize=2.5, color=color, label=name.upper())
        _log_ms(ax, snaps["latency_ms"].tolist())
        ax.set_xlabel("read in the snapshot (index; the same id at the same index in both)")
        ax.set_ylabel("latency (ms, log)")
        _legend(ax)
        _grid(ax)
        figures.append(Figure("cache-reads", "Every successful read of each snapshot against its place in the "
                              f"snapshot ({SNAPSHOTS}): a cold cache shows in the first reads.", _png(fig)))
    result = next((n for n in report.notes if n.startswith(("COLD was", "No comparison"))), "")
    return ScenarioView(result, figures)


# -- rewarm (study 000, experiment 2) -----------------------------------------------------------------------


@register_view("rewarm")
def rewarm_view(run_dir: Path, meta: dict, report: Any) -> ScenarioView:
    settings = meta.get("settings") or {}
    buckets = report.tables[0].csv_rows if report.tables else []
    first = report.tables[1].csv_rows if len(report.tables) > 1 else []
    figures = []
    if buckets:
        figures.append(_rewarm_buckets(run_dir, settings, buckets))
    if first:
        figures.append(_rewarm_first(settings, first))
    result = next((n for n in report.notes if n.startswith("P50 of bucket 0")), "")
    result = result or next((n for n in report.notes if n.startswith("Maximum of the run")), "")
    return ScenarioView(result, figures)


def _rewarm_buckets(run_dir: Path, settings: dict, buckets: list[dict]) -> Figure:
    """P50, mean and P99 per bucket as steps over the buckets (shaded), every read a grey dot."""
    ok = _ok(_csv(run_dir, TRACE, ["t_since_start_s", "latency_ms", "ok"]))
    fig, (ax,) = _figure(3.4)
    for i, b in enumerate(buckets):
        ax.axvspan(b["start_s"], b["end_s"], color=BANDS[i % 2], zorder=0)
    window = _float(settings.get("first_window_s"))
    if window:
        ax.axvspan(0, window, color="#fff3c4", zorder=0, label=f"first {window:g} s (traced below)")
    if not ok.empty:
        dots = _thin(ok)
        ax.plot(dots["t_since_start_s"], dots["latency_ms"], ".", color=MAX, markersize=1.5, alpha=0.5,
                label="each read", zorder=1)
    for key, label, color in (("p50_ms", "P50", P50), ("mean_ms", "mean", MEAN), ("p99_ms", "P99", P99)):
        xs, ys = [], []
        for b in buckets:  # a bucket without a successful read is a gap in the line
            xs += [b["start_s"], b["end_s"]]
            ys += [b[key], b[key]] if b[key] is not None else [float("nan")] * 2
        ax.plot(xs, ys, color=color, linewidth=1.8, label=f"{label} per bucket", zorder=3)
    values = [b[k] for b in buckets for k in ("p50_ms", "p99_ms", "max_ms") if b[k]]
    _log_ms(ax, values + (ok["latency_ms"].tolist() if not ok.empty else []))
    ax.set_xlim(0, buckets[-1]["end_s"])
    ax.set_xlabel("seconds since the first read was due")
    ax.set_ylabel("latency (ms, log)")
    _legend(ax)
    bucket = _float(settings.get("bucket_s")) or 0
    return Figure("rewarm-buckets", f"P50, mean and P99 of each {bucket:g}-second bucket (shaded alternately) over "
                  "the run, response time from the intended start; grey dots are single reads.", _png(fig))


def _rewarm_first(settings: dict, first: list[dict]) -> Figure:
    """Every read of the first window: its latency against the time it was due."""
    window = _float(settings.get("first_window_s")) or 1
    fig, (ax,) = _figure(3.0)
    done = [r for r in first if r["latency_ms"] is not None]
    failed = [r for r in first if r["latency_ms"] is None]
    ax.plot([r["t_since_start_s"] * 1000 for r in done], [r["latency_ms"] for r in done], "o", markersize=3,
            color=P50, label="a read")
    if done:
        top = max(done, key=lambda r: r["latency_ms"])
        ax.annotate(f"{top['latency_ms']:.3f} ms", (top["t_since_start_s"] * 1000, top["latency_ms"]),
                    xytext=(6, 0), textcoords="offset points", fontsize=8, va="center")
    for r in failed:
        ax.axvline(r["t_since_start_s"] * 1000, color=COLD, linestyle=":", linewidth=1,
                   label="a failed read" if r is failed[0] else None)
    _log_ms(ax, [r["latency_ms"] for r in done])
    ax.set_xlim(0, window * 1000)
    ax.set_xlabel("milliseconds since the first read was due (the read's intended start)")
    ax.set_ylabel("latency (ms, log)")
    _legend(ax)
    _grid(ax)
    return Figure("rewarm-first-window", f"Every read of the first {window:g} s, its latency against when it was "
                  "due: the first reads of a cold cache pay for page fetches"
                  + ("; dotted red lines are failed reads." if failed else "."), _png(fig))


# -- longscan (study 000, experiment 3) ---------------------------------------------------------------------


def segments(batches: list[dict], size: int) -> dict[str, list[dict]]:
    """The first, middle and last ``size`` batches (they overlap when there are fewer than 3 x size)."""
    n = len(batches)
    k = min(size, n)
    mid = max(0, (n - k) // 2)
    return {"first": batches[:k], "middle": batches[mid:mid + k], "last": batches[n - k:]}


@register_view("longscan")
def longscan_view(run_dir: Path, meta: dict, report: Any) -> ScenarioView:
    batches = _csv(run_dir, BATCHES, ["batch", "documents", "elapsed_ms", "t_end_s", "docs_per_s"])
    rows = {r["metric"]: r for r in report.tables[0].csv_rows} if report.tables else {}
    size = int((meta.get("settings") or {}).get("segment", 10))
    figures = []
    if not batches.empty:
        records = batches.to_dict("records")
        parts = segments(records, size)
        fig, (ax,) = _figure(3.4)
        for name, part in parts.items():
            if not part:
                continue
            start = float(part[0]["t_end_s"]) - float(part[0]["elapsed_ms"]) / 1000
            end = float(part[-1]["t_end_s"])
            ax.axvspan(start, end, color=SEGMENTS[name], zorder=0)
            metric = next((m for m in rows if m.startswith(f"{name} ")), None)
            value = _float(rows[metric]["value"]) if metric else None
            if value is not None:
                ax.plot([start, end], [value, value], color="#333333", linewidth=2, zorder=3)
                ax.annotate(f"{name}: {value:,.0f} docs/s", (start, value), xytext=(0, 5), textcoords="offset points",
                            fontsize=8)
        ax.plot(batches["t_end_s"], batches["docs_per_s"], ".-", color=P50, markersize=3, linewidth=0.6,
                label="one batch", zorder=2)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("seconds since the query started (each batch at the time it ended)")
        ax.set_ylabel("documents returned per second")
        _legend(ax)
        _grid(ax)
        figures.append(Figure("longscan-batches", f"Throughput of each batch of the scan (documents returned per "
                              f"second of its round trip); shaded: the first, middle and last {size} batches, the "
                              "black line each segment's throughput as in the table.", _png(fig)))
    result = ""
    last = next((r for m, r in rows.items() if m.startswith("last ")), None)
    query = rows.get("query time")
    if last and _float(last["value"]) is not None:
        change = f" ({last['change_pct']:+.1f}% vs the first)" if last.get("change_pct") is not None else ""
        seconds = f"query {query['value']:.3f} s; " if query and query.get("value") is not None else ""
        result = f"{seconds}{last['metric']}: {last['value']:,.1f} docs/s{change}"
    return ScenarioView(result, figures)


# -- idle (study 001) ---------------------------------------------------------------------------------------


@register_view("idle")
def idle_view(run_dir: Path, meta: dict, report: Any) -> ScenarioView:
    rows = report.tables[0].csv_rows if report.tables else []
    figures = []
    if rows:
        fig, (ax,) = _figure(3.4)
        groups = [f"run {r['run']}" for r in rows]
        series = [("first connection", [r["first_connection_ms"] for r in rows], "#9467bd"),
                  ("first query", [r["first_query_ms"] for r in rows], COLD),
                  (f"p50 of the next {rows[0]['next_count'] or ''}".rstrip(), [r["next_p50_ms"] for r in rows], P50)]
        _bars(ax, groups, series, "ms")
        probes = _csv(run_dir, PROBES, ["run", "step", "latency_ms", "ok"])
        lookups = _ok(probes[probes["step"] == "lookup"]) if not probes.empty else probes
        width = 0.8 / 3
        for i, r in enumerate(rows):
            mine = lookups[lookups["run"] == r["run"]] if not lookups.empty else lookups
            if len(mine):
                ax.plot([i + 0.4 + width * 0.15] * len(mine), mine["latency_ms"], "_", color="#333333",
                        markersize=7, label="each later lookup" if i == 0 else None)
        failed = [i for i, r in enumerate(rows) if r["result"] != "success"]
        for i in failed:
            ax.annotate("FAILED", (i, 0), xytext=(0, 14), textcoords="offset points", ha="center", color=COLD,
                        fontsize=9, fontweight="bold", xycoords=("data", "axes fraction"))
        values = [v for _, vs, _ in series for v in vs if v] + (lookups["latency_ms"].tolist() if len(lookups) else [])
        _log_ms(ax, values)
        ax.set_ylabel("ms (log)")
        _legend(ax)
        figures.append(Figure("idle-probes", "Per probe run, after the idle window: a new connection, the first query "
                              "on it, and the p50 of the further lookups (each lookup a dash); ms on a log scale.",
                              _png(fig)))
    return ScenarioView(report.notes[0] if report.notes else "", figures)


# -- ycsb-load (study 002) ----------------------------------------------------------------------------------


@register_view("ycsb-load")
def ycsb_load_view(run_dir: Path, meta: dict, report: Any) -> ScenarioView:
    inserts = _csv(run_dir, INSERTS, ["client", "records", "t_since_start_s", "latency_ms", "ok"])
    row = report.tables[0].csv_rows[0] if report.tables and report.tables[0].csv_rows else {}
    figures = []
    ok = _ok(inserts)
    if not ok.empty:
        done = ok.assign(second=((ok["t_since_start_s"] + ok["latency_ms"] / 1000) // 1).astype(int))
        seconds = range(int(done["second"].max()) + 1)
        fig, (ax,) = _figure(3.2)
        per_client = done.groupby(["client", "second"])["records"].sum()
        edges = [*seconds, len(seconds)]  # each second's value held over [s, s + 1)
        for client in sorted(done["client"].unique()):
            series = per_client.loc[client].reindex(seconds, fill_value=0).tolist()
            ax.step(edges, [*series, series[-1]], where="post", color=MAX, linewidth=0.7, alpha=0.7,
                    label="one client" if client == done["client"].min() else None)
        total = done.groupby("second")["records"].sum().reindex(seconds, fill_value=0).tolist()
        ax.step(edges, [*total, total[-1]], where="post", color=P50, linewidth=1.8, label="all clients")
        ax.set_xlim(0, len(seconds))
        ax.set_ylim(bottom=0)
        ax.set_xlabel("seconds since the load started (by the second an insert call completed)")
        ax.set_ylabel("records inserted per second")
        _legend(ax)
        _grid(ax)
        figures.append(Figure("ycsb-load-throughput", "Records inserted per second, by all clients and by each "
                              "client (the last second is partial).", _png(fig)))
        fig, (ax,) = _figure(3.2)
        by_second = done.groupby("second")["latency_ms"]
        xs = [s + 0.5 for s in by_second.groups]
        ax.plot(xs, by_second.quantile(0.5).values, color=P50, marker=".", label="p50")
        ax.plot(xs, by_second.quantile(0.99).values, color=P99, marker=".", label="p99")
        ax.plot(xs, by_second.max().values, ".", color=MAX, label="max")
        _log_ms(ax, done["latency_ms"].tolist())
        ax.set_xlim(0, len(seconds))
        ax.set_xlabel("seconds since the load started (by the second an insert call completed)")
        per = row.get("latency_per", "insert")
        ax.set_ylabel(f"ms per {per} (log)")
        _legend(ax)
        _grid(ax)
        figures.append(Figure("ycsb-load-latency", f"Latency of the insert calls per second: p50, p99 and maximum "
                              f"(ms per {per}; linear-interpolated percentiles of the second's calls).", _png(fig)))
    result = ""
    if row.get("inserts_per_s") is not None:
        result = (f"{row['inserted']:,} records in {row['seconds']:.3f} s: {row['inserts_per_s']:,.1f} inserts/s with "
                  f"{row['clients']} clients, batch size {row['batch_size']}; {row['failures']} failed calls")
    return ScenarioView(result, figures)


# -- ycsb-run (study 002) -----------------------------------------------------------------------------------


@register_view("ycsb-run")
def ycsb_run_view(run_dir: Path, meta: dict, report: Any) -> ScenarioView:
    rows = report.tables[0].csv_rows if report.tables else []
    if not rows:
        return ScenarioView()
    if meta.get("mode") == "scale":
        return _scale_view(rows)
    key = "consistency" if meta.get("mode") == "consistency" else "distribution"
    groups = [str(r[key]) for r in rows]
    fig, (left, right) = _figure(3.4, columns=2)
    _bars(left, groups, [("throughput", [r["throughput_ops_s"] for r in rows], P50)], "ops/s")
    target = _float(meta.get("target_tps"))
    if target:
        left.axhline(target, color="#333333", linestyle="--", linewidth=1, label=f"target {target:g} TPS")
        _legend(left)
    left.set_ylabel("successful operations per second")
    left.set_xlabel(key)
    left.set_ylim(bottom=0, top=max([r["throughput_ops_s"] or 0 for r in rows] + [target or 0, 1]) * 1.15)
    _bars(right, groups, [("read p99", [r["read_p99_ms"] for r in rows], WARM),
                          ("update p99", [r["update_p99_ms"] for r in rows], COLD)], "ms")
    right.set_ylabel("p99 (ms)")
    right.set_xlabel(key)
    right.set_ylim(bottom=0, top=max([v or 0 for r in rows for v in (r["read_p99_ms"], r["update_p99_ms"])] + [1])
                   * 1.15)
    _legend(right)
    what = "consistency level" if key == "consistency" else "request distribution"
    figure = Figure("ycsb-run", f"YCSB workload A per {what}: throughput (successful operations per second) and "
                    "read and update p99 (response time from the intended start, ms).", _png(fig))
    parts = [f"{r[key]}: {r['throughput_ops_s']:,.1f} ops/s, read p99 {r['read_p99_ms'] or 0:.3f} ms, update p99 "
             f"{r['update_p99_ms'] or 0:.3f} ms" for r in rows if r["throughput_ops_s"] is not None]
    return ScenarioView("; ".join(parts), [figure])


def _scale_view(rows: list[dict]) -> ScenarioView:
    workers = [r["workers"] for r in rows]
    fig, (left, right) = _figure(3.4, columns=2)
    left.plot(workers, [r["ideal_ops_s"] for r in rows], "--", color=MAX, label="linear ideal (first run x n)")
    left.plot(workers, [r["throughput_ops_s"] for r in rows], "o-", color=P50, label="achieved")
    for r in rows:
        if r["pct_of_ideal"] is not None and r["throughput_ops_s"] is not None:
            left.annotate(f"{r['pct_of_ideal']:.0f}%", (r["workers"], r["throughput_ops_s"]), xytext=(4, -10),
                          textcoords="offset points", fontsize=8)
    left.set_xticks(workers)
    left.set_xlabel("worker processes")
    left.set_ylabel("successful operations per second")
    left.set_ylim(bottom=0)
    _legend(left)
    _grid(left)
    right.plot(workers, [r["read_p99_ms"] for r in rows], "o-", color=WARM, label="read p99")
    right.plot(workers, [r["update_p99_ms"] for r in rows], "o-", color=COLD, label="update p99")
    right.set_xticks(workers)
    right.set_xlabel("worker processes")
    right.set_ylabel("p99 (ms)")
    right.set_ylim(bottom=0)
    _legend(right)
    _grid(right)
    figure = Figure("ycsb-run-scale", "Throughput per worker count against the linear ideal (the first run's "
                    "throughput times its share of workers), labelled with the % of ideal; read and update p99 per "
                    "worker count.", _png(fig))
    last = rows[-1]
    result = ""
    if last["pct_of_ideal"] is not None:
        result = (f"{last['workers']} workers: {last['throughput_ops_s']:,.1f} ops/s, {last['pct_of_ideal']:.0f}% of "
                  f"the linear ideal ({last['ideal_ops_s']:,.1f} ops/s)")
    return ScenarioView(result, [figure])
