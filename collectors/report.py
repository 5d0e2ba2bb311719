"""The run report: ``report.html`` (self-contained), ``timeline.png`` and ``summary.md``.

`build_report` merges the run (``merged.csv``), estimates its cost (``cost.csv``) and writes:

- the tables the console printed at the end of the run, from the same files (``summary.csv``,
  ``stages.csv``) through the same functions (`dbsurge.measure.tables`): per operation (planned, ok, failed,
  ops/s, response p50/p95/p99/p99.9/max, service p50/p99, lag p99), per stage (with the CloudWatch
  capacity of each stage when the run has it) and the ledger; in the HTML also every stage and
  operation in full;
- the plots of `collectors.timeline_plots`: per operation the response-time percentiles with service
  time beside them, the operations completed per second (the samples behind each per-second
  percentile), target versus achieved rate, lag and drops, and capacity and cache hit ratio, on one
  axis of seconds since the run started with UTC along the top;
- the cost, when there is one to show: a local run costs nothing that dbsurge can price, so its
  report has no cost section rather than a table of $0.0000;
- for a scenario's run, the scenario's own tables (the `Report` summary.md holds), its figures and links
  to its engine runs, under the facts (`collectors.scenario_report`): an in-process scenario has no
  engine tables, so that section is most of its page.

A section without data is left out. The HTML embeds every plot as a base64 PNG and uses no script,
stylesheet, font or image from elsewhere, so a browser opens it from disk. ``timeline.png`` holds
the panels in one picture for pasting into a document; ``summary.md`` has the tables for a terminal
or a pull request.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from dbsurge.collectors.cost import CostReport
from dbsurge.collectors.report_data import ReportData, load_report_data
from dbsurge.collectors.rundata import format_utc
from dbsurge.collectors.scenario_report import ScenarioPart, mode_label, raw_files, scenario_part, section_html
from dbsurge.collectors.timeline_plots import RESPONSE, panels, render_images, samples_for, stage_ok
from dbsurge.collectors.window_plots import longrun_figures

from dbsurge.rundir import STAGE_COLUMNS
from dbsurge.rundir.reader import read_rows
from dbsurge.rundir.schema import (
    COST,
    EVENTS,
    MERGED,
    METRICS,
    REPORT_HTML,
    SEGMENTS,
    STAGES,
    SUMMARY_CSV,
    SUMMARY_MD,
    TIMELINE,
    TIMELINE_OPEN,
    TIMELINE_PNG,
)
from dbsurge.rundir.writer import write_text

SCENARIO_MARK = "<!-- dbsurge scenario table -->"  # dbsurge.scenarios.scenario_run.SECTION_MARK
_MARKED_EVENTS = ("error", "worker_lost", "cost_cap", "rate_change")

Table = tuple[list[str], list[list[str]]]

#: A scenario's own figures in report.html, by run.json's ``scenario``: (title, note, [(id, caption, PNG)]).
SCENARIO_FIGURES: dict[str, Callable[[Any], tuple[str, str, list[tuple[str, str, bytes]]]]] = {
    "longrun": longrun_figures,
}


# -- number formats (cost and capacity; latency and rates use dbsurge.measure.tables' formats) ------------------


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


def _usd(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    if math.isnan(number):
        return ""
    return f"${number:,.2f}" if abs(number) >= 100 else f"${number:.4f}"


# -- tables: what the console printed, from the same files --------------------------------------------------


def _read_rows(path: Path) -> list[dict]:
    try:
        return read_rows(path.parent, path.name)
    except OSError:
        return []


def _csv_rows(data: ReportData, name: str) -> list[dict]:
    """Rows of stages.csv or summary.csv as the console's table functions take them: every column, blank if absent.

    Files written before a column existed (the ledger's ``planned`` and ``ok``) then show ``-`` in it.
    """
    return [{**dict.fromkeys(STAGE_COLUMNS, ""), **row} for row in _read_rows(data.run.path / name)]


def operation_rows(data: ReportData) -> Table:
    """Per operation over the whole run (summary.csv), as the console's "Operations" table."""
    from dbsurge.measure.tables import operation_table

    rows = _csv_rows(data, SUMMARY_CSV)
    return operation_table(rows) if rows else ([], [])


def stage_table(data: ReportData) -> Table:
    """Per stage (stages.csv) as the console's "Stages" table, with each capacity series' max and mean."""
    from dbsurge.measure.tables import stage_table as console_stage_table

    rows = _csv_rows(data, STAGES)
    if not rows:
        return [], []
    headers, lines = console_stage_table(rows)
    columns = [c for c in data.capacity.columns if c.endswith(("(max)", "(mean)"))]
    for line in lines:
        cap = data.capacity[data.capacity["stage"] == line[0]] if not data.capacity.empty else pd.DataFrame()
        line += [_num(cap[c].iloc[0], 2) if not cap.empty else "" for c in columns]
    return headers + columns, lines


def stage_operation_rows(data: ReportData) -> Table:
    """Every stage and operation in full: the console's operation columns, one row per stages.csv row."""
    from dbsurge.measure.tables import operation_table

    rows = _csv_rows(data, STAGES)
    if not rows:
        return [], []
    headers, lines = operation_table(rows)
    return ["stage", *headers], [[row["stage"], *line] for row, line in zip(rows, lines)]


#: What the rate-override table is (the console's end-of-run table says the same, `dbsurge.engine.finish.SEGMENTS_TITLE`).
OVERRIDES_NOTE = (f"A row per stage and per live rate override in force ({SEGMENTS}: {TIMELINE}'s seconds, each "
                  "in the row in force at its start; the ledger stays per stage).")


def override_rows(data: ReportData) -> Table:
    """The rate-override table from segments.csv (a run with live rate changes); no rows without one."""
    from dbsurge.measure.tables import segment_table

    rows = _read_rows(data.run.path / SEGMENTS)
    return segment_table(rows) if rows else ([], [])


def ledger_rows(data: ReportData) -> Table:
    """The ledger per stage from stages.csv (or the run from summary.csv)."""
    from dbsurge.measure.tables import ledger_table

    rows = _read_rows(data.run.path / STAGES) or _read_rows(data.run.path / SUMMARY_CSV)
    if not rows or "planned" not in rows[0]:
        return [], []
    return ledger_table(rows)


def failure_rows(data: ReportData) -> list[str]:
    """The failures by kind with the first message of each (run.json's results), as the console printed them."""
    from dbsurge.measure.tables import failure_lines

    results = data.run.meta.get("results") or {}
    errors, first = results.get("errors"), results.get("first_errors")
    return failure_lines(errors, first if isinstance(first, dict) else {}) if isinstance(errors, dict) else []


#: Above the failure kinds (the console's title, `dbsurge.engine.finish.FAILURES_TITLE`).
FAILURES_NOTE = f"Each kind with its count and the first message of it; {EVENTS} holds the first of each per worker."


def thin_note(rows: list[dict], group: Callable[[dict], str] | None = None) -> str:
    """A sentence naming the rows whose p95, p99 or p99.9 rests on fewer than 100 / (100 - q) successful operations.

    Rows are named by operation, gathered under ``group`` (a row's stage) when one is given; "" when none is thin.
    """
    parts = []
    for name, q, _ in reversed(RESPONSE[1:]):
        need = samples_for(q)
        thin = [r for r in rows if 0 < stage_ok(r) < need]
        if not thin:
            continue
        if len(thin) == len(rows):
            where = "every row"
        elif group is None:
            where = ", ".join(r["operation"] for r in thin)
        else:
            by_group: dict[str, list[str]] = {}
            for r in thin:
                by_group.setdefault(group(r), []).append(r["operation"])
            where = ", ".join(f"{g} ({', '.join(ops)})" for g, ops in by_group.items())
        parts.append(f"{name} (fewer than {need:,}) in {where}")
    if not parts:
        return ""
    return ("A percentile of fewer than 100 / (100 − q) successful operations is their maximum or next to it: "
            + "; ".join(parts) + ".")


def _operation_thin_note(data: ReportData) -> str:
    return thin_note(_csv_rows(data, SUMMARY_CSV))


def _stage_thin_note(data: ReportData) -> str:
    rows = [r for r in _csv_rows(data, STAGES) if r["operation"] != "ALL"]
    return thin_note(rows, group=lambda r: r["stage"])


def cost_tables(cost: CostReport) -> tuple[Table, Table]:
    """The bill (items and total) and the per-stage cost table."""
    items = [[i.name, f"{_num(i.usage, 4)} {i.unit}", _usd(i.unit_price_usd) if i.unit_price_usd is not None else "",
              _usd(i.cost_usd), i.note] for i in cost.items]
    items.append(["Total", f"{cost.window_s:.1f} s", "", _usd(cost.total_usd),
                  _ops_note(cost.operations, cost.ops_per_usd)])
    stages = [[s.stage, f"{s.duration_s:.1f}", _usd(s.cost_usd), _num(s.operations, 0), _num(s.ops_per_usd, 0)]
              for s in cost.stages.itertuples(index=False)]
    return (["Item", "Usage", "Unit price", "Cost", "Note"], items), (
        ["Stage", "Duration (s)", "Cost", "Operations", "Ops per $"], stages)


def has_cost(data: ReportData) -> bool:
    """Whether the run has a cost worth a section: some item priced above zero (a local run has none)."""
    return data.cost is not None and data.cost.total_usd > 0


def cost_failure(data: ReportData) -> str | None:
    """Why a run that should have a cost (it polled CloudWatch) has none; None otherwise."""
    return data.cost_error if data.cost is None and data.cost_error and data.run.cloudwatch else None


def _ops_note(operations: int | None, per_usd: float | None) -> str:
    if not operations:
        return ""
    return f"{_num(operations, 0)} operations" + (f", {_num(per_usd, 0)} per $" if per_usd else "")


_NUMERIC = re.compile(r"^[-+$]?[\d,.]+(%| s| ms|[ A-Za-z-]*hours| GB-months| DPUs| RRUs| WRUs| million requests)?$"
                      r"|^[\d.,]+ / [\d.,]+$")
_BLANK = ("", "-")


def _numeric_columns(headers: list[str], rows: list[list[str]]) -> list[bool]:
    """A column is numeric when every filled cell is a number (blanks and ``-`` do not count)."""
    out = []
    for i in range(len(headers)):
        cells = [str(r[i]).strip() for r in rows if i < len(r) and str(r[i]).strip() not in _BLANK]
        out.append(i > 0 and bool(cells) and all(_NUMERIC.match(c) for c in cells))
    return out


def html_table(headers: list[str], rows: list[list[str]]) -> str:
    """An HTML table; numeric columns are right-aligned, text columns left-aligned."""
    numeric = _numeric_columns(headers, rows)

    def attr(i: int) -> str:
        return ' class="num"' if i < len(numeric) and numeric[i] else ""

    head = "".join(f"<th{attr(i)}>{html.escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{attr(i)}>{html.escape(str(c))}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# -- the facts ------------------------------------------------------------------------------------------------


def completeness(data: ReportData) -> str | None:
    """None for a run that finished; otherwise one sentence saying it did not, with the time of its last data."""
    meta = data.run.meta
    # a run whose process died was ended by `dbsurge run` (its ledger never closed: no results)
    ended_by_parent = meta.get("ended_utc") and meta.get("results") is None and meta.get("stop_reason")
    if meta.get("ended_utc") and not ended_by_parent:
        if meta.get("interrupted"):
            i = meta["interrupted"]
            return (f"interrupted at t = {i.get('at_s')} s ({i.get('by') or i.get('signal')}): the tables cover the time "
                    "that ran")
        if meta.get("stop_reason"):
            return f"stopped early: {meta['stop_reason']}"
        return None
    last = None
    for name in (TIMELINE_OPEN, TIMELINE):
        rows = _read_rows(data.run.path / name)
        if rows:
            last = rows[-1].get("time_utc")
            break
    why = meta["stop_reason"] if ended_by_parent else "its process was killed or crashed"
    return (f"INCOMPLETE: the run did not finish ({why}); "
            f"last data at {last or 'unknown'}. Tables hold what was written until then.")


def _facts(data: ReportData, part: ScenarioPart | None = None) -> list[tuple[str, str]]:
    run = data.run
    window = run.window()
    target = run.target or str(run.meta.get("target_display") or run.meta.get("target_name") or "")
    negotiated = run.meta.get("negotiated") if isinstance(run.meta.get("negotiated"), dict) else {}
    facts = [("Run", run.run_id), ("Target", target), ("Connection", str(negotiated.get("line") or "")),
             *(("Warning", str(w)) for w in negotiated.get("warnings") or []),
             ("Workload", run.workload), ("Plan", run.plan_text)]
    if part is not None:  # the scenario's result leads, as the engine's verdict does
        facts.insert(0, ("Scenario", mode_label(part, run.meta)))
        facts.insert(0, ("Result", part.view.result))
    # a scenario whose run.json keeps no times of its own (capacity's parent of step runs) cannot be judged by them
    judged = part is None or "started_utc" in run.meta
    status = completeness(data) if judged else None
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


# -- HTML -------------------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
color:#1d2733;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #d5dbe3}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;font-size:.9em}dt{font-weight:600}dd{margin:0}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0}th,td{border:1px solid #d5dbe3;padding:.3em .6em;
text-align:left}th{background:#eef2f7}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #e3e7ed}figcaption{font-size:.8em;color:#555}
.note{font-size:.85em;color:#555}summary{cursor:pointer;font-weight:600;margin-top:1.2em}
h3{font-size:1em;margin:1.2em 0 .2em}ul.notes{font-size:.85em;color:#333;padding-left:1.2em}
"""

_SCENARIO_TIME_NOTE = ("Seconds since the run started along the bottom, the same instants in UTC along the top; "
                       "dotted red lines mark errors.")
_TIME_NOTE = ("Every plot shares one time axis: seconds since the run started along the bottom, the same instants in "
              "UTC along the top. Shaded bands are the plan's stages; dotted red lines mark errors and rate changes. "
              "Per-second values go by the second an operation completed; the tables go by intended start.")


def _section(title: str, table: Table, *notes: str) -> list[str]:
    """An h2, its table and notes; nothing when the table has no rows."""
    headers, rows = table
    if not rows:
        return []
    return [f"<h2>{html.escape(title)}</h2>", html_table(headers, rows),
            *(f'<p class="note">{html.escape(n)}</p>' for n in notes if n)]


def _figure_html(name: str, caption: str, png: bytes) -> str:
    encoded = base64.b64encode(png).decode()
    return (f'<figure id="plot-{html.escape(name)}"><img src="data:image/png;base64,{encoded}" '
            f'alt="{html.escape(caption.split(".")[0])}"><figcaption>{html.escape(caption)}</figcaption></figure>')


def render_html(data: ReportData, images: dict[str, bytes], part: ScenarioPart | None = None) -> str:
    """The report page; ``images`` holds each panel's PNG by panel name (`timeline_plots.panels`).

    ``part``: a scenario's tables and figures, right under the facts (`collectors.scenario_report`).
    """
    title = f"dbsurge report: {data.run.run_id}"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in _facts(data, part))
        + "</dl>",
    ]
    if part is not None:
        parts += section_html(part, data.run.path, data.run.meta, html_table, _figure_html)
    parts += _section("Operations", operation_rows(data),
                      "Response time from the intended start (what the user waited), successful operations only; "
                      "svc = service time (from the actual start); milliseconds with microsecond precision.",
                      _operation_thin_note(data))
    capacity_note = ("Capacity per stage: CloudWatch datapoints whose timestamp (the start of their period) falls in "
                     "the stage; max from the Maximum statistic, mean from the Average."
                     if any(c.endswith("(max)") for c in data.capacity.columns) else "")
    parts += _section("Per stage", stage_table(data), capacity_note, _stage_thin_note(data))
    if override_rows(data)[1]:
        parts += _section("Rate overrides", override_rows(data), OVERRIDES_NOTE)
    figures = [_figure_html(p.name, p.caption, images[p.name]) for p in panels(data) if p.name in images]
    if figures:
        engine = bool(data.run.stages) or (data.run.path / STAGES).is_file()
        parts += ["<h2>Timeline</h2>" if engine else "<h2>Over the run</h2>",
                  f'<p class="note">{html.escape(_TIME_NOTE if engine else _SCENARIO_TIME_NOTE)}</p>', *figures]
    parts += _scenario_figures_html(data)
    parts += _section("Ledger", ledger_rows(data),
                      "planned = ok + failed (by kind) + dropped + unknown + not sent (by reason)")
    failures = failure_rows(data)
    if failures:
        parts += ["<h2>Failures</h2>", f'<p class="note">{html.escape(FAILURES_NOTE)}</p>',
                  '<ul class="notes">' + "".join(f"<li>{html.escape(f)}</li>" for f in failures) + "</ul>"]
    detail_headers, detail_rows = stage_operation_rows(data)
    if detail_rows:
        parts += ['<details id="stage-operations"><summary>Every stage and operation</summary>',
                  html_table(detail_headers, detail_rows), "</details>"]
    parts += _cost_html(data)
    # the engine's once-a-minute `resources` samples are a scenario's table (longrun), not 720 rows of events
    shown = [e for e in data.events if e.get("kind") not in ("stage", "resources")]
    if shown:
        rows = [[str(e.get("time_utc", "")), str(e.get("kind", "")), event_details(e)] for e in shown]
        parts += ["<h2>Events</h2>", html_table(["Time (UTC)", "Kind", "Details"], rows)]
    files = [f"{MERGED} (one row per second)", COST, *([TIMELINE_PNG] if figures else []), SUMMARY_MD,
             f"{METRICS}/", *(raw_files(data.run.path) if part is not None else [])]
    parts.append(f'<p class="note">Files: {html.escape(", ".join(files))}.</p></body></html>')
    return "\n".join(parts)


def event_details(event: dict) -> str:
    """An event's fields as a person reads them: ``at_s=35.668, rate_tps=80``; a field that is None is left out
    (it printed ``at_s=35.667605632000004, rate_tps=None``)."""
    def shown(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}".rstrip("0").rstrip(".") if math.isfinite(v) else str(v)
        return str(v)

    return ", ".join(f"{k}={shown(v)}" for k, v in event.items() if k not in ("time_utc", "kind") and v is not None)


def _scenario_figures_html(data: ReportData) -> list[str]:
    """The scenario's own section (`SCENARIO_FIGURES`), nothing for a run of another kind or without figures."""
    draw = SCENARIO_FIGURES.get(str(data.run.meta.get("scenario")))
    if draw is None:
        return []
    title, note, figures = draw(data)
    if not figures:
        return []
    return [f"<h2>{html.escape(title)}</h2>", f'<p class="note">{html.escape(note)}</p>',
            *(_figure_html(name, caption, png) for name, caption, png in figures)]


def _cost_html(data: ReportData) -> list[str]:
    if has_cost(data):
        (ih, ir), (sh, sr) = cost_tables(data.cost)
        notes = [data.cost.prices.note, *data.cost.notes]
        return ["<h2>Cost</h2>", html_table(ih, ir), html_table(sh, sr),
                '<p class="note">Prices: ' + html.escape("; ".join(notes)) + "</p>"]
    failure = cost_failure(data)
    return ["<h2>Cost</h2>", f'<p class="note">No cost estimate: {html.escape(failure)}</p>'] if failure else []


# -- summary.md -------------------------------------------------------------------------------------------------


def _md_section(title: str, table: Table, *notes: str) -> list[str]:
    headers, rows = table
    if not rows:
        return []
    return [f"## {title}", "", markdown_table(headers, rows), "", *(f"{n}\n" for n in notes if n)]


def render_markdown(data: ReportData, part: ScenarioPart | None = None) -> str:
    """summary.md: the facts, the operation, stage and ledger tables, the cost when there is one.

    A scenario's own tables follow (`build_report` keeps its section); its result is among the facts.
    """
    lines = [f"# dbsurge run {data.run.run_id}", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(data, part)]
    lines.append("")
    lines += _md_section("Operations", operation_rows(data),
                         "Response time from the intended start; svc = service time; ms.", _operation_thin_note(data))
    lines += _md_section("Per stage", stage_table(data), _stage_thin_note(data))
    if override_rows(data)[1]:
        lines += _md_section("Rate overrides", override_rows(data), OVERRIDES_NOTE)
    lines += _md_section("Ledger", ledger_rows(data),
                         "planned = ok + failed (by kind) + dropped + unknown + not sent (by reason)")
    failures = failure_rows(data)
    if failures:
        lines += ["## Failures", "", FAILURES_NOTE, "", *(f"- {f}" for f in failures), ""]
    if has_cost(data):
        (ih, ir), (sh, sr) = cost_tables(data.cost)
        lines += ["## Cost", "", markdown_table(ih, ir), "", markdown_table(sh, sr), "", "Prices: " + "; ".join(
            [data.cost.prices.note, *data.cost.notes]), ""]
    elif cost_failure(data):
        lines += ["## Cost", "", f"No cost estimate: {cost_failure(data)}", ""]
    if part is None or (data.run.path / STAGES).is_file():  # an in-process scenario had no plan to keep
        lines += _generator_lines(data.run.meta.get("results") or {})
    errors = [e for e in data.events if e.get("kind") in _MARKED_EVENTS]
    if errors:
        lines += ["## Events", ""]
        lines += [f"- {e.get('time_utc', '')} {e.get('kind')}: {_event_text(e)}".rstrip() for e in errors]
        lines.append("")
    if panels(data):
        lines += [f"Plots: {REPORT_HTML} and {TIMELINE_PNG} beside this file.", ""]
    elif part is not None and part.view.figures:
        lines += [f"Figures: {REPORT_HTML} beside this file.", ""]
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
        unknown = f"unknown {results['unknown']}, " if results.get("unknown") else ""
        lines.append(f"- planned {planned}, sent {results.get('operations')}, dropped {results.get('dropped')}, "
                     f"{unknown}not sent {results.get('not_sent')}")
    behind = results.get("behind_plan") or []
    kept = "- kept to the plan: no slot dropped, no stage short of its rate or late enough to change a figure"
    lines += [f"- {b}" for b in behind] or [kept]
    checks = results.get("checks") or []
    if checks:
        lines += ["", "## Checks", ""]
        lines += [f"- {'passed' if c['passed'] else 'FAILED'}: {c['check']} (measured {c.get('shown', c['value'])})"
                  for c in checks]
    return lines + [""]


def build_report(run_dir: str | Path, scenario: Any = None) -> Path:
    """Write ``report.html``, ``timeline.png`` and ``summary.md`` (and ``merged.csv``, ``cost.csv``).

    A scenario's run (run.json names one) gets its study tables and figures too: ``scenario`` is the
    `dbsurge.scenarios.report.Report` the scenario just wrote into summary.md; without it (``dbsurge report``)
    the report is built again from the raw files and its CSVs and summary.md section rewritten with it.
    """
    data = load_report_data(run_dir)
    part = scenario_part(data.run.path, data.run.meta, scenario, write=scenario is None)
    images, timeline = render_images(data)
    path = data.run.path
    if timeline is not None:
        (path / TIMELINE_PNG).write_bytes(timeline)
    else:  # nothing to draw: no picture rather than an empty one (or a stale one from an earlier report)
        (path / TIMELINE_PNG).unlink(missing_ok=True)
    summary = path / SUMMARY_MD
    kept = ""
    if summary.exists():  # a scenario's own table (`dbsurge scenario`) follows its marker: keep it
        old = summary.read_text()
        if SCENARIO_MARK in old:
            kept = "\n" + old[old.index(SCENARIO_MARK):]
    write_text(summary, render_markdown(data, part) + kept)
    out = path / REPORT_HTML
    write_text(out, render_html(data, images, part))
    return out

