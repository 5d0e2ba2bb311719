"""Client threads that connect first and then start together: the scenarios' concurrent clients.

`run_client_threads` starts one thread per client; each connects (``connect(i)`` returns its
session and whatever the client needs), then all wait at a barrier, so that connecting is no
part of any measurement. Time zero (`Start`) is set once every client is connected (or has
failed to), and the clients go. A client that cannot connect is counted in
``Start.connect_errors`` and does nothing; ``before_go`` may refuse to go on (raise) instead.
A signal (Ctrl-C, SIGTERM) sets ``Start.stop``: the clients notice it between two calls, and
`run_client_threads` waits for them (at most `STOP_WAIT_S`) before it lets the signal go on.

It waits on an event each client sets as it ends, never on ``Thread.join``: a join that a signal
interrupts marks a thread that is still running as ended (CPython 3.11, the bpo-45274 clean-up
releases the lock the live thread holds), so a second join returns at once. A killed ycsb-load then
built its table while one client was still handing over its last 162 rows.

Threads, not greenlets: the scenarios run in the ``dbsurge`` process, which does not monkey-patch,
and the drivers release the GIL while they wait on the network.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dbsurge.measure.timing import now_ns
from dbsurge.scenarios.files import error_cell

CONNECT_TIMEOUT_S = 120.0
#: After a signal, how long the clients get to finish the call in hand and hand over their rows, so that a table
#: built after it counts what they did (a killed ycsb-load's table once counted 1,000 of its 2,000 inserts).
STOP_WAIT_S = 10.0


@dataclass
class Start:
    """Time zero of the clients (perf_counter_ns and the wall clock), the stop flag, failed connections."""

    t0_ns: int = 0
    t0_epoch_s: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    connect_errors: Counter = field(default_factory=Counter)


def run_client_threads(clients: int, connect: Callable[[int], tuple[Any, Any]],
                       work: Callable[[int, Any, Start], None], *, start_lead_s: float = 0.0,
                       before_go: Callable[[Start], None] | None = None, name: str = "client") -> Start:
    """Run ``work(i, state, start)`` in ``clients`` threads, together, after each ``connect(i)``.

    ``connect(i)`` returns ``(session, state)``; the session is closed when the client ends.
    Time zero is ``start_lead_s`` after the last client connected. Returns when every client ended.
    """
    start = Start()
    ready = threading.Barrier(clients + 1, timeout=CONNECT_TIMEOUT_S)
    go = threading.Event()
    lock = threading.Lock()
    ended = [threading.Event() for _ in range(clients)]

    def client(i: int) -> None:
        try:
            run_one(i)
        finally:
            ended[i].set()

    def run_one(i: int) -> None:
        try:
            session, state = connect(i)
        except Exception as e:  # noqa: BLE001 - a client that cannot connect sends nothing; the others go on
            with lock:
                start.connect_errors[error_cell(e)] += 1
            _wait(ready)
            return
        try:
            _wait(ready)
            go.wait()
            if not start.stop.is_set():
                work(i, state, start)
        finally:
            with contextlib.suppress(Exception):
                session.close()

    threads = [threading.Thread(target=client, args=(i,), name=f"{name}-{i}", daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    _wait(ready)
    start.t0_ns = now_ns() + int(start_lead_s * 1e9)
    start.t0_epoch_s = time.time() + start_lead_s
    try:
        if before_go is not None:
            before_go(start)
    except BaseException:
        start.stop.set()
        go.set()
        raise
    go.set()
    try:
        for done in ended:
            while not done.wait(timeout=0.5):
                pass
    except BaseException:  # Ctrl-C, SIGTERM: the clients stop after the call in hand, and what they did is written
        start.stop.set()
        deadline = time.monotonic() + STOP_WAIT_S
        for done in ended:
            done.wait(timeout=max(0.0, deadline - time.monotonic()))
        raise
    return start


def _wait(barrier: threading.Barrier) -> None:
    """Wait at the start barrier; a broken one (a client never arrived) lets everyone go on."""
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
