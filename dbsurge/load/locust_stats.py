"""Locust's own statistics, fed from the recorder once a second instead of by an event per operation.

Locust keeps its web UI tables and ``--csv`` files in `locust.stats.RequestStats`: a count per
rounded response time, per-second request counts, a total, a minimum and a maximum per
(name, method). Locust fills them from its ``request`` event, which cost 3.8 µs per operation
(`EventHook.fire`, the runner's listener, two `StatsEntry.log` calls): a sixteenth of a paced
lookup's CPU. dbsurge's users record every operation anyway (`Recorder.record`), so the recorder's
once-a-second drain hands its successful operations here, as arrays, and `LocustStatsFeed` adds
them to the same entries with the same rounding rule (`dbsurge.measure.latency_buckets`). Failed
operations still fire the ``request`` event one by one, with their exception: Locust's failures
table needs it, and failures are few.

What a reader of Locust's tables sees is the same counts and buckets, up to a second later. What
changes is the ``request`` event: a listener a locustfile adds hears failed dbsurge operations only
(docs/architecture.md, "Locust's statistics").
"""

from __future__ import annotations

import numpy as np

#: (upper bound µs, rounding step µs) of `dbsurge.measure.latency_buckets.bucket_response_time`, in µs.
_STEPS = ((1_000, 1), (10_000, 10), (100_000, 100), (1_000_000, 10_000), (10_000_000, 100_000))


