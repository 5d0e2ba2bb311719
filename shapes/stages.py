"""Any stage plan from ``--stages``, with percentages of ``--baseline-tps`` or absolute rates.

    locust -f locustfiles/ycsb.py,shapes/stages.py --target embedded-mongo --headless \
        --stages "30s@500tps,30s@ramp(500tps..2000tps),30s@50%" --baseline-tps 1000
"""

from __future__ import annotations

from dbsurge.base.errors import PlanError
from dbsurge.engine.arrival_shape import ArrivalRateShape
from dbsurge.plan.stage_plan import StagePlan


class StagesShape(ArrivalRateShape):
    def build_plan(self, options) -> StagePlan:
        if not options.stages:
            raise PlanError("shapes/stages.py needs --stages, e.g. --stages '30s@100tps,30s@200tps'")
        return StagePlan.parse(options.stages, options.baseline_tps)
