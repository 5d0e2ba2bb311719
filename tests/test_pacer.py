"""The pacer: workers' shares add up to the plan exactly, uniform or Poisson; every arrival of a share
ends sent, dropped or written off with a reason; a reshare skips nobody's slots."""

from __future__ import annotations

import numpy as np
import pytest

from dbsurge.load.pacer import Pacer
from dbsurge.measure.ledger import planned_counts
from dbsurge.measure.recorder import Recorder
from dbsurge.plan.arrivals import ArrivalSequence, OperationMix
from dbsurge.plan.stage_plan import Schedule, StagePlan


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
        assert pacer.done(s)
    return out


def _pacer(schedule, **kw):
    clock = FakeClock()
    return Pacer(schedule, start_epoch_ns=0, clock_ns=clock, wall_ns=clock, **kw), clock


@pytest.mark.parametrize("text", ["2s@ramp(0tps..100tps)", "1s@0tps,2s@ramp(0tps..100tps),1s@50tps"])
def test_a_plan_that_ramps_up_from_zero_gives_every_slot(text):
    # the first arrival of a ramp from 0 TPS sits where the rate is 0: its time was 0/0 (ZeroDivisionError)
    schedule = Schedule.from_plan(StagePlan.parse(text))
    p, _ = _pacer(schedule)
    slots = _all_slots(p)
    assert len(slots) == round(schedule.total()) and [s.number for s in slots] == list(range(len(slots)))
    start = 1e9 if text.startswith("1s@0tps") else 0
    assert slots[0].intended_ns == start and slots[0].stage == (1 if start else 0)
    times = [s.intended_ns for s in slots]
    assert times == sorted(times) and len(set(times)) == len(times)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_uniform_shares_add_up_to_the_plan(workers):
    plan = StagePlan.parse("2s@20%,2s@200%,2s@100%,2s@5%", 200)
    schedule = Schedule.from_plan(plan)
    slots = []
    for i in range(workers):
        p, _ = _pacer(schedule, worker_index=i, worker_count=workers)
        slots += _all_slots(p)
    assert len(slots) == int(schedule.total())
    per_stage = [sum(1 for s in slots if s.stage == k) for k in range(4)]
    assert per_stage == [80, 800, 400, 20]
    times = sorted(s.intended_ns for s in slots)
    # evenly spaced in stage 2 (400 TPS = 2.5 ms apart) whatever the worker count
    stage2 = [t for t in times if 2e9 <= t < 4e9]
    gaps = {round((b - a) / 1e6, 3) for a, b in zip(stage2, stage2[1:])}
    assert gaps == {2.5}


@pytest.mark.parametrize("workers", [1, 3])
def test_poisson_is_one_sequence_whatever_the_worker_count(workers):
    schedule = Schedule.from_plan(StagePlan.parse("10s@500tps,5s@100tps"))
    slots = []
    for i in range(workers):
        p, _ = _pacer(schedule, arrivals="poisson", seed=7, worker_index=i, worker_count=workers)
        slots += _all_slots(p)
    single, _ = _pacer(schedule, arrivals="poisson", seed=7)
    assert sorted(s.intended_ns for s in slots) == [s.intended_ns for s in _all_slots(single)]
    assert abs(len(slots) - 5500) < 4 * 75  # within 4 sigma of a Poisson count
    mix = OperationMix([("op", 1.0)], 7)
    planned = planned_counts(schedule, ArrivalSequence("poisson", 7), mix)
    assert planned == {(0, 0): sum(s.stage == 0 for s in slots), (1, 0): sum(s.stage == 1 for s in slots)}


def test_each_arrival_has_one_operation_on_every_worker():
    schedule = Schedule.from_plan(StagePlan.parse("5s@200tps"))
    mix = OperationMix([("read", 1.0), ("update", 1.0)], 42)
    ops = {}
    for i in range(2):
        p, _ = _pacer(schedule, mix=mix, worker_index=i, worker_count=2)
        ops.update({s.number: s.op for s in _all_slots(p)})
    assert [ops[k] for k in range(1000)] == mix.of_many(np.arange(1000)).tolist()
    assert 400 < sum(ops.values()) < 600
    planned = planned_counts(schedule, ArrivalSequence("uniform", 42), mix)
    assert planned[(0, 1)] == sum(ops.values())


