"""C clients, each on its own connection in its own thread, each sending R operations per second.

Study 000 drives its cache experiments with a fixed number of clients at a fixed rate each (100
connections x 30 ops/s to warm, 20 x 5 to re-warm). Each client here follows a schedule that does
not drift, as YCSB's throttle does: operation ``n`` of client ``i`` is due at
``t0 + i * interval / C + n * interval``, so the C clients' arrivals interleave evenly. A client
that falls behind runs its next operation at once and the delay counts: latency is measured from
the intended start (response time), service time beside it.

Threads, not greenlets: the scenarios run in the ``dbsurge`` process, which does not monkey-patch,
and the drivers release the GIL while they wait on the network. The rates here are small (hundreds
of operations per second), far below where the GIL would distort a measurement.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# (session, client_index) -> (next_key, run): next_key() picks the operation's key (or None),
# run(key) performs one complete operation and raises on failure. Only run(key) is timed.
MakeOperation = Callable[[Any, int], tuple[Callable[[], Any], Callable[[Any], object]]]
CONNECT_TIMEOUT_S = 120.0


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


@dataclass
class _ClientLog:
    count: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    last_end_ns: int = 0
    operations: list[Timed] = field(default_factory=list)


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
    interval_ns = int(1e9 / rate_per_client)
    ready = threading.Barrier(clients + 1, timeout=CONNECT_TIMEOUT_S)
    go = threading.Event()
    stop = threading.Event()
    clock: dict[str, int] = {}
    logs = [_ClientLog() for _ in range(clients)]
    connect_errors: Counter = Counter()
    lock = threading.Lock()

    def client(i: int) -> None:
        session = None
        try:
            session = connect(i)
            next_key, run = make_operation(session, i)
        except Exception as e:  # noqa: BLE001 - a client that cannot connect sends nothing; the others go on
            with lock:
                connect_errors[_one_line(e)] += 1
            _wait(ready)
            return
        try:
            _wait(ready)
            go.wait()
            t0, end = clock["t0"], clock["end"]
            intended = t0 + (i * interval_ns) // clients
            log = logs[i]
            perf = time.perf_counter_ns
            while intended < end and not stop.is_set():
                delay = intended - perf()
                if delay > 0:
                    time.sleep(delay / 1e9)
                key = next_key()
                start = perf()
                try:
                    run(key)
                    error = ""
                except Exception as e:  # noqa: BLE001 - a failed operation is data, not a crash
                    error = _one_line(e)
                end_ns = perf()
                log.count += 1
                log.last_end_ns = end_ns
                if error:
                    log.errors[error] += 1
                else:
                    log.latencies_ms.append((end_ns - min(intended, start)) / 1e6)
                if keep_operations:
                    log.operations.append(Timed(i, key, intended, start, end_ns, error))
                intended += interval_ns
        finally:
            with contextlib.suppress(Exception):
                session.close()

    threads = [threading.Thread(target=client, args=(i,), name=f"client-{i}", daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    _wait(ready)
    t0 = time.perf_counter_ns() + int(start_lead_s * 1e9)
    t0_epoch = time.time() + start_lead_s
    clock.update(t0=t0, end=t0 + int(duration_s * 1e9))
    go.set()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
    except KeyboardInterrupt:
        stop.set()
        raise
    result = PacedResult(t0_ns=t0, t0_epoch_s=t0_epoch, duration_s=duration_s, connect_errors=connect_errors,
                         last_end_ns=t0)
    for log in logs:
        result.count += log.count
        result.latencies_ms += log.latencies_ms
        result.errors.update(log.errors)
        result.last_end_ns = max(result.last_end_ns, log.last_end_ns)
        result.operations += log.operations
    result.operations.sort(key=lambda op: op.intended_ns)
    return result


def _wait(barrier: threading.Barrier) -> None:
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass


def _one_line(e: BaseException) -> str:
    from dbsurge.redact import redact_text

    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return redact_text(f"{type(e).__name__}: {first[:160]}")
