"""Locust's own statistics, fed from the recorder once a second instead of by an event per operation.

Locust keeps its web UI tables and ``--csv`` files in `locust.stats.RequestStats`: a count per
rounded response time, per-second request counts, a total, a minimum and a maximum per
(name, method). Locust fills them from its ``request`` event, which cost 3.8 µs per operation
(`EventHook.fire`, the runner's listener, two `StatsEntry.log` calls): a sixteenth of a paced
lookup's CPU. dbsurge's users record every operation anyway (`Recorder.record`), so the recorder's
once-a-second drain hands its successful operations here, as arrays, and `LocustStatsFeed` adds
them to the same entries with the same rounding rule (`dbsurge.latency_buckets`). Failed
operations still fire the ``request`` event one by one, with their exception: Locust's failures
table needs it, and failures are few.

What a reader of Locust's tables sees is the same counts and buckets, up to a second later. What
changes is the ``request`` event: a listener a locustfile adds hears failed dbsurge operations only
(docs/architecture.md, "Locust's statistics").
"""

from __future__ import annotations

import numpy as np

#: (upper bound µs, rounding step µs) of `dbsurge.latency_buckets.bucket_response_time`, in µs.
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


class LocustStatsFeed:
    """Adds the recorder's successful operations to Locust's `RequestStats` (``environment.stats``).

    A drain hands its operations over (`__call__`, a few vectorised steps); `apply` adds what was
    handed over since the last call to Locust's entries, once a second: a second's worth of
    distinct response times is a few hundred dictionary updates per operation, not one per part of
    a drain. ``method`` maps a recorder operation id to the request type its users report (the
    workload's name); ``names`` is the recorder's list of operation names, by id.
    """

    def __init__(self, stats, names: list[str]) -> None:
        self.stats = stats
        self.names = names
        self.method: dict[int, str] = {}
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __call__(self, op: np.ndarray, resp_us: np.ndarray, end_wall_ns: np.ndarray) -> None:
        """One drain's successful operations: operation ids, response times (µs), completion times (wall ns)."""
        if op.size:
            self._pending.append((op, resp_us, end_wall_ns))

    def apply(self, pause=None) -> None:
        """Add what was handed over to Locust's entries (and its total); ``pause()`` between pieces of work."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        op = np.concatenate([p[0] for p in pending])
        resp = np.concatenate([p[1] for p in pending])
        end = np.concatenate([p[2] for p in pending])
        ops = np.unique(op).tolist()
        for o in ops:
            sel = op == o if len(ops) > 1 else slice(None)
            _add(self.stats.get(self.names[o], self.method.get(o, "")), resp[sel], end[sel], pause)
        _add(self.stats.total, resp, end, pause)


#: Response-time buckets added to Locust's dictionary between two pauses of `LocustStatsFeed.apply`.
KEYS_PER_PIECE = 256


def _add(entry, resp_us: np.ndarray, end_wall_ns: np.ndarray, pause) -> None:
    """`StatsEntry.log` for many operations at once (`locust.stats.StatsEntry`).

    Per-second request counts are exact; the response-time buckets are added as of the last second
    (Locust's per-second copy of them, for its current percentiles, is taken before they are).
    """
    secs = end_wall_ns // 1_000_000_000
    last_sec = int(secs.max())
    last = entry.last_request_timestamp
    if entry.use_response_times_cache and last and last_sec > int(last):
        entry._cache_response_times(last_sec - 1)
    keys, counts = np.unique(bucket_keys_us(resp_us), return_counts=True)
    keys, counts = keys.tolist(), counts.tolist()
    times = entry.response_times
    for i in range(0, len(keys), KEYS_PER_PIECE):
        if i and pause is not None:
            pause()
        for k, c in zip(keys[i:i + KEYS_PER_PIECE], counts[i:i + KEYS_PER_PIECE]):
            times[k / 1000 if k < 100_000 else k // 1000] += c
    # the counters last, in one piece: a reader between two pauses sees the buckets ahead of the count
    for sec, n in zip(*(a.tolist() for a in np.unique(secs, return_counts=True))):
        entry.num_reqs_per_sec[sec] += n
    entry.num_requests += int(resp_us.size)
    entry.total_response_time += float(resp_us.sum()) / 1000
    low, high = float(resp_us.min()) / 1000, float(resp_us.max()) / 1000
    entry.min_response_time = low if entry.min_response_time is None else min(entry.min_response_time, low)
    entry.max_response_time = max(entry.max_response_time, high)
    stamp = float(end_wall_ns.max()) / 1e9
    if last is None or stamp > last:
        entry.last_request_timestamp = stamp
