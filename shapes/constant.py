"""One arrival rate, ``--rate`` TPS, for ``-t`` (or until stopped when no run time is given).

    locust -f locustfiles/orders.py,shapes/constant.py --target embedded-postgres --headless \
        --rate 200 -t 30s
"""

from __future__ import annotations

import math

from dbsurge.base.errors import PlanError
from dbsurge.engine.arrival_shape import ArrivalRateShape
from dbsurge.plan.stage_plan import StagePlan


class ConstantShape(ArrivalRateShape):
    use_common_options = True  # reads -t

    def build_plan(self, options) -> StagePlan:
        if options.rate is None:
            raise PlanError("shapes/constant.py needs --rate TPS, e.g. --rate 200")
        duration = float(options.run_time) if getattr(options, "run_time", None) else math.inf
        # The plan now carries the duration; the shape ends the test after it (plus --drain).
        # Locust's own -t timer would cut the plan short by --start-delay.
        options.run_time = None
        return StagePlan.constant(float(options.rate), duration)
