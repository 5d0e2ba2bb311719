"""Microsecond HdrHistograms with numpy counts.

The layout (bucket and sub-bucket indexing) is HdrHistogram's, for values from 1 µs to 1 hour
at 3 significant digits, so an interval can be written to a standard HdrHistogram log through
the `hdrhistogram` package and read by any HdrHistogram tool. The counts live in a numpy array
so that recording a second's worth of values, merging workers and reading percentiles are
vectorised instead of per-value Python loops::

    >>> h = Histogram()
    >>> h.record_many([680, 700, 720, 29780])     # microseconds
    >>> h.count, h.percentile(50), h.max_value
    (4, 700, 29791)

Values are equivalent within 0.1%: ``29780`` lands in a bucket whose highest value is 29791,
which is what HdrHistogram reports for it too.
"""

from __future__ import annotations

import math

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3

# HdrHistogram's derived constants for (1, 1h, 3 digits); computed the way HdrHistogram does.
_UNIT_MAGNITUDE = int(math.floor(math.log2(LOWEST_US)))
_SUB_BUCKET_COUNT_MAG = int(math.ceil(math.log2(2 * 10**SIGNIFICANT_DIGITS)))
_SUB_HALF_MAG = _SUB_BUCKET_COUNT_MAG - 1
_SUB_BUCKET_COUNT = 1 << (_SUB_HALF_MAG + 1)
_SUB_HALF_COUNT = _SUB_BUCKET_COUNT // 2
_SUB_BUCKET_MASK = (_SUB_BUCKET_COUNT - 1) << _UNIT_MAGNITUDE
_TEMPLATE = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
COUNTS_LEN = _TEMPLATE.counts_len
assert COUNTS_LEN <= 1 << 16  # a bucket index fits the wire's uint16 (`encode_sparse`)

_COUNT_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def encode_sparse(index: np.ndarray, counts: np.ndarray) -> tuple[bytes, bytes]:
    """A sparse histogram's (bucket index, count) pairs as two byte strings: the indices as uint16, the
    counts in the narrowest unsigned type that holds the largest (uint8 for a worker's usual second).

    At 2,500 operations a second most buckets hold one or two samples, so this is 3 bytes a bucket
    instead of int32 + int64's 12: a quarter of the once-a-second report a master merges per worker.
    Exact: nothing is rounded, only packed.
    """
    if index.size == 0:
        return b"", b""
    top = int(counts.max())
    width = 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4 if top < 1 << 32 else 8
    return index.astype(np.uint16).tobytes(), counts.astype(_COUNT_TYPES[width]).tobytes()


def decode_sparse(wire: list) -> tuple[np.ndarray, np.ndarray]:
    """`encode_sparse`'s pairs back, as (uint16 indices, int64 counts); the count width is the byte ratio."""
    idx = np.frombuffer(wire[0], dtype=np.uint16)
    if idx.size == 0:
        return idx, np.zeros(0, dtype=np.int64)
    width = len(wire[1]) // idx.size
    if width not in _COUNT_TYPES or width * idx.size != len(wire[1]):
        raise ValueError(f"a histogram on the wire with {idx.size} buckets and {len(wire[1])} bytes of counts")
    return idx, np.frombuffer(wire[1], dtype=_COUNT_TYPES[width]).astype(np.int64)


def counts_index(values: np.ndarray) -> np.ndarray:
    """HdrHistogram's counts index for each value (int64 array, values clipped to the range)."""
    v = np.clip(np.asarray(values, dtype=np.int64), 0, HIGHEST_US)
    pow2ceiling = 64 - _clz64(v | _SUB_BUCKET_MASK)
    bucket = pow2ceiling - _UNIT_MAGNITUDE - (_SUB_HALF_MAG + 1)
    sub = v >> (bucket + _UNIT_MAGNITUDE)
    return ((bucket + 1) << _SUB_HALF_MAG) + (sub - _SUB_HALF_COUNT)


def _clz64(v: np.ndarray) -> np.ndarray:
    # number of leading zeros of positive int64 values; frexp gives the bit length exactly for
    # integers below 2**53, far above our one-hour ceiling in microseconds
    _, exp = np.frexp(v.astype(np.float64))
    return 64 - exp.astype(np.int64)


def value_from_index(index: np.ndarray) -> np.ndarray:
    """The lowest value (microseconds) of each bucket index, HdrHistogram's ``get_value_from_index`` on arrays."""
    index = np.asarray(index, dtype=np.int64)
    bucket = (index >> _SUB_HALF_MAG) - 1
    sub = (index & (_SUB_HALF_COUNT - 1)) + _SUB_HALF_COUNT
    low = bucket < 0
    sub = np.where(low, sub - _SUB_HALF_COUNT, sub)
    bucket = np.where(low, 0, bucket)
    return sub << (bucket + _UNIT_MAGNITUDE)


# One value's bucket index and the highest value of a bucket, in plain integers: reading a second's
# percentiles calls them a dozen times per row, and numpy's per-call overhead on scalars (about 10 us a
# call) was most of the master loop's once-a-second pause. tests/test_histogram.py checks them against
# `counts_index` and against HdrHistogram's own arithmetic.

