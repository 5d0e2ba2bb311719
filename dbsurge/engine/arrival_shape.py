"""LoadTestShape for arrival rates: the plan sets the rate, the shape only sizes the user pool.

A Locust shape can only say how many users run. dbsurge's shapes build a `StagePlan` from the
options; the plan goes to the workers (see `locust_plugin`), whose pacers set the pace. The
shape's `tick()` returns enough users to sustain the rate by Little's law, ``users = rate x
service time x headroom``, for the highest rate still ahead in the plan, using the service
time the run has measured so far, capped by ``--max-users``. The pool only grows during a
plan: stopping a Locust user kills it where it stands, and an operation in flight would be
lost. Idle users cost a greenlet and a connection.
The shape ends the test when every arrival of the plan is accounted for, or ``--drain`` seconds
after the plan's last slot if some are still out then (a slow target: late slots are still sent,
with their lag), after closing the ledger (`dbsurge.engine.stopping.close_run`): slots still untaken
then are booked as ``users_exhausted`` and operations still in flight as ``in_flight``. Stages in
which the pool wanted more users than ``--max-users`` are remembered, so the summary can blame
lag on the cap.
"""

from __future__ import annotations

import math
import time

import gevent
from locust import LoadTestShape

from dbsurge.plan.pool_size import grown_pool
from dbsurge.plan.stage_plan import StagePlan

HEADROOM = 2.0
ASSUMED_SERVICE_S = 0.005  # before the first measurement, when the preflight probe could not run
MIN_USERS_PER_WORKER = 2
TICK_S = 1.0  # how often Locust calls tick()


class ArrivalRateShape(LoadTestShape):
    """Base of dbsurge's shapes; subclasses implement `build_plan`."""

    abstract = True

    def build_plan(self, options) -> StagePlan:  # pragma: no cover - abstract
        raise NotImplementedError

    def tick(self):
        run = getattr(self.runner.environment, "dbsurge", None) if self.runner is not None else None
        if run is None or run.plan is None:
            return None
        opts = run.options
        workers = max(1, self.runner.worker_count) if hasattr(self.runner, "worker_count") else 1
        # Locust spreads users over every connected worker, refused ones too (dbsurge.engine.membership):
        # ask for enough that the members alone hold the pool
        members = len(run.shares) if run.shares else workers
        inflate = workers / max(1, min(members, workers))
        elapsed = run.elapsed_s()
        schedule = run.schedule
        if elapsed is not None and schedule is not None and elapsed > schedule.end_s - TICK_S:
            # Locust calls tick() once a second: the last tick before the end waits here, so the
            # run ends as soon as it can rather than up to a second (and a whole --drain) late
            from dbsurge.engine.stopping import close_run

            _wait_for_the_last_arrivals(run, run.start_epoch_ns / 1e9 + schedule.end_s, float(opts.drain))
            close_run(run, "users_exhausted", in_flight_reason="in_flight")
            return None
        t = max(0.0, elapsed or 0.0)
        rate = _peak_rate(schedule, run.plan, t)
        service = None
        if run.aggregator is not None:
            service = run.aggregator.recent_service_s()
        # before the run has measured anything: what the preflight probe measured, else a guess
        service = max(service or run.probe_service_s or ASSUMED_SERVICE_S, 0.0005)
        wanted = math.ceil((rate * service * HEADROOM + MIN_USERS_PER_WORKER * members) * inflate)
        users = min(grown_pool(getattr(self, "_users", 0), wanted), int(opts.max_users))
        if wanted > int(opts.max_users) and schedule is not None and t < schedule.end_s:
            run.capped_stages.add(schedule.stage_at(t))
        self._users = users
        return users, max(users, 50)


def _wait_for_the_last_arrivals(run, end_epoch_s: float, drain_s: float) -> None:
    """Until every arrival of the plan is accounted for (sent and finished, dropped or written
    off), at most until ``drain_s`` after the plan's end."""
    while time.time() < end_epoch_s:
        gevent.sleep(min(0.05, max(0.0, end_epoch_s - time.time())))
    planned = None
    if run.has_workers and run.schedule is not None:
        planned = run.arrivals().first_at_or_after(run.schedule.total())
    deadline = end_epoch_s + drain_s
    while time.time() < deadline and not _all_accounted(run, planned):
        gevent.sleep(0.05)


def _all_accounted(run, planned: int | None) -> bool:
    """Nothing of the plan is left: a local run asks its pacer; a master counts what the workers
    reported (``planned`` arrivals in all; their reports come once a second)."""
    if run.measures_here:
        return run.pacer is not None and run.pacer.nothing_left()
    if run.aggregator is None or planned is None:
        return False
    return sum(run.aggregator.per_source.values()) >= planned


def _peak_rate(schedule, plan: StagePlan, t: float) -> float:
    """The highest rate from t to the end of the plan: the pool is sized for the peak ahead of time.

    Growing the pool mid-plan costs a worker a pause while the new users connect (up to ~100 ms
    seen with master and workers on a loaded 2-core host), which would show as lag right at a
    stage change; sizing for the rest of the plan up front leaves only the growth that a longer
    measured service time asks for (and live rate changes).
    """
    if schedule is None:
        return max((max(s.start_tps, s.end_tps) for s, st in zip(plan.stages, plan.starts)
                    if st + s.duration_s > t), default=0.0)
    return max((max(seg.start_tps, seg.end_tps) for seg in schedule.segments if seg.end_s > t), default=0.0)
