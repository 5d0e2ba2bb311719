"""The one reader of a run directory: its files read, and checked before a command reads them, so that a
damaged one is refused in one line.

`read_meta`, `read_rows`, `iter_rows` and `read_events` read run.json, a CSV and events.jsonl; `check_run_dir`
checks every file that is there.

``dbsurge report``, ``cost``, ``collect``, ``compare`` and ``rerun`` read what a run wrote
(`dbsurge.rundir`). A file cut short by a full disk or a kill, edited by hand or replaced by
something else must not become a report that says "Verdict: OK" with its ledger missing, nor a
traceback: `check_run_dir` reads every engine file that is there and raises one `UserError`
naming the file and what is wrong with it, before anything is written.

What is checked, for the files that exist (a missing one is the caller's business: an early crash
or a scenario writes fewer):

- ``run.json``: UTF-8 text, one JSON object, and the types of the keys dbsurge writes (times,
  counts, the plan and its stages, the results).
- ``stages.csv``, ``summary.csv``, ``timeline.csv``, ``workers.csv``, ``segments.csv``: UTF-8 text
  ending in a line break, a header of columns dbsurge writes (`dbsurge.rundir`), every row as long
  as the header, counts as whole numbers of 0 or more, other numbers finite, times in ISO 8601.
- ``events.jsonl``: every line a JSON object.
- ``intervals.hlog``: HdrHistogram log lines whose numbers are finite and whose histograms decode.

    >>> check_run_dir("/nonexistent")
    Traceback (most recent call last):
    ...
    dbsurge.base.errors.UserError: /nonexistent is not a directory: give a run directory such as results/<run-id>
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import math
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dbsurge.base.errors import UserError, clip
from dbsurge.base.json_input import load_json
from dbsurge.config.size_limits import FileRefused, read_bounded
from dbsurge.rundir.hlog import parse_line
from dbsurge.rundir.schema import (
    COUNT_COLUMNS,
    CSV_FILES,
    CSV_GLOB,
    EVENTS,
    INTERVALS,
    LEDGER,
    METRICS,
    OPTION_KEYS,
    PLAN_KEYS,
    RESULT_KEYS,
    RUN_JSON,
    RUN_KEYS,
    RUN_SCHEMA,
    STAGE_KEYS,
    STAGES,
    SUMMARY_CSV,
    TIMELINE,
    column_type,
    is_count,
    is_time,
)

#: Larger files than this are not what a run writes (a year at one line a second is ~300 MB of timeline).
MAX_FILE_BYTES = 2 * 1024**3

_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class DamagedRun(UserError):
    """A run directory's file that cannot be read as what dbsurge wrote."""


def damaged(path: Path, what: str) -> DamagedRun:
    """The one line for a damaged file of a run directory, for the readers that find the damage themselves."""
    return _damaged(path, what)


def _damaged(path: Path, what: str) -> DamagedRun:
    return DamagedRun(f"{clip(path, 160)} is damaged: {what}; nothing was read or written (restore the file, "
                      f"or run again)")


def read_meta(run_dir: str | Path) -> dict:
    """run.json of a run directory as a dict; `UserError` in one line when there is none or it cannot be read."""
    path = Path(run_dir) / RUN_JSON
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no {RUN_JSON})")
    try:
        meta = load_json(path.read_text())
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8, nested too deeply
        raise UserError(f"{path} cannot be read: {e}") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path} does not hold a JSON object")
    return meta


def has_meta(run_dir: str | Path) -> bool:
    """Whether a directory has a run.json (a run directory, or a parent of repetitions)."""
    return (Path(run_dir) / RUN_JSON).is_file()


def read_rows(run_dir: str | Path, name: str) -> list[dict]:
    """A CSV of the run directory as dicts (``[]`` when it does not exist)."""
    return list(iter_rows(run_dir, name))


def iter_rows(run_dir: str | Path, name: str) -> Iterator[dict]:
    """The rows of a CSV of the run directory, one at a time (nothing when it does not exist)."""
    path = Path(run_dir) / name
    if not path.is_file():
        return
    with open(path, newline="") as f:
        yield from csv.DictReader(f)


