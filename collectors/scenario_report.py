"""A scenario's part of report.html: its study tables, notes and figures, from the same `Report` as summary.md.

``dbsurge scenario NAME`` builds a `dbsurge.scenarios.report.Report` from the run directory's files; the
console prints it, summary.md holds it after its marker, and `collectors.report.build_report` puts the very
same tables into report.html (`section_html`), so the two never disagree. The figures come from
`collectors.scenario_figures` (one view per scenario kind). An in-process scenario (cache, rewarm, longscan,
idle, ycsb-load) has no engine tables, so its page is this section with the facts, capacity, cost and events;
a scenario run through the engine (a single ycsb-run, spike) has this section above the engine's; a scenario
of several engine runs (``ycsb-run --scale-workers``, ``--consistency``, capacity) links each run's report.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbsurge.collectors.scenario_figures import ScenarioView, scenario_view
from dbsurge.collectors.scenario_hooks import scenarios

from dbsurge.rundir.schema import CSV_GLOB, CSV_SUFFIX, NOT_RAW, REPORT_HTML

#: A table longer than this (the first window's every read) is folded under its title.
FOLD_ROWS = 40


@dataclass
class ScenarioPart:
    """The scenario's report (None when it could not be built, with the reason) and its view."""

    name: str
    report: Any
    view: ScenarioView
    error: str = ""


def scenario_name(meta: dict) -> str | None:
    """The scenario of a run directory's run.json, when it is one dbsurge knows."""
    name = meta.get("scenario")
    return name if isinstance(name, str) and name in scenarios().names else None


def build_scenario_report(run_dir: Path, meta: dict) -> Any:
    """The scenario's `Report` from the run directory's files (its module's pure ``report``)."""
    return scenarios().report(meta["scenario"], Path(run_dir))


def scenario_part(run_dir: Path, meta: dict, report: Any = None, *, write: bool = False) -> ScenarioPart | None:
    """The scenario's report and figures; None for a run that is no scenario's.

    ``report``: the one the scenario just printed (built again from the files when None); ``write``: also write
    its CSVs and its summary.md section (`dbsurge report` rebuilding a finished run). A report that cannot be
    built (a damaged raw file) is a sentence on the page, not a failed report.
    """
    name = scenario_name(meta)
    if name is None:
        return None
    try:
        if report is None:
            report = build_scenario_report(run_dir, meta)
            if write:
                scenarios().write_report(Path(run_dir), report, title=f"dbsurge scenario {name}: {Path(run_dir).name}")
    except Exception as e:  # noqa: BLE001 - the rest of the report still stands; the page says why this part is missing
        return ScenarioPart(name, None, ScenarioView(), f"{type(e).__name__}: {e}")
    try:
        view = scenario_view(Path(run_dir), meta, report)
    except Exception as e:  # noqa: BLE001 - the tables stand without their figures
        return ScenarioPart(name, report, ScenarioView(), f"figures not drawn ({type(e).__name__}: {e})")
    return ScenarioPart(name, report, view)


def mode_label(part: ScenarioPart, meta: dict) -> str:
    """The scenario and its mode, as the command line said it (``ycsb-run --scale-workers``)."""
    mode = meta.get("mode")
    flag = {"scale": " --scale-workers", "consistency": " --consistency"}.get(mode or "", "")
    return f"{part.name}{flag}"


def section_html(part: ScenarioPart, run_dir: Path, meta: dict, html_table: Any, figure_html: Any) -> list[str]:
    """The scenario's section: heading, each table with its title, the notes, the figures, links to its runs."""
    out = ['<section id="scenario">']
    if part.report is None:
        out += [f"<h2>Scenario {html.escape(part.name)}</h2>",
                f'<p class="note">The scenario\'s tables could not be built: {html.escape(part.error)}</p>',
                "</section>"]
        return out
    out.append(f"<h2>{html.escape(part.report.heading)}</h2>")
    for table in part.report.tables:
        slug = html.escape(table.csv_name.removesuffix(CSV_SUFFIX))
        body = html_table(table.headers, table.rows)
        if len(table.rows) > FOLD_ROWS:  # a per-read trace: folded, so the figures stay near the top
            body = f"<details><summary>All {len(table.rows):,} rows</summary>{body}</details>"
        out += [f'<h3 id="table-{slug}">{html.escape(table.title)}</h3>', body,
                f'<p class="note">Raw numbers: {html.escape(table.csv_name)}.</p>']
    if part.report.notes:
        out.append("<ul class=\"notes\">" + "".join(f"<li>{html.escape(n)}</li>" for n in part.report.notes)
                   + "</ul>")
    if part.error:
        out.append(f'<p class="note">{html.escape(part.error)}</p>')
    out += [figure_html(f.name, f.caption, f.png) for f in part.view.figures]
    links = sub_runs(run_dir, meta)
    if links:
        items = "".join(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a></li>' for label, href in links)
        out += ["<h3>Each run's own report</h3>", f"<ul>{items}</ul>"]
    out.append("</section>")
    return out


def sub_runs(run_dir: Path, meta: dict) -> list[tuple[str, str]]:
    """(label, relative link) of each engine run a scenario made under its directory that has a report.html."""
    out = []
    for r in meta.get("runs") or []:
        if not isinstance(r, dict) or not r.get("run_dir"):
            continue
        if "workers" in r:
            label = f"{r['workers']} worker" + ("" if r["workers"] == 1 else "s")
        else:
            label = f"consistency {r['consistency']}" if "consistency" in r else str(r["run_dir"])
        if (Path(run_dir) / r["run_dir"] / REPORT_HTML).is_file():
            out.append((f"{label}: {r['run_dir']}/{REPORT_HTML}", f"{r['run_dir']}/{REPORT_HTML}"))
    return out


def raw_files(run_dir: Path) -> list[str]:
    """The CSV files of a scenario's run directory (its raw data and its tables), for the page's file list."""
    return sorted(p.name for p in Path(run_dir).glob(CSV_GLOB) if p.name not in NOT_RAW)
