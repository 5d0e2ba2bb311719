"""The one way dbsurge times an operation: `time_call`, on ``time.perf_counter_ns``.

An operation is timed from just before the call to just after it returns; whatever must happen
for the operation to be complete (fetching a cursor's rows, iterating a batch) is the called
function's job, inside the timed block. A failure is a measurement too: the exception is
returned, not raised, with the time it took::

    >>> ok, value, start_ns, end_ns = time_call(sum, (1, 2, 3))
    >>> ok, value, end_ns >= start_ns
    (True, 6, True)
    >>> ok, error, _, _ = time_call(int, "x")
    >>> ok, type(error).__name__
    (False, 'ValueError')

`time_call` allocates nothing but its result tuple, so a hot loop (the engine's user loop, a
scenario's client thread) calls it per operation. Only ``Exception`` is caught: ``KeyboardInterrupt``,
``SystemExit`` and gevent's ``GreenletExit`` go through.

`Laps` times consecutive pieces of one long operation (a cursor read batch by batch): each `lap`
returns the nanoseconds since the previous one, and `restart` leaves out time the caller spends
between pieces.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

__all__ = ["Laps", "elapsed_ms", "now_ns", "time_call"]

#: The clock of every timed operation (monotonic, nanoseconds; not a wall clock).
now_ns = perf_counter_ns


def time_call(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any, int, int]:
    """``fn(*args)``, timed: ``(ok, result or exception, start_ns, end_ns)`` on ``perf_counter_ns``."""
    start = perf_counter_ns()
    try:
        result = fn(*args)
    except Exception as e:  # noqa: BLE001 - a failed operation is a measurement, handed to the caller
        return False, e, start, perf_counter_ns()
    return True, result, start, perf_counter_ns()


def elapsed_ms(start_ns: int, end_ns: int) -> float:
    """``end_ns - start_ns`` in milliseconds."""
    return (end_ns - start_ns) / 1e6


class Laps:
    """Consecutive pieces of one operation: ``lap()`` -> ns since the last lap (or the start)."""

    __slots__ = ("last_ns", "start_ns")

    def __init__(self) -> None:
        self.start_ns = self.last_ns = perf_counter_ns()

    def lap(self) -> int:
        """Nanoseconds since the previous lap, `restart` or creation; the next lap counts from now."""
        now = perf_counter_ns()
        took, self.last_ns = now - self.last_ns, now
        return took

    def restart(self) -> None:
        """The next lap counts from now (time since the last lap is left out)."""
        self.last_ns = perf_counter_ns()

    def since_start_ns(self) -> int:
        return perf_counter_ns() - self.start_ns
