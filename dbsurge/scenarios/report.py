"""What a scenario prints and writes at its end: its `Report` (tables, then sentences), and progress lines.

A `Report` is built by a scenario's pure ``report(run_dir)`` from the run directory's files.
`show_report` is the one place it leaves the process: each table's CSV (raw numbers) through
`RunDirectory.write_csv`, the report as a section of summary.md after `SECTION_MARK` (replacing an
earlier one, so ``--from`` and ``dbsurge report`` keep one), report.html with the same tables and the
scenario's figures (`dbsurge.collectors.report.build_report`), then the text on stdout, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dbsurge.measure.tables import markdown, render
from dbsurge.rundir import RunDirectory
from dbsurge.rundir.schema import REPORT_HTML, SUMMARY_MD
from dbsurge.rundir.writer import write_text
from dbsurge.scenarios.files import csv_cell

SECTION_MARK = "<!-- dbsurge scenario table -->"


@dataclass
class Table:
    """One printed table and its CSV form (raw numbers, no formatting)."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    csv_name: str
    csv_columns: list[str]
    csv_rows: list[dict]


@dataclass
class Report:
    """What a scenario prints and writes at the end: tables, then plain sentences."""

    heading: str
    tables: list[Table]
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        parts = [self.heading]
        parts += [render(t.headers, t.rows, t.title) for t in self.tables]
        if self.notes:
            parts.append("\n".join(self.notes))
        return "\n\n".join(parts)

    def markdown(self) -> str:
        out = [SECTION_MARK, f"## {self.heading}", ""]
        for t in self.tables:
            out += [f"### {t.title}", "", markdown(t.headers, t.rows), ""]
        out += [f"- {n}" for n in self.notes]
        return "\n".join(out) + "\n"


def write_report(run_dir: Path, report: Report, *, title: str) -> None:
    """Write each table's CSV and the report into summary.md (replacing an earlier scenario section)."""
    run_dir = Path(run_dir)
    rd = RunDirectory(run_dir.parent, run_dir.name)
    try:
        for t in report.tables:
            rd.write_csv(t.csv_name, t.csv_columns, [{k: csv_cell(v) for k, v in row.items()} for row in t.csv_rows])
    finally:
        rd.close()
    path = run_dir / SUMMARY_MD
    existing = path.read_text() if path.is_file() else f"# {title}\n\n"
    head = existing.split(SECTION_MARK)[0].rstrip() + "\n\n"
    write_text(path, head + report.markdown())


def show_report(run_dir: Path, report: Report, scenario: str, *, title: str | None = None) -> Report:
    """Write the report into the run directory (`write_report`, report.html) and print it with the directory's path."""
    run_dir = Path(run_dir)
    write_report(run_dir, report, title=title or f"dbsurge scenario {scenario}: {run_dir.name}")
    write_html(run_dir, report)
    print("\n" + report.text() + f"\n\nresults: {run_dir}", flush=True)
    return report


def write_html(run_dir: Path, report: Report) -> None:
    """report.html with this report's tables (the ones summary.md just got) and the scenario's figures.

    The measurements are on disk whatever happens here: a page that cannot be drawn is one line saying how to
    try again, not a failed scenario.
    """
    from dbsurge.collectors.report import build_report

    try:
        build_report(run_dir, scenario=report)
    except Exception as e:  # noqa: BLE001 - the tables are printed and written; only the page is missing
        say(f"{REPORT_HTML} not written ({type(e).__name__}: {e}); `dbsurge report {run_dir}` tries again")


def say(message: str) -> None:
    """A progress line on stdout, flushed at once (tests and users follow the run by it)."""
    print(f"dbsurge: {message}", flush=True)
