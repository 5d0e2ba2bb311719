"""Recording operations on a worker and merging workers on the master.

The hot path is `Recorder.record`: it appends one record of raw nanosecond timestamps (seven int64s,
packed into a bytearray) and returns. Once a second (`drain`, called from Locust's ``report_to_master``
on a worker, or directly on a local runner) the buffer becomes histograms in one vectorised pass:

- per (operation, stage of the intended start): response time (intended start to end), service
  time (actual start to end) and lag (actual minus intended start), plus counts of successes,
  failures and 40001 retries;
- per (second of completion, operation): the same three histograms, for the timeline;
- per (stage whose window holds the completion, operation): the successes, for the stage's delivered
  rate (`stage_completions`): the window is the plan's, against the run's time zero, on this worker's
  clock as the master corrected it, so a success is counted where it completed, to the nanosecond.

The payload is sparse histogram counts (see `Histogram.to_wire`), so merging on the master is
exact: the merged p99 equals the p99 of all samples recorded by all workers, to the histogram's
precision. Latency histograms hold successful operations; failed operations have their own
response-time histogram and are counted by kind (``timeout``, ``connect``, ``server:57P01``...).

The recorder is also the pacer's ledger sink: dropped slots and arrivals not sent (with their
reason) are counted per (stage, operation) and shipped in the same payload, so the payload is
built in this one place, stamped by the worker's clock; the cells' wire form is `dbsurge.measure.cells`.
"""

from __future__ import annotations

import math
import struct
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from dbsurge.measure.cells import (  # noqa: F401 - re-exported for readers
    FAILURE_FAMILIES,
    NOT_SENT_REASONS,
    Cell,
    group_wire,
    stage_completions,
)
from dbsurge.measure.histogram import counts_index

NS_PER_US = 1000
NS_PER_S = 1_000_000_000

#: One operation in the recorder's buffer: operation id, stage, intended start, start, end
#: (`perf_counter_ns`), failure kind id, retries; native int64s, as numpy reads them back.
RECORD_FIELDS = 7
RECORD = struct.Struct(f"={RECORD_FIELDS}q")
_pack = RECORD.pack
#: The end of an open-ended plan's last window (epoch ns): nothing completes after it.
_NO_END_NS = np.iinfo(np.int64).max


