"""Recording operations on a worker and merging workers on the master.

The hot path is `Recorder.record`: it appends one tuple of raw nanosecond timestamps and returns.
Once a second (`drain`, called from Locust's ``report_to_master`` on a worker, or directly on a
local runner) the buffered tuples become histograms in one vectorised pass:

- per (operation, stage of the intended start): response time (intended start to end), service
  time (actual start to end) and lag (actual minus intended start), plus counts of successes,
  failures and 40001 retries;
- per (second of completion, operation): the same three histograms, for the timeline.

The payload is sparse histogram counts (see `Histogram.to_wire`), so merging on the master is
exact: the merged p99 equals the p99 of all samples recorded by all workers, to the histogram's
precision. Latency histograms hold successful operations; failed operations have their own
response-time histogram and are counted by kind (``timeout``, ``connect``, ``server:57P01``...).

The recorder is also the pacer's ledger sink: dropped slots and arrivals not sent (with their
reason) are counted per (stage, operation) and shipped in the same payload, so the wire format
is written in this one module and read by `Cell.add_wire` and the `Aggregator`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from .histogram import Histogram, counts_index

NS_PER_US = 1000
NS_PER_S = 1_000_000_000
_KEY_SPAN = 1 << 20  # operation and stage indexes stay far below this


def _failure_family(kind: str) -> str:
    family = kind.split(":", 1)[0]
    return family if family in FAILURE_FAMILIES else "other"


#: Failure kinds, by family (a server error carries its SQLSTATE or MongoDB code: ``server:40P01``).
FAILURE_FAMILIES = ("connect", "timeout", "disconnect", "server", "occ", "other")


@dataclass
class Cell:
    """Histograms and the ledger's counters for one (operation, stage) or one (second, operation).

    ``response``/``service`` hold successful operations; ``failed_response`` the response time of
    failed ones; ``lag`` every operation sent. ``failed`` counts failures by kind, ``not_sent`` the
    arrivals written off by reason (``in_flight``, ``interrupted``...).
    """

    response: Histogram = field(default_factory=Histogram)
    service: Histogram = field(default_factory=Histogram)
    lag: Histogram = field(default_factory=Histogram)
    failed_response: Histogram = field(default_factory=Histogram)
    ok: int = 0
    retries: int = 0
    dropped: int = 0
    over_plan: int = 0  # operations sent beyond the plan (booked by the ledger)
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
        """Arrivals this cell accounts for: sent, dropped or not sent (less what went beyond the plan)."""
        return self.count + self.dropped + sum(self.not_sent.values()) - self.over_plan

    def failed_by_family(self) -> dict[str, int]:
        out = dict.fromkeys(FAILURE_FAMILIES, 0)
        for kind, n in self.failed.items():
            out[_failure_family(kind)] += n
        return out


class Recorder:
    """Per-process buffer of operation timings, turned into histograms once a second.

    ``record`` takes `time.perf_counter_ns()` timestamps and a failure kind id (0: success; see
    `kind_id`); the recorder converts completion times to wall-clock seconds with an offset
    measured once, so every worker's intervals line up on UTC seconds.
    """

    def __init__(self, *, clock_ns=time.perf_counter_ns, wall_ns=time.time_ns, raw_samples_path: str | None = None):
        self._buf: list[tuple] = []
        self.operations: list[str] = []
        self._op_ids: dict[str, int] = {}
        self.kinds: list[str] = [""]  # kind id 0 is success
        self._kind_ids: dict[str, int] = {}
        self.first_errors: dict[str, str] = {}  # kind -> first message, shipped once
        self._ledger: Counter[tuple[int, int, str]] = Counter()
        self._dropped_secs: Counter[tuple[int, int]] = Counter()
        self.loop_lag_us: dict[int, int] = {}  # stage -> worst event-loop stall seen in it
        self.wall_offset_ns = wall_ns() - clock_ns()
        self.clock_ns = clock_ns
        # Debugging and tests: every successful response time (us, int64) appended to this file, so
        # merged percentiles can be checked against all samples together.
        self.raw_samples_path = raw_samples_path

    def op_id(self, name: str) -> int:
        """A small integer for an operation name (register once per user, not per operation)."""
        i = self._op_ids.get(name)
        if i is None:
            i = self._op_ids[name] = len(self.operations)
            self.operations.append(name)
        return i

    def kind_id(self, kind: str, message: str = "") -> int:
        """A small integer (> 0) for a failure kind; the first message of each kind is kept for events."""
        i = self._kind_ids.get(kind)
        if i is None:
            i = self._kind_ids[kind] = len(self.kinds)
            self.kinds.append(kind)
            self.first_errors[kind] = message
        return i

    def record(self, op: int, stage: int, intended_ns: int, start_ns: int, end_ns: int, kind: int = 0,
               retries: int = 0) -> None:
        self._buf.append((op, stage, intended_ns, start_ns, end_ns, kind, retries))

    # -- the pacer's ledger sink --------------------------------------------------------------------

    def count(self, stage: int, op: int, column: str, n: int = 1, epoch_s: int | None = None) -> None:
        """Count arrivals that were not sent: ``dropped`` or ``not_sent:<reason>``."""
        self._ledger[(stage, op, column)] += n
        if column == "dropped" and epoch_s is not None:
            self._dropped_secs[(int(epoch_s), op)] += n

    def loop_lag(self, stage: int, stall_us: int) -> None:
        if stall_us > self.loop_lag_us.get(stage, 0):
            self.loop_lag_us[stage] = stall_us

    def drain(self) -> dict:
        """Everything recorded since the last drain, as a msgpack-friendly payload."""
        buf, self._buf = self._buf, []
        payload: dict = {
            "ops": list(self.operations), "stages": [], "intervals": [],
            "ledger": [[st, op, col, n] for (st, op, col), n in self._ledger.items()],
            "dropped_secs": [[sec, op, n] for (sec, op), n in self._dropped_secs.items()],
            "errors": {}, "loop_lag_us": [[st, us] for st, us in self.loop_lag_us.items()],
        }
        self._ledger.clear()
        self._dropped_secs.clear()
        self.loop_lag_us = {}
        if not buf:
            return payload
        # from a flat iterator: faster than np.array() over a list of tuples (0.24 vs 0.36 us per record)
        a = np.fromiter(chain.from_iterable(buf), dtype=np.int64, count=7 * len(buf)).reshape(-1, 7)
        op, stage, intended, start, end, kind, retries = (a[:, i] for i in range(7))
        resp = np.maximum(end - intended, 0) // NS_PER_US
        serv = np.maximum(end - start, 0) // NS_PER_US
        lag = np.maximum(start - intended, 0) // NS_PER_US
        sec = (end + self.wall_offset_ns) // NS_PER_S
        okm = kind == 0
        if self.raw_samples_path:
            with open(self.raw_samples_path, "ab") as f:
                f.write(resp[okm].astype(np.int64).tobytes())
        payload["stages"] = _group(np.stack([op, stage]), okm, kind, self.kinds, resp, serv, lag, retries)
        payload["intervals"] = _group(np.stack([sec, op]), okm, kind, self.kinds, resp, serv, lag, retries)
        if not okm.all():
            for k in np.unique(kind[~okm]).tolist():
                name = self.kinds[k]
                if name in self.first_errors:
                    payload["errors"][name] = self.first_errors.pop(name)
        return payload


def _group(keys: np.ndarray, okm, kind, kinds: list[str], resp, serv, lag, retries) -> list:
    """Rows of [key0, key1, cell_wire] for each distinct (key0, key1) column of ``keys``.

    The wire form (see `Cell.add_wire`: sparse histogram counts) is computed straight from the
    values, without building dense histograms: a drain then costs in proportion to the operations
    it holds instead of a fixed ~2 ms for allocating and scanning 23,552-bucket arrays per cell,
    which the pacer feels as a pause once a second.
    """
    # one 1-D key per row (the second key, an operation or stage index, is small) sorts much
    # faster than np.unique over columns
    combined = keys[0] * _KEY_SPAN + keys[1]
    uniq, inverse = np.unique(combined, return_inverse=True)
    inverse = inverse.reshape(-1)
    rows = []
    for g in range(uniq.size):
        m = inverse == g
        good = m & okm
        bad = m & ~okm
        ok = int(good.sum())
        failed: dict[str, int] = {}
        if ok != int(m.sum()):
            ks, ns = np.unique(kind[bad], return_counts=True)
            failed = {kinds[k]: n for k, n in zip(ks.tolist(), ns.tolist())}
        wire = [_sparse_wire(resp[good]), _sparse_wire(serv[good]), _sparse_wire(lag[m]), _sparse_wire(resp[bad]),
                ok, int(retries[m].sum()), failed]
        rows.append([int(uniq[g] // _KEY_SPAN), int(uniq[g] % _KEY_SPAN), wire])
    return rows


def _sparse_wire(values: np.ndarray) -> list:
    """`Histogram.to_wire` of a histogram holding ``values`` (µs), computed without the histogram."""
    if values.size == 0:
        return [b"", b"", 0, 0, 0]
    counts = np.bincount(counts_index(values))  # as long as the highest index present, not 23,552
    index = np.flatnonzero(counts)
    return [index.astype(np.int32).tobytes(), counts[index].astype(np.int64).tobytes(), int(values.min()),
            int(values.max()), int(values.sum())]
