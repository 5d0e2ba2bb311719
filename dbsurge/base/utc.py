"""The run directory's one time format: ISO 8601 UTC with milliseconds and a Z.

    >>> utc_iso(0.25)
    '1970-01-01T00:00:00.250Z'
"""

from __future__ import annotations

from datetime import datetime, timezone


def utc_iso(epoch_s: float) -> str:
    """ISO 8601 UTC with millisecond precision and a Z."""
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_utc(text: str) -> float:
    """The epoch seconds of a `utc_iso` string (or any ISO 8601 time with a Z or an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