class Recorder:
    """Per-process buffer of operation timings, turned into histograms once a second.

    ``record`` takes `time.perf_counter_ns()` timestamps and a failure kind id (0: success; see
    `kind_id`); the recorder converts completion times to wall-clock seconds with an offset
    measured once, so every worker's intervals line up on UTC seconds.
    """

    def __init__(self, *, clock_ns=time.perf_counter_ns, wall_ns=time.time_ns, raw_sink=None):
        # Packed records (`RECORD`), not a list of tuples: a tuple per operation was an object the cycle
        # collector tracks, and a young collection during the once-a-second drain found 6,000-8,000 of them
        # (the drain's frees held its allocation count down while the users added records): a pause of
        # every user of 1.1-1.5 ms once a second at 16,000 TPS. The drain reads the bytes in place, too.
        self._buf = bytearray()
        self.operations: list[str] = []
        self._op_ids: dict[str, int] = {}
        self.kinds: list[str] = [""]  # kind id 0 is success
        self._kind_ids: dict[str, int] = {}
        self.first_errors: dict[str, str] = {}  # kind -> first message, shipped once
        self._ledger: Counter[tuple[int, int, str]] = Counter()
        self._dropped_secs: Counter[tuple[int, int]] = Counter()
        self.loop_lag_us: dict[int, int] = {}  # stage -> worst event-loop stall seen in it
        self.logs: list[dict] = []  # warnings and errors of this worker, shipped to the master (`log`)
        self.connects: Counter[str] = Counter()  # connection attempts by outcome (`connect_result`)
        self.wall_offset_ns = wall_ns() - clock_ns()
        self.clock_ns = clock_ns
        # Debugging and tests: called with every drain's successful response times (us, int64), so
        # merged percentiles can be checked against all samples together (the caller writes them).
        self.raw_sink = raw_sink
        # Locust's own statistics (`dbsurge.load.locust_stats.LocustStatsFeed`): called with every drain's
        # successful operations (operation ids, response times in us, wall-clock completion ns)
        self.stats_sink = None
        # the stages' windows in the master's epoch ns: stage i is [edges[i], edges[i + 1]) (`set_stage_windows`)
        self.stage_edges_ns: np.ndarray | None = None

    def set_stage_windows(self, start_epoch_ns: int, starts_s: Sequence[float], end_s: float) -> None:
        """The plan's stage windows, from the run's time zero (the master's epoch ns) and the stages' starts
        (plan seconds); ``end_s`` is the plan's end (inf: open-ended). A closed-model run has one stage
        from time zero on. Successes are counted in the stage whose window holds their completion."""
        edges = [start_epoch_ns + round(st * NS_PER_S) for st in starts_s]
        edges.append(start_epoch_ns + round(end_s * NS_PER_S) if math.isfinite(end_s) else _NO_END_NS)
        self.stage_edges_ns = np.array(edges, dtype=np.int64)

    def cut_stage_windows(self, stop_epoch_ns: int) -> None:
        """The run stopped at ``stop_epoch_ns`` (the master's epoch ns): no window reaches past it, so what
        completes in the drain after a stop counts in no stage (the stage's rate is over the part that ran)."""
        if self.stage_edges_ns is not None:
            self.stage_edges_ns = np.minimum(self.stage_edges_ns, max(int(stop_epoch_ns), int(self.stage_edges_ns[0])))

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
        self._buf.extend(_pack(op, stage, intended_ns, start_ns, end_ns, kind, retries))

    # -- the pacer's ledger sink --------------------------------------------------------------------

    def count(self, stage: int, op: int, column: str, n: int = 1, epoch_s: int | None = None) -> None:
        """Count arrivals that were not sent (``dropped`` or ``not_sent:<reason>``), ``issued`` ones (sent to
        the database; the ledger's ``unknown`` if this worker is lost before it reports their outcome), or
        ``unknown:<reason>`` ones (sent, still in flight when the account was closed)."""
        self._ledger[(stage, op, column)] += n
        if column == "dropped" and epoch_s is not None:
            self._dropped_secs[(int(epoch_s), op)] += n

    def log(self, level: str, message: str, at: float) -> None:
        """Keep a worker's warning or error for the master (at most 20 a second; the rest are counted)."""
        if len(self.logs) < 20:
            self.logs.append({"level": level, "message": message[:300], "at": round(at, 3)})
        elif len(self.logs) == 20:
            self.logs.append({"level": "WARNING", "message": "more log records this second were not shipped",
                              "at": round(at, 3)})

    def connect_result(self, outcome: str) -> None:
        """Count a connection attempt: ``ok``, ``failed``, or ``refused:<code>`` (the server said no)."""
        self.connects[outcome] += 1

    def loop_lag(self, stage: int, stall_us: int) -> None:
        if stall_us > self.loop_lag_us.get(stage, 0):
            self.loop_lag_us[stage] = stall_us

    def drain(self) -> dict:
        """Everything recorded since the last drain, as a msgpack-friendly payload.

        ``completed`` is [[stage, operation, n]]: the successes by the stage whose window holds their
        completion (`set_stage_windows`; empty before the windows are set), beside ``stages``, which groups
        every operation by the stage of its intended start."""
        return next(self.drain_in_parts(None))

    def drain_in_parts(self, part_size: int | None):
        """`drain`, as payloads of at most ``part_size`` operations each (one payload when None).

        A local run merges its own payloads in the pacer's process and lets the pacer run between
        parts: a second of 2,000 operations is 2 ms of work, at once a pause of the whole process.
        The first part carries the ledger's counts and the logs; merged together, the parts are the
        one payload `drain` makes. The parts are taken from the buffer at the call, so operations
        recorded while the caller goes through them wait for the next drain.
        """
        buf, self._buf = self._buf, bytearray()  # recording goes on into a new buffer before this one is exported
        records = np.frombuffer(buf, dtype=np.int64).reshape(-1, RECORD_FIELDS)  # read in place, no copy
        payload: dict = {
            "ops": list(self.operations), "stages": [], "intervals": [], "completed": [],
            "ledger": [[st, op, col, n] for (st, op, col), n in self._ledger.items()],
            "dropped_secs": [[sec, op, n] for (sec, op), n in self._dropped_secs.items()],
            "errors": {}, "loop_lag_us": [[st, us] for st, us in self.loop_lag_us.items()],
            "logs": self.logs, "connects": dict(self.connects),
        }
        self.logs = []
        self.connects = Counter()
        self._ledger.clear()
        self._dropped_secs.clear()
        self.loop_lag_us = {}
        step = part_size or len(records) or 1
        first = 0
        while True:
            yield self._measured(records[first:first + step], payload)
            first += step
            if first >= len(records):
                return
            payload = {"ops": payload["ops"], "stages": [], "intervals": [], "completed": [], "ledger": [],
                       "dropped_secs": [], "errors": {}, "loop_lag_us": [], "logs": [], "connects": {}}

    def _measured(self, records: np.ndarray, payload: dict) -> dict:
        """``payload`` with the histograms of the operations in ``records`` (rows of `RECORD`'s fields)."""
        if not len(records):
            return payload
        op, stage, intended, start, end, kind, retries = (records[:, i] for i in range(RECORD_FIELDS))
        resp = np.maximum(end - intended, 0) // NS_PER_US
        serv = np.maximum(end - start, 0) // NS_PER_US
        lag = np.maximum(start - intended, 0) // NS_PER_US
        sec = (end + self.wall_offset_ns) // NS_PER_S
        okm = kind == 0
        if self.raw_sink is not None:
            self.raw_sink(resp[okm].astype(np.int64))
        if self.stats_sink is not None:
            self.stats_sink(op[okm], resp[okm], end[okm] + self.wall_offset_ns)
        # both groupings' histogram buckets, in one pass over the three columns
        index = tuple(np.split(counts_index(np.concatenate([resp, serv, lag])), 3))
        stages = group_wire(np.stack([op, stage]), okm, kind, self.kinds, resp, serv, lag, retries, index)
        if len(stages) == 1 and bool((sec == sec[0]).all()):
            # the usual part: one operation, one stage, one second: the second's cell is the stage's, made once
            payload["intervals"] = [[int(sec[0]), stages[0][0], stages[0][2]]]
        else:
            payload["intervals"] = group_wire(np.stack([sec, op]), okm, kind, self.kinds, resp, serv, lag, retries,
                                              index)
        payload["stages"] = stages
        if self.stage_edges_ns is not None:
            done_ns = end + self.wall_offset_ns
            payload["completed"] = stage_completions(self.stage_edges_ns, done_ns[okm], op[okm])
        if not okm.all():
            for k in np.unique(kind[~okm]).tolist():
                name = self.kinds[k]
                if name in self.first_errors:
                    payload["errors"][name] = self.first_errors.pop(name)
        return payload


