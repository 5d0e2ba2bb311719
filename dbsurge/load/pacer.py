"""The pacer: intended start times for one worker's share of a stage plan (an open model).

Every worker knows the same `Schedule`, the same start time and the same numbered arrivals
(`dbsurge.plan.arrivals.ArrivalSequence`: arrival ``k`` sits at position ``E_k`` on the plan's
cumulative-arrivals axis and is due at ``schedule.time_of(E_k)``). Worker ``i`` of ``n`` takes
arrivals ``i, i+n, i+2n, ...``, so the workers together deliver exactly the plan, uniform or
Poisson, without talking to each other.

A user asks `next_slot()` for its next intended start, waits for it with `wait_for`, runs the
operation and records response time from the intended start. When every user is busy, slots go
late; the lateness is the lag. With ``max_lag_s`` set, slots later than that are skipped and
counted as dropped instead of being sent.

The pacer keeps this worker's part of the run's ledger: every arrival of its share is sent (the
user records it as ok or failed), dropped, or written off as not sent with a reason when the pacer
is closed (`close`: the plan ended with slots still untaken, the run was interrupted), or as
unknown when its operation is still in flight at the end (`write_off_in_flight`). It reports those
counts to a *sink* (the `Recorder`), which ships them with the measurements.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import time
from collections import deque
from typing import Protocol

import gevent
import numpy as np

from dbsurge.plan.arrivals import ArrivalSequence, OperationMix
from dbsurge.plan.stage_plan import Schedule

NS = 1_000_000_000

#: How long before a slot the pacer stops sleeping in the event loop and starts spinning.
#: libev's epoll backend rounds its timeouts up to whole milliseconds, so a plain gevent.sleep
#: wakes up to ~1 ms late; the last stretch is spent yielding to other greenlets in a loop
#: (gevent.sleep(0)), which keeps their I/O flowing while we watch the clock.
SPIN_NS = 1_100_000
#: A slot due sooner than this is waited for by watching the clock, without yielding: a sleep in the
#: event loop (arm the timerfd, block in epoll_wait, be woken, switch greenlets twice, read the timerfd)
#: costs the process more CPU than this. Measured at 12,000-15,000 TPS in one process: about 7 µs
#: less CPU per operation, and no worse lag (bench/findings.md, "stop 32"); other greenlets wait at
#: most this long.
WAIT_OUT_NS = 10_000
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


class Slot:
    """One intended start: when (perf_counter ns), its stage and operation, and the arrival's number.

    Made once per operation: a plain class with ``__slots__`` (a frozen dataclass's ``__init__`` took
    0.6 µs, this one 0.16). Treat it as immutable: a re-timed slot is a new `Slot`.
    """

    __slots__ = ("intended_ns", "stage", "number", "op", "position")

    def __init__(self, intended_ns: int, stage: int, number: int, op: int, position: float) -> None:
        self.intended_ns = intended_ns
        self.stage = stage
        self.number = number
        self.op = op  # index into the pacer's operation mix
        self.position = position

    def __repr__(self) -> str:
        return (f"Slot(intended_ns={self.intended_ns}, stage={self.stage}, number={self.number}, op={self.op}, "
                f"position={self.position})")


class LedgerSink(Protocol):
    """Where the pacer reports the arrivals it did not send (the `Recorder`)."""

    def count(self, stage: int, op: int, column: str, n: int = 1, epoch_s: int | None = None) -> None: ...




class Pacer:
    """Intended start times for this worker, in `time.perf_counter_ns()` units.

    ``start_epoch_ns`` is the common start time as wall-clock (``time.time_ns()``) nanoseconds,
    sent by the master; each worker converts it to its own monotonic clock once, so stage
    boundaries are exact on every worker that keeps wall-clock time (NTP) in step.
    ``op_ids`` maps the mix's operation indexes to the sink's operation ids.
    """

    def __init__(
        self,
        schedule: Schedule,
        *,
        start_epoch_ns: int,
        mix: OperationMix | None = None,
        sink: LedgerSink | None = None,
        op_ids: list[int] | None = None,
        worker_index: int = 0,
        worker_count: int = 1,
        arrivals: str = "uniform",
        seed: int = 1,
        max_lag_s: float | None = None,
        clock_ns=time.perf_counter_ns,
        wall_ns=time.time_ns,
    ):
        self.schedule = schedule
        self.sequence = ArrivalSequence(arrivals, seed)
        if mix is None:
            mix = OperationMix([("op", 1.0)], seed)
        if sink is None:
            from dbsurge.measure.recorder import Recorder

            sink = Recorder()
        self.mix = mix
        self.sink = sink
        self.op_ids = op_ids if op_ids is not None else list(range(len(mix.names)))
        self.clock_ns = clock_ns
        self.max_lag_ns = int(max_lag_s * NS) if max_lag_s else None
        self.wall_offset_ns = wall_ns() - clock_ns()
        self.start_ns = start_epoch_ns - self.wall_offset_ns
        self.start_epoch_ns = start_epoch_ns
        self.returned: deque[Slot] = deque()
        self.in_flight: dict[int, Slot] = {}
        self.last_done_ns: int | None = None  # when an operation last came back (`target_silent`)
        self._issued: set[int] = set()  # numbers of in-flight slots already sent to the database
        self.closed: str | None = None  # the not-sent reason once closed
        self.paused = False  # cut off from the master: no slots until it gives a share again (`rejoin`)
        # a worker's lease (`dbsurge.engine.lease`): no slot is issued at or after this clock_ns instant
        # unless the master renewed it; None (a local run, the tests' own pacers): no lease needed
        self.lease_until_ns: int | None = None
        self._lapses: list[tuple[int, int]] = []  # [from, to) clock_ns spells in which the lease had lapsed
        self.stop_number: int | None = None  # leaving: arrivals from here on are the others' (`stop_at`)
        # closed: arrivals from here on were never planned (an open-ended plan cut where it stopped)
        self.cut_number: int | None = None
        self._pending: tuple[int, int, int] | None = None  # (index, count, from_number) of a reshare
        # Precise waits need the real monotonic clock (tests pass their own clocks).
        self._alarm = Alarm.create() if clock_ns is time.perf_counter_ns else None
        self._assign(worker_index, worker_count, from_number=0)

    # -- sharing the plan between workers -------------------------------------------------------

    def _assign(self, index: int, count: int, from_number: int) -> None:
        if count < 1 or not (0 <= index < count):
            raise ValueError(f"bad worker share {index}/{count}")
        self.index, self.count = index, count
        self.next_number = _first_of_share(index, count, from_number)

    def reshare(self, index: int, count: int, from_number: float) -> None:
        """Take share ``index`` of ``count`` from global arrival ``from_number`` on (a worker joined or left).

        Arrivals of the old share before ``from_number`` are still this worker's: the switch
        happens when the pacer reaches it, so no survivor skips its own slots.
        """
        if count < 1 or not (0 <= index < count):
            raise ValueError(f"bad worker share {index}/{count}")
        self._pending = (index, count, math.ceil(from_number))
        self._maybe_switch()

    def join_at(self, index: int, count: int, from_number: float) -> None:
        """A worker that joins mid-run: take share ``index`` of ``count`` from arrival ``from_number`` on.

        Unlike `reshare`, there is no old share to finish: the arrivals before ``from_number`` were the
        other workers' (already sent, or theirs to send), so starting anywhere earlier would send them twice.
        """
        self._pending = None
        self._assign(index, count, math.ceil(from_number))

    def _maybe_switch(self) -> None:
        if self._pending is not None and self.next_number >= self._pending[2]:
            self._assign(*self._pending)
            self._pending = None

    def set_schedule(self, schedule: Schedule, at_s: float | None = None) -> int:
        """Apply a live rate change at plan time ``at_s``; slots already taken keep their numbers and are re-timed.

        A change must not leave a backlog behind that outlives it: when this worker is more than
        `BACKLOG_S` behind, the untaken arrivals due before the change are written off as dropped
        (counted, never silent) instead of being sent flat out under the new rate. Returns how many.
        """
        self.schedule = schedule
        if at_s is None or self.closed is not None:
            return 0
        behind_s = (self.clock_ns() - self.start_ns) / NS - schedule.time_of(self.sequence.position(self.next_number))
        if not (behind_s > BACKLOG_S):
            return 0
        cutoff = self.sequence.first_at_or_after(schedule.cumulative(at_s))
        if self._pending is not None:
            cutoff = min(cutoff, self._pending[2])
        n = self._write_off(self.next_number, cutoff, self.count, "dropped")
        self.next_number = max(self.next_number, _first_of_share(self.index, self.count, cutoff))
        return n

    # -- the lease (dbsurge.engine.lease) -----------------------------------------------------------------

    def require_lease(self) -> None:
        """From now on, slots are issued only while a renewal holds (a worker, before its first renewal)."""
        if self.lease_until_ns is None:
            self.lease_until_ns = 0

    def renew_lease(self, until_ns: int) -> float | None:
        """The master renewed the lease until ``until_ns`` (this pacer's clock); an older renewal changes nothing.

        A renewal that ends a lapse records it: the arrivals that came due while no lease held are not
        sent later (`next_slot` books them not sent, ``worker_lost``), so a worker back from a stalled,
        CPU-starved or partitioned spell does not burst its backlog at the database. Only the lapse's
        last `LAPSE_CATCH_UP_S` may still go, late: the master kept the share (it renewed), so they
        cannot be sent twice, and a hiccup of a loaded host costs no arrivals, only lag.

        Returns how long the lapse this renewal ends lasted, in seconds (None when the lease held):
        the caller says so, since on a starved host this renewal may be the first thing that runs
        when the process gets the CPU back, before anything noticed that the lease had lapsed.
        """
        now, old = self.clock_ns(), self.lease_until_ns or 0
        ended = 0 < old <= now < until_ns
        if ended and now - old > LAPSE_CATCH_UP_NS:
            self._lapses.append((old, now - LAPSE_CATCH_UP_NS))  # the lapse's last half second may still go
        self.lease_until_ns = max(old, int(until_ns))
        return (now - old) / 1e9 if ended else None

    def _due_in_a_lapse(self, slot: Slot) -> bool:
        return any(a <= slot.intended_ns < b for a, b in self._lapses)

    def leased(self) -> bool:
        """True while this pacer may issue a slot: no lease is needed, or the last renewal still holds."""
        return self.lease_until_ns is None or self.clock_ns() < self.lease_until_ns

    # -- taking slots ---------------------------------------------------------------------------

    def next_slot(self) -> Slot | None:
        """The next intended start for this worker, or None when the plan is over or the pacer closed.

        Slots later than ``max_lag_s`` are skipped and counted as dropped.
        """
        if self.closed is not None or self.paused or not self.leased():
            return None
        sched = self.schedule
        while True:
            if self.returned:
                slot = self.returned.popleft()
            else:
                self._maybe_switch()
                k = self.next_number
                if self.stop_number is not None and k >= self.stop_number:
                    return None
                e = self.sequence.position(k)
                t = sched.time_of(e)
                if t == math.inf:
                    return None
                self.next_number = k + self.count
                if k % 4096 == 0:
                    self.sequence.forget_before(k - 8192)
                slot = Slot(self.start_ns + int(t * NS), sched.stage_of(e), k, self.mix.of(k), e)
            if self._lapses and self._due_in_a_lapse(slot):
                if self._planned(slot):
                    self.sink.count(slot.stage, self.op_ids[slot.op], "not_sent:worker_lost")
                continue
            if self.max_lag_ns is not None and self.clock_ns() - slot.intended_ns > self.max_lag_ns:
                self.sink.count(slot.stage, self.op_ids[slot.op], "dropped", 1,
                                (slot.intended_ns + self.wall_offset_ns) // NS)
                continue
            self.in_flight[slot.number] = slot
            return slot

    def nothing_left(self) -> bool:
        """Every arrival of this share is taken and finished, dropped or written off."""
        return (self._pending is None and not self.in_flight and not self.returned
                and self.sequence.position(self.next_number) >= self.schedule.total())

    def give_back(self, slot: Slot) -> None:
        """Return a slot a user took but did not run (stopped while waiting, or the pacer closed)."""
        if self.in_flight.pop(slot.number, None) is None:
            return  # already written off
        if slot.position >= self.schedule.total():
            return  # a rate change moved it past the plan's end: no longer planned
        if self.closed is not None:
            if self._planned(slot):
                self.sink.count(slot.stage, self.op_ids[slot.op], "not_sent:" + self.closed)
        else:
            self.returned.appendleft(slot)

    def issued(self, slot: Slot) -> None:
        """A user is sending the slot's operation to the database (the ledger's ``unknown`` if never reported)."""
        self.sink.count(slot.stage, self.op_ids[slot.op], "issued")
        self._issued.add(slot.number)

    def done(self, slot: Slot) -> bool:
        """A user finished the slot's operation: True when it is to be recorded.

        False when the slot was written off meanwhile (`write_off_in_flight`): it is already in
        the ledger as not sent, and recording it too would count it twice.
        """
        self.last_done_ns = self.clock_ns()
        self._issued.discard(slot.number)
        return self.in_flight.pop(slot.number, None) is not None

    def target_silent(self, silent_s: float) -> bool:
        """The evidence that the database, not the generator, held this share back: operations are
        out (slots past their due time, held by users) and none has come back for ``silent_s``.

        Every user is then waiting on the database (a free one would have taken the untaken slots),
        which did not answer: blackholed, paused, or stalled."""
        now = self.clock_ns()
        if not any(s.intended_ns <= now for s in self.in_flight.values()):
            return False
        last = self.last_done_ns if self.last_done_ns is not None else self.start_ns
        return now - max(last, self.start_ns) >= silent_s * NS

    def wait_for(self, slot: Slot) -> Slot | None:
        """Sleep until the slot is due and return it (re-timed if the rate changed meanwhile).

        Far from the slot, sleep in the event loop in steps of at most 250 ms, so a live rate
        change or a close reaches a waiting slot quickly. The last stretch: on Linux, an `Alarm` (a
        timerfd the event loop watches) wakes us on time without using the CPU; elsewhere, yield in
        a tight loop for the last millisecond. Returns None (the caller gives the slot back) when a
        rate change moved the slot past the end of the plan, the pacer was closed, or its lease lapsed
        (checked last thing before the slot is returned: a user runs it at once, without yielding).
        """
        clock = self.clock_ns
        schedule = self.schedule
        alarm = self._alarm
        while True:
            if self.closed is not None or self.paused or not self.leased():
                return None  # a lapsed lease: the slot goes back, unsent (it may be someone else's soon)
            remaining = slot.intended_ns - clock()
            if remaining <= 0:
                return slot
            if remaining <= WAIT_OUT_NS and alarm is not None:  # closer than a sleep costs (WAIT_OUT_NS), on
                while clock() < slot.intended_ns:  # the real clock only (an alarm needs it; a test's stands still)
                    pass
                continue
            if alarm is not None and remaining <= MAX_SLEEP_NS:
                alarm.sleep_until(slot.intended_ns)
            elif remaining <= SPIN_NS:
                gevent.sleep(0)
                continue
            else:
                gevent.sleep(min((remaining - SPIN_NS) / NS, 0.25))
            if self.schedule is not schedule:
                schedule = self.schedule
                t = schedule.time_of(slot.position)
                if t == math.inf:
                    return None
                slot = Slot(self.start_ns + int(t * NS), schedule.stage_of(slot.position), slot.number, slot.op,
                            slot.position)
                if slot.number in self.in_flight:
                    self.in_flight[slot.number] = slot

    # -- losing the master, and coming back ------------------------------------------------------

    def stop_at(self, number: int) -> None:
        """Leaving: keep taking this share's arrivals below ``number``, none from it on."""
        self.stop_number = int(number)
        self._pending = None

    def pause(self) -> None:
        """Stop issuing slots: this worker lost sight of the master, which may give its share away."""
        self.paused = True

    def rejoin(self, index: int, count: int, from_number: float, write_off_until: float) -> int:
        """Resume after a pause with share ``index`` of ``count`` from ``from_number``.

        This worker's own untaken arrivals before ``write_off_until`` (where the master gave its share
        away, or ``from_number`` if it never did) are booked as not sent (``worker_lost``); any after
        that belong to the workers that took the share over. Returns how many were booked.
        """
        until = math.ceil(write_off_until)
        column = "not_sent:worker_lost"
        n = 0
        for slot in self.returned:
            if slot.number < until:
                self.sink.count(slot.stage, self.op_ids[slot.op], column)
                n += 1
        self.returned.clear()
        if self._pending is not None:
            index0, count0, f0 = self._pending
            n += self._write_off(self.next_number, min(f0, until), self.count, column)
            n += self._write_off(_first_of_share(index0, count0, f0), until, count0, column)
            self._pending = None
        else:
            n += self._write_off(self.next_number, until, self.count, column)
        self._assign(index, count, math.ceil(from_number))
        self.paused = False
        return n

    # -- the end: what was not sent -------------------------------------------------------------

    def position_at(self, epoch_s: float) -> float:
        """The plan's cumulative-arrivals position at a wall-clock time."""
        return self.schedule.cumulative(epoch_s - self.start_epoch_ns / NS)

    def close(self, reason: str, until_position: float | None = None) -> int:
        """Stop issuing slots; count every untaken arrival of this share as not sent for ``reason``.

        ``until_position`` bounds the count for an open-ended plan (the position at the stop);
        a finite plan counts to its end. Returns the number written off. Idempotent.
        """
        if self.closed is not None:
            return 0
        self.closed = reason
        end = self.schedule.total() if until_position is None else min(until_position, self.schedule.total())
        if not math.isfinite(end):
            end = self.schedule.cumulative(max(0.0, (self.clock_ns() - self.start_ns) / NS))
        column = "not_sent:" + reason
        stop_k = self.sequence.first_at_or_after(end)
        if until_position is not None and until_position >= 0:
            # an open-ended plan cut where it stopped: arrivals from here on were never planned, and
            # a slot beyond the cut that a user took ahead of its time is let go uncounted. (A leaving
            # worker passes -1: nothing of its share is left to write off, and what it holds is its own.)
            self.cut_number = stop_k
        n = 0
        for slot in self.returned:
            if slot.number < stop_k:
                self.sink.count(slot.stage, self.op_ids[slot.op], column)
                n += 1
        self.returned.clear()
        if self._pending is not None:
            index, count, from_number = self._pending
            n += self._write_off(self.next_number, min(from_number, stop_k), self.count, column)
            n += self._write_off(_first_of_share(index, count, from_number), stop_k, count, column)
        else:
            n += self._write_off(self.next_number, stop_k, self.count, column)
        return n

    def _write_off(self, k0: int, k1: int, step: int, column: str) -> int:
        """Count arrivals ``k0, k0+step, ... < k1`` in the ledger under ``column``, by stage and operation."""
        n = 0
        starts = np.array(self.schedule.stage_starts())
        for a in range(k0, k1, step * CHUNK):
            ks = np.arange(a, min(k1, a + step * CHUNK), step, dtype=np.int64)
            if ks.size == 0:
                continue
            pos = self.sequence.positions(int(ks[0]), int(ks[-1]) + 1)[ks - ks[0]]
            stages = np.clip(np.searchsorted(starts, pos, side="right") - 1, 0, len(starts) - 2)
            ops = self.mix.of_many(ks)
            keys, counts = np.unique(stages * 1024 + ops, return_counts=True)
            for key, c in zip(keys.tolist(), counts.tolist()):
                self.sink.count(key // 1024, self.op_ids[key % 1024], column, c)
                n += c
        return n

    def write_off_in_flight(self, reason: str = "in_flight") -> tuple[int, float]:
        """Write off every slot still held by a user; returns (count, oldest age in seconds).

        A slot whose operation was sent to the database (`issued`) is ``unknown:<reason>``: it went
        out, and nobody can say whether the database did it. One only taken (its user had not sent
        it yet) is ``not_sent:<reason>``. A slot past the cut of a closed open-ended plan was taken
        ahead of its time by a waiting user: it was never planned, so it is let go without a count.
        """
        now = self.clock_ns()
        oldest = 0.0
        n = 0
        for slot in self.in_flight.values():
            if self._planned(slot):
                op = self.op_ids[slot.op]
                if slot.number in self._issued:  # its outcome is accounted now, as unknown: no longer just issued
                    self.sink.count(slot.stage, op, "unknown:" + reason)
                    self.sink.count(slot.stage, op, "issued", -1)
                else:
                    self.sink.count(slot.stage, op, "not_sent:" + reason)
                oldest = max(oldest, (now - slot.intended_ns) / NS)
                n += 1
        self.in_flight.clear()
        self._issued.clear()
        return n, oldest

    def _planned(self, slot: Slot) -> bool:
        """False for a slot past the cut of a closed plan (`close`): no ledger entry is due for it."""
        return self.cut_number is None or slot.number < self.cut_number


#: At the plan's end, a share whose operations have all been out this long with none back is the
#: target's: what it could not issue is ``target_silent`` (exit 1), not ``users_exhausted`` (exit 3).
TARGET_SILENT_S = 1.0
CHUNK = 1 << 20  # arrivals counted per numpy pass when closing
#: Of a lapsed lease's spell, how much (its end) may still be sent late once a renewal holds again:
#: the catch-up bound after a lapse is this much of the worker's share (docs/architecture.md, "The lease").
LAPSE_CATCH_UP_S = 0.5
LAPSE_CATCH_UP_NS = int(LAPSE_CATCH_UP_S * 1e9)

#: How far behind the plan a worker may be when the rate changes before the old backlog is dropped.
BACKLOG_S = 1.0


def _first_of_share(index: int, count: int, from_number: int) -> int:
    """The smallest k >= from_number with k = index (mod count)."""
    return from_number + ((index - from_number) % count)


#: The shortest pause `Breather` makes: a timer, so that the wait goes through a poll of the event loop.
YIELD_S = 0.00005


#: The share of a process's time that its background work (a local run's once-a-second merge, a worker's
#: drains) may take while it runs, between the pacer's turns (`Breather`).
BACKGROUND_SHARE = 0.25
#: The longest pause `Breather` makes between two pieces.
MAX_BREATH_S = 0.01


class Breather:
    """Pauses between the pieces of a burst of background work, so that the users keep up with the plan meanwhile.

    A process that paces its users near its ceiling has little time to spare: at 16,000 TPS in one
    process the users took 88% of a core. Its once-a-second work (a second's drain in 40 parts, their
    merges, the rows and files) is 25-30 ms of pieces of up to 0.6 ms; with only one turn of the loop
    (50 µs) between them, it ran in a burst that took most of the process for 40 ms, the users fell
    behind and every slot due meanwhile went out late (a per-second lag p99 of 1.3-5 ms). Each call
    lets the users run for three times the piece that came before it (the work takes at most
    `BACKGROUND_SHARE` of the process while it lasts, spread over 100-200 ms instead of 40): in three
    alternating runs at 16,000 TPS the median second's lag p99 went from 1.2-3.3 ms to 0.7-0.9 ms
    (bench/findings.md, "stop 36"). The first piece counts from the breather's creation.

    Every pause is a timer (at least `YIELD_S`), never `gevent.sleep(0)`: gevent runs the callbacks
    that sleep(0) schedules back to back for up to its switch interval (5 ms) before it polls, and a
    pacer's alarm is an fd that only a poll sees. A timer is checked after the poll. (`gevent.idle`
    polls too, but waits until nothing else is pending, which a process saturated by its users may
    not be for a long time.)
    """

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = time.perf_counter_ns()

    def __call__(self) -> None:
        piece_s = (time.perf_counter_ns() - self._since) / NS
        rest = piece_s * (1.0 - BACKGROUND_SHARE) / BACKGROUND_SHARE
        gevent.sleep(min(max(rest, YIELD_S), MAX_BREATH_S))
        self._since = time.perf_counter_ns()
