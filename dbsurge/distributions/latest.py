"""Skewed-latest integers: the most recently inserted records are the most popular.

Algorithm: YCSB's ``SkewedLatestGenerator`` (used by ``requestdistribution=latest``, workload D):
draw a zipfian offset ``z`` over the current record count and return ``newest - z``, so the newest
record is the most frequent, the one before it next, and so on. The count is read from a callable
at every draw, so records inserted during the run join the distribution immediately (the zipfian
generator extends its zeta term by term).

One deliberate difference: YCSB returns ``last - zipf(last)`` with ``last`` the highest inserted
record number, which can never return record 0; we draw over all ``count`` records, so the
result is always in ``[0, count)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from dbsurge.distributions.zipfian import ZIPFIAN_CONSTANT, ZipfianGenerator


class SkewedLatestGenerator:
    """Record indexes in ``[0, count())``, skewed towards ``count() - 1``, the newest.

    >>> inserted = [1000]
    >>> gen = SkewedLatestGenerator(random.Random(5), lambda: inserted[0])
    >>> draws = [gen.next() for _ in range(10_000)]
    >>> max(set(draws), key=draws.count)
    999
    >>> inserted[0] = 1500       # 500 inserts later the newest record leads
    >>> draws = [gen.next() for _ in range(10_000)]
    >>> max(set(draws), key=draws.count)
    1499
    """

    __slots__ = ("_count", "_zipf")

    def __init__(self, rng: random.Random, count: Callable[[], int], theta: float = ZIPFIAN_CONSTANT) -> None:
        self._count = count
        self._zipf = ZipfianGenerator(rng, 0, max(count(), 1) - 1, theta)

    def next(self) -> int:
        """The next record index; recent records are the most likely."""
        count = self._count()
        return count - 1 - self._zipf.next_of(count)
