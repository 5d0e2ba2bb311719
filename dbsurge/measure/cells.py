"""The cell and its wire format: what one worker ships for an (operation, stage) or a (second, operation).

A cell holds HdrHistograms in microseconds (response time of successes, service time of
successes, lag of every operation sent, response time of failures) and the ledger's counters
(ok, retries, failures by kind, dropped, not sent by reason). On the wire (msgpack, once a second)
a cell is ``[response, service, lag, failed_response, ok, retries, {kind: n}]``, each histogram in
its sparse form (`Histogram.to_wire`: bucket indexes and counts). `group_wire` builds cells'
wire form straight from arrays of values; `Cell.add_wire` reads it. Adding wire cells is exact:
the merged p99 is the p99 of every sample from every worker, to the histogram's precision.
`cell_stats` turns a cell into the figures of every table (timeline.csv, stages.csv, the web panel).

    >>> import numpy as np
    >>> rows = group_wire(np.array([[0, 1], [0, 1]]), np.array([True, False]), np.array([0, 1]), ["", "timeout"],
    ...                   np.array([900, 5000]), np.array([800, 5000]), np.array([100, 0]), np.array([0, 0]))
    >>> c = Cell(); c.add_wire(rows[0][2]); (c.ok, dict(c.failed))
    (1, {})
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from dbsurge.measure.histogram import (
    Histogram,
    counts_index,
    decode_sparse,
    encode_sparse,
    highest_equivalent_of,
    index_of,
    percentile_rank,
)

_KEY_SPAN = 1 << 20  # operation and stage indexes stay far below this

#: Not-sent reasons, as they appear in the ledger's columns (``not_sent_<reason>``).
NOT_SENT_REASONS = ("worker_lost", "no_connect", "interrupted", "in_flight", "users_exhausted", "target_silent",
                    "unaccounted")
#: Why a live worker wrote an arrival off as ``unknown`` at the end (sent, still in flight): ``unknown:<reason>``.
UNKNOWN_REASONS = ("in_flight", "interrupted")


def _failure_family(kind: str) -> str:
    family = kind.split(":", 1)[0]
    return family if family in FAILURE_FAMILIES else "other"


#: Failure kinds, by family (a server error carries its SQLSTATE or MongoDB code: ``server:40P01``).
FAILURE_FAMILIES = ("connect", "timeout", "disconnect", "server", "occ", "throttled", "other")


@dataclass
class Cell:
    """Histograms and the ledger's counters for one (operation, stage) or one (second, operation).

    ``response``/``service`` hold successful operations; ``failed_response`` the response time of
    failed ones; ``lag`` every operation sent. ``failed`` counts failures by kind, ``not_sent`` the
    arrivals written off by reason (``in_flight``, ``interrupted``...), ``unknown`` those issued to the
    database whose outcome nobody knows: still in flight when a worker closed its account, or issued by
    a worker that was lost before it reported them (booked by the ledger).
    """

    response: Histogram = field(default_factory=Histogram)
    service: Histogram = field(default_factory=Histogram)
    lag: Histogram = field(default_factory=Histogram)
    failed_response: Histogram = field(default_factory=Histogram)
    ok: int = 0
    retries: int = 0
    dropped: int = 0
    over_plan: int = 0  # operations sent beyond the plan (booked by the ledger)
    unknown: int = 0  # issued, outcome never known: in flight at the end, or a lost worker's (booked by the ledger)
    failed: Counter = field(default_factory=Counter)
    not_sent: Counter = field(default_factory=Counter)

    def add_wire(self, w: list) -> None:
        """Add one wire cell: [response, service, lag, failed_response, ok, retries, {kind: n}]."""
        self.response.add_wire(w[0])
        self.service.add_wire(w[1])
        self.lag.add_wire(w[2])
        self.failed_response.add_wire(w[3])
        self.ok += int(w[4])
        self.retries += int(w[5])
        for kind, n in w[6].items():
            self.failed[kind] += int(n)

    def add(self, other: Cell) -> None:
        self.response.add(other.response)
        self.service.add(other.service)
        self.lag.add(other.lag)
        self.failed_response.add(other.failed_response)
        self.ok += other.ok
        self.retries += other.retries
        self.dropped += other.dropped
        self.over_plan += other.over_plan
        self.unknown += other.unknown
        self.failed.update(other.failed)
        self.not_sent.update(other.not_sent)

    @property
    def failures(self) -> int:
        return sum(self.failed.values())

    @property
    def count(self) -> int:
        """Operations sent: successes and failures."""
        return self.ok + self.failures

    @property
    def accounted(self) -> int:
        """Arrivals this cell accounts for: sent, dropped, unknown or not sent (less what went beyond the plan)."""
        return self.count + self.dropped + self.unknown + sum(self.not_sent.values()) - self.over_plan

    def failed_by_family(self) -> dict[str, int]:
        out = dict.fromkeys(FAILURE_FAMILIES, 0)
        for kind, n in self.failed.items():
            out[_failure_family(kind)] += n
        return out


class WorkerSecond:
    """One worker's second on the master, for workers.csv: counts, and the lag and response p99.

    A `Cell` per worker and second allocated three 23,552-bucket histograms (550 kB): at 200
    workers, 110 MB a second to allocate, fill and scan, for two percentiles. This one keeps the
    reports' sparse (bucket, count) pairs and reads its percentiles from them, with the same result.
    """

    __slots__ = ("ok", "failures", "dropped", "_lag", "_response")

    def __init__(self) -> None:
        self.ok = self.failures = self.dropped = 0
        self._lag: list[tuple[np.ndarray, np.ndarray, int]] = []  # (bucket indices, counts, highest value)
        self._response: list[tuple[np.ndarray, np.ndarray, int]] = []

    @property
    def count(self) -> int:
        return self.ok + self.failures

    def add_wire(self, w: list) -> None:
        """Add one wire cell (`Cell.add_wire`'s form)."""
        for hist, into in ((w[0], self._response), (w[2], self._lag)):
            idx, cnt = decode_sparse(hist)
            if idx.size:
                into.append((idx, cnt, int(hist[3])))
        self.ok += int(w[4])
        self.failures += sum(int(n) for n in w[6].values())

    def lag_p99_us(self) -> int:
        return _sparse_percentile(self._lag, 99.0)

    def response_p99_us(self) -> int:
        return _sparse_percentile(self._response, 99.0)


#: Above this many (bucket, count) pairs, `_sparse_percentile` sums per bucket instead of sorting the pairs.
_SORT_PAIRS_BELOW = 4096


def _sparse_percentile(parts: list[tuple[np.ndarray, np.ndarray, int]], p: float) -> int:
    """`Histogram.percentile` of the histogram these sparse parts add up to."""
    if not parts:
        return 0
    idx = np.concatenate([i for i, _, _ in parts])
    cnt = np.concatenate([c for _, c, _ in parts])
    if idx.size < _SORT_PAIRS_BELOW:
        # a worker's second on the master: a few reports of a few hundred buckets; their pairs in bucket order
        # (as int64: a stable sort of uint16 is a radix sort, slower on a few hundred pairs)
        idx = idx.astype(np.int64)
        order = np.argsort(idx, kind="stable")
        idx, cum = idx[order], np.cumsum(cnt[order])
    else:
        # a local run's second (40 drain parts, 16,000 pairs at 16,000 TPS): the counts per bucket up to the highest
        # present, by a weighted bincount (float64: exact below 2**53). Sorting the pairs took 0.3 ms a percentile.
        idx, cum = None, np.cumsum(np.bincount(idx, weights=cnt))
    i = int(np.searchsorted(cum, percentile_rank(p, int(cum[-1]))))
    top = highest_equivalent_of(index_of(max(m for _, _, m in parts)))
    return min(highest_equivalent_of(i if idx is None else int(idx[i])), top)


def group_wire(keys: np.ndarray, okm, kind, kinds: list[str], resp, serv, lag, retries, index=None) -> list:
    """Rows of [key0, key1, cell_wire] for each distinct (key0, key1) column of ``keys``.

    The wire form (see `Cell.add_wire`: sparse histogram counts) is computed straight from the
    values, without building dense histograms: a drain then costs in proportion to the operations
    it holds instead of a fixed ~2 ms for allocating and scanning 23,552-bucket arrays per cell,
    which the pacer feels as a pause once a second. ``index``: the histogram indexes of ``resp``,
    ``serv`` and ``lag`` (`counts_index`), when the caller groups the same values more than once.
    """
    ri, si, li = index if index is not None else (counts_index(resp), counts_index(serv), counts_index(lag))
    # one 1-D key per row (the second key, an operation or stage index, is small) sorts much
    # faster than np.unique over columns
    combined = keys[0] * _KEY_SPAN + keys[1]
    if combined.size and bool((combined == combined[0]).all()):  # the usual part: one key, nothing to sort
        uniq, inverse = combined[:1], None
    else:
        uniq, inverse = np.unique(combined, return_inverse=True)
        inverse = inverse.reshape(-1)
    all_ok = bool(okm.all())
    rows = []
    for g in range(uniq.size):
        # the usual drain: one group, every operation a success (no masks to build)
        m = slice(None) if uniq.size == 1 else inverse == g
        good = m if all_ok else (okm if uniq.size == 1 else m & okm)
        n = resp.size if uniq.size == 1 else int(m.sum())
        ok = n if all_ok else int(okm[m].sum())
        failed: dict[str, int] = {}
        bad_wire = sparse_wire(resp[:0])
        if ok != n:
            bad = ~okm if uniq.size == 1 else m & ~okm
            ks, ns = np.unique(kind[bad], return_counts=True)
            failed = {kinds[k]: n for k, n in zip(ks.tolist(), ns.tolist())}
            bad_wire = sparse_wire(resp[bad], ri[bad])
        wire = [sparse_wire(resp[good], ri[good]), sparse_wire(serv[good], si[good]), sparse_wire(lag[m], li[m]),
                bad_wire, ok, int(retries[m].sum()), failed]
        rows.append([int(uniq[g] // _KEY_SPAN), int(uniq[g] % _KEY_SPAN), wire])
    return rows


def stage_completions(edges_ns: np.ndarray, done_ns: np.ndarray, ops: np.ndarray) -> list[list[int]]:
    """Rows of [stage, operation, n]: the successes completed (``done_ns``, epoch ns) in stage i's window
    ``[edges_ns[i], edges_ns[i + 1])``, by operation; a completion in no window (before time zero, after the
    plan's end or a stop) is in no row. What the master divides by a stage's duration: its delivered rate.

        >>> stage_completions(np.array([10, 20, 30]), np.array([9, 10, 19, 20, 29, 30]), np.array([0, 0, 1, 0, 0, 0]))
        [[0, 0, 1], [0, 1, 1], [1, 0, 2]]
    """
    stage = np.searchsorted(edges_ns, done_ns, side="right") - 1
    inside = (stage >= 0) & (stage < len(edges_ns) - 1)
    if not inside.any():
        return []
    if bool(inside.all()) and bool((stage == stage[0]).all()) and bool((ops == ops[0]).all()):
        return [[int(stage[0]), int(ops[0]), int(stage.size)]]  # the usual part: one stage, one operation
    keys, counts = np.unique(stage[inside] * _KEY_SPAN + ops[inside], return_counts=True)
    return [[int(k // _KEY_SPAN), int(k % _KEY_SPAN), int(n)] for k, n in zip(keys.tolist(), counts.tolist())]


def sparse_wire(values: np.ndarray, index: np.ndarray | None = None) -> list:
    """`Histogram.to_wire` of a histogram holding ``values`` (µs), computed without the histogram.

    ``index``: the values' `counts_index`, when the caller has it already."""
    if values.size == 0:
        return [b"", b"", 0, 0, 0]
    counts = np.bincount(counts_index(values) if index is None else index)  # as long as the highest index present
    index = np.flatnonzero(counts)
    return [*encode_sparse(index, counts[index]), int(values.min()), int(values.max()), int(values.sum())]


def us_to_ms(us: float) -> float:
    """Microseconds as milliseconds with three decimals (the precision of every table)."""
    return round(us / 1000.0, 3)


def cell_stats(cell: Cell, planned: int | None = None) -> dict:
    """Percentiles, counts and the ledger of a cell; times in milliseconds with microsecond precision.

    ``failure_rate`` counts over planned arrivals when the plan is known (an arrival that was
    never sent is not a success either), else over operations sent.
    """
    r, s, lag, f = cell.response, cell.service, cell.lag, cell.failed_response
    p50, p95, p99, p999 = r.percentiles([50, 95, 99, 99.9])
    sp50, sp95, sp99 = s.percentiles([50, 95, 99])
    fp50, fp99 = f.percentiles([50, 99])
    failures = cell.failures
    base = planned if planned else cell.count
    by_family = cell.failed_by_family()
    out = {
        "planned": "" if planned is None else planned,
        "count": cell.count, "ok": cell.ok,
        "failures": failures,
        "retries": cell.retries,
        "failure_rate": round(failures / base, 6) if base else 0.0,
        "p50_ms": us_to_ms(p50), "p95_ms": us_to_ms(p95), "p99_ms": us_to_ms(p99), "p999_ms": us_to_ms(p999),
        "max_ms": us_to_ms(r.max_value), "mean_ms": us_to_ms(r.mean),
        "service_p50_ms": us_to_ms(sp50), "service_p95_ms": us_to_ms(sp95), "service_p99_ms": us_to_ms(sp99),
        "lag_p99_ms": us_to_ms(lag.percentile(99)), "lag_max_ms": us_to_ms(lag.max_value),
        "failed_p50_ms": us_to_ms(fp50) if failures else "", "failed_p99_ms": us_to_ms(fp99) if failures else "",
        "failed_max_ms": us_to_ms(f.max_value) if failures else "",
        "dropped": cell.dropped,
        "unknown": cell.unknown,
        "not_sent": sum(cell.not_sent.values()),
        "failed_detail": ";".join(f"{k}={n}" for k, n in sorted(cell.failed.items())),
    }
    for fam in FAILURE_FAMILIES:
        out[f"failed_{fam}"] = by_family[fam]
    for reason in NOT_SENT_REASONS:
        out[f"not_sent_{reason}"] = cell.not_sent.get(reason, 0)
    out["over_plan"] = cell.over_plan
    return out