def test_slots_later_than_max_lag_are_dropped_and_counted():
    schedule = Schedule.from_plan(StagePlan.parse("1s@100tps,1s@100tps"))
    sink = Recorder()
    p, clock = _pacer(schedule, max_lag_s=0.05, sink=sink)
    clock.now = int(1.5e9)  # everything before 1.45 s is too late
    first = p.next_slot()
    assert first.intended_ns == pytest.approx(1.45e9, abs=1e7)
    ledger = {(st, col): n for st, _, col, n in sink.drain()["ledger"]}
    assert ledger == {(0, "dropped"): 100, (1, "dropped"): 45}


def test_reshare_keeps_the_old_share_until_the_switch():
    """A survivor takes its own slots below from_number, then the lost worker's too: nobody's are skipped."""
    schedule = Schedule.from_plan(StagePlan.parse("10s@100tps"))
    p, _ = _pacer(schedule, worker_index=1, worker_count=2)
    p.reshare(0, 1, from_number=500)
    numbers = [s.number for s in _all_slots(p)]
    assert numbers == list(range(1, 500, 2)) + list(range(500, 1000))


def test_a_worker_joining_mid_run_starts_at_the_hand_over():
    """A new worker takes share 2 of 3 from arrival 600: none of the arrivals before it, which others sent."""
    schedule = Schedule.from_plan(StagePlan.parse("10s@100tps"))
    p, _ = _pacer(schedule, worker_index=2, worker_count=3)
    p.join_at(2, 3, from_number=600)
    numbers = [s.number for s in _all_slots(p)]
    assert numbers == list(range(602, 1000, 3))


def test_close_writes_off_the_untaken_rest_by_stage():
    schedule = Schedule.from_plan(StagePlan.parse("1s@100tps,1s@50tps"))
    sink = Recorder()
    p, clock = _pacer(schedule, sink=sink, worker_index=0, worker_count=2)
    taken = [p.next_slot() for _ in range(10)]  # arrivals 0, 2, ..., 18
    for s in taken[:8]:
        assert p.done(s)
    p.give_back(taken[9])  # a user stopped while waiting: back in the queue
    assert p.close("interrupted") == 1 + (75 - 10)  # the returned slot and every untaken one of this share
    n, oldest = p.write_off_in_flight("interrupted")
    assert n == 1 and not p.done(taken[8])  # written off: a late finish is not recorded twice
    ledger = {(st, col): n for st, _, col, n in sink.drain()["ledger"]}
    assert ledger == {(0, "not_sent:interrupted"): 50 - 8, (1, "not_sent:interrupted"): 25}
    assert p.next_slot() is None


def test_closing_an_open_plan_lets_go_of_slots_past_the_cut():
    # Users take slots ahead of their time and wait for them. An open-ended plan cut at position 5
    # planned arrivals 0-4; a slot past the cut that a user held is neither sent nor planned.
    schedule = Schedule.from_plan(StagePlan.constant(10))
    sink = Recorder()
    p, clock = _pacer(schedule, sink=sink)
    taken = [p.next_slot() for _ in range(8)]  # arrivals 0..7, due at 0.0 .. 0.7 s
    clock.now = 450_000_000
    for s in taken[:4]:
        assert p.done(s)
    cut = schedule.cumulative(0.5)
    assert p.close("interrupted", until_position=cut) == 0
    p.give_back(taken[5])
    p.give_back(taken[6])
    n, _ = p.write_off_in_flight("interrupted")
    assert n == 1  # arrival 4 (due at 0.4 s, before the cut) was still held: planned, not sent
    ledger = {(st, col): n for st, _, col, n in sink.drain()["ledger"]}
    assert ledger == {(0, "not_sent:interrupted"): 1}
    mix = OperationMix([("op", 1.0)], 0)
    assert sum(planned_counts(schedule, ArrivalSequence("uniform", 0), mix, cut).values()) == 4 + 1


