"""intervals.hlog's lines: written and parsed here, next to each other, for the writer, the checker and the windows.

The HdrHistogram interval log, format 1.3: a header of ``#`` comments (the start and base times) and a
column line, then one line per operation and second::

    Tag=read,12.000,1.000,3.251,HISTFAAAA...

the operation's tag, the interval's start (seconds from the base time), its length (seconds), its largest
value (milliseconds) and its compressed histogram (microseconds, base64). The format allows a line without
a tag; dbsurge tags every interval with its operation, and an interval of no operation cannot be booked in
any operation's table, so `parse_line` refuses it: the run directory's checker and the long run's windows
read every line alike (the checker used to pass an untagged line that the windows then skipped silently).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from dbsurge.base.utc import utc_iso

#: The column line of the header.
COLUMNS_LINE = '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"'
BASE_TIME_PREFIX = "#[BaseTime:"
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class Interval(NamedTuple):
    """One interval line: the operation, start (s from the base time), length (s), max (ms), encoded histogram."""

    tag: str
    start_s: float
    length_s: float
    max_ms: float
    histogram: str


def header(base_s: float) -> str:
    """The log's first lines (format version, start and base time, units, columns), each ending in a line break."""
    return ("#[Histogram log format version 1.3]\n"
            f"#[StartTime: {base_s:.3f} (seconds since epoch), {utc_iso(base_s)}]\n"
            f"{BASE_TIME_PREFIX} {base_s:.3f} (seconds since epoch)]\n"
            "#[values in microseconds; response time from the intended start]\n"
            f"{COLUMNS_LINE}\n")


def interval_line(tag: str, start_s: float, length_s: float, max_ms: float, encoded: bytes | str) -> str:
    """One interval's line (``start_s`` already relative to the base time), ending in a line break."""
    enc = encoded.decode() if isinstance(encoded, bytes) else encoded
    return f"Tag={tag},{start_s:.3f},{length_s:.3f},{max_ms:.3f},{enc}\n"


def base_time(line: str) -> float | None:
    """The base time (epoch seconds) of a ``#[BaseTime: ...]`` line, else None."""
    if not line.startswith(BASE_TIME_PREFIX):
        return None
    try:
        return float(line[len(BASE_TIME_PREFIX):].split()[0])
    except (IndexError, ValueError):
        return None


def parse_line(line: str) -> Interval | None:
    """The interval of one line; None for a header line (a ``#`` comment, the column line, a blank line).

    Raises `ValueError` saying what is wrong with anything else: no ``Tag=`` (dbsurge tags every interval), not
    five fields, numbers that are not finite. The histogram itself is the caller's to decode.
    """
    line = line.strip()
    if not line or line.startswith(("#", '"StartTimestamp"')):
        return None
    fields = line.split(",")
    if not fields[0].startswith("Tag="):
        raise ValueError("has no Tag=operation (dbsurge tags every interval with its operation)")
    if len(fields) != 5 or not fields[0][4:]:
        raise ValueError("is not an interval (Tag=operation,start,length,max,histogram)")
    if not all(_NUMBER.fullmatch(f) and math.isfinite(float(f)) for f in fields[1:4]):
        raise ValueError("is not an interval: its start, length and max are not finite numbers")
    return Interval(fields[0][4:], float(fields[1]), float(fields[2]), float(fields[3]), fields[4])