def read_events(run_dir: str | Path) -> list[dict]:
    """events.jsonl as a list of dicts; lines that are not JSON objects are skipped (``[]`` without the file)."""
    return list(iter_events(run_dir))


def iter_events(run_dir: str | Path, containing: str | None = None) -> Iterator[dict]:
    """The events of events.jsonl one at a time, read as a stream (a 12-hour run's file is large); with
    ``containing``, only the lines that hold that text are parsed. Lines that are not JSON objects are skipped."""
    path = Path(run_dir) / EVENTS
    if not path.is_file():
        return
    with open(path) as f:
        for line in f:
            if containing is not None and containing not in line:
                continue
            try:
                item = load_json(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                yield item


def check_run_dir(run_dir: str | Path, *, while_written: bool = False, warn_missing: bool = True) -> dict | None:
    """Check every file of `run_dir` that dbsurge writes; returns run.json's object (None without one).

    `warn_missing` (the default) warns of a finished run's missing timeline.csv or stages.csv, for the commands
    that build a report or a table from them; ``dbsurge rerun`` reads run.json alone and passes False.

    A set of repetitions (``kind: repetitions``) has its repetitions' directories checked too. With
    `while_written` (``dbsurge scenario longrun --from`` during a run), a run that has not ended has only the
    files written whole checked (run.json, stages.csv, summary.csv): the others grow, a line at a time.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"{clip(path, 160)} is not a directory: give a run directory such as results/<run-id>")
    meta = check_run_json(path / RUN_JSON) if _present(path / RUN_JSON) else None
    growing = while_written and not (isinstance(meta, dict) and meta.get("ended_utc"))
    for name, (allowed, required, ledger) in CSV_FILES.items():
        if growing and name not in (STAGES, SUMMARY_CSV):
            continue
        if _present(path / name):
            check_csv(path / name, allowed, required, ledger=ledger)
    if growing:
        return meta
    _check_other_files(path)
    if warn_missing:
        _warn_missing(path, meta)
    if isinstance(meta, dict) and isinstance(meta.get("results"), dict) and (path / SUMMARY_CSV).exists():
        check_results_agree(path / RUN_JSON, meta["results"], path / SUMMARY_CSV)
    if meta is not None and meta.get("kind") == "repetitions":
        for item in _dig(meta, "repetitions", "runs") or []:
            child = path / str(item.get("run_dir")) if isinstance(item, dict) else None
            if child is not None and child.is_dir():
                check_run_dir(child)
    return meta


def _present(path: Path) -> bool:
    """Whether `path` is there to be checked; a symbolic link that leads nowhere (dangling, or a loop) is damage.

    ``Path.exists`` follows the link and says False for both: a timeline.csv that linked to itself was taken for
    a missing one and the report rebuilt without it at exit 0, and a dangling stages.csv was called "a directory"."""
    if path.exists():
        return True
    if path.is_symlink():
        raise _damaged(path, "it is a symbolic link that leads to no file (it dangles or loops)")
    return False


#: The files every finished run of the engine writes: one missing is told, not passed over.
_ENGINE_FILES = (STAGES, TIMELINE)


def _warn_missing(path: Path, meta: Any) -> None:
    """One warning line per file a finished engine run writes that is not there (the report is built without it)."""
    import sys

    if not isinstance(meta, dict) or meta.get("scenario") or meta.get("kind") == "repetitions" \
            or not isinstance(meta.get("results"), dict) or "plan" not in meta:
        return
    for name in _ENGINE_FILES:
        if not os.path.lexists(path / name):
            sys.stderr.write(f"dbsurge: warning: {clip(path / name, 160)} is missing: what is built from this run "
                             f"goes without it\n")


def _check_other_files(path: Path) -> None:
    """events.jsonl, intervals.hlog and the collectors' metrics/*.csv, those that are there."""
    if _present(path / EVENTS):
        check_events(path / EVENTS)
    if _present(path / INTERVALS):
        check_hlog(path / INTERVALS)
    for csv_file in sorted((path / METRICS).glob(CSV_GLOB)) if (path / METRICS).is_dir() else []:
        check_metrics_csv(csv_file)


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


# -- text ------------------------------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    """`path` as UTF-8 text without NUL bytes, else `DamagedRun` naming where the first bad byte is."""
    try:
        data = read_bounded(path, MAX_FILE_BYTES)  # /dev/zero and a FIFO have st_size 0: no bound
    except FileRefused as e:
        raise _damaged(path, f"it {e.reason}") from None
    except OSError as e:
        raise UserError(f"{clip(path, 160)} cannot be read: {e.strerror or type(e).__name__}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise _damaged(path, f"it is not text (a NUL byte at offset {nul})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _damaged(path, f"it is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


# -- run.json ----------------------------------------------------------------------------------------------------


def _check_keys(path: Path, obj: dict, keys: dict, where: str) -> None:
    for key, (check, what) in keys.items():
        value = obj.get(key)
        if value is not None and not check(value):
            raise _damaged(path, f"{where}{key} is {clip(json.dumps(value, default=str), 40)}, not {what}")


def check_run_json(path: Path) -> dict:
    """run.json as a dict with the types dbsurge writes, else `DamagedRun`."""
    text = read_text(path)
    if not text.strip():
        raise _damaged(path, "it is empty")
    try:
        meta = load_json(text)
    except ValueError as e:
        hint = "" if "nested" in str(e) else ": cut short?"
        raise _damaged(path, f"it is not JSON ({clip(e, 80)}){hint}") from None
    if not isinstance(meta, dict):
        raise _damaged(path, f"it holds a JSON {type(meta).__name__}, not an object")
    _check_keys(path, meta, RUN_KEYS, "")
    check_schema(path, meta)
    _check_parts(path, meta)
    return meta


class NewerRun(UserError):
    """A run directory written by a newer dbsurge, in a run.json schema this one does not read."""


def check_schema(path: Path, meta: dict) -> None:
    """`NewerRun` for a run.json of a schema above `RUN_SCHEMA`; none is schema 1 (written before the key was)."""
    schema = meta.get("schema", 1)
    if isinstance(schema, int) and schema > RUN_SCHEMA:
        raise NewerRun(f"{clip(path, 160)} is from a newer dbsurge (schema {schema}); this one reads up to "
                       f"{RUN_SCHEMA}: read it with that dbsurge, or upgrade this one")


def _check_parts(path: Path, meta: dict) -> None:
    """The plan, its stages, the options rerun reads and the results, each by its own keys."""
    plan = meta.get("plan")
    if isinstance(plan, dict):
        _check_keys(path, plan, PLAN_KEYS, "plan.")
        for i, stage in enumerate(plan.get("stages") or []):
            _check_keys(path, stage, STAGE_KEYS, f"plan.stages[{i}].")
    if isinstance(meta.get("options"), dict):
        _check_keys(path, meta["options"], OPTION_KEYS, "options.")
    if isinstance(meta.get("results"), dict):
        _check_keys(path, meta["results"], RESULT_KEYS, "results.")
        for key in ("failed_by_kind", "not_sent_by_reason"):
            for name, value in (meta["results"].get(key) or {}).items():
                if not is_count(value):
                    raise _damaged(path, f"results.{key}.{clip(name, 30)} is {clip(value, 30)}, not a count")


# -- CSV ----------------------------------------------------------------------------------------------------------


def check_csv(path: Path, allowed: set[str], required: set[str], *, ledger: bool = False) -> int:
    """A CSV file dbsurge wrote: header, row lengths, cells; returns its number of rows, else `DamagedRun`."""
    text = read_text(path)
    if not text:
        raise _damaged(path, "it is empty (not even a header)")
    if not text.endswith("\n"):
        raise _damaged(path, "its last line is cut short (no line break at the end)")
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise _damaged(path, f"it is not CSV ({clip(e, 60)})") from None
    header, body = rows[0], rows[1:]
    _check_header(path, header, allowed, required, ledger)
    for n, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise _damaged(path, f"line {n} has {len(row)} cells for {len(header)} columns (cut short?)")
        for column, cell in zip(header, row):
            problem = _cell_problem(column, cell)
            if problem:
                raise _damaged(path, f"line {n}, column {column}: '{clip(cell, 30)}' is not {problem}")
        if ledger:
            _check_balance(path, n, dict(zip(header, row)))
    return len(body)


class InconsistentRun(DamagedRun):
    """A run directory whose files each read, but whose ledger does not add up (edited by hand, or mixed up)."""


def _check_balance(path: Path, n: int, row: dict[str, str]) -> None:
    """The ledger the report shows must add up, row by row: planned = ok + failed + dropped + unknown + not sent
    (- over plan), failed = the failures by kind, not sent = by reason, count = ok + failed. A hand-edited
    stages.csv read as "Verdict: OK" beside a ledger with arrivals missing from it."""
    def get(column: str) -> int:
        return int(float(row.get(column) or 0))

    where = f"line {n} ({clip(row.get('stage') or 'run', 30)}, {clip(row.get('operation') or '', 30)})"
    sums = [("failures", "the failures by kind", [c for c in row if c.startswith("failed_") and c in COUNT_COLUMNS]),
            ("not_sent", "the arrivals not sent by reason", [c for c in row if c.startswith("not_sent_")])]
    for total, what, parts in sums:
        if total in row and parts and get(total) != sum(get(c) for c in parts):
            raise _inconsistent(path, f"{where}: {total} is {get(total)} but {what} add up to "
                                      f"{sum(get(c) for c in parts)}")
    if "count" in row and "ok" in row and get("count") != get("ok") + get("failures"):
        raise _inconsistent(path, f"{where}: count is {get('count')} but ok + failed is {get('ok') + get('failures')}")
    if row.get("planned", "") != "" and "ok" in row:
        accounted = (get("ok") + get("failures") + get("dropped") + get("unknown") + get("not_sent")
                     - get("over_plan"))
        if get("planned") != accounted:
            raise _inconsistent(path, f"{where}: planned is {get('planned')} but ok + failed + dropped + unknown + "
                                      f"not sent is {accounted}")


#: run.json's results -> the summary's column for the whole run (its ALL row): the same ledger, said twice.
_RESULTS_IN_SUMMARY = {"planned_operations": "planned", "operations": "count", "not_sent": "not_sent"}


def check_results_agree(meta_path: Path, results: dict, summary: Path) -> None:
    """run.json's ``results`` (the verdict's figures) and summary.csv's ALL row (the ledger table) must agree."""
    rows = [r for r in csv.DictReader(io.StringIO(read_text(summary), newline="")) if r.get("operation") == "ALL"]
    if len(rows) != 1:
        return  # a summary without its run row (an old or partial one): nothing to compare
    for key, column in _RESULTS_IN_SUMMARY.items():
        said, cell = results.get(key), rows[0].get(column) or ""
        if is_count(said) and cell != "" and said != int(float(cell)):
            raise _inconsistent(meta_path, f"results.{key} is {said} but {summary.name}'s run row says {column} "
                                           f"{int(float(cell))}")


def _inconsistent(path: Path, what: str) -> InconsistentRun:
    return InconsistentRun(f"{clip(path, 160)} is inconsistent: {what}: the ledger does not balance (edited by "
                           f"hand?), so no verdict is given; nothing was read or written (restore the file, or run "
                           f"again)")


def _check_header(path: Path, header: list[str], allowed: set[str], required: set[str], ledger: bool) -> None:
    unknown = [c for c in header if c not in allowed]
    if unknown:
        raise _damaged(path, f"its header has a column dbsurge does not write, '{clip(unknown[0], 30)}' "
                             f"(a header cut short or edited?)")
    # a run before the ledger (no planned, ok, not_sent) is read as it is; a ledger with a column gone is damage
    missing = sorted(required - set(header)) or (
        sorted(set(LEDGER) - set(header)) if ledger and set(header) & {"planned", "ok", "not_sent"} else [])
    if missing:
        raise _damaged(path, f"its header has no column {missing[0]}")
    if len(set(header)) != len(header):
        raise _damaged(path, "its header names a column twice")


def _cell_problem(column: str, cell: str) -> str | None:
    """What is wrong with one cell (None when nothing): blanks are "not measured" and always allowed."""
    kind = column_type(column)
    if kind == "text" or cell == "":
        return None
    if kind == "time":
        return None if is_time(cell) else "an ISO 8601 time"
    if not _NUMBER.fullmatch(cell) or not math.isfinite(float(cell)):
        return "a finite number"
    if kind == "count":
        value = float(cell)
        if value < 0 or value != int(value):
            return "a count (a whole number of 0 or more)"
    return None


def check_metrics_csv(path: Path) -> int:
    """A collector's CSV under ``metrics/`` (a sampler's, CloudWatch's, the runners'): text, rows as long as the
    header, and every ``*_utc`` cell an ISO 8601 time (the readers parse them all, and the report and cost plot
    and bill by them). Their other columns differ by collector and are not checked. Returns the rows."""
    text = read_text(path)
    if not text.strip():
        return 0  # an empty metrics file is "nothing sampled", as the readers take it
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as e:
        raise _damaged(path, f"it is not CSV ({clip(e, 60)})") from None
    header, body = rows[0], rows[1:]
    times = [i for i, column in enumerate(header) if column.endswith("_utc")]
    for n, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise _damaged(path, f"line {n} has {len(row)} cells for {len(header)} columns (cut short?)")
        for i in times:
            if row[i] and not is_time(row[i]):
                raise _damaged(path, f"line {n}, column {header[i]}: '{clip(row[i], 30)}' is not an ISO 8601 time")
    return len(body)


# -- events.jsonl and intervals.hlog ------------------------------------------------------------------------------


def _whole_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, line) of a file of lines that are not blank, after checking that its last line is whole."""
    text = read_text(path)
    if text and not text.endswith("\n"):
        raise _damaged(path, "its last line is cut short (no line break at the end)")
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield n, line


def check_events(path: Path) -> int:
    """Every line of events.jsonl a JSON object with a text ``kind``; returns the number of events."""
    count = 0
    for n, line in _whole_lines(path):
        try:
            event = load_json(line)
        except ValueError:
            raise _damaged(path, f"line {n} is not JSON: '{clip(line, 30)}'") from None
        if not isinstance(event, dict):
            raise _damaged(path, f"line {n} is a JSON {type(event).__name__}, not an event object")
        if "kind" in event and not isinstance(event["kind"], str):
            raise _damaged(path, f"line {n}: kind is {clip(event['kind'], 30)}, not a name")
        if "time_utc" in event and not is_time(event["time_utc"]):
            raise _damaged(path, f"line {n}: time_utc is {clip(event['time_utc'], 30)}, not an ISO 8601 time")
        count += 1
    return count


#: The cookie bases of an encoded HdrHistogram (V2, and V2 compressed), as in HdrHistogram_py's codec; the
#: cookie's bits 4-7 carry the word size and are masked off.
_HDR_V2, _HDR_V2_COMPRESSED = 0x1C849303, 0x1C849304


def check_hlog(path: Path) -> int:
    """An HdrHistogram interval log (``rundir.RunDirectory.hlog_interval``): returns its number of intervals."""
    count = 0
    for n, line in _whole_lines(path):
        try:
            interval = parse_line(line)  # the windows' parser: the two agree on every line
        except ValueError as exc:
            raise _damaged(path, f"line {n} {exc}: '{clip(line, 40)}'") from None
        if interval is None:
            continue
        problem = _histogram_problem(interval.histogram)
        if problem:
            raise _damaged(path, f"line {n}: the histogram {problem}")
        count += 1
    return count


def _histogram_problem(encoded: str) -> str | None:
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return "is not base64"
    if len(raw) < 8:
        return "is too short"
    cookie, length = int.from_bytes(raw[:4], "big") & ~0xF0, int.from_bytes(raw[4:8], "big")
    if cookie not in (_HDR_V2, _HDR_V2_COMPRESSED):
        return "is not an HdrHistogram"
    if cookie == _HDR_V2_COMPRESSED:
        if len(raw) - 8 < length:
            return "is cut short"
        try:
            inner = zlib.decompress(raw[8:8 + length])
        except zlib.error:
            return "does not decompress"
        if len(inner) < 4 or int.from_bytes(inner[:4], "big") & ~0xF0 != _HDR_V2:
            return "is not an HdrHistogram"
    return None


def check_run_dirs(paths: Iterable[str | Path]) -> None:
    """`check_run_dir` on each of `paths` (``dbsurge compare`` and ``report`` of several runs)."""
    for p in paths:
        check_run_dir(p)