def test_a_rate_change_leaves_no_backlog_behind():
    """1,000x the rate for 2 s, then back: the slots of the spike a worker could not reach are dropped at the
    change (counted), not sent flat out afterwards."""
    base = Schedule.from_plan(StagePlan.parse("20s@100tps"))
    sink = Recorder()
    p, clock = _pacer(base, sink=sink, max_lag_s=None)
    spike = base.changed(2.0, rate_tps=100_000)
    p.set_schedule(spike, 2.0)
    clock.now = int(2.0e9)
    for _ in range(50):  # a few slots taken at the start of the spike
        assert p.done(p.next_slot())
    clock.now = int(4.0e9)  # the worker is far behind: ~200,000 slots of the spike untaken
    back = spike.changed(4.0, rate_tps=100)
    dropped = p.set_schedule(back, 4.0)
    assert dropped > 100_000
    nxt = p.next_slot()
    assert nxt.intended_ns >= int(4.0e9)  # the next slot belongs to the new rate, not the old backlog
    ledger = {col: n for _, _, col, n in sink.drain()["ledger"]}
    assert ledger["dropped"] == dropped
    # and the plan still adds up: taken + dropped + the rest
    planned = planned_counts(back, ArrivalSequence("uniform", 1), OperationMix([("op", 1.0)], 1))
    assert sum(planned.values()) == int(round(back.total()))


def test_no_slot_without_a_lease_and_none_after_it_lapsed():
    """A worker's pacer issues slots only while its lease holds; a late renewal (an old send time) renews nothing."""
    from dbsurge.engine.lease import LEASE_NS

    schedule = Schedule.from_plan(StagePlan.parse("10s@100tps"))
    p, clock = _pacer(schedule)
    p.require_lease()
    assert p.next_slot() is None  # before the first renewal
    p.renew_lease(0 + LEASE_NS)  # asked at t = 0
    clock.now = int(1.0e9)
    slot = p.next_slot()
    assert slot is not None and p.wait_for(slot) is slot  # due, and the lease holds: it may be sent
    p.give_back(slot)
    clock.now = LEASE_NS  # the lease ends: the same slot is not given out again
    assert p.next_slot() is None
    clock.now = int(2.0e9)
    p.renew_lease(int(0.5e9) + LEASE_NS)  # the answer to a request sent at 0.5 s, delivered late: it has lapsed
    assert p.next_slot() is None
    p.renew_lease(clock.now + LEASE_NS)
    assert p.next_slot().number == slot.number  # what it gave back is still its own


def test_what_came_due_while_the_lease_had_lapsed_is_never_sent():
    """A worker back from a lapse (a CPU-starved host, a partition the master did not give up on) sends
    nothing that came due while no lease held: booked not sent (worker_lost), not a burst of backlog."""
    from dbsurge.engine.lease import LEASE_NS

    schedule = Schedule.from_plan(StagePlan.parse("10s@100tps"))
    sink = Recorder()
    p, clock = _pacer(schedule, sink=sink)
    p.require_lease()
    p.renew_lease(0 + LEASE_NS)  # the first renewal: what is due before it is not a lapse
    taken = []
    while (s := p.next_slot()) is not None and s.intended_ns < LEASE_NS - int(0.2e9):
        taken.append(s)
        assert p.done(s)
    p.give_back(s)  # due at 1.05 s, inside the lease: still this worker's after the lapse
    clock.now = int(3.0e9)  # starved from 1.25 s to 3 s: no renewal held
    assert p.next_slot() is None
    p.renew_lease(clock.now + LEASE_NS)
    first = p.next_slot()
    assert first.number == s.number
    late = [p.next_slot() for _ in range(19)]  # due from 1.06 s to 1.24 s, under the lease: sent, late
    assert all(x.intended_ns < LEASE_NS for x in late)
    nxt = p.next_slot()
    assert int(2.5e9) <= nxt.intended_ns < int(2.52e9)  # due from 1.25 s to 2.5 s: gone; the lapse's last 0.5 s
    ledger = {col: n for _, _, col, n in sink.drain()["ledger"]}  # may still go (LAPSE_CATCH_UP_S)
    assert 120 <= ledger["not_sent:worker_lost"] <= 130  # 1.25 s at 100 TPS
    p.renew_lease(clock.now + LEASE_NS)
    clock.now = int(3.0e9) + LEASE_NS + int(0.4e9)  # a short lapse (0.4 s): nothing written off, only late
    p.renew_lease(clock.now + LEASE_NS)
    assert not any(c == "not_sent:worker_lost" for _, _, c, _ in sink.drain()["ledger"]) and p.next_slot()


