"""The Locust user that runs database operations, open or closed model.

Each user holds one connection (a `Session` of the target) and a set of operation callables
from its workload. Under an arrival-rate shape, users take intended start times from the
worker's pacer one at a time: one user waits for the next slot while the others wait their
turn, so a slot is never held by a user that is busy, and a live rate change reaches the very
next slot. Without a shape the users run operations back to back (Locust's closed model), and
response time equals service time.

This is the one place where operations are timed (`time.perf_counter_ns`), around the call, with
any cursor consumed inside it, and bounded (a libev timer of the user a little past the target's
``op_timeout_s``, behind the driver's own socket and statement timeouts). Every slot a user takes
ends in the ledger: a success, a failure of some kind (a user that cannot connect records a
``connect`` failure for each slot it takes, and retries the connection with exponential backoff,
never in a hot loop), or, when the pacer wrote it off meanwhile, nothing more.
"""

from __future__ import annotations

import logging
import random
import time
from bisect import bisect_right
from itertools import accumulate

import gevent
from gevent import GreenletExit, get_hub, getcurrent
from locust import User, constant, task
from locust.user.users import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING

from dbsurge.base.backoff import Backoff
from dbsurge.base.errors import OperationTimeout
from dbsurge.load.refusals import ConnectFailure, as_connect_error, describe, refusal_code
from dbsurge.measure.timing import time_call
from dbsurge.plan.arrivals import operation_mix_weights

log = logging.getLogger("dbsurge")
_user_numbers = iter(range(1, 1 << 62))


class DbUser(User):
    """Base of dbsurge's users; a concrete subclass names its ``workload``."""

    abstract = True
    workload: str = ""
    wait_time = constant(0)

    def stop(self, force: bool = False):
        """Stop this user; while a plan runs, after the slot it is on (the operation loop checks the state).

        When a worker joins, Locust moves users to it from the others and, without ``--stop-timeout``,
        kills each user it stops where it stands: an operation under way would have no result, and the
        ledger would book its slot as in flight at the end. (Deciding by whether the user holds a slot
        right now is not enough: a kill lands a loop iteration later, when it may have taken one.)
        Once the plan is closed, its slots are written off already, and a kill loses nothing.
        """
        run = getattr(self.environment, "dbsurge", None)
        pacer = getattr(run, "pacer", None)
        if force and pacer is not None and pacer.closed is None \
                and self._state in (LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING):
            self._state = LOCUST_STATE_STOPPING
            return False
        return super().stop(force)

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


def end_the_last_tests_users(runner) -> int:
    """At a test's start (Locust's ``test_start``): end the users the last test asked to stop that have not ended
    yet; how many.

    `DbUser.stop` lets a user finish its slot, so a Stop leaves users alive for up to half a second (the sleep
    of a user with no slot). Locust sizes the next test's spawn by the users alive when it starts
    (``LocalRunner._start``, ``WorkerRunner.start_worker``): a leftover counted as one of the new pool, then
    ended, and a web UI Start right after a Stop got fewer users than it asked for, or none (the second test
    sent nothing for 20 s). The last test's plan is closed by now, its slots booked: ending them loses nothing.

    The leftovers are chosen before anything yields, then all killed at once and waited for. gevent empties a
    greenlet's ``args`` when it ends, and a user whose kill was waited for (its session closes, which yields)
    let another leftover finish its slot and end meanwhile: reading that one's ``args[0]`` then raised
    IndexError, Locust logged it and skipped the rest of this listener, and the new test never began (the
    third Start, right after the second's Stop, never sent anything: the CI failure, every time in a loop).
    """
    group = runner.user_greenlets
    leftovers = [g for g in list(group) if g.args and getattr(g.args[0], "_state", None) == LOCUST_STATE_STOPPING]
    for g in leftovers:  # no yield in this loop: a kill only schedules the GreenletExit
        group.killone(g, block=False)
    gevent.joinall(leftovers)
    return len(leftovers)


#: How far past the target's op_timeout_s the user's own bound fires (the driver should fail first).
TIMEOUT_MARGIN_S = 1.0
#: Reconnect backoff (`dbsurge.base.backoff`, full jitter): the longest wait doubles from the first to the
#: cap. The cap is also how late a user may notice that the database is back, so it is short: an outage
#: looks at most about a second longer than it was (with 5 s, a 3.5 s restart showed as 8.7 s of failures).
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.1, 1.0


