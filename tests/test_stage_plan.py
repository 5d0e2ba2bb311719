"""Stage plans: parsing, printing, rates, cumulative arrivals, live changes."""

from __future__ import annotations

import math

import pytest

from dbsurge.base.errors import PlanError
from dbsurge.plan.stage_plan import SPIKE_PLAN, Schedule, StagePlan, format_duration, parse_duration


def test_spike_plan_rates_and_print():
    plan = StagePlan.parse(SPIKE_PLAN, baseline_tps=1000)
    assert [s.start_tps for s in plan.stages] == [200, 2000, 1000, 50]
    assert plan.duration == 360
    assert str(plan) == "2m@20%,1m@200%,2m@100%,1m@5%"
    assert StagePlan.parse(str(plan), 1000) == plan


def test_absolute_and_ramp_round_trip():
    text = "30s@500tps,30s@ramp(500tps..2000tps)"
    plan = StagePlan.parse(text)
    assert str(plan) == text
    assert plan.rate_at(45) == pytest.approx(1250)
    # 30 s x 500 + 30 s x mean(500, 2000)
    assert Schedule.from_plan(plan).total() == pytest.approx(15000 + 37500)


@pytest.mark.parametrize("bad, part", [
    ("2x@20%", "2x"), ("2m@20", "'20'"), ("2m20%", "2m20%"), ("", "empty"), ("1m@20%,,1m@5%", "empty"),
    ("0s@10tps", "no duration"), ("1m@ramp(10tps..)", "ramp"),
])
def test_malformed_plans_name_the_bad_part(bad, part):
    with pytest.raises(PlanError) as e:
        StagePlan.parse(bad, 100)
    assert part in str(e.value)
    assert "\n" not in str(e.value)


def test_percentage_without_baseline_is_an_error():
    with pytest.raises(PlanError, match="baseline"):
        StagePlan.parse("1m@20%")


def test_durations():
    assert parse_duration("250ms") == 0.25
    assert parse_duration("1.5h") == 5400
    assert format_duration(120) == "2m" and format_duration(90) == "90s" and format_duration(0.25) == "250ms"


def test_schedule_time_of_inverts_cumulative_at_stage_boundaries():
    plan = StagePlan.parse("20s@20%,20s@200%,20s@100%,20s@5%", 200)
    s = Schedule.from_plan(plan)
    assert s.total() == 800 + 8000 + 4000 + 200
    assert s.time_of(800) == pytest.approx(20.0)  # first arrival of stage 2 exactly at its start
    assert s.time_of(8800) == pytest.approx(40.0)
    assert s.time_of(13000) == math.inf
    for n in (0, 1, 799, 5000, 12999):
        assert s.cumulative(s.time_of(n)) == pytest.approx(n, abs=1e-6)


def test_live_change_keeps_the_past_and_scales_the_future():
    plan = StagePlan.parse("20s@100tps,20s@200tps")
    s = Schedule.from_plan(plan)
    doubled = s.changed(10, scale=2)
    assert doubled.cumulative(10) == pytest.approx(1000)
    assert doubled.total() == pytest.approx(1000 + 10 * 200 + 20 * 400)
    fixed = s.changed(30, rate_tps=50)
    assert fixed.rate_at(35) == 50 and fixed.stage_at(35) == 1
    assert fixed.total() == pytest.approx(2000 + 2000 + 500)


def test_constant_open_ended():
    s = Schedule.from_plan(StagePlan.constant(100))
    assert s.time_of(1000) == pytest.approx(10.0)
    assert s.end_s == math.inf


@pytest.mark.parametrize("text", ["5s@100tps,5s@0tps,5s@ramp(100tps..300tps),5s@0tps,5s@ramp(50tps..0tps),3s@40tps",
                                  "2s@ramp(0tps..100tps),1s@10tps", "10s@200tps"])
def test_the_kept_segment_and_stage_answer_as_the_search_does(text):
    # Schedule keeps the last answer's segment and stage span (the pacer asks once per operation, in
    # order); any position, in any order, after any live change, gets the answer of a search from scratch
    import random

    base = Schedule.from_plan(StagePlan.parse(text))
    total = base.total()
    rng = random.Random(7)
    edges = list(base.stage_starts()) + [seg.arrivals_before for seg in base.segments]
    points = sorted([rng.uniform(-1, total + 5) for _ in range(3000)] + edges + [float(k) for k in range(int(total) + 2)])
    for schedule in (base, base.changed(2.5, scale=1.7), base.changed(7.5, rate_tps=55.0), base.changed(1.0, rate_tps=0)):
        for order in (points, points[::-1], rng.sample(points, len(points))):
            for e in order:
                kept = (schedule.time_of(e), schedule.stage_of(e))
                schedule._last_segment = schedule._last_stage = None
                assert kept == (schedule.time_of(e), schedule.stage_of(e)), (text, e)