def test_the_renewal_that_ends_a_lapse_says_so_even_when_nothing_saw_it_begin(caplog):
    """A starved worker's first greenlet to run may be the renewal's handler: the lapse, and the arrivals it
    writes off, must still be in the log that goes to the master (a CI run booked one arrival not sent,
    worker_lost, with no word of a lapse in the run's events)."""
    import types

    from dbsurge.engine.lease import LEASE_NS, on_lease
    from dbsurge.engine.wire import Lease

    p, clock = _pacer(Schedule.from_plan(StagePlan.parse("10s@100tps")))
    p.require_lease()
    environment = types.SimpleNamespace(dbsurge=types.SimpleNamespace(pacer=p))

    def renewal(sent_ns: int) -> None:
        on_lease(environment, types.SimpleNamespace(data=Lease(sent_ns=sent_ns).encode(), node_id="master"))

    assert p.renew_lease(0 + LEASE_NS) is None  # the first renewal ends no lapse
    clock.now = int(3.0e9)
    with caplog.at_level("WARNING", logger="dbsurge"):
        renewal(clock.now)  # starved from 1.25 s to 3 s
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert "lease lapsed for 1.8 s" in caplog.text and "not sent (worker_lost)" in caplog.text
    assert "the master renewed this worker's lease" in caplog.text  # what the fault tests read in the run's events
    caplog.clear()
    clock.now += LEASE_NS + int(0.3e9)
    with caplog.at_level("WARNING", logger="dbsurge"):
        renewal(clock.now)  # a short lapse: nothing written off, only late
        renewal(clock.now + 1)  # and a renewal that ends none says nothing
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "lease lapsed for 0.3 s" in caplog.text
    assert "the master renewed this worker's lease" in caplog.text


def test_the_lease_ends_strictly_before_the_master_gives_up():
    from dbsurge.engine import lease

    assert lease.LEASE_S + lease.CLOCK_BOUND_S + lease.HEARTBEAT_S == lease.LOST_AFTER_S
    assert lease.RENEW_S * 4 <= lease.LEASE_S  # a healthy worker renews several times per lease


def test_issued_slots_are_counted_and_an_in_flight_write_off_books_sent_ones_unknown():
    """A slot sent to the database and still in flight at the end is ``unknown`` (and no longer just issued);
    one only taken, never sent, is not sent."""
    schedule = Schedule.from_plan(StagePlan.parse("1s@100tps"))
    sink = Recorder()
    p, _ = _pacer(schedule, sink=sink)
    a, b, c = p.next_slot(), p.next_slot(), p.next_slot()
    p.issued(a)
    p.issued(b)
    assert p.done(a)
    p.write_off_in_flight("in_flight")  # b was issued, c only taken
    ledger = {col: n for _, _, col, n in sink.drain()["ledger"]}
    assert ledger == {"issued": 2 - 1, "unknown:in_flight": 1, "not_sent:in_flight": 1}, ledger
    assert c.number == 2


def test_the_ledger_books_a_lost_workers_unreported_operations_as_unknown():
    from dbsurge.measure.aggregator import Aggregator
    from dbsurge.measure.ledger import balance

    agg = Aggregator(stage_names=["s"])
    lost = Recorder()
    p, _ = _pacer(Schedule.from_plan(StagePlan.parse("1s@10tps")), sink=lost, op_ids=[lost.op_id("op")],
                  worker_index=1, worker_count=2)
    slots = [p.next_slot() for _ in range(3)]
    for s in slots:
        p.issued(s)  # sent; the worker dies before it reports any outcome
    agg.merge(lost.drain(), source="w1")
    booked = balance(agg.stage_cells, {("op", 0): 5}, ["w1"], True, unreported=agg.unreported(["w1"]))
    assert booked == {"unknown": 3, "worker_lost": 2}, booked
    cell = agg.stage_cells[("op", 0)]
    assert cell.unknown == 3 and cell.not_sent["worker_lost"] == 2


def test_the_once_a_second_loop_lets_a_due_slot_go_between_its_steps():
    """`Breather` passes control to a greenlet whose alarm is due (the pacer waiting for a slot),
    where `gevent.sleep(0)` would not: gevent runs the callbacks that sleep(0) schedules back to back
    for its 5 ms switch interval before it polls, and the alarm is an fd that only a poll sees.
    So a local run's drain, merge and flush, cut into steps, delay a due slot by one step, not all."""
    import time

    import gevent

    from dbsurge.load.pacer import Alarm, Breather

    alarm = Alarm.create()
    if alarm is None:
        pytest.skip("no timerfd here")

    def steps_until_woken(yield_between) -> int:
        woke: list[int] = []
        due = time.perf_counter_ns() + 2_000_000
        waiter = gevent.spawn(lambda: (alarm.sleep_until(due), woke.append(1)))
        gevent.sleep(0)  # the waiter arms its alarm and parks
        steps = 0
        while not woke and steps < 200:
            busy_until = time.perf_counter_ns() + 200_000  # a step of work: 0.2 ms without yielding
            while time.perf_counter_ns() < busy_until:
                pass
            steps += 1
            yield_between()
        waiter.join(timeout=1)
        return steps

    # the alarm is due 2 ms in (10 steps of 0.2 ms at most); a poll after each step sees it within a step or two
    assert steps_until_woken(Breather()) <= 14
    # sleep(0) keeps the loop in its callbacks: the waiter runs only once a switch interval has passed
    assert steps_until_woken(lambda: gevent.sleep(0)) >= 20


