"""The pacer: workers' shares add up to the plan exactly; drops past max lag; Poisson is seeded."""

from __future__ import annotations

import pytest

from dbsurge.pacer import Pacer
from dbsurge.stage_plan import Schedule, StagePlan


class FakeClock:
    """A settable clock, so slot arithmetic can be checked without sleeping."""

    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


def _all_slots(pacer):
    out = []
    while (s := pacer.next_slot()) is not None:
        out.append(s)
    return out


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_uniform_shares_add_up_to_the_plan(workers):
    plan = StagePlan.parse("2s@20%,2s@200%,2s@100%,2s@5%", 200)
    schedule = Schedule.from_plan(plan)
    slots = []
    for i in range(workers):
        clock = FakeClock()
        p = Pacer(schedule, start_epoch_ns=0, worker_index=i, worker_count=workers, clock_ns=clock, wall_ns=clock)
        slots += _all_slots(p)
    assert len(slots) == int(schedule.total())
    per_stage = [sum(1 for s in slots if s.stage == k) for k in range(4)]
    assert per_stage == [80, 800, 400, 20]
    times = sorted(s.intended_ns for s in slots)
    # evenly spaced in stage 2 (400 TPS = 2.5 ms apart) whatever the worker count
    stage2 = [t for t in times if 2e9 <= t < 4e9]
    gaps = {round((b - a) / 1e6, 3) for a, b in zip(stage2, stage2[1:])}
    assert gaps == {2.5}


def test_poisson_is_seeded_and_near_the_rate():
    schedule = Schedule.from_plan(StagePlan.parse("20s@500tps"))
    runs = []
    for _ in range(2):
        clock = FakeClock()
        p = Pacer(schedule, start_epoch_ns=0, arrivals="poisson", seed=7, clock_ns=clock, wall_ns=clock)
        runs.append([s.intended_ns for s in _all_slots(p)])
    assert runs[0] == runs[1]
    assert abs(len(runs[0]) - 10000) < 4 * 100  # within 4 sigma of a Poisson count


def test_slots_later_than_max_lag_are_dropped_and_counted():
    schedule = Schedule.from_plan(StagePlan.parse("1s@100tps,1s@100tps"))
    clock = FakeClock()
    p = Pacer(schedule, start_epoch_ns=0, max_lag_s=0.05, clock_ns=clock, wall_ns=clock)
    clock.now = int(1.5e9)  # everything before 1.45 s is too late
    first = p.next_slot()
    assert first.intended_ns == pytest.approx(1.45e9, abs=1e7)
    dropped, issued = p.take_counts()
    assert issued == 146  # 145 dropped and the one handed out
    assert dropped[0] == 100 and dropped[1] == 45


def test_reshare_takes_over_a_lost_worker():
    schedule = Schedule.from_plan(StagePlan.parse("10s@100tps"))
    clock = FakeClock()
    p = Pacer(schedule, start_epoch_ns=0, worker_index=1, worker_count=2, clock_ns=clock, wall_ns=clock)
    p.reshare(0, 1, from_number=500)
    numbers = [s.number for s in _all_slots(p)]
    assert numbers[0] == 500 and numbers == list(range(500, 1000))
