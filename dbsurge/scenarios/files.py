"""Reading a scenario's run directory: run.json and its CSVs as dicts (`dbsurge.rundir.reader`'s), and the cells
in them.

Every table is built from these files by a scenario's pure ``report(run_dir)``, so a finished
run's table can be printed again (``--from``). Writing goes through `dbsurge.rundir.RunDirectory`
(run.json, the tables' CSVs) and `ScenarioRun.append_rows` (raw rows as they are measured).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from dbsurge.base.redact import redact_text
from dbsurge.rundir.reader import iter_rows, read_meta, read_rows
from dbsurge.rundir.summaries import opt_float
from dbsurge.targets import one_line

__all__ = ["csv_cell", "epoch_of", "error_cell", "floats", "is_ok", "iter_rows", "opt_float", "read_meta",
           "read_rows"]


def is_ok(row: dict) -> bool:
    """A raw row's ``ok`` cell as a boolean (missing counts as ok)."""
    return str(row.get("ok", "1")).lower() not in ("0", "false")


def floats(rows: Iterable[dict], column: str, *, ok_only: bool = True) -> list[float]:
    """The non-empty values of a column as floats (rows with ``ok`` false left out)."""
    out = []
    for r in rows:
        if ok_only and not is_ok(r):
            continue
        v = r.get(column)
        if v not in (None, ""):
            out.append(float(v))
    return out


def epoch_of(utc_text: str | None) -> float | None:
    """Seconds since the epoch of a run directory's UTC time (`dbsurge.rundir.utc_iso`); None when blank."""
    if not utc_text:
        return None
    return datetime.fromisoformat(utc_text).timestamp()


def csv_cell(v: Any) -> Any:
    """A value as a table's CSV holds it: blank for None, floats to 6 decimals."""
    if v is None:
        return ""
    if isinstance(v, float):
        return round(v, 6)
    return v


def error_cell(e: BaseException, limit: int = 160) -> str:
    """A raw row's ``error`` cell: ``Kind: first line of the message`` (trimmed), secrets removed."""
    return redact_text(f"{type(e).__name__}: {one_line(str(e), limit)}")
