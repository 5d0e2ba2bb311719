"""Running dbsurge and Locust as a user would, from the tests: real processes, real servers."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def dbsurge(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``dbsurge ARGS`` in a child process; returns the completed process (text output)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "dbsurge.commands.cli", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout)


def locust(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "locust", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout)


def only_run_dir(results: Path) -> Path:
    dirs = [d for d in results.iterdir() if d.is_dir()]
    assert len(dirs) == 1, f"expected one run directory in {results}, found {dirs}"
    return dirs[0]


def run_files(results: Path, name: str) -> list[Path]:
    """``results/*/NAME`` while a run may be starting: the checks before a run make the results
    directory to probe that it is writable and remove it again, so it can vanish between the
    glob's look and its listing; that is "not there yet", not an error."""
    try:
        return sorted(Path(results).glob(f"*/{name}"))
    except FileNotFoundError:
        return []


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"



class _ReportPage(HTMLParser):
    """The scenario section of a report.html: each table under its title, the figures' ids and the links."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, tuple[list[str], list[list[str]]]] = {}
        self.figures: list[str] = []
        self.links: list[str] = []
        self.section = False
        self._title = ""
        self._text: list[str] | None = None
        self._row: list[str] | None = None
        self._head = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id") == "scenario":
            self.section = True
        if not self.section:
            return
        if tag in ("h3", "th", "td"):
            self._text = []
        elif tag == "table":
            self.tables[self._title] = ([], [])
        elif tag == "thead":
            self._head = True
        elif tag == "tr":
            self._row = []
        elif tag == "figure" and (a.get("id") or "").startswith("plot-"):
            self.figures.append(a["id"][len("plot-"):])
        elif tag == "img":
            assert (a.get("src") or "").startswith("data:image/png;base64,"), "a figure that is not an embedded PNG"
        elif tag == "a":
            self.links.append(a.get("href") or "")

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.section = False
        elif tag == "h3" and self._text is not None:
            self._title, self._text = "".join(self._text), None
        elif tag in ("th", "td") and self._text is not None and self._row is not None:
            self._row.append("".join(self._text))
            self._text = None
        elif tag == "thead":
            self._head = False
        elif tag == "tr" and self._row is not None:
            headers, rows = self.tables[self._title]
            (headers.extend if self._head else rows.append)(self._row)
            self._row = None


def report_page(run: Path) -> _ReportPage:
    """The scenario section of ``run``/report.html, parsed (tables as the page shows them, figure ids, links)."""
    page = _ReportPage()
    page.feed((Path(run) / "report.html").read_text())
    return page


def scenario_report(run: Path, cwd: Path) -> _ReportPage:
    """report.html of a scenario's run, checked: its tables and at least one figure, and ``dbsurge report RUN``
    builds the same page again from the run directory's files (after report.html is removed)."""
    first = report_page(run)
    assert first.tables and first.figures, (list(first.tables), first.figures)
    (Path(run) / "report.html").unlink()
    proc = dbsurge("report", str(run), cwd=cwd, timeout=120)
    assert proc.returncode == 0, explain(proc)
    again = report_page(run)
    assert again.tables == first.tables and again.figures == first.figures and again.links == first.links
    return again


#: How far a figure shown with 3 (1) decimals may be from the value it shows: half a unit of the last decimal, and
#: a hair more, since 0.2585 shown as 0.259 is 0.0005 away only up to the float's last bit.
SHOWN_3 = 5e-4 * (1 + 1e-6)
SHOWN_1 = 5e-2 * (1 + 1e-6)


def cell(text: str) -> float:
    """A number of a report table's cell (``1,234.5 docs/s``, ``0.812``)."""
    return float(text.replace(",", "").split()[0])


def strict_locust_parser():
    """Locust's parser with dbsurge's options and strict numbers, as `dbsurge run` and the web forms read them,
    built without gevent's monkey-patching of this process.

    LOCUST_SKIP_MONKEY_PATCH counts only at Locust's first import; left set, every Locust this process starts
    later (the other tests' masters and workers inherit it) would run unpatched and never hear its peers."""
    set_here = "LOCUST_SKIP_MONKEY_PATCH" not in os.environ
    os.environ.setdefault("LOCUST_SKIP_MONKEY_PATCH", "1")
    try:
        from locust.argument_parser import get_parser
    finally:
        if set_here:
            os.environ.pop("LOCUST_SKIP_MONKEY_PATCH", None)
    from dbsurge.config.option_types import strict_numbers
    from dbsurge.config.options import add_options

    parser = get_parser()
    add_options(parser)
    strict_numbers(parser)
    return parser
