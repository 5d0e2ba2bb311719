"""The one writer of a run directory, ``results/<run-id>/``: written as the run goes, finalised at the end.

Every file is appended and flushed as data arrives, so a crash or a kill loses at most the last
interval: ``events.jsonl`` and ``timeline.csv`` gain a line per event or second, the interval
histogram log a line per second and operation, and ``run.json`` is rewritten atomically when
something about the run changes (its end time, a rate change). The file names and columns are
`dbsurge.rundir.schema`'s; see docs/architecture.md.

Three rules hold for every file written here, by `RunDirectory` during a run and by the functions
below after it (the collectors, ``dbsurge cost``, the parent of a run that died):

- run.json and events.jsonl never hold a secret: `redact_obj` is applied to everything they get.
- A file rewritten whole goes through a temporary file and ``os.replace`` (`atomic_path`); a write
  that fails removes its temporary file, so a full disk leaves no ``*.tmp`` behind.
- A run whose process died is finalised here (`finalise`): run.json ended and marked stopped, the
  end in events.jsonl, a summary from what was measured, no temporary file left.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dbsurge.base.errors import EXIT_INCOMPLETE
from dbsurge.base.json_input import load_json
from dbsurge.base.redact import redact_uri
from dbsurge.base.utc import utc_iso
from dbsurge.rundir.hlog import header, interval_line
from dbsurge.rundir.schema import (
    EVENTS,
    INTERVALS,
    METRICS,
    REPORT_HTML,
    RESERVE_NAME,
    RUN_JSON,
    RUN_SCHEMA,
    STAGE_COLUMNS,
    STAGES,
    SUMMARY_CSV,
    SUMMARY_MD,
    TEMP_SUFFIX,
    TEMP_SUFFIXES,
    TIMELINE,
    TIMELINE_COLUMNS,
    TIMELINE_OPEN,
    WORKER_COLUMNS,
    WORKERS,
)

_SECRET_KEYS = {"password", "passwd", "token", "secret", "auth_token", "aws_secret_access_key", "aws_session_token",
                "web_auth", "join_token"}


def redact_obj(obj):
    """A copy of a JSON-like object with secrets removed: secret-named keys and passwords in URIs."""
    if isinstance(obj, dict):
        return {k: ("***" if str(k).lower() in _SECRET_KEYS and v else redact_obj(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str) and "://" in obj:
        return redact_uri(obj)
    return obj


def jsonable(obj: Any) -> Any:
    """``obj`` as what run.json can hold: dicts (their keys as text), lists (tuples too), text, numbers, booleans and
    None as they are, anything else as its text. The one conversion for an engine run's options and a scenario's
    options, settings and results: a value nobody converted would otherwise be dropped by one and kept by the other."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def _json_text(meta: dict) -> str:
    """run.json's text: secrets removed, indented, a line break at the end."""
    return json.dumps(redact_obj(meta), indent=2, default=str) + "\n"


def _event_line(row: dict) -> str:
    return json.dumps(redact_obj(row), default=str) + "\n"


# -- whole files, atomically -------------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; it replaces ``path`` when the block ends, and is removed when
    the block fails (a full disk leaves the old file, never an empty one, and no temporary file)."""
    path = Path(path)
    tmp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``path`` whole, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_csv(path: str | Path, columns: list[str], rows: list[dict]) -> Path:
    """Write a CSV whole, atomically: a header of ``columns``, then ``rows`` (keys not in ``columns`` left out)."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return Path(path)


class CsvAppender:
    """A CSV of the run directory that grows as rows arrive (a sampler's, a scenario's raw rows): opened for
    appending at the first `write`, its header written when the file is new, flushed after every write so a
    kill loses nothing written, kept open until `close`. Keys not in ``columns`` are left out."""

    def __init__(self, path: str | Path, columns: list[str]):
        self.path = Path(path)
        self.columns = columns
        self._file = None
        self._writer = None

    def write(self, rows: Iterable[dict]) -> None:
        """Append ``rows`` (none: only open the file and write its header)."""
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", newline="")  # noqa: SIM115 - kept open while rows arrive; see close
            self._writer = csv.DictWriter(self._file, self.columns, extrasaction="ignore")
            if self._file.tell() == 0:
                self._writer.writeheader()
        self._writer.writerows(rows)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = self._writer = None


# -- run.json and events.jsonl after the run -------------------------------------------------------------------


def update_run_json(run_dir: str | Path, **fields) -> None:
    """Rewrite run.json atomically with some top-level fields changed (secrets removed, as during the run)."""
    path = Path(run_dir) / RUN_JSON
    meta = load_json(path.read_text())
    meta.update(fields)
    write_text(path, _json_text(meta))


def append_event(run_dir: str | Path, row: dict) -> None:
    """Append one event (a dict with its ``time_utc`` and ``kind``) to events.jsonl, secrets removed."""
    with open(Path(run_dir) / EVENTS, "a") as f:
        f.write(_event_line(row))


def metrics_path(run_dir: str | Path, name: str) -> Path:
    """A collector's file under ``metrics/``, its folder made."""
    folder = Path(run_dir) / METRICS
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def new_run_id(label: str = "run") -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{label}-{secrets.token_hex(2)}"


