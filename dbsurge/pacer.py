"""The pacer: intended start times for one worker's share of a stage plan (an open model).

Every worker knows the same `Schedule` and the same start time. The schedule numbers arrivals
0, 1, 2, ... and gives the time at which each is due (`Schedule.time_of`). With even spacing,
worker ``i`` of ``n`` takes arrivals ``i, i+n, i+2n, ...``, so the workers together deliver exactly
the plan, evenly spaced, without talking to each other. With Poisson arrivals each worker draws
its own Poisson process at ``1/n`` of the rate (the superposition of independent Poisson processes
is Poisson at the summed rate), by stepping through the arrival count in exponential increments
with mean ``n`` and mapping counts to times through the schedule, which handles ramps and live
changes the same way.

A user asks `next_slot()` for its next intended start, waits for it with `wait_for`, runs the
operation and records response time from the intended start. When every user is busy, slots go
late; the lateness is the lag. With ``max_lag_s`` set, slots later than that are skipped and
counted as dropped instead of being sent.
"""

from __future__ import annotations

import ctypes
import math
import os
import random
import sys
import time
from collections import deque
from dataclasses import dataclass

import gevent

from .stage_plan import Schedule

NS = 1_000_000_000

#: How long before a slot the pacer stops sleeping in the event loop and starts spinning.
#: libev's epoll backend rounds its timeouts up to whole milliseconds, so a plain gevent.sleep
#: wakes up to ~1 ms late; the last stretch is spent yielding to other greenlets in a loop
#: (gevent.sleep(0)), which keeps their I/O flowing while we watch the clock.
SPIN_NS = 1_100_000
#: Longest single sleep on the `Alarm` (a live rate change is noticed after at most this long).
MAX_SLEEP_NS = 250_000_000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class Alarm:
    """Wakes the calling greenlet at an absolute `time.perf_counter_ns` instant, without spinning.

    gevent's loop (libev) waits in ``epoll_wait``, whose timeout is in whole milliseconds, so a
    gevent timer fires up to a millisecond late. Spinning through that last millisecond (what the
    pacer did) keeps a CPU busy all the time once slots are less than a millisecond apart: a worker
    at 1,000 TPS burns a whole core, and on a host it shares with the database that core is taken
    from the server (measured on 2 cores: service time p50 3.0 ms spinning, 0.24 ms with the alarm).
    A Linux timerfd armed at the absolute ``CLOCK_MONOTONIC`` deadline (the clock behind
    ``perf_counter_ns`` on Linux) is an fd that becomes readable on time; the loop watches it like
    a socket, so the wait ends within microseconds of the deadline for two system calls.
    """

    _CLOCK_MONOTONIC = 1
    _TFD_TIMER_ABSTIME = 1
    _TFD_FLAGS = os.O_NONBLOCK | os.O_CLOEXEC  # TFD_NONBLOCK and TFD_CLOEXEC are the O_ values

    def __init__(self, libc, fd: int) -> None:
        self._settime = libc.timerfd_settime
        self.fd = fd
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        self._watcher = None

    @classmethod
    def create(cls) -> Alarm | None:
        """An alarm, or None where timerfd is missing (not Linux) or perf_counter is not CLOCK_MONOTONIC."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            if "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
                return None
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.timerfd_create(cls._CLOCK_MONOTONIC, cls._TFD_FLAGS)
        except (OSError, AttributeError):
            return None
        return cls(libc, fd) if fd >= 0 else None

    def sleep_until(self, deadline_ns: int) -> None:
        """Park this greenlet in the event loop until ``perf_counter_ns() >= deadline_ns``."""
        if self._watcher is None:
            self._watcher = gevent.get_hub().loop.io(self.fd, 1)
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, NS)
        if self._settime(self.fd, self._TFD_TIMER_ABSTIME, self._spec_ref, None) != 0:
            gevent.sleep(max(deadline_ns - time.perf_counter_ns(), 0) / NS)
            return
        try:
            gevent.get_hub().wait(self._watcher)
        finally:
            try:
                os.read(self.fd, 8)  # the expiration count: leaves the fd unreadable for the next wait
            except BlockingIOError:
                pass


@dataclass(frozen=True)
class Slot:
    """One intended start: when (perf_counter ns), which stage, and the global arrival number."""

    intended_ns: int
    stage: int
    number: float


class Pacer:
    """Intended start times for this worker, in `time.perf_counter_ns()` units.

    ``start_epoch_ns`` is the common start time as wall-clock (``time.time_ns()``) nanoseconds,
    sent by the master; each worker converts it to its own monotonic clock once, so stage
    boundaries are exact on every worker that keeps wall-clock time (NTP) in step.
    """

    def __init__(
        self,
        schedule: Schedule,
        *,
        start_epoch_ns: int,
        worker_index: int = 0,
        worker_count: int = 1,
        arrivals: str = "uniform",
        seed: int = 1,
        max_lag_s: float | None = None,
        clock_ns=time.perf_counter_ns,
        wall_ns=time.time_ns,
    ):
        if arrivals not in ("uniform", "poisson"):
            raise ValueError(f"unknown arrival process '{arrivals}': use uniform or poisson")
        self.schedule = schedule
        self.arrivals = arrivals
        self.clock_ns = clock_ns
        self.max_lag_ns = int(max_lag_s * NS) if max_lag_s else None
        self.start_ns = start_epoch_ns - (wall_ns() - clock_ns())
        self.start_epoch_ns = start_epoch_ns
        self.rng = random.Random(seed * 1_000_003 + worker_index)
        self.dropped: dict[int, int] = {}
        self.issued = 0  # slots handed out or dropped since the last take_counts()
        self.returned: deque[Slot] = deque()
        self.finished = False
        # Precise waits need the real monotonic clock (tests pass their own clocks).
        self._alarm = Alarm.create() if clock_ns is time.perf_counter_ns else None
        self._assign(worker_index, worker_count, from_number=0.0)

    # -- sharing the plan between workers -------------------------------------------------------

    def _assign(self, index: int, count: int, from_number: float) -> None:
        if count < 1 or not (0 <= index < count):
            raise ValueError(f"bad worker share {index}/{count}")
        self.index, self.count = index, count
        if self.arrivals == "uniform":
            k = math.ceil(from_number)
            self.next_number = float(k + ((index - k) % count))
        else:
            self.next_number = from_number + self.rng.expovariate(1.0) * count

    def reshare(self, index: int, count: int, from_number: float) -> None:
        """Take a new share of the plan from global arrival ``from_number`` on (a worker joined or left)."""
        self._assign(index, count, from_number)

    def set_schedule(self, schedule: Schedule) -> None:
        """Apply a live rate change; slots already taken keep their times."""
        self.schedule = schedule

    def elapsed_s(self) -> float:
        return (self.clock_ns() - self.start_ns) / NS

    # -- taking slots ---------------------------------------------------------------------------

    def _advance(self) -> None:
        if self.arrivals == "uniform":
            self.next_number += self.count
        else:
            self.next_number += self.rng.expovariate(1.0) * self.count

    def next_slot(self) -> Slot | None:
        """The next intended start for this worker, or None when the plan is over.

        Slots later than ``max_lag_s`` are skipped and counted in ``dropped`` per stage.
        """
        if self.returned:
            self.issued += 1
            return self.returned.popleft()
        sched = self.schedule
        while True:
            t = sched.time_of(self.next_number)
            if t == math.inf:
                self.finished = True
                return None
            number = self.next_number
            self._advance()
            self.issued += 1
            intended = self.start_ns + int(t * NS)
            if self.max_lag_ns is not None and self.clock_ns() - intended > self.max_lag_ns:
                stage = sched.stage_at(t)
                self.dropped[stage] = self.dropped.get(stage, 0) + 1
                continue
            return Slot(intended, sched.stage_at(t), number)

    def give_back(self, slot: Slot) -> None:
        """Return a slot a user took but could not run (it was stopped while waiting)."""
        self.returned.append(slot)
        self.issued -= 1

    def wait_for(self, slot: Slot) -> Slot | None:
        """Sleep until the slot is due and return it (re-timed if the rate changed meanwhile).

        Far from the slot, sleep in the event loop in steps of at most 250 ms, so a live rate
        change reaches a waiting slot quickly. The last stretch: on Linux, an `Alarm` (a timerfd
        the event loop watches) wakes us on time without using the CPU; elsewhere, yield in a tight
        loop for the last millisecond. Returns None when a rate change moved the slot past the end
        of the plan.
        """
        clock = self.clock_ns
        schedule = self.schedule
        alarm = self._alarm
        while True:
            remaining = slot.intended_ns - clock()
            if remaining <= 0:
                return slot
            if alarm is not None and remaining <= MAX_SLEEP_NS:
                alarm.sleep_until(slot.intended_ns)
            elif remaining <= SPIN_NS:
                gevent.sleep(0)
                continue
            else:
                gevent.sleep(min((remaining - SPIN_NS) / NS, 0.25))
            if self.schedule is not schedule:
                schedule = self.schedule
                t = schedule.time_of(slot.number)
                if t == math.inf:
                    return None
                slot = Slot(self.start_ns + int(t * NS), schedule.stage_at(t), slot.number)

    def take_counts(self) -> tuple[dict[int, int], int]:
        """Dropped slots per stage and slots issued (run or dropped) since the last call."""
        d, self.dropped = self.dropped, {}
        n, self.issued = self.issued, 0
        return d, n
