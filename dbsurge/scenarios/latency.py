"""Latency arithmetic for the scenarios' tables: pure functions over lists of milliseconds.

Percentiles come from the engine's microsecond HdrHistogram (`dbsurge.measure.histogram.Histogram`), so a
scenario's P99 means what the engine's P99 means (the highest value equivalent to the bucket,
within 0.1%)::

    >>> s = summarize_ms([0.68, 0.70, 0.72, 29.78])
    >>> s["count"], s["p50_ms"], s["max_ms"]
    (4, 0.7, 29.791)
    >>> delta_text(0.68, 3.14)
    '+362% (4.62x)'
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dbsurge.measure.histogram import Histogram

PERCENTILES = (50.0, 95.0, 99.0)


def histogram_ms(values_ms: Iterable[float]) -> Histogram:
    """A microsecond histogram of latencies given in milliseconds."""
    h = Histogram()
    us = np.rint(np.asarray(list(values_ms), dtype=np.float64) * 1000.0).astype(np.int64)
    h.record_many(np.maximum(us, 1))
    return h


def summarize_ms(values_ms: Iterable[float]) -> dict:
    """``count, p50_ms, p95_ms, p99_ms, max_ms, mean_ms`` of latencies in ms (``None`` when empty)."""
    values = list(values_ms)
    if not values:
        return {"count": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None, "mean_ms": None}
    h = histogram_ms(values)
    p50, p95, p99 = (v / 1000.0 for v in h.percentiles(PERCENTILES))
    return {"count": h.count, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99, "max_ms": h.max_value / 1000.0,
            "mean_ms": round(float(np.mean(values)), 3)}


def change_pct(before: float | None, after: float | None) -> float | None:
    """``after`` relative to ``before`` in percent (+365.0 for 0.68 -> 3.16); None if undefined."""
    if before in (None, 0) or after is None:
        return None
    return (after - before) / before * 100.0


def ratio(before: float | None, after: float | None) -> float | None:
    if before in (None, 0) or after is None:
        return None
    return after / before


def delta_text(before: float | None, after: float | None) -> str:
    """The studies' delta cell: ``+365% (4.6x)``; ``-`` when undefined."""
    pct, r = change_pct(before, after), ratio(before, after)
    if pct is None or r is None:
        return "-"
    return f"{pct:+.0f}% ({r:.2f}x)"


def ms(value: float | None, digits: int = 3) -> str:
    """A latency cell: three decimals in milliseconds, ``-`` for none."""
    return "-" if value is None else f"{value:.{digits}f}"


def number(value: float | None, digits: int = 1) -> str:
    """A rate or count cell with thousands separators, ``-`` for none."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if digits == 0 else f"{value:,.{digits}f}"


def pct(value: float | None, digits: int = 1) -> str:
    """A signed percentage cell, ``-`` for none."""
    return "-" if value is None else f"{value:+.{digits}f}%"
