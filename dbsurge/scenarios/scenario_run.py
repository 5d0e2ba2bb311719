"""What every scenario shares: its options, its target, its run directory and its printed tables.

A scenario's defaults come in two sets: the study's (what a run against a cloud endpoint uses)
and ``--quick`` (scaled down so it runs in seconds on the embedded targets). An option given on
the command line always wins; `apply_defaults` fills in the rest.

`ScenarioRun` is the edge where I/O happens: it starts or resolves the target (an embedded
server of its own when the scenario must restart it), writes ``run.json`` (secrets removed by
`RunDirectory.write_meta`), appends raw rows as they are measured, and at the end writes the
table as ``<scenario>.csv`` and in ``summary.md`` and prints it. Tables are `Report` values built
by each scenario's pure functions from the run directory's files, so ``--from`` prints them again.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbsurge.errors import UserError
from dbsurge.options import parse_key_values  # noqa: F401  (the scenarios' import)
from dbsurge.rundir import RunDirectory, new_run_id, utc_iso
from dbsurge.stage_plan import parse_duration
from dbsurge.tables import markdown, render

EMBEDDED_KINDS = {"embedded-postgres": "postgres", "embedded-mongo": "mongo"}
SECTION_MARK = "<!-- dbsurge scenario table -->"


# -- options -------------------------------------------------------------------------------------


class ScenarioParser(argparse.ArgumentParser):
    """argparse that raises `UserError` (one line, exit 2) instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


def scenario_parser(name: str, description: str, *, cloudwatch: bool = False) -> ScenarioParser:
    """A parser with the options every scenario takes."""
    p = ScenarioParser(prog=f"dbsurge scenario {name}", description=description)
    p.add_argument("--target", default=os.environ.get("DBSURGE_TARGET"),
                   help="database URI, or embedded-postgres / embedded-mongo (default: $DBSURGE_TARGET)")
    p.add_argument("--target-option", action="append", default=None, metavar="KEY=VALUE",
                   help="binding option, e.g. connect_timeout=15, isolation=serializable, w=1 (repeatable)")
    p.add_argument("--workload-option", action="append", default=None, metavar="KEY=VALUE",
                   help="workload option, e.g. documents=2000000 (repeatable)")
    p.add_argument("--quick", action="store_true",
                   help="scaled-down defaults that run in seconds on the embedded targets")
    p.add_argument("--seed", type=int, default=42, help="seed of the random choices (default 42)")
    p.add_argument("--results-dir", default="results", help="where run directories go (default: results)")
    p.add_argument("--run-id", default=None, help="name of the run directory (default: UTC time, scenario, suffix)")
    p.add_argument("--from", dest="from_run", default=None, metavar="RUN_DIR",
                   help="print the table of a finished run of this scenario again (nothing is run)")
    if cloudwatch:
        p.add_argument("--cloudwatch", action="append", default=None, metavar="PRESET:ID",
                       help="CloudWatch capacity beside the table, e.g. docdb:my-cluster, aurora:a2 (repeatable)")
        p.add_argument("--cloudwatch-region", default=None, help="AWS region for --cloudwatch (default: the AWS "
                                                                 "settings')")
        p.add_argument("--cloudwatch-endpoint-url", default=None, help="CloudWatch endpoint (default: AWS's)")
    return p


def apply_defaults(args: argparse.Namespace, study: dict[str, Any], quick: dict[str, Any]) -> dict[str, Any]:
    """Fill every option left unset (None) with the ``--quick`` or the study's default; returns them all."""
    chosen = {}
    for key, default in study.items():
        value = getattr(args, key, None)
        if value is None:
            value = quick.get(key, default) if args.quick else default
            setattr(args, key, value)
        chosen[key] = value
    return chosen


