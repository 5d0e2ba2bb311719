"""The one timing helper, the versions, and the paced clients' intended times from the engine's schedule."""

from __future__ import annotations

import pytest

from dbsurge.base.versions import versions
from dbsurge.measure.timing import Laps, elapsed_ms, time_call
from dbsurge.plan.stage_plan import Schedule, StagePlan
from dbsurge.scenarios.paced_clients import _Share


def test_time_call_returns_the_result_or_the_exception_with_its_times():
    ok, value, start, end = time_call(divmod, 7, 2)
    assert ok and value == (3, 1) and end >= start
    ok, error, start, end = time_call(divmod, 1, 0)
    assert not ok and isinstance(error, ZeroDivisionError) and end >= start
    assert elapsed_ms(1_000_000, 3_500_000) == 2.5
    with pytest.raises(KeyboardInterrupt):  # only Exception is a measurement
        time_call(_interrupt)


def _interrupt() -> None:
    raise KeyboardInterrupt


def test_laps_leave_out_time_between_pieces():
    laps = Laps()
    assert laps.lap() >= 0
    laps.restart()
    assert 0 <= laps.lap() <= laps.since_start_ns()


def test_paced_share_interleaves_clients_as_the_old_formula_and_stops_at_the_end():
    clients, rate, duration = 5, 20.0, 2.0
    schedule = Schedule.from_plan(StagePlan.constant(clients * rate, duration))
    interval_ns = 1e9 / rate
    for i in range(clients):
        share = _Share(schedule, i, clients)
        times = []
        while (t := share.next_ns()) != float("inf"):
            times.append(t)
        assert len(times) == rate * duration
        assert times == pytest.approx([i * interval_ns / clients + n * interval_ns for n in range(len(times))],
                                      abs=1)


def test_versions_name_python_dbsurge_and_the_drivers():
    v = versions()
    assert {"python", "dbsurge", "locust", "gevent", "psycopg", "pymongo"} <= set(v)
