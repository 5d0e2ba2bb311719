"""The web panel's figures and rows, without a browser: the timeline's seconds, by stage and rate override.

- The aggregator hands every second it writes to the live figures; a second goes to the row (stage,
  override) in force at its start, and the figures are the written timeline rows' (the same cells).
- `segment_rows` labels them, and gives an override that held no complete second its own empty row.
- The start form loses the plan's options and, under a plan, Locust's users/ramp-up fields.
- The report keeps its own Content-Security-Policy through the same-origin guard.
"""

from __future__ import annotations

from types import SimpleNamespace

from dbsurge.measure.aggregator import Aggregator
from dbsurge.measure.cells import Cell
from dbsurge.plan.segments import segment_rows
from dbsurge.plan.stage_plan import Schedule, StagePlan
from dbsurge.ui.web import SECURITY_HEADERS, adjust_swarm_form, secured_headers

T0 = 1_800_000_000  # the plan's time zero, on a whole second


def _second(ok: int, resp_us: int, failed: dict | None = None) -> Cell:
    c = Cell()
    c.ok = ok
    c.response.record_many([resp_us] * ok)
    c.service.record_many([resp_us // 2] * ok)
    c.failed.update(failed or {})
    return c


def _aggregator(plan: StagePlan, changes: list) -> Aggregator:
    agg = Aggregator(stage_names=[s.name for s in plan.stages], grace_s=0.0)
    sched = Schedule.from_plan(plan)
    for at_s, rate, scale in changes:
        sched = sched.changed(at_s, rate_tps=rate, scale=scale)
    agg.set_schedule(sched, float(T0))
    agg.override_times = lambda: [c[0] for c in changes]
    return agg


def _feed(agg: Aggregator, seconds: dict[int, Cell]) -> list[dict]:
    for t, cell in seconds.items():
        agg.open_seconds[T0 + t]["op"].add(cell)
    return agg.flush(now=T0 + max(seconds) + 2.0).rows


def test_rows_follow_stages_and_overrides_with_the_timelines_figures():
    plan = StagePlan.parse("3s@10tps,3s@20tps")
    changes = [[1.5, 40.0, None], [4.0, None, 2.0]]  # 40 TPS from t=1.5 s, then the plan x2 from t=4 s
    agg = _aggregator(plan, changes)
    written = _feed(agg, {t: _second(10 + t, 1000 * (t + 1), {"timeout": 1} if t == 3 else None) for t in range(6)})
    rows = segment_rows(agg.live.rows, changes, agg.stage_names, agg.start_epoch_s)
    # second 1 starts before the override at 1.5 s: the plan's; second 2 is the override's
    assert [(r["segment"], r["seconds"]) for r in rows] == [
        ("stage 10tps", 2), ("override 1: 40 TPS from 08:00:01Z (stage 10tps)", 1),
        ("stage 20tps under override 1", 1), ("override 2: plan x2 from 08:00:04Z (stage 20tps)", 2)]
    # the figures are the timeline's: planned and ok summed over the row's seconds, percentiles merged
    timeline = {r["time_utc"]: r for r in written if r["operation"] == "ALL"}
    last = [timeline[f"2027-01-15T08:00:0{t}.000Z"] for t in (4, 5)]
    assert rows[-1]["target_tps"] == round(sum(r["target_tps"] for r in last) / 2, 3) == 40.0
    assert rows[-1]["achieved_tps"] == sum(r["achieved_tps"] for r in last) / 2 == 14.5
    assert rows[-1]["p99_ms"] == last[1]["p99_ms"]  # the slowest of seconds 4 and 5: second 5's
    assert rows[0]["p50_ms"] == 2.0  # 10 at 1 ms and 11 at 2 ms
    assert rows[2]["failures"] == 1 and rows[2]["failed_by_kind"] == {"timeout": 1}
    now = agg.live.recent_stats()
    assert now["seconds"] == 5 and now["start_utc"] == "2027-01-15T08:00:01.000Z"
    spark = agg.live.sparkline()
    assert spark["achieved_tps"] == [10, 11, 12, 13, 14, 15] and spark["p99_ms"][-1] == last[1]["p99_ms"]


def test_a_stage_row_has_the_plans_length_and_rate_whatever_seconds_it_spans():
    """Time zero 0.4 s into a second: the 15 s stage at 20 TPS spans 16 timeline seconds, the last shared with
    the 200 TPS stage. The panel read "16 s · target 29.6"; its row is the plan's: 15 s, target 20. An override
    splits a stage's row at its moment, and the stage still running ends at the last second written."""
    plan = StagePlan.parse("15s@20tps,10s@200tps")
    changes = [[20.0, 100.0, None]]  # 100 TPS from t=20 s
    agg = _aggregator(plan, changes)
    agg.set_schedule(agg.schedule, T0 + 0.4)
    for t in range(23):  # the seconds from T0 (t=-0.4 s) to T0+22 (t=21.6 s to 22.6 s)
        agg.open_seconds[T0 + t]["op"].add(_second(20, 1000))
    agg.flush(now=T0 + 23.0)  # written up to the second from T0+22
    rows = segment_rows(agg.live.rows, changes, agg.stage_names, agg.start_epoch_s, agg.schedule)
    assert [(r["segment"], r["seconds"]) for r in rows] == [
        ("stage 20tps", 16), ("stage 200tps", 5), ("override 1: 100 TPS from 08:00:20Z (stage 200tps)", 2)]
    assert [(r["duration_s"], r["target_tps"]) for r in rows] == [(15.0, 20.0), (5.0, 200.0), (2.6, 100.0)]


def test_an_override_without_a_second_of_its_own_still_has_a_row():
    plan = StagePlan.constant(50.0)
    changes = [[2.2, 80.0, None], [2.6, 120.0, None]]  # both within second 2
    agg = _aggregator(plan, changes)
    _feed(agg, {t: _second(50, 1000) for t in range(5)})
    rows = segment_rows(agg.live.rows, changes, agg.stage_names, agg.start_epoch_s)
    assert [(r["segment"], r["seconds"]) for r in rows] == [
        ("stage 50tps", 3), ("override 1: 80 TPS from 08:00:02Z", 0), ("override 2: 120 TPS from 08:00:02Z", 2)]


def _web_ui(extra: dict):
    args = {"extra_options": extra, "hide_common_options": False}
    env = SimpleNamespace(runner=object())
    return SimpleNamespace(template_args=args, update_template_args=lambda: None, environment=env)


def test_the_start_form_offers_only_what_the_run_uses():
    extra = {k: {"default_value": v} for k, v in
             [("baseline_tps", 1000.0), ("stages", None), ("stage_seconds", None), ("rate", 50.0), ("max_users", 200),
              ("arrivals", "uniform"), ("target", "postgresql://u:***@h/db")]}
    web_ui = _web_ui(extra)
    adjust_swarm_form(web_ui, SimpleNamespace(plan=StagePlan.constant(50.0)))
    assert sorted(web_ui.template_args["extra_options"]) == ["arrivals", "max_users", "target"]
    assert web_ui.template_args["hide_common_options"] is True
    assert "not changed here" in extra["target"]["help_text"]
    closed = _web_ui({"rate": {"default_value": None}})
    adjust_swarm_form(closed, SimpleNamespace(plan=None))  # the closed model: Locust's users are the run's
    assert closed.template_args["hide_common_options"] is False and closed.template_args["extra_options"] == {}


def test_a_response_keeps_its_own_policy_and_gets_no_cors():
    own = "script-src 'none'"
    headers = dict(secured_headers([("Content-Security-Policy", own), ("Access-Control-Allow-Origin", "*"),
                                    ("Content-Type", "text/html")]))
    assert headers["Content-Security-Policy"] == f"{own}; frame-ancestors 'self'"
    assert "Access-Control-Allow-Origin" not in headers and headers["Content-Type"] == "text/html"
    assert dict(secured_headers([("Content-Type", "text/html")])) == {"Content-Type": "text/html",
                                                                      **SECURITY_HEADERS}


def test_the_charts_series_is_the_timelines_per_operation_and_stays_bounded_over_a_long_run():
    import json

    from dbsurge.measure.live import SERIES_OPS, SERIES_S, LiveFigures

    plan = StagePlan.parse("3s@10tps,3s@20tps")
    agg = _aggregator(plan, [])
    for t in range(6):  # two operations: each has its own percentiles, ALL has them merged
        agg.open_seconds[T0 + t]["read"].add(_second(10, 1000))
        agg.open_seconds[T0 + t]["write"].add(_second(5 if t != 4 else 0, 8000, {"timeout": 1} if t == 4 else None))
    written = agg.flush(now=T0 + 8.0).rows
    series = agg.live.series()
    timeline = [r for r in written if r["operation"] == "ALL"]
    assert series["time_s"] == list(range(T0, T0 + 6))
    assert series["target_tps"] == [r["target_tps"] for r in timeline] == [10.0] * 3 + [20.0] * 3
    assert series["achieved_tps"] == [r["achieved_tps"] for r in timeline] == [15, 15, 15, 15, 10, 15]
    assert series["failures"] == [0, 0, 0, 0, 1, 0]
    assert series["lag_p99_ms"] == [float(r["lag_p99_ms"]) for r in timeline]
    assert sorted(series["operations"]) == ["ALL", "read", "write"]
    assert series["operations"]["ALL"]["p99_ms"] == [r["p99_ms"] for r in timeline]
    assert series["operations"]["read"]["p50_ms"] == [1.0] * 6
    # a second without a success of an operation is a gap in its line, not a 0 ms point
    writes = [r for r in written if r["operation"] == "write"]
    assert series["operations"]["write"]["p99_ms"] == [r["p99_ms"] if r["ok"] else None for r in writes]
    assert series["operations"]["write"]["p99_ms"][4] is None and writes[4]["p99_ms"] == 0
    # the seconds after one the page has: those only, every column cut alike
    after = agg.live.series(since=T0 + 3)
    assert after["time_s"] == [T0 + 4, T0 + 5] and after["achieved_tps"] == [10, 15] and after["since"] == T0 + 3
    assert after["operations"]["write"]["p99_ms"] == series["operations"]["write"]["p99_ms"][4:]
    assert agg.live.series(since=T0 + 5)["time_s"] == [] and agg.live.series(since=0)["time_s"] == series["time_s"]

    # a day-long run at one point a second, with more operations than the chart draws: the series, its
    # memory and the answer it makes stay those of the last SERIES_S seconds
    live = LiveFigures()
    names = [f"op{i}" for i in range(SERIES_OPS + 4)]
    sizes = []
    cell = Cell()  # the percentiles come from the rows; an empty cell keeps a day of seconds quick to feed
    cell.ok = 3
    rows = [{"operation": op, "ok": 3, "p50_ms": 1.5, "p95_ms": 1.5, "p99_ms": 1.5} for op in names]
    for sec in range(T0, T0 + 86_400, 1):
        live.add_second(sec, None, 3.0, cell, {"ok": 3, "p99_ms": 1.5, "lag_p99_ms": 0.1}, rows)
        if sec - T0 in (SERIES_S, 86_399):
            sizes.append(len(json.dumps(live.series())))
    series = live.series()
    assert len(live.series_points) == len(series["time_s"]) == SERIES_S
    assert series["time_s"][0] == T0 + 86_400 - SERIES_S and series["time_s"][-1] == T0 + 86_399
    assert all(len(v) == SERIES_S for op in series["operations"].values() for v in op.values())
    assert series["operation_names"] == names[:SERIES_OPS] and series["operations_left_out"] == names[SERIES_OPS:]
    assert len(series["operations"]) == SERIES_OPS + 1  # and ALL
    assert sizes[0] == sizes[1] < 400_000, sizes  # the answer after a day is the size it was after 15 minutes