#: Space kept back in the run directory (`RunDirectory.keep_reserve`) for the final files: a results
#: disk that fills up mid-run still gets summary.csv, summary.md and a finalised run.json.
RESERVE_BYTES = 512 * 1024


class RunDirectory:
    """Files of one run. Create with the results root and a run id; write through its methods.

    Every file rewritten whole goes through a temporary file and ``os.replace``; a write that fails
    removes its temporary file, so a full disk leaves no ``*.tmp`` behind.
    """

    def __init__(self, root: str | Path, run_id: str):
        self.run_id = run_id
        self.path = Path(root) / run_id
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / METRICS).mkdir(exist_ok=True)
        self._events = open(self.path / EVENTS, "a", buffering=1)  # noqa: SIM115 - open for the run; see close
        self._timeline_file = None
        self._timeline = None
        self._hlog = None
        self.meta: dict = {}

    # -- run.json ---------------------------------------------------------------------------------

    def write_meta(self, **fields) -> None:
        """Update run.json (secrets removed) atomically; its `RUN_SCHEMA` first, for every reader."""
        self.meta = {"schema": self.meta.get("schema", RUN_SCHEMA), **self.meta, **fields}
        write_text(self.path / RUN_JSON, _json_text(self.meta))

    # -- the space kept for the final files ---------------------------------------------------------

    def keep_reserve(self, size: int = RESERVE_BYTES) -> None:
        """Keep ``size`` bytes of the disk for the end (best effort: a disk already full keeps none)."""
        try:
            with open(self.path / RESERVE_NAME, "wb") as f:
                f.write(b"\0" * size)
        except OSError:
            (self.path / RESERVE_NAME).unlink(missing_ok=True)

    def release_reserve(self) -> None:
        """Give the reserved space back (nothing to do on a directory that cannot be written any more)."""
        with contextlib.suppress(OSError):
            (self.path / RESERVE_NAME).unlink(missing_ok=True)

    # -- events.jsonl -------------------------------------------------------------------------------

    def event(self, kind: str, at: float | None = None, **fields) -> None:
        row = {"time_utc": utc_iso(at if at is not None else time.time()), "kind": kind, **fields}
        self._events.write(_event_line(row))

    # -- timeline.csv and the interval histogram log --------------------------------------------------

    def timeline_rows(self, rows: list[dict]) -> None:
        if self._timeline is None:
            # open for the run; see close
            self._timeline_file = open(self.path / TIMELINE, "a", newline="", buffering=1)  # noqa: SIM115
            self._timeline = csv.DictWriter(self._timeline_file, TIMELINE_COLUMNS, extrasaction="ignore")
            if self._timeline_file.tell() == 0:
                self._timeline.writeheader()
        self._timeline.writerows(rows)
        self._timeline_file.flush()

    def write_flush(self, flush, pause=None) -> None:
        """Write what `Aggregator.flush` gave back: timeline rows, interval-log lines, the open seconds, events.

        ``pause()``, when given, is called between the files (a local run lets its pacer run there: the
        four files of one second took 0.75-1.1 ms in one piece at 16,000 TPS)."""
        pause = pause or (lambda: None)
        for kind, message, worker in flush.failures:
            self.event("failure", failure_kind=kind, message=message, worker=worker)
        if flush.rows:
            self.timeline_rows(flush.rows)
            pause()
        for op, sec, max_ms, encoded in flush.intervals:
            self.hlog_interval(op, sec, 1.0, max_ms, encoded, flush.base_s or sec)
        if flush.worker_rows:
            pause()
            self._append_csv(WORKERS, WORKER_COLUMNS, flush.worker_rows)
        for worker, rec in flush.logs:
            self.event("worker_log", worker=worker, **rec)
        pause()
        open_path = self.path / TIMELINE_OPEN
        if flush.open_rows is None:
            open_path.unlink(missing_ok=True)
        else:
            self.write_csv(TIMELINE_OPEN, TIMELINE_COLUMNS, flush.open_rows)

    def _append_csv(self, name: str, columns: list[str], rows: list[dict]) -> None:
        path = self.path / name
        new = not path.exists()
        with open(path, "a", newline="") as f:
            w = csv.DictWriter(f, columns, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerows(rows)

    def write_tables(self, stages: list[dict], summary: list[dict]) -> None:
        self.write_csv(STAGES, STAGE_COLUMNS, stages)
        self.write_csv(SUMMARY_CSV, STAGE_COLUMNS, summary)

    def hlog_interval(self, tag: str, start_s: float, length_s: float, max_ms: float, encoded: bytes | str,
                      base_s: float) -> None:
        """One line of the HdrHistogram interval log (values in microseconds, max in milliseconds).

        Its lines are `dbsurge.rundir.hlog`'s, which the checker and the windows parse. Written by dbsurge rather
        than with `hdrh.log.HistogramLogWriter`: that writer has no ``Tag=``
        (one tag per operation is how this log keeps operations apart, log format 1.3), and its
        ``output_start_time`` fails (it formats milliseconds as seconds with a method datetime lacks).
        """
        if self._hlog is None:
            self._hlog = open(self.path / INTERVALS, "a", buffering=1)  # noqa: SIM115 - open for the run; see close
            if self._hlog.tell() == 0:
                self._hlog.write(header(base_s))
        self._hlog.write(interval_line(tag, start_s - base_s, length_s, max_ms, encoded))

    def write_csv(self, name: str, columns: list[str], rows: list[dict]) -> Path:
        """Write the CSV ``name`` whole, atomically."""
        return write_csv(self.path / name, columns, rows)

    def write_text(self, name: str, text: str) -> Path:
        """Write ``name`` whole, atomically (a full disk leaves the old file, never an empty one)."""
        return write_text(self.path / name, text)

    def close(self) -> None:
        for f in (self._events, self._timeline_file, self._hlog):
            if f is not None and not f.closed:
                f.close()


# -- finalising a run whose process died ---------------------------------------------------------------------


def run_dir_finalised(path: Path) -> bool:
    """Whether the run's own process ended it (run.json has its end and exit code)."""
    try:
        meta = load_json((path / RUN_JSON).read_text())
    except (OSError, ValueError):
        return not path.exists()
    return isinstance(meta, dict) and meta.get("exit_code") is not None and bool(meta.get("ended_utc"))


def remove_temp_files(path: Path) -> bool:
    """Remove the run directory's temporary files; False if some could not be removed (a read-only directory)."""
    removed = True
    try:
        for f in path.glob("*"):
            if f.name.endswith(TEMP_SUFFIXES) and f.is_file():
                try:
                    f.unlink(missing_ok=True)
                except OSError:
                    removed = False
    except OSError:
        return False
    return removed


def _last_second(path: Path) -> tuple[str | None, float | None]:
    """The last second with data (timeline.open.csv, else timeline.csv) as (UTC text, epoch seconds)."""
    for name in (TIMELINE_OPEN, TIMELINE):
        try:
            lines = (path / name).read_text().splitlines()
        except OSError:
            continue
        for line in reversed(lines[1:]):
            stamp = line.split(",", 1)[0]
            try:
                return stamp, datetime.fromisoformat(stamp).timestamp()
            except ValueError:
                continue
    return None, None


def finalise(path: Path, why: str, head: str = "KILLED", *,
             build_report: Callable[[Path], object] | None = None) -> str:
    """End a run directory whose process died: run.json, summary.md from what was measured, no temp files.

    The ledger cannot be closed here (the workers' last reports died with the master), so the run
    is marked stopped (``stop_reason``, ``complete: false``, exit 3) and the summary is built by
    ``build_report`` from the timeline, as ``dbsurge report`` does; without it (a hurried ending), or when
    it fails, summary.md holds the verdict alone. Returns the verdict line.
    """
    remove_temp_files(path)
    try:
        meta = load_json((path / RUN_JSON).read_text())
        if not isinstance(meta, dict):
            meta = {}
        meta = {"schema": meta.get("schema", RUN_SCHEMA), **meta}
    except (OSError, ValueError):
        meta = {}
    last_utc, last_s = _last_second(path)
    started = meta.get("started_utc")
    at = ""
    if started and last_s is not None:
        t0 = datetime.fromisoformat(str(started)).timestamp()
        at = f" at t = {max(0.0, last_s + 1 - t0):.1f} s"
    verdict = (f"{head}: {why}{at}; its ledger was not closed: {SUMMARY_MD} holds what was measured until then "
               f"(exit {EXIT_INCOMPLETE})")
    meta.update(ended_utc=last_utc or utc_iso(time.time()), complete=False, exit_code=EXIT_INCOMPLETE,
                stop_reason=why, verdict=verdict)
    try:
        write_text(path / RUN_JSON, _json_text(meta))
        append_event(path, {"time_utc": utc_iso(time.time()), "kind": "run_end", "exit_code": EXIT_INCOMPLETE,
                            "stop_reason": why})
    except OSError as exc:
        # a directory that cannot be written (full, read-only, permissions taken away): say so, keep the verdict
        verdict += f"; {RUN_JSON} could not be finalised in {path} ({exc.strerror or type(exc).__name__})"
        remove_temp_files(path)
        return verdict
    _summary_from_what_was_measured(path, verdict, build_report)
    remove_temp_files(path)
    return verdict


def _summary_from_what_was_measured(path: Path, verdict: str, build_report: Callable[[Path], object] | None) -> None:
    if build_report is None:  # a hurried ending: the verdict alone; `dbsurge report` builds the rest from the files
        with contextlib.suppress(OSError):
            (path / SUMMARY_MD).write_text(f"# dbsurge run {path.name}\n\n**{verdict}**\n\n"
                                           f"`dbsurge report {path}` builds the tables and {REPORT_HTML}.\n")
        return
    try:
        build_report(path)
        return
    except Exception:  # noqa: BLE001, S110 - a damaged timeline: the verdict alone, rather than no summary at all
        pass
    try:
        (path / SUMMARY_MD).write_text(f"# dbsurge run {path.name}\n\n**{verdict}**\n")
    except OSError:
        pass
