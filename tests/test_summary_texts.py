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
    assert finding.text.startswith("the target failed 4200 of 6000 operations (timeout 200, connect 4000) in stage")
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
