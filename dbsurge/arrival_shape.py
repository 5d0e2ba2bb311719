"""LoadTestShape for arrival rates: the plan sets the rate, the shape only sizes the user pool.

A Locust shape can only say how many users run. dbsurge's shapes build a `StagePlan` from the
options; the plan goes to the workers (see `locust_plugin`), whose pacers set the pace. The
shape's `tick()` returns enough users to sustain the rate by Little's law, ``users = rate x
service time x headroom``, using the service time the run has measured so far, capped by
``--max-users``. The pool only grows during a plan: stopping a Locust user kills it where it
stands, and an operation in flight would be lost. Idle users cost a greenlet and a connection.
The shape ends the test ``--drain`` seconds after the plan's last slot.
"""

from __future__ import annotations

import math

from locust import LoadTestShape

from .stage_plan import StagePlan

HEADROOM = 2.0
ASSUMED_SERVICE_S = 0.005  # before the first measurement
MIN_USERS_PER_WORKER = 2


class ArrivalRateShape(LoadTestShape):
    """Base of dbsurge's shapes; subclasses implement `build_plan`."""

    abstract = True
    dbsurge_run = None  # set by the plugin at init

    def build_plan(self, options) -> StagePlan:  # pragma: no cover - abstract
        raise NotImplementedError

    def tick(self):
        run = self.dbsurge_run
        if run is None or run.plan is None:
            return None
        opts = run.options
        workers = max(1, self.runner.worker_count) if hasattr(self.runner, "worker_count") else 1
        elapsed = run.elapsed_s()
        schedule = run.schedule
        if elapsed is not None and schedule is not None and elapsed > schedule.end_s + float(opts.drain):
            return None
        t = max(0.0, elapsed or 0.0)
        rate = _peak_rate(schedule, run.plan, t)
        service = None
        if run.aggregator is not None:
            service = run.aggregator.recent_service_s()
        service = max(service or ASSUMED_SERVICE_S, 0.0005)
        wanted = math.ceil(rate * service * HEADROOM) + MIN_USERS_PER_WORKER * workers
        users = min(max(wanted, getattr(self, "_users", 0)), int(opts.max_users))
        self._users = users
        return users, max(users, 50)


def _peak_rate(schedule, plan: StagePlan, t: float) -> float:
    """The highest rate over the next two seconds, so users are there before a step."""
    if schedule is not None:
        return max(schedule.rate_at(t), schedule.rate_at(t + 1.0), schedule.rate_at(t + 2.0))
    return max(plan.rate_at(t), plan.rate_at(t + 2.0))