def index_of(value: int) -> int:
    """`counts_index` of one value."""
    v = min(max(int(value), 0), HIGHEST_US)
    bucket = (v | _SUB_BUCKET_MASK).bit_length() - _UNIT_MAGNITUDE - (_SUB_HALF_MAG + 1)
    return ((bucket + 1) << _SUB_HALF_MAG) + ((v >> (bucket + _UNIT_MAGNITUDE)) - _SUB_HALF_COUNT)


def highest_equivalent_of(index: int) -> int:
    """The highest value that falls in bucket ``index``, as HdrHistogram reports percentiles."""
    bucket = (index >> _SUB_HALF_MAG) - 1
    sub = (index & (_SUB_HALF_COUNT - 1)) + _SUB_HALF_COUNT
    if bucket < 0:
        bucket, sub = 0, sub - _SUB_HALF_COUNT
    return (sub << (bucket + _UNIT_MAGNITUDE)) + (1 << (_UNIT_MAGNITUDE + bucket)) - 1


def percentile_rank(p: float, count: int) -> int:
    """How many of ``count`` values lie at or below percentile ``p`` (0-100), as HdrHistogram counts it."""
    return max(1, int(min(p, 100.0) * count / 100.0 + 0.5))


class Histogram:
    """A microsecond histogram: counts per HdrHistogram bucket, plus exact min and max.

    The 23,552 counts (184 kB) are allocated on the first value: a master makes several histograms
    per operation and second, most of them empty (failures, lag of a second no worker sent in), and
    allocating and zeroing them all was the larger part of its once-a-second merge.
    """

    __slots__ = ("_counts", "count", "min_value_raw", "max_value_raw", "total_us")

    def __init__(self) -> None:
        self._counts: np.ndarray | None = None
        self.count = 0
        self.min_value_raw = 0
        self.max_value_raw = 0
        self.total_us = 0

    @property
    def counts(self) -> np.ndarray:
        """The counts per bucket index (int64, `COUNTS_LEN` long)."""
        if self._counts is None:
            self._counts = np.zeros(COUNTS_LEN, dtype=np.int64)
        return self._counts

    def record_many(self, values_us) -> None:
        v = np.asarray(values_us, dtype=np.int64)
        if v.size == 0:
            return
        counts = self.counts
        counts += np.bincount(counts_index(v), minlength=COUNTS_LEN)
        self._track(int(v.min()), int(v.max()), int(v.size), int(v.sum()))

    def _track(self, lo: int, hi: int, n: int, total: int) -> None:
        self.min_value_raw = lo if self.count == 0 else min(self.min_value_raw, lo)
        self.max_value_raw = max(self.max_value_raw, hi)
        self.count += n
        self.total_us += total

    def add(self, other: Histogram) -> None:
        if other.count == 0:
            return
        if self._counts is None:
            self._counts = other.counts.copy()
        else:
            self._counts += other.counts
        self._track(other.min_value_raw, other.max_value_raw, other.count, other.total_us)

    # -- wire form: sparse (index, count) pairs, cheap to ship from workers to the master --------

    def to_wire(self) -> list:
        if self._counts is None:
            return [b"", b"", self.min_value_raw, self.max_value_raw, self.total_us]
        nz = np.flatnonzero(self._counts)
        return [*encode_sparse(nz, self._counts[nz]), self.min_value_raw, self.max_value_raw, self.total_us]

    def add_wire(self, wire: list) -> None:
        idx, cnt = decode_sparse(wire)
        if idx.size == 0:
            return
        np.add.at(self.counts, idx, cnt)
        self._track(int(wire[2]), int(wire[3]), int(cnt.sum()), int(wire[4]))

    @classmethod
    def from_wire(cls, wire: list) -> Histogram:
        h = cls()
        h.add_wire(wire)
        return h

    # -- reading ----------------------------------------------------------------------------------

    def percentile(self, p: float) -> int:
        """HdrHistogram's value at percentile p (0-100): the highest value equivalent to that bucket."""
        return self.percentiles((p,))[0]

    def percentiles(self, ps) -> list[int]:
        if self.count == 0:
            return [0 for _ in ps]
        # no count lies past the highest value's bucket: the sum need not run over all 23,552 (a
        # database answering in milliseconds fills the first few thousand)
        top_index = index_of(self.max_value_raw)
        cum = np.cumsum(self.counts[: top_index + 1])
        top = highest_equivalent_of(top_index)
        targets = [percentile_rank(p, self.count) for p in ps]
        return [min(highest_equivalent_of(i), top) for i in np.searchsorted(cum, targets).tolist()]

    @property
    def max_value(self) -> int:
        """Highest recorded value, reported as HdrHistogram does (its bucket's highest equivalent)."""
        if self.count == 0:
            return 0
        return highest_equivalent_of(index_of(self.max_value_raw))

    @property
    def mean(self) -> float:
        return self.total_us / self.count if self.count else 0.0

    def to_hdr(self) -> HdrHistogram:
        """A copy as an `hdrh` HdrHistogram (for the standard interval log)."""
        h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
        if self._counts is None:
            return h
        np.ctypeslib.as_array(h.counts)[:] = self._counts.astype(np.uint64)
        nz = np.flatnonzero(self._counts)
        if nz.size:
            h.set_internal_tacking_values(int(nz[0]), int(nz[-1]), self.count)
        return h
