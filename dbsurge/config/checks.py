"""Pass/fail thresholds for pipelines: ``--check "order_create.p99<50ms,failure_rate<1%"``.

A check is ``[OPERATION.]METRIC OP VALUE[UNIT]``. Without an operation it applies to the whole
run (``ALL``). Metrics are the columns of summary.csv without their unit suffix: p50, p95, p99,
p999, max, mean, service_p50, service_p95, service_p99, lag_p99, lag_max (times; a unit us, ms or
s is required), failure_rate (% up to 100, or a fraction below 1), achieved_tps, count, failures,
retries, dropped::

    >>> [str(c) for c in parse_checks("order_create.p99<50ms, failure_rate<1%")]
    ['order_create.p99<50ms', 'failure_rate<1%']
    >>> parse_checks("p99<50ms")[0].evaluate([{"operation": "ALL", "p99_ms": 61.2}])
    (False, 61.2)
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dbsurge.base.errors import UserError, clip

_TIME_METRICS = {"p50", "p95", "p99", "p999", "max", "mean", "service_p50", "service_p95", "service_p99",
                 "lag_p99", "lag_max"}
_PLAIN_METRICS = {"achieved_tps", "count", "failures", "retries", "dropped"}
_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
# re.ASCII: \d and \w would take Arabic-Indic or fullwidth digits as numbers (used with fullmatch, not $,
# which also matches before a trailing newline).
_CHECK = re.compile(r"(?:(?P<op>[A-Za-z_][\w-]*)\.)?(?P<metric>[a-z_0-9]+)\s*(?P<cmp><=|>=|<|>)\s*"
                    r"(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>us|ms|s|%|tps)?", re.ASCII)
# A time limit without its unit is refused: "p99<50" could mean 50 ms or 50 s, and a guess would judge wrongly.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


@dataclass(frozen=True)
class Check:
    """One threshold, normalised to the unit of its summary column."""

    text: str
    operation: str
    column: str
    compare: str
    limit: float

    def evaluate(self, summary_rows: list[dict]) -> tuple[bool, float | None]:
        """(passed, measured value); an operation that never ran fails with value None."""
        row = next((r for r in summary_rows if r.get("operation") == self.operation), None)
        if row is None or row.get(self.column) in (None, ""):
            return False, None
        value = float(row[self.column])
        return _OPS[self.compare](value, self.limit), value

    def shown(self, value: float | None) -> str:
        """The measured value with its unit, as the limit was written: ``5.999 ms``, ``2.5%``, ``98.2 TPS``.

        >>> parse_checks("order_create.p99<0.1ms")[0].shown(5.999)
        '5.999 ms'
        >>> parse_checks("failure_rate<1%")[0].shown(0.025)
        '2.5%'
        """
        if value is None:
            return "no data"
        if self.column.endswith("_ms"):
            return f"{value:g} ms"
        if self.column == "failure_rate":
            return f"{value * 100:g}%"
        if self.column == "achieved_tps":
            return f"{value:g} TPS"
        return f"{value:g} operations"  # count, failures, retries, dropped

    def __str__(self) -> str:
        return self.text


def parse_checks(text: str | None) -> list[Check]:  # noqa: C901 - the grammar of a check: one branch per metric family
    """Parse a comma-separated list of checks; a malformed one raises UserError naming it."""
    if not text:
        return []
    checks = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = _CHECK.fullmatch(part)
        if not m:
            raise UserError(f"bad --check '{clip(part)}': expected e.g. order_create.p99<50ms or failure_rate<1%")
        metric, unit, value = m.group("metric"), m.group("unit"), float(m.group("value"))
        if not math.isfinite(value):  # a 400-digit limit reads as inf
            raise UserError(f"bad --check '{clip(part)}': the limit is too large")
        if metric in _TIME_METRICS:
            if unit not in _TIME_UNITS_MS:
                raise UserError(f"bad --check '{clip(part)}': {metric} takes a time unit (us, ms or s), "
                                f"e.g. {metric}<{m.group('value')}ms")
            column, limit = f"{metric}_ms", value * _TIME_UNITS_MS[unit]
        elif metric == "failure_rate":
            if unit not in ("%", None):
                raise UserError(f"bad --check '{clip(part)}': failure_rate takes % or a fraction")
            if unit == "%" and value > 100:
                raise UserError(f"bad --check '{clip(part)}': a failure rate is at most 100%, so this limit "
                                f"could never fail")
            if unit is None and value >= 1:
                # a bare 1 is a fraction (100%), surely meant as 1%: say so rather than pass every run
                raise UserError(f"bad --check '{clip(part)}': a failure rate without % is a fraction below 1; "
                                f"write {m.group('value')}% or e.g. 0.01")
            column, limit = "failure_rate", value / 100.0 if unit == "%" else value
        elif metric in _PLAIN_METRICS:
            if unit not in (None, "tps"):
                raise UserError(f"bad --check '{clip(part)}': {metric} takes no unit")
            column, limit = metric, value
        else:
            known = ", ".join(sorted(_TIME_METRICS | _PLAIN_METRICS | {"failure_rate"}))
            raise UserError(f"bad --check '{clip(part)}': unknown metric '{clip(metric, 30)}' (known: {known})")
        checks.append(Check(part.replace(" ", ""), m.group("op") or "ALL", column, m.group("cmp"), limit))
    return checks


def check_operations(checks: Iterable[Check], known: Iterable[str]) -> None:
    """Refuse a check on an operation the workload does not have (it could only fail, after the whole load).

    `known` are the workload's operation names; ``ALL`` (the whole run) is always known.
    """
    names = set(known) | {"ALL"}
    for c in checks:
        if c.operation not in names:
            raise UserError(f"bad --check '{clip(c.text)}': no operation '{clip(c.operation, 40)}' in this workload "
                            f"(known: {', '.join(sorted(names))})")


def evaluate_checks(checks: list[Check], summary_rows: list[dict]) -> list[tuple[Check, bool, float | None]]:
    return [(c, *c.evaluate(summary_rows)) for c in checks]
