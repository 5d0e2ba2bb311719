"""One run of an in-process scenario: its target, its run directory, its raw rows and its end.

`ScenarioRun` is the edge where an in-process scenario's I/O happens: it starts or resolves the
target (an embedded server of its own when the scenario must restart it), writes ``run.json``
(secrets removed by `RunDirectory.write_meta`), appends raw rows as they are measured, and at the
end shows the report (`dbsurge.scenarios.report.show_report`). `dbsurge.scenarios.base.Scenario`
opens and closes it; an experiment's phases only call it.

The other pieces of a scenario live beside it: its command line in ``arguments.py``, reading a run
directory in ``files.py``, the report in ``report.py``. The names below are re-exported from
here for the modules that imported them from this one before the split.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dbsurge.base.versions import versions
from dbsurge.embedded.servers import resolve_embedded
from dbsurge.rundir import RunDirectory, new_run_id, utc_iso
from dbsurge.rundir.writer import CsvAppender, jsonable
from dbsurge.scenarios.arguments import apply_defaults, parse_key_values, require_target
from dbsurge.scenarios.cold_start import EMBEDDED_KINDS, start_own_embedded
from dbsurge.scenarios.files import csv_cell, floats, iter_rows, opt_float, read_meta, read_rows
from dbsurge.scenarios.report import Report, say, show_report
from dbsurge.targets import open_target

__all__ = ["ScenarioRun", "apply_defaults", "ensure_loaded", "floats", "iter_rows", "opt_float", "parse_key_values",
           "read_meta", "read_rows", "say"]


#: The run directories of this process's scenarios whose load began (`ScenarioRun.begin`): a signal after that
#: point must not say "nothing was sent" (`dbsurge.commands.cli`).
BEGUN: list[Path] = []


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
        self._raw_files: dict[str, CsvAppender] = {}
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
        name = require_target(self.args)
        kind = EMBEDDED_KINDS.get(name.strip().lower())
        if kind is not None and own_server:
            self.handle = start_own_embedded(kind, server_settings or {})
            self.own_server = True
            self.uri = self.handle.uri
        else:
            self.uri, self.handle = resolve_embedded(name)
        self.target = open_target(self.uri, options)
        self.target.check()
        for warning in self.target.negotiated().get("warnings") or []:  # verification off: before any load
            say(f"WARNING: {warning}")
        return self.target

    def reopen_target(self, options: dict[str, str]) -> Any:
        """The same target with other binding options (no network), with what the first one's check negotiated."""
        target = open_target(self.uri, options)
        if self.target is not None:
            target.take_negotiation_of(self.target)
        return target

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
            negotiated=self.target.negotiated() if self.target is not None else None,
            embedded=self._embedded_meta(), workload=workload, workload_options=workload_options,
            options=_options_meta(self.args), settings=jsonable(self.settings), plan=None,
            cloudwatch=list(getattr(self.args, "cloudwatch", None) or []), versions=versions(), **fields,
        )
        self.rundir.event("run_start", at=self.started_s, scenario=self.scenario)
        BEGUN.append(self.rundir.path)
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
        out = self._raw_files.get(name)
        if out is None:  # kept open while rows arrive; closed in finish
            out = self._raw_files[name] = CsvAppender(self.path / name, columns)
        out.write({k: csv_cell(v) for k, v in row.items()} for row in rows)

    def _close_raw_files(self) -> None:
        for out in self._raw_files.values():
            out.close()
        self._raw_files.clear()

    def finish(self, report_of_run: Any, *, results: dict | None = None) -> Report:
        """Close the raw files, mark the end in run.json, then build, write and print the report."""
        self._close_raw_files()
        ended = time.time()
        self.meta(ended_utc=utc_iso(ended), duration_s=round(ended - (self.started_s or ended), 3))
        self.event("run_end", at=ended)
        report = report_of_run(self.path)
        self.meta(results=jsonable({**(results or {}), "table": report.tables[0].csv_rows if report.tables else []}))
        return show_report(self.path, report, self.scenario)

    def interrupted(self, signum: int, code: int) -> None:
        """A signal stopped the scenario after its load began: close the raw files, mark run.json interrupted."""
        import signal

        with self._lock:
            self._close_raw_files()
        ended = time.time()
        name = signal.Signals(signum).name
        self.meta(ended_utc=utc_iso(ended), duration_s=round(ended - (self.started_s or ended), 3), complete=False,
                  exit_code=code, interrupted={"signal": name, "by": name,
                                               "at_s": round(ended - (self.started_s or ended), 3)})
        self.event("run_end", at=ended, exit_code=code, interrupted=name)

    def close(self) -> None:
        self._close_raw_files()
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


def _options_meta(args: argparse.Namespace) -> dict:
    """The options for run.json; key=value lists become dicts, so a secret-named key is redacted."""
    out = {k: v for k, v in vars(args).items() if k not in ("target_option", "workload_option")}
    out["target_options"] = parse_key_values(args.target_option, "--target-option")
    out["workload_options"] = parse_key_values(args.workload_option, "--workload-option")
    return jsonable(out)