def test_a_breather_gives_the_users_three_times_the_piece_before_it(monkeypatch):
    """`Breather` (between the pieces of a local run's once-a-second work and of a worker's drains) sleeps three
    times the piece since its last call, never less than a turn of the loop and never more than MAX_BREATH_S,
    and the users run meanwhile: the work takes at most a quarter of the process while it lasts."""
    import time

    import gevent

    from dbsurge.load.pacer import BACKGROUND_SHARE, MAX_BREATH_S, YIELD_S, Breather

    sleep = gevent.sleep
    asked: list[float] = []
    monkeypatch.setattr(gevent, "sleep", lambda seconds=0: (asked.append(seconds), sleep(seconds))[1])
    ticks: list[int] = []
    user = gevent.spawn(lambda: [(sleep(0.0002), ticks.append(1)) for _ in range(100_000)])
    sleep(0)

    def piece_then_breath(piece_s: float, breathe: Breather) -> tuple[float, int]:
        busy_until = time.perf_counter() + piece_s
        while time.perf_counter() < busy_until:  # a piece of work: no yield
            pass
        before = len(ticks)
        breathe()
        return asked[-1], len(ticks) - before

    assert (1 - BACKGROUND_SHARE) / BACKGROUND_SHARE == 3.0
    breathe = Breather()
    breath, ran = piece_then_breath(0.002, breathe)
    assert 0.006 <= breath <= MAX_BREATH_S and ran >= 3  # the users ran for 6 ms or more after a 2 ms piece
    # no piece since: about the shortest pause, a turn through the loop (three times the few microseconds the
    # call itself took, on a loaded machine: never compared exactly, 5.4e-05 != 5e-05 failed a run)
    assert YIELD_S <= piece_then_breath(0.0, breathe)[0] < 0.001
    assert piece_then_breath(0.02, Breather())[0] == MAX_BREATH_S  # a long piece: the longest breath, not 60 ms
    user.kill()


def test_what_a_process_made_before_time_zero_is_frozen():
    """`freeze_what_lives_for_the_run` (again, 0.3 s before time zero: `make_pacer`) takes what setting up
    made out of the cycle collector's sight: otherwise a full collection walks it during the load, a pause
    of every user. In a child: dbsurge.engine.run_state imports Locust, which must not patch this process."""
    import subprocess
    import sys

    code = (
        "import gc\n"
        "from dbsurge.engine.run_state import freeze_what_lives_for_the_run as freeze\n"
        "freeze()  # make_pacer's first freeze, at the plan\n"
        "before = gc.get_freeze_count()\n"
        "made = [[i] for i in range(5000)]  # tracked, as connections and workload tables are\n"
        "freeze()  # the second, before time zero\n"
        "young = {id(o) for o in gc.get_objects()}\n"
        "print(gc.get_freeze_count() - before, sum(id(m) in young for m in made))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    frozen, still_seen = map(int, out.stdout.split())
    assert frozen >= 5000 and still_seen == 0


def test_the_pool_grows_in_steps_not_a_user_a_tick():
    """Sized before time zero it takes what the plan wants; once running, a measured service time that creeps up
    does not add a user a tick (each new user connects on the load host mid-run: a stall), only a want past 25%
    more than the pool grows it, with headroom."""
    from dbsurge.plan.pool_size import grown_pool

    assert grown_pool(0, 4) == 4
    sizes = [4]
    for wanted in (5, 5, 5, 6, 6):  # what the demo's stage 1 asked for, tick after tick
        sizes.append(grown_pool(sizes[-1], wanted))
    assert sizes == [4, 4, 4, 4, 8, 8]
    assert grown_pool(8, 3) == 8  # never smaller