def seconds(text: str | float | None, what: str) -> float:
    """A duration option (``20m``, ``30s``, ``1.5``) in seconds; `UserError` naming the option."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return parse_duration(str(text))
    except UserError as e:
        raise UserError(f"{what}: {e}") from None


def positive(value: float, what: str) -> float:
    if not value > 0:
        raise UserError(f"{what} must be positive (got {value:g})")
    return value


# -- tables --------------------------------------------------------------------------------------


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
    for t in report.tables:
        _write_csv(run_dir / t.csv_name, t.csv_columns, t.csv_rows)
    path = run_dir / "summary.md"
    existing = path.read_text() if path.is_file() else f"# {title}\n\n"
    head = existing.split(SECTION_MARK)[0].rstrip() + "\n\n"
    path.write_text(head + report.markdown())


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
    os.replace(tmp, path)


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return round(v, 6)
    return v


def read_rows(run_dir: Path, name: str) -> list[dict]:
    """A CSV of the run directory as dicts (``[]`` when it does not exist)."""
    return list(iter_rows(run_dir, name))


def iter_rows(run_dir: Path, name: str) -> Iterator[dict]:
    """The rows of a CSV of the run directory, one at a time (nothing when it does not exist)."""
    path = Path(run_dir) / name
    if not path.is_file():
        return
    with open(path, newline="") as f:
        yield from csv.DictReader(f)


def read_meta(run_dir: Path) -> dict:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no run.json)")
    return json.loads(path.read_text())


def floats(rows: Iterable[dict], column: str, *, ok_only: bool = True) -> list[float]:
    """The non-empty values of a column as floats (rows with ``ok`` false left out)."""
    out = []
    for r in rows:
        if ok_only and str(r.get("ok", "1")).lower() in ("0", "false"):
            continue
        v = r.get(column)
        if v not in (None, ""):
            out.append(float(v))
    return out


def opt_float(v: Any) -> float | None:
    return None if v in (None, "") else float(v)


# -- the run -------------------------------------------------------------------------------------


class ScenarioRun:
    """One run of an in-process scenario: the target, the run directory, the raw rows and the end.

    Use as a context manager; it stops an embedded server it started and closes the directory::

        with ScenarioRun("idle", args, settings) as run:
            target = run.connect_target(options)
            run.begin(workload="orders", workload_options=...)
            run.append_rows("probes.csv", COLUMNS, rows)
            run.finish(report)
    """

    def __init__(self, scenario: str, args: argparse.Namespace, settings: dict[str, Any]) -> None:
        self.scenario = scenario
        self.args = args
        self.settings = settings
        self.handle: Any = None
        self.own_server = False
        self.uri: str | None = None
        self.target: Any = None
        self.rundir: RunDirectory | None = None
        self.started_s: float | None = None
        self._raw_files: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> ScenarioRun:  # noqa: PYI034 - not subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the target --------------------------------------------------------------------------------

    def connect_target(self, options: dict[str, str], *, own_server: bool = False,
                       server_settings: dict[str, str] | None = None) -> Any:
        """Resolve the target, validate its options and check it answers; returns the `Target`.

        ``own_server``: for ``embedded-postgres`` / ``embedded-mongo``, start a server of our own
        (in a temporary directory, removed at the end) so that it can be restarted; its settings
        (``shared_buffers``, ``cache_size``) come from ``server_settings``.
        """
        from dbsurge.targets import open_target

        name = self.args.target
        if not name:
            raise UserError("no target: pass --target URI (or embedded-postgres / embedded-mongo), or set "
                            "DBSURGE_TARGET")
        kind = EMBEDDED_KINDS.get(name.strip().lower())
        if kind is not None and own_server:
            from dbsurge.scenarios.cold_start import start_own_embedded

            self.handle = start_own_embedded(kind, server_settings or {})
            self.own_server = True
            self.uri = self.handle.uri
        else:
            from dbsurge.embedded import resolve_embedded

            self.uri, self.handle = resolve_embedded(name)
        self.target = open_target(self.uri, options)
        self.target.check()
        return self.target

    def reopen_target(self, options: dict[str, str]) -> Any:
        """The same target with other binding options (no network)."""
        from dbsurge.targets import open_target

        return open_target(self.uri, options)

    # -- the run directory ---------------------------------------------------------------------------

    def begin(self, *, workload: str | None, workload_options: dict[str, Any], **fields: Any) -> RunDirectory:
        """Create ``results/<run-id>/`` and write run.json's first version."""
        run_id = self.args.run_id or new_run_id(self.scenario)
        self.rundir = RunDirectory(self.args.results_dir, run_id)
        self.started_s = time.time()
        target = self.target.describe() if self.target is not None else None
        self.rundir.write_meta(
            run_id=run_id, scenario=self.scenario, started_utc=utc_iso(self.started_s), ended_utc=None,
            command=sys.argv,
            target=target, target_display=self.target.display if self.target is not None else None,
            embedded=self._embedded_meta(), workload=workload, workload_options=workload_options,
            options=_options_meta(self.args), settings=_jsonable(self.settings), plan=None,
            cloudwatch=list(getattr(self.args, "cloudwatch", None) or []), versions=versions(), **fields,
        )
        self.rundir.event("run_start", at=self.started_s, scenario=self.scenario)
        return self.rundir

    def _embedded_meta(self) -> dict | None:
        if self.handle is None:
            return None
        meta = {"kind": self.handle.kind, "own_server": self.own_server}
        for attr in ("shared_buffers", "cache_size"):
            if hasattr(self.handle, attr):
                meta[attr] = getattr(self.handle, attr)
        return meta

    @property
    def path(self) -> Path:
        assert self.rundir is not None
        return self.rundir.path

    def event(self, kind: str, **fields: Any) -> None:
        if self.rundir is not None:
            self.rundir.event(kind, **fields)

    def meta(self, **fields: Any) -> None:
        """Add fields to run.json (rewritten atomically)."""
        assert self.rundir is not None
        self.rundir.write_meta(**fields)

    def append_rows(self, name: str, columns: list[str], rows: Iterable[dict]) -> None:
        """Append raw rows to a CSV of the run directory (header first), flushed at once; thread-safe."""
        with self._lock:
            self._append_rows(name, columns, rows)

    def _append_rows(self, name: str, columns: list[str], rows: Iterable[dict]) -> None:
        entry = self._raw_files.get(name)
        if entry is None:
            f = open(self.path / name, "a", newline="")  # noqa: SIM115 - kept open while rows arrive; closed in finish
            writer = csv.DictWriter(f, columns, extrasaction="ignore")
            if f.tell() == 0:
                writer.writeheader()
            entry = self._raw_files[name] = (f, writer)
        f, writer = entry
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
        f.flush()

    def finish(self, report_of_run: Any, *, results: dict | None = None) -> Report:
        """Close the raw files, mark the end in run.json, then build, write and print the report."""
        for f, _ in self._raw_files.values():
            f.close()
        self._raw_files.clear()
        ended = time.time()
        self.meta(ended_utc=utc_iso(ended), duration_s=round(ended - (self.started_s or ended), 3))
        self.event("run_end", at=ended)
        report = report_of_run(self.path)
        self.meta(results=_jsonable({**(results or {}), "table": report.tables[0].csv_rows if report.tables else []}))
        write_report(self.path, report, title=f"dbsurge scenario {self.scenario}: {self.path.name}")
        print("\n" + report.text() + f"\n\nresults: {self.path}", flush=True)
        return report

    def close(self) -> None:
        for f, _ in self._raw_files.values():
            f.close()
        self._raw_files.clear()
        if self.rundir is not None:
            self.rundir.close()
        if self.handle is not None:
            self.handle.stop()
            self.handle = None


