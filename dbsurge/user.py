"""The Locust user that runs database operations, open or closed model.

Each user holds one connection (a `Session` of the target) and a set of operation callables
from its workload. Under an arrival-rate shape, users take intended start times from the
worker's pacer one at a time: one user waits for the next slot while the others wait their
turn, so a slot is never held by a user that is busy, and a live rate change reaches the very
next slot. Without a shape the users run operations back to back (Locust's closed model), and
response time equals service time.

This is the one place where operations are timed (`time.perf_counter_ns`), around the call, with
any cursor consumed inside it.
"""

from __future__ import annotations

import logging
import random
import time
from bisect import bisect_right
from itertools import accumulate

import gevent
from gevent import GreenletExit
from locust import User, constant, task
from locust.user.users import LOCUST_STATE_STOPPING

from .redact import redact_text

log = logging.getLogger("dbsurge")
_user_numbers = iter(range(1, 1 << 62))


class DbUser(User):
    """Base of dbsurge's users; a concrete subclass names its ``workload``."""

    abstract = True
    workload: str = ""
    wait_time = constant(0)

    @task
    def run_operations(self) -> None:
        run = getattr(self.environment, "dbsurge", None)
        if run is None:
            raise RuntimeError("dbsurge is not set up: import dbsurge.locust_plugin in the locustfile")
        if not run.ready.wait(timeout=30):
            log.error("no plan from the master after 30 s; this user stays idle")
            gevent.sleep(3600)
            return
        _operation_loop(self, run)


def _operation_loop(user: DbUser, run) -> None:
    number = next(_user_numbers)
    rng = random.Random(run.options.seed * 7919 + number * 104729 + (run.pacer.index if run.pacer else 0))
    workload = run.workload(user.workload)
    weights = [(n, w) for n, w in run.operation_weights if n in workload.operations] or \
        [(n, w) for n, w in workload.operations.items() if w > 0]
    names = [n for n, _ in weights]
    cum = list(accumulate(w for _, w in weights))
    total = cum[-1]
    recorder = run.recorder
    op_ids = [recorder.op_id(n) for n in names]
    session = run.target.connect()
    fns_map = workload.new_client(session, rng.randrange(1 << 30))
    fns = [fns_map[n] for n in names]
    fire = user.environment.events.request.fire
    request_type = workload.name
    clock = time.perf_counter_ns
    record = recorder.record
    choose = rng.random
    single = len(fns) == 1
    try:
        while user._state != LOCUST_STATE_STOPPING:
            pacer = run.pacer
            if pacer is not None:
                with run.slot_lock:
                    slot = pacer.next_slot()
                    if slot is not None:
                        try:
                            slot = pacer.wait_for(slot)
                        except GreenletExit:
                            pacer.give_back(slot)
                            raise
                if slot is None:  # the plan is over: stay idle until the shape stops the test
                    gevent.sleep(0.5)
                    continue
                intended, stage = slot.intended_ns, slot.stage
            else:
                intended, stage = 0, 0
            k = 0 if single else bisect_right(cum, choose() * total)
            retries_before = session.retries
            start = clock()
            try:
                fns[k]()
                exc = None
            except Exception as e:  # a failed operation is data, not a crash
                exc = e
            end = clock()
            if intended == 0:
                intended = start
            retries = session.retries - retries_before
            record(op_ids[k], stage, intended, start, end, exc is None, retries)
            fire(request_type=request_type, name=names[k], response_time=(end - intended) / 1e6,
                 response_length=0, exception=exc, context=None)
            if exc is not None:
                # a broken connection is the session's business: it reconnects before the next operation
                recorder.error(_error_kind(exc))
    finally:
        try:
            session.close()
        except Exception:
            pass


def _error_kind(exc: Exception) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return redact_text(f"{type(exc).__name__}: {first[:160]}")
