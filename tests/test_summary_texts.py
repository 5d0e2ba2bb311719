"""The sentences a run's end prints: whose lag, in one short line, and only when it changes an answer."""

from __future__ import annotations

from dbsurge.engine.finish import lag_findings


def _stage(stage: str = "200%", *, lag: float, p99: float, achieved: float = 400.0, target: float = 400.0,
           dropped: int = 0, loop: float = 0.0, service_p99: float = 2.0, count: int = 24000, failures: int = 0,
           **failed: int) -> dict:
    row = {"stage": stage, "operation": "ALL", "lag_p99_ms": lag, "lag_max_ms": lag * 2, "dropped": dropped,
           "achieved_tps": achieved, "target_tps": target, "p99_ms": p99, "service_p99_ms": service_p99,
           "loop_lag_max_ms": loop, "count": count, "failures": failures}
    row.update({f"failed_{k}": n for k, n in failed.items()})
    return row


def test_a_few_ms_of_lag_at_a_rate_that_was_delivered_is_no_warning():
    # the demo's runs under load: lag p99 5-16 ms, the plan delivered, nothing dropped, whoever lagged
    for row in (_stage(lag=16.0, p99=60.0, loop=12.0), _stage(lag=8.0, p99=40.0), _stage(lag=6.0, p99=20.0)):
        [finding] = lag_findings([row], 5.0)
        assert not finding.material, finding


def test_lag_that_is_most_of_the_response_time_or_queued_or_short_is_a_short_warning():
    cases = [_stage(lag=16.0, p99=20.0, loop=12.0),  # the generator's own lag is most of the p99
             _stage(lag=103.0, p99=130.0, service_p99=25.0),  # arrivals queued behind the database
             _stage(lag=12.0, p99=40.0, achieved=300.0),  # the rate was not delivered
             _stage(lag=12.0, p99=40.0, dropped=5)]
    for row in cases:
        [finding] = lag_findings([row], 5.0)
        assert finding.material and len(finding.text) <= 200, finding
    assert lag_findings(cases[:1], 5.0)[0].cause == "generator"
    assert lag_findings(cases[1:2], 5.0)[0].text.startswith("the target kept every user busy in stage 200%")


def test_the_generator_is_not_blamed_when_the_target_was_failing():
    """The CQL JVM killed for good: timeouts and connect failures, the driver's event loop busy with reconnects."""
    row = _stage(lag=900.0, p99=5000.0, loop=800.0, achieved=63.5, target=200.0, count=6000, failures=4200,
                 timeout=200, connect=4000)
    [finding] = lag_findings([row], 5.0)
    assert finding.cause == "target" and finding.material, finding
    assert "generator" not in finding.text and "distorts" not in finding.text, finding.text
    assert finding.text.startswith("the target kept every user busy in stage 200%: it failed 4200 of 6000 "
                                   "operations (timeout 200, connect 4000)"), finding.text
    assert "63.5 of 200.0 TPS achieved" in finding.text
    # the same stall with the operations succeeding: the generator's evidence, and the generator is named
    healthy = _stage(lag=900.0, p99=950.0, loop=800.0, achieved=63.5, target=200.0)
    assert lag_findings([healthy], 5.0)[0].cause == "generator"


def test_no_log_line_names_dbsurge_twice():
    """The formatters print the logger's name (``ERROR dbsurge: ...``): a message that starts with it again
    read ``ERROR dbsurge: dbsurge: this worker's lease lapsed ...``."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    doubled = []
    for path in [*(root / "dbsurge").rglob("*.py"), *(root / "collectors").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
                    and node.func.attr in ("debug", "info", "warning", "error", "exception", "critical")):
                continue
            first = node.args[0]
            text = first.value if isinstance(first, ast.Constant) else (
                first.values[0].value if isinstance(first, ast.JoinedStr) and first.values
                and isinstance(first.values[0], ast.Constant) else None)
            if isinstance(text, str) and text.startswith("dbsurge: "):
                doubled.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not doubled, doubled


def test_the_idle_table_names_the_idle_window_with_its_unit(tmp_path):
    import json

    from dbsurge.scenarios.idle import report

    (tmp_path / "run.json").write_text(json.dumps({"scenario": "idle", "settings": {"idle": "5", "lookups": 20,
                                                                                    "connect_timeout_s": 15}}))
    (tmp_path / "probes.csv").write_text("run,phase,ms,result\n")
    title = report(tmp_path).tables[0].title
    assert title.startswith("First request after 5 s idle (connect timeout 15 s"), title


def test_a_stage_never_reached_has_no_failure_rate_and_rates_keep_one_precision():
    from dbsurge.measure.tables import stage_table
    from dbsurge.scenarios.spike import spike_rows

    def row(stage, target, count):
        return {"stage": stage, "operation": "ALL", "target_tps": target, "achieved_tps": "20" if count else "0",
                "count": str(count), "failures": "0", "failure_rate": "0", "p95_ms": "1", "p99_ms": "1",
                "service_p99_ms": "1", "lag_p99_ms": "1", "dropped": "0", "ok": str(count)}

    rows = [row("20%", "20", 200), row("ramp", "244.86", 2400), row("5%", "2.5", 0)]
    _h, lines = stage_table(rows)
    assert [line[1] for line in lines] == ["20", "245", "2.5"]  # not "244.86" beside "20"
    assert lines[0][-3] == "0.000%" and lines[2][-3] == "-", lines  # a stage a SIGINT never reached
    spike = spike_rows(rows, {})
    assert spike[0]["failure_rate"] == 0.0 and spike[2]["failure_rate"] is None


def test_the_spike_table_shows_a_stage_never_reached_without_a_failure_rate(tmp_path):
    import csv
    import json

    from dbsurge.rundir.schema import STAGES
    from dbsurge.scenarios.spike import report

    fields = ["stage", "operation", "target_tps", "achieved_tps", "count", "failures", "failure_rate", "p95_ms",
              "p99_ms"]
    with open(tmp_path / STAGES, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerow(dict(zip(fields, ["20%", "ALL", "20", "20", "200", "0", "0", "1", "1"])))
        w.writerow(dict(zip(fields, ["200%", "ALL", "200", "0", "0", "0", "0", "", ""])))
    (tmp_path / "run.json").write_text(json.dumps({"scenario": "spike", "plan": {"text": "x", "baseline_tps": 100}}))
    table = report(tmp_path).tables[0]
    rate = table.headers.index("failure rate")
    assert [r[rate] for r in table.rows] == ["0.000%", "-"], table.rows


def test_the_reports_events_show_rounded_times_and_no_none():
    from dbsurge.collectors.report import event_details

    event = {"time_utc": "2026-01-01T00:00:35.667Z", "kind": "rate_change", "at_s": 35.667605632000004,
             "rate_tps": None, "scale": 2.0, "override": 1, "label": "override 1: plan x2"}
    assert event_details(event) == "at_s=35.668, scale=2, override=1, label=override 1: plan x2"


def test_every_scenarios_quick_run_takes_seconds():
    """The README: `--quick` defaults for the embedded servers run in seconds; longrun's held its rate 3 minutes."""
    import importlib

    from dbsurge.scenarios import SCENARIOS
    from dbsurge.scenarios.arguments import seconds

    for name, (module, _line) in SCENARIOS.items():
        scenario = importlib.import_module(module).SCENARIO
        for key in ("duration", "warm_duration", "idle", "step_seconds", "stage_seconds"):
            if key in scenario.quick:
                assert seconds(scenario.quick[key], key) <= 60, (name, key, scenario.quick[key])