def ensure_loaded(workload: Any) -> float:
    """Load the workload's data set if it is not there; returns the seconds it took (0 if present)."""
    if workload.has_data():
        return 0.0
    say(f"loading the {workload.name} data set ({_size_of(workload)}) into {workload.target.display}")
    t0 = time.monotonic()
    workload.load(progress=True)
    return round(time.monotonic() - t0, 3)


def _size_of(workload: Any) -> str:
    opts = workload.options
    for key in ("documents", "recordcount", "products"):
        if key in opts:
            return f"{key}={opts[key]:,}"
    return "default size"


def say(message: str) -> None:
    """A progress line on stdout, flushed at once (tests and users follow the run by it)."""
    print(f"dbsurge: {message}", flush=True)


def versions() -> dict:
    out = {"python": platform.python_version()}
    try:
        from dbsurge import __version__

        out["dbsurge"] = __version__
    except ImportError:
        pass
    for module, attr in (("psycopg", "__version__"), ("pymongo", "version")):
        mod = sys.modules.get(module)
        if mod is not None:
            out[module] = getattr(mod, attr, "")
    return out


def _options_meta(args: argparse.Namespace) -> dict:
    """The options for run.json; key=value lists become dicts, so a secret-named key is redacted."""
    out = {k: v for k, v in vars(args).items() if k not in ("target_option", "workload_option")}
    out["target_options"] = parse_key_values(args.target_option, "--target-option")
    out["workload_options"] = parse_key_values(args.workload_option, "--workload-option")
    return _jsonable(out)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def print_from(run_dir: str, report_of_run: Any, scenario: str) -> int:
    """``--from RUN_DIR``: build the report from the files and print it (and rewrite the CSV and summary)."""
    path = Path(run_dir)
    meta = read_meta(path)
    if meta.get("scenario") not in (None, scenario):
        raise UserError(f"{path} is a run of scenario {meta.get('scenario')}, not {scenario}")
    report = report_of_run(path)
    write_report(path, report, title=f"dbsurge scenario {scenario}: {path.name}")
    print(report.text() + f"\n\nresults: {path}", flush=True)
    return 0