def bucket_keys_us(resp_us: np.ndarray) -> np.ndarray:
    """`latency_buckets.bucket_response_time` of each response time, vectorised, in µs.

    >>> bucket_keys_us(np.array([412, 4123, 41234, 147000, 3432000, 58760000])).tolist()
    [412, 4120, 41200, 150000, 3400000, 59000000]
    """
    step = np.full(resp_us.shape, 1_000_000, dtype=np.int64)
    for bound, s in reversed(_STEPS):
        step[resp_us < bound] = s
    return (resp_us + step // 2) // step * step


def locust_key(key_us: int) -> float | int:
    """The key Locust's ``response_times`` dict uses for a bucket (ms: a float below 100 ms, else an int).

    >>> locust_key(412), locust_key(4120), locust_key(150000)
    (0.412, 4.12, 150)
    """
    return key_us / 1000 if key_us < 100_000 else key_us // 1000


#: Every bucket the rule can give, in µs, sorted (up to an hour, the histograms' ceiling too): a bucket's
#: position here is its index in `_Entry.counts`.
ALL_KEYS_US = np.unique(bucket_keys_us(np.concatenate([
    np.arange(0, 1_000), np.arange(1_000, 10_000, 10), np.arange(10_000, 100_000, 100),
    np.arange(100_000, 1_000_000, 10_000), np.arange(1_000_000, 10_000_000, 100_000),
    np.arange(10_000_000, 3_600_000_001, 1_000_000)])))
_LOCUST_KEYS = [locust_key(k) for k in ALL_KEYS_US.tolist()]


class _Entry:
    """What a drain handed over for one of Locust's entries since the last `LocustStatsFeed.apply`."""

    __slots__ = ("counts", "last_ns", "max_us", "min_us", "n", "per_second", "sum_us")

    def __init__(self) -> None:
        self.counts = np.zeros(ALL_KEYS_US.size, dtype=np.int64)
        self.per_second: dict[int, int] = {}
        self.n = self.sum_us = self.max_us = 0
        self.min_us: int | None = None
        self.last_ns = 0

    def add(self, index: np.ndarray, resp_us: np.ndarray, end_wall_ns: np.ndarray) -> None:
        """Operations by bucket index (`bucket_index`), response time (µs) and completion time (wall ns)."""
        self.add_summary(_summary(index, resp_us, end_wall_ns))

    def add_summary(self, summary: tuple) -> None:
        """Add what `_summary` made of some operations (one summary may go to an operation's entry and the total)."""
        counts, per_second, n, sum_us, low, high, last_ns = summary
        self.counts[:counts.size] += counts
        for sec, k in per_second:
            self.per_second[sec] = self.per_second.get(sec, 0) + k
        self.min_us = low if self.min_us is None else min(self.min_us, low)
        self.max_us = max(self.max_us, high)
        self.n += n
        self.sum_us += sum_us
        self.last_ns = max(self.last_ns, last_ns)


def _summary(index: np.ndarray, resp_us: np.ndarray, end_wall_ns: np.ndarray) -> tuple:
    """(counts by bucket, [(second, count)], n, sum µs, min µs, max µs, last completion ns) of some operations."""
    counts = np.bincount(index)  # as long as the highest bucket present, not all of them
    last_ns = int(end_wall_ns.max())
    first_s, last_s = int(end_wall_ns.min()) // 1_000_000_000, last_ns // 1_000_000_000
    if first_s == last_s:  # the usual part: one second
        per_second = [(first_s, int(resp_us.size))]
    else:
        secs = end_wall_ns // 1_000_000_000
        per_second = list(zip(*(a.tolist() for a in np.unique(secs, return_counts=True))))
    return (counts, per_second, int(resp_us.size), int(resp_us.sum()), int(resp_us.min()), int(resp_us.max()),
            last_ns)


def bucket_index(resp_us: np.ndarray) -> np.ndarray:
    """Each response time's position in `ALL_KEYS_US` (times past an hour count in its last bucket)."""
    return np.searchsorted(ALL_KEYS_US, np.minimum(bucket_keys_us(resp_us), ALL_KEYS_US[-1]))


class LocustStatsFeed:
    """Adds the recorder's successful operations to Locust's `RequestStats` (``environment.stats``).

    A drain hands its operations over (`__call__`): a few vectorised steps count them into dense
    per-bucket arrays (`_Entry`), one per operation and one for Locust's total. `apply` (once a second
    in a local run; on a worker after each pre-drain pass and at each report) adds the buckets that
    are not empty to Locust's dictionaries: the distinct response times handed over since, a few
    hundred dictionary updates per entry, with pauses between pieces.
    ``method`` maps a recorder operation id to the request type its users report (the workload's
    name); ``names`` is the recorder's list of operation names, by id.
    """

    def __init__(self, stats, names: list[str]) -> None:
        self.stats = stats
        self.names = names
        self.method: dict[int, str] = {}
        self._entries: dict[int | None, _Entry] = {}  # by operation id; None: Locust's total

    def __call__(self, op: np.ndarray, resp_us: np.ndarray, end_wall_ns: np.ndarray) -> None:
        """One drain's successful operations: operation ids, response times (µs), completion times (wall ns)."""
        if not op.size:
            return
        index = bucket_index(resp_us)
        if bool((op == op[0]).all()):  # the usual drain: one operation, whose summary is the total's too
            whole = _summary(index, resp_us, end_wall_ns)
            self._entries.setdefault(int(op[0]), _Entry()).add_summary(whole)
            self._entries.setdefault(None, _Entry()).add_summary(whole)
            return
        for o in np.unique(op).tolist():
            sel = op == o
            self._entries.setdefault(o, _Entry()).add(index[sel], resp_us[sel], end_wall_ns[sel])
        self._entries.setdefault(None, _Entry()).add(index, resp_us, end_wall_ns)

    def apply(self, pause=None) -> None:
        """Add what was handed over to Locust's entries (and its total); ``pause()`` between pieces of work."""
        entries, self._entries = self._entries, {}
        for o, pending in entries.items():
            entry = self.stats.total if o is None else self.stats.get(self.names[o], self.method.get(o, ""))
            _add(entry, pending, pause)


#: Response-time buckets added to Locust's dictionary between two pauses of `LocustStatsFeed.apply`.
KEYS_PER_PIECE = 256


def _add(entry, pending: _Entry, pause) -> None:
    """`StatsEntry.log` for many operations at once (`locust.stats.StatsEntry`).

    Per-second request counts are exact; the response-time buckets are added as of the last second
    (Locust's per-second copy of them, for its current percentiles, is taken before they are).
    """
    last = entry.last_request_timestamp
    last_sec = pending.last_ns // 1_000_000_000
    if entry.use_response_times_cache and last and last_sec > int(last):
        entry._cache_response_times(last_sec - 1)
    index = np.flatnonzero(pending.counts).tolist()
    counts = pending.counts
    times = entry.response_times
    for i in range(0, len(index), KEYS_PER_PIECE):
        if i and pause is not None:
            pause()
        for j in index[i:i + KEYS_PER_PIECE]:
            times[_LOCUST_KEYS[j]] += int(counts[j])
    # the counters last, in one piece: a reader between two pauses sees the buckets ahead of the count
    for sec, n in pending.per_second.items():
        entry.num_reqs_per_sec[sec] += n
    entry.num_requests += pending.n
    entry.total_response_time += pending.sum_us / 1000
    low, high = pending.min_us / 1000, pending.max_us / 1000
    entry.min_response_time = low if entry.min_response_time is None else min(entry.min_response_time, low)
    entry.max_response_time = max(entry.max_response_time, high)
    stamp = pending.last_ns / 1e9
    if last is None or stamp > last:
        entry.last_request_timestamp = stamp