def test_the_cache_headline_says_when_nothing_made_the_cold_snapshot_cold():
    """After 1 s idle with restart=False the headline read "COLD was slower than WARM at every percentile"."""
    from dbsurge.scenarios.cache import cache_rows, verdict

    warm, cold = [0.5] * 100, [0.6] * 100
    same_cache = cache_rows(warm, cold, 0, 0, {"warm": {"hit_pct": "100.0"}, "cold": {"hit_pct": "99.9"}})
    text = verdict(same_cache, {"idle_s": 1.0, "restart": False})
    assert text.startswith("NOT A COLD START: nothing emptied the cache between the snapshots (1 s idle, no restart; "
                           "the server's cache hit ratio stayed 100.0% -> 99.9%)"), text
    assert "Measured: COLD was slower than WARM at every percentile: P50 0.500 -> 0.600 ms" in text
    assert "--restart-target" in text
    # a restart, or the server's own counters showing the cache emptied: a cold start, as before
    assert verdict(same_cache, {"idle_s": 0, "restart": True}).startswith("COLD was slower than WARM at every")
    emptied = cache_rows(warm, cold, 0, 0, {"warm": {"hit_pct": "100.0"}, "cold": {"hit_pct": "60.0"}})
    assert verdict(emptied, {"idle_s": 1200, "restart": False}).startswith("COLD was slower than WARM at every")


def test_the_demo_says_which_step_failed_what_it_means_and_what_to_do():
    """`make demo` ended `make: *** [Makefile:21: demo] Error 3` after an INCOMPLETE first run, with nothing saying
    the demo had failed or why."""
    from dbsurge.commands.demo import outcome_lines

    lines = outcome_lines([("orders spike on PostgreSQL", "results/demo-orders-x", 3),
                           ("documents reads on MongoDB-wire", "results/demo-documents-x", 0),
                           ("YCSB load on DynamoDB-API", None, 0)])
    text = "\n".join(lines)
    assert "  orders spike on PostgreSQL: exit 3 (INCOMPLETE), results/demo-orders-x" in lines
    assert "  documents reads on MongoDB-wire: exit 0 (ok)" in lines
    assert "demo FAILED: 1 of 3 steps did not exit 0 (the demo exits 3):" in lines
    failed = next(line for line in lines if line.startswith("  orders spike on PostgreSQL: INCOMPLETE"))
    assert "too busy" in failed and "run `make demo` again" in failed and "results/demo-orders-x/summary.md" in failed
    assert "demo OK" not in text
    assert outcome_lines([("a", None, 0)])[-1] == "demo OK: every step exited 0"


def test_the_generator_is_not_blamed_when_the_target_held_users_longer_than_its_stall():
    # a 30 ms stall, but every user waited 120 ms on the database at p99: the queue was the database's
    busy = _stage(lag=80.0, p99=200.0, loop=30.0, service_p99=120.0, achieved=300.0)
    [finding] = lag_findings([busy], 5.0)
    assert finding.cause == "target" and finding.text.startswith("the target kept every user busy"), finding
    # a 1.4 s stall against 130 ms of service: the generator's
    stalled = _stage(lag=1800.0, p99=1830.0, loop=1423.0, service_p99=130.0, achieved=300.0)
    assert lag_findings([stalled], 5.0)[0].cause == "generator"
