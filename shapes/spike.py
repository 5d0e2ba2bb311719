"""Study 001's load spike: 20% -> 200% -> 100% -> 5% of a baseline rate (1,000 TPS by default).

    locust -f locustfiles/orders.py,shapes/spike.py --target embedded-postgres --headless \
        --baseline-tps 200 --stage-seconds 20

``--baseline-tps`` scales the rates; ``--stage-seconds`` makes every stage that long (the study
ran 2/1/2/1 minutes); ``--stages`` replaces the plan altogether.
"""

from __future__ import annotations

from dbsurge.engine.arrival_shape import ArrivalRateShape
from dbsurge.plan.stage_plan import SPIKE_PLAN, StagePlan, format_duration


class SpikeShape(ArrivalRateShape):
    def build_plan(self, options) -> StagePlan:
        text = options.stages or SPIKE_PLAN
        if options.stage_seconds and not options.stages:
            d = format_duration(float(options.stage_seconds))
            text = ",".join(f"{d}@{part.split('@', 1)[1]}" for part in SPIKE_PLAN.split(","))
        return StagePlan.parse(text, options.baseline_tps)
