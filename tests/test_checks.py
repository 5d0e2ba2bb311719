"""--check thresholds for pipelines."""

from __future__ import annotations

import pytest

from dbsurge.base.errors import UserError
from dbsurge.config.checks import evaluate_checks, parse_checks

ROWS = [
    {"operation": "order_create", "p99_ms": 61.2, "failure_rate": 0.0},
    {"operation": "ALL", "p99_ms": 12.0, "failure_rate": 0.02, "lag_p99_ms": 0.4},
]


def test_checks_pass_and_fail_with_units():
    checks = parse_checks("order_create.p99<50ms,failure_rate<1%,lag_p99<=1000us,p99<0.1s")
    results = {str(c): ok for c, ok, _ in evaluate_checks(checks, ROWS)}
    assert results == {"order_create.p99<50ms": False, "failure_rate<1%": False, "lag_p99<=1000us": True,
                       "p99<0.1s": True}


def test_unknown_operation_fails_the_check():
    (c,) = parse_checks("nope.p99<50ms")
    assert c.evaluate(ROWS) == (False, None)


@pytest.mark.parametrize("bad", ["p99<<5ms", "p98<5ms", "failure_rate<5ms", "p99<5tps", "p99<50", "lag_max>=3",
                                 "failure_rate<200%", "failure_rate<100.5%", "failure_rate<1", "failure_rate<=5",
                                 "p99<٥٠ms"])
def test_malformed_checks(bad):
    with pytest.raises(UserError, match="bad --check"):
        parse_checks(bad)


def test_a_measured_value_is_shown_with_its_unit():
    shown = {str(c): c.shown(v) for c, v in zip(
        parse_checks("order_create.p99<0.1ms,failure_rate<1%,achieved_tps>90,dropped<=0,lag_p99<2s"),
        (5.999, 0.025, 98.5, 3, 1500.0))}
    assert shown == {"order_create.p99<0.1ms": "5.999 ms", "failure_rate<1%": "2.5%", "achieved_tps>90": "98.5 TPS",
                     "dropped<=0": "3 operations", "lag_p99<2s": "1500 ms"}
    assert parse_checks("p99<1ms")[0].shown(None) == "no data"


@pytest.mark.parametrize("good, limit", [("failure_rate<0.5", 0.5), ("failure_rate<100%", 1.0), ("p99<0.1s", 100.0),
                                         ("failure_rate<=0", 0.0)])
def test_checks_at_their_bounds(good, limit):
    assert parse_checks(good)[0].limit == pytest.approx(limit)
