"""C clients, each on its own connection in its own thread, each sending R operations per second.

Study 000 drives its cache experiments with a fixed number of clients at a fixed rate each (100
connections x 30 ops/s to warm, 20 x 5 to re-warm). The intended start times are the engine's:
the C clients share one plan at C x R operations per second (`dbsurge.plan.stage_plan.Schedule`),
numbered by `dbsurge.plan.arrivals.ArrivalSequence` (uniform), and client ``i`` takes arrivals
``i, i + C, i + 2C, ...`` as an engine worker takes its share. So operation ``n`` of client ``i`` is
due at ``t0 + (n * C + i) / (C * R)``: the clients' arrivals interleave evenly and the schedule
does not drift. A client that falls behind runs its next operation at once and the delay counts:
latency is measured from the intended start (response time), service time beside it.

Why not the engine's pacer itself: it runs in Locust's gevent workers (``dbsurge run``, a child
process), and these scenarios measure in the ``dbsurge`` process, one real connection per client
thread, next to steps the engine has no part in (snapshots, restarts). The rates here are small
(hundreds of operations per second), far below where the GIL would distort a measurement; the
drivers release it while they wait on the network. Every operation is timed by
`dbsurge.measure.timing.time_call`, as in the engine.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dbsurge.measure.timing import now_ns, time_call
from dbsurge.plan.arrivals import ArrivalSequence
from dbsurge.plan.stage_plan import Schedule, StagePlan
from dbsurge.scenarios.client_threads import Start, run_client_threads
from dbsurge.scenarios.files import error_cell

# (session, client_index) -> (next_key, run): next_key() picks the operation's key (or None),
# run(key) performs one complete operation and raises on failure. Only run(key) is timed.
MakeOperation = Callable[[Any, int], tuple[Callable[[], Any], Callable[[Any], object]]]


@dataclass(frozen=True, slots=True)
class Timed:
    """One operation: the client, its key, the intended/actual start and end (perf_counter_ns)."""

    client: int
    key: Any
    intended_ns: int
    start_ns: int
    end_ns: int
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def response_ms(self) -> float:
        return (self.end_ns - min(self.intended_ns, self.start_ns)) / 1e6

    @property
    def service_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass
class PacedResult:
    """What the clients did, and when time zero was.

    ``operations`` holds every operation (in order of intended start) when they were kept;
    ``latencies_ms`` (successful operations' response times), ``count`` and ``errors`` always.
    """

    t0_ns: int
    t0_epoch_s: float
    duration_s: float
    count: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    last_end_ns: int = 0
    operations: list[Timed] = field(default_factory=list)
    connect_errors: Counter = field(default_factory=Counter)

    def since_start_s(self, ns: int) -> float:
        return (ns - self.t0_ns) / 1e9

    @property
    def elapsed_s(self) -> float:
        return max(0.0, (self.last_end_ns - self.t0_ns) / 1e9)

    def add(self, log: _ClientLog) -> None:
        self.count += log.count
        self.latencies_ms += log.latencies_ms
        self.errors.update(log.errors)
        self.last_end_ns = max(self.last_end_ns, log.last_end_ns)
        self.operations += log.operations


@dataclass
class _ClientLog:
    count: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    last_end_ns: int = 0
    operations: list[Timed] = field(default_factory=list)


class _Share:
    """Client ``i`` of ``C``: the intended times (ns after time zero) of arrivals ``i, i + C, ...``."""

    def __init__(self, schedule: Schedule, client: int, clients: int) -> None:
        self.schedule = schedule
        self.sequence = ArrivalSequence("uniform", seed=0)
        self.k = client
        self.step = clients

    def next_ns(self) -> float:
        """The next arrival's intended time in ns since time zero (inf past the plan's end)."""
        t = self.schedule.time_of(self.sequence.position(self.k))
        self.k += self.step
        return t * 1e9


def run_paced_clients(*, clients: int, rate_per_client: float, duration_s: float, connect: Callable[[int], Any],
                      make_operation: MakeOperation, keep_operations: bool = True,
                      start_lead_s: float = 0.05) -> PacedResult:
    """Run ``clients`` threads at ``rate_per_client`` operations per second each for ``duration_s``.

    Every client connects first (``connect(i)`` returns a session with ``close()``); time zero is
    set once all have connected, so connecting is not part of any operation's latency. A client
    that cannot connect is counted in ``connect_errors`` and sends nothing. Without
    ``keep_operations`` only the latencies and counts are kept (a long warm phase at thousands of
    operations per second would otherwise hold millions of records).
    """
    schedule = Schedule.from_plan(StagePlan.constant(clients * rate_per_client, duration_s))
    logs = [_ClientLog() for _ in range(clients)]

    def open_client(i: int) -> tuple[Any, Any]:
        session = connect(i)
        return session, make_operation(session, i)

    def client(i: int, operation: Any, start: Start) -> None:
        next_key, run = operation
        _paced_loop(_Share(schedule, i, clients), next_key, run, start, logs[i], i, keep_operations)

    start = run_client_threads(clients, open_client, client, start_lead_s=start_lead_s)
    result = PacedResult(t0_ns=start.t0_ns, t0_epoch_s=start.t0_epoch_s, duration_s=duration_s,
                         connect_errors=start.connect_errors, last_end_ns=start.t0_ns)
    for log in logs:
        result.add(log)
    result.operations.sort(key=lambda op: op.intended_ns)
    return result


def _paced_loop(share: _Share, next_key: Callable[[], Any], run: Callable[[Any], object], start: Start,
                log: _ClientLog, i: int, keep_operations: bool) -> None:
    """One client's operations, each at its intended time (or at once when behind)."""
    t0, stop = start.t0_ns, start.stop
    offset = share.next_ns()
    while offset != float("inf") and not stop.is_set():
        intended = t0 + round(offset)
        delay = intended - now_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        key = next_key()
        ok, value, begun, end = time_call(run, key)
        error = "" if ok else error_cell(value)
        log.count += 1
        log.last_end_ns = end
        if error:
            log.errors[error] += 1
        else:
            log.latencies_ms.append((end - min(intended, begun)) / 1e6)
        if keep_operations:
            log.operations.append(Timed(i, key, intended, begun, end, error))
        offset = share.next_ns()