def _operation_loop(user: DbUser, run) -> None:  # noqa: C901 - the hot loop, inlined on purpose (every call costs every operation)
    number = next(_user_numbers)
    user_seed = run.options.seed * 7919 + number * 104729 + (run.pacer.index if run.pacer else 0)
    rng = random.Random(user_seed)
    # its own generator: a reconnect's wait does not move the workload's draws
    reconnect = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S, random.Random(f"dbsurge:reconnect:{user_seed}"))
    workload = run.workload(user.workload)
    weights = operation_mix_weights(run.config.operation_weights, workload.operations)
    # under a plan, arrival k runs operation mix.of(k): the user must use the pacer's order of names
    names = list(run.pacer.mix.names) if run.pacer is not None else [n for n, _ in weights]
    cum = list(accumulate(dict(weights)[n] for n in names))
    total = cum[-1]
    recorder = run.recorder
    op_ids = [recorder.op_id(n) for n in names]
    target = run.target
    target_classify = getattr(target, "classify", None)

    def classify(exc: BaseException) -> str:
        if target_classify is None or isinstance(exc, (ConnectFailure, OperationTimeout)):
            return _classify(exc)
        try:
            return target_classify(exc)
        except Exception:
            return "other"

    op_bound_s = float(getattr(target, "op_timeout_s", None) or 30.0) + TIMEOUT_MARGIN_S
    connect_bound_s = float(getattr(target, "connect_timeout_s", None) or 10.0) + TIMEOUT_MARGIN_S
    fire = user.environment.events.request.fire
    # Locust's tables get successes from the recorder (dbsurge.load.locust_stats); the request event, failures only
    feed = getattr(run, "locust_stats", None)
    if feed is not None:
        feed.method.update((i, workload.name) for i in op_ids)
    fire_ok = feed is None
    request_type = workload.name
    clock = time.perf_counter_ns
    record = recorder.record
    choose = rng.random
    single = len(names) == 1
    session = None
    fns: list = []
    retry_connect_at = 0
    last_connect_error: BaseException | None = None
    connect_failures = 0  # in a row: the next wait's place in the backoff

    def fail(k: int, stage: int, intended: int, start: int, exc: BaseException) -> None:
        kind = classify(exc)
        record(op_ids[k], stage, intended or start, start, clock(), recorder.kind_id(kind, describe(exc)))
        fire(request_type=request_type, name=names[k], response_time=(clock() - (intended or start)) / 1e6,
             response_length=0, exception=exc, context=None)

    def open_session() -> tuple:
        """(session, operation callables), bounded by the connect timeout; raises what the connect raised.

        Each attempt is counted (`Recorder.connect_result`): the run says how many connections the
        server refused against how many were asked for."""
        try:
            with gevent.Timeout(connect_bound_s, OperationTimeout("connect did not finish in time")):
                new = target.connect()
                fns_map = workload.new_client(new, rng.randrange(1 << 30))
        except GreenletExit:
            raise
        except (Exception, OperationTimeout) as e:
            code = refusal_code(e)
            recorder.connect_result(f"refused:{code}" if code else "failed")
            raise
        recorder.connect_result("ok")
        return new, [fns_map[n] for n in names]

    # Connect now, before the first slot: a connection costs several round trips (TCP, TLS, auth),
    # which at 50 ms from the database would make the first slot of every user late. A failure here
    # is retried at the first slot, which records it if it fails again.
    try:
        session, fns = open_session()
    except GreenletExit:
        raise
    except (Exception, OperationTimeout) as e:  # the first slot fails the same way, then retries with backoff
        session = None
        last_connect_error = as_connect_error(e)
        retry_connect_at = clock() + int(reconnect.delay(connect_failures) * 1e9)
        connect_failures += 1

    # The operation bound: one libev timer per user, armed with `again` before each operation and
    # stopped after it. ev_timer_again counts its `repeat` (the whole bound) from now; a stopped timer
    # restarted with `start` (a reused gevent.Timeout) would only get what its last run left, and time
    # operations out early once a user's operations had added up to the bound. It costs about 0.1 us
    # an operation where a new gevent.Timeout per operation cost about 1.5 us.
    bound = get_hub().loop.timer(op_bound_s, op_bound_s)
    me = getcurrent()

    def bound_fired() -> None:
        bound.stop()  # it repeats
        me.throw(OperationTimeout(f"no answer within {op_bound_s:g}s (the user's bound)"))  # time_call returns it

    try:
        while user._state != LOCUST_STATE_STOPPING:
            pacer = run.pacer
            slot = None
            if pacer is not None:
                with run.slot_lock:
                    slot = pacer.next_slot()
                    if slot is not None:
                        try:
                            waited = pacer.wait_for(slot)
                        except GreenletExit:
                            pacer.give_back(slot)
                            raise
                        if waited is None:
                            pacer.give_back(slot)
                            slot = None
                        else:
                            slot = waited
                if slot is None:  # the plan is over or the run is stopping: idle until the shape stops the test
                    gevent.sleep(0.5)
                    continue
                intended, stage, k = slot.intended_ns, slot.stage, slot.op
            else:
                intended, stage = 0, 0
                k = 0 if single else bisect_right(cum, choose() * total)
            if session is None:
                start = clock()
                if start < retry_connect_at:  # backing off: this slot fails as the last attempt did
                    if pacer is None:
                        gevent.sleep((retry_connect_at - start) / 1e9)
                        continue
                    if pacer.done(slot):
                        fail(k, stage, intended, start, last_connect_error)
                    continue
                try:
                    session, fns = open_session()
                    connect_failures = 0
                except GreenletExit:
                    raise
                except (Exception, OperationTimeout) as e:
                    session = None
                    last_connect_error = as_connect_error(e)
                    retry_connect_at = clock() + int(reconnect.delay(connect_failures) * 1e9)
                    connect_failures += 1
                    if pacer is None or pacer.done(slot):
                        fail(k, stage, intended, start, last_connect_error)
                    continue
            retries_before = session.retries
            if slot is not None:
                pacer.issued(slot)  # sent to the database: if this worker is lost now, its outcome is unknown
            bound.again(bound_fired)  # the whole bound from now (see `bound` above)
            try:
                ok, exc, start, end = time_call(fns[k])  # the one timing helper (dbsurge.measure.timing)
            finally:
                bound.stop()
            if ok:
                exc = None
            if pacer is not None and not pacer.done(slot):
                continue  # written off as not sent while it ran (the run ended or stopped)
            if intended == 0:
                intended = start
            retries = session.retries - retries_before
            kind_name = None if exc is None else classify(exc)
            kind = 0 if exc is None else recorder.kind_id(kind_name, describe(exc))
            record(op_ids[k], stage, intended, start, end, kind, retries)
            if exc is not None or fire_ok:
                fire(request_type=request_type, name=names[k], response_time=(end - intended) / 1e6,
                     response_length=0, exception=exc, context=None)
            if isinstance(exc, OperationTimeout) and exc.interrupted:
                # the driver was interrupted mid-protocol: this connection cannot be trusted again (a session's own
                # deadline, PostgreSQL's op_timeout, closed its connection already and reconnects by itself)
                _close_quietly(session)
                session = None
            elif kind_name == "connect":
                # the session's own reconnect failed (the database is unreachable from here): back off like
                # a user whose connect failed, so the slots due meanwhile fail at once instead of each one
                # waiting out a connect timeout while the rest of this worker's share piles up behind it
                _close_quietly(session)
                session = None
                last_connect_error = as_connect_error(exc)
                retry_connect_at = clock() + int(reconnect.delay(connect_failures) * 1e9)
                connect_failures += 1
    finally:
        bound.close()
        if session is not None:
            _close_quietly(session)


def _classify(exc: BaseException) -> str:
    """Failure kind when the target has no `classify` of its own."""
    if isinstance(exc, ConnectFailure):
        return exc.kind
    if isinstance(exc, (OperationTimeout, gevent.Timeout, TimeoutError)):
        return "timeout"
    return "other"


def _close_quietly(session) -> None:
    try:
        session.close()
    except Exception:
        pass
