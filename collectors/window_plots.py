"""report.html's plots of a long run (``dbsurge scenario longrun``): its windows, on the timeline's axis.

Per window length (``longrun-windows-<length>.csv``, written by `dbsurge.scenarios.longrun`), two
panels drawn with the timeline's machinery (`collectors.timeline_plots`: the same figure geometry,
stage shading, events, elapsed and UTC axes and legend), so they line up under the per-second panels:

- throughput per window (successful operations per second) against the target, as steps that cover
  each window;
- P99 per window and operation (the merged histograms' P99), with each spike marked (a cross) and the
  spike threshold (``--spike-factor`` x the median window P99) as a dotted line.

These read the CSVs only: a 12-hour run's panels cost the number of windows, not of seconds.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbsurge.collectors.timeline_plots import (
    _COLORS,
    Panel,
    _draw,
    _empty,
    _encode,
    _log_ms_axis,
    _panel_figure,
    _pixels,
)

from dbsurge.rundir.reader import read_rows
from dbsurge.rundir.schema import CSV_SUFFIX, INTERVALS, LONGRUN_WINDOWS_PREFIX, longrun_windows

if TYPE_CHECKING:
    from dbsurge.collectors.report_data import ReportData

_NAME = re.compile(re.escape(LONGRUN_WINDOWS_PREFIX) + r"(\d+)([smh])" + re.escape(CSV_SUFFIX))
_UNIT_S = {"s": 1, "m": 60, "h": 3600}
SECTION_TITLE = "Windows (dbsurge scenario longrun)"
SECTION_NOTE = ("Per window: throughput is successful operations per second over the window; P99 is the P99 of the "
                f"window's merged per-second histograms ({INTERVALS}). A cross marks a spike (P99 above the "
                f"spike factor times the median window P99, the dotted line). Every window: "
                f"{longrun_windows('<length>')}.")


def window_files(run_dir: Path) -> list[tuple[str, Path]]:
    """(label, path) of each windows CSV, shortest window first."""
    found = []
    for path in run_dir.glob(longrun_windows("*")):
        m = _NAME.fullmatch(path.name)
        if m:
            found.append((int(m.group(1)) * _UNIT_S[m.group(2)], f"{m.group(1)}{m.group(2)}", path))
    return [(label, path) for _, label, path in sorted(found)]


def _rows(path: Path) -> list[dict]:
    return read_rows(path.parent, path.name)


def _num(v: Any) -> float | None:
    try:
        return float(v) if v not in (None, "") else None
    except ValueError:
        return None


def _operations(rows: list[dict]) -> list[str]:
    return [c[: -len("_p99_ms")] for c in (rows[0] if rows else {}) if c.endswith("_p99_ms")]


def _window_steps(ax: Any, rows: list[dict], column: str, **style: Any) -> bool:
    """A value per window as steps from each window's start to its end; False when there is none."""
    xs, ys = [], []
    for r in rows:
        xs.append(_num(r["start_s"]))
        ys.append(_num(r[column]))
    if not rows or all(y is None for y in ys):
        return False
    xs.append(_num(rows[-1]["end_s"]))
    ys.append(ys[-1])
    ax.step(xs, [float("nan") if y is None else y for y in ys], where="post", **style)
    return True


def draw_throughput(ax: Any, rows: list[dict], label: str, _factor: float | None = None) -> None:
    _window_steps(ax, rows, "target_tps", color="#555555", lw=1.2, ls="--", label="target", zorder=3)
    if not _window_steps(ax, rows, "throughput_ops_s", color=_COLORS[0], lw=1.4, label=f"achieved ({label})"):
        _empty(ax, "no windows")
    tops = [v for r in rows for c in ("target_tps", "throughput_ops_s") if (v := _num(r[c])) is not None]
    ax.set_ylim(0, max(tops) * 1.15 if tops and max(tops) > 0 else 1)  # a held target is not drawn on the frame
    ax.set_ylabel("operations/s")
    ax.set_title(f"Throughput per {label} window vs target", fontsize=10, loc="left", pad=30)


def draw_p99(ax: Any, rows: list[dict], label: str, factor: float | None = None) -> None:
    drawn = False
    for i, op in enumerate(_operations(rows)):
        color = _COLORS[i % len(_COLORS)]
        if not _window_steps(ax, rows, f"{op}_p99_ms", color=color, lw=1.3, label=f"{op} P99"):
            continue
        drawn = True
        p99s = [v for r in rows if (v := _num(r[f"{op}_p99_ms"])) is not None]
        spikes = [r for r in rows if str(r.get(f"{op}_spike")) in ("1", "True")]
        if spikes:
            ax.plot([(_num(r["start_s"]) + _num(r["end_s"])) / 2 for r in spikes],
                    [_num(r[f"{op}_p99_ms"]) for r in spikes], ls="none", marker="x", ms=7, mew=1.6, color=color,
                    label=f"{op} spikes ({len(spikes)})", zorder=4)
        if p99s and factor:
            ax.axhline(factor * statistics.median(p99s), color=color, lw=0.8, ls=":", label=f"{op} spike threshold")
    if not drawn:
        _empty(ax, "no windows with successes")
        return
    _log_ms_axis(ax)
    ax.set_ylabel("ms")
    ax.set_title(f"P99 per {label} window (merged histograms), spikes marked", fontsize=10, loc="left", pad=30)


def longrun_figures(data: ReportData) -> tuple[str, str, list[tuple[str, str, bytes]]]:
    """The section's title, its note and its figures (id, caption, PNG), two per window length."""
    factor = _num((data.run.meta.get("longrun") or {}).get("spike_factor"))
    figures = []
    for label, path in window_files(data.run.path):
        rows = _rows(path)
        kinds = (("throughput", draw_throughput,
                  f"Successful operations per second in each {label} window, against the plan's target"),
                 ("p99", draw_p99, f"P99 of each {label} window per operation; crosses are spikes"))
        for kind, draw, caption in kinds:
            panel = Panel(f"windows-{label}-{kind}", caption,
                          lambda ax, _d, r=rows, f=draw, w=label: f(ax, r, w, factor), height=2.3)
            fig, ax = _panel_figure(panel.height)
            _draw(ax, data, panel)
            figures.append((panel.name, panel.caption, _encode(_pixels(fig))))
    return SECTION_TITLE, SECTION_NOTE, figures
