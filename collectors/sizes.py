"""``dbsurge compare A B C --sizes 3,6,9``: throughput against the linear ideal as the database grows (study 002).

Study 002 runs one workload against a small, a medium and a large cluster and reads the throughput
as a share of what a linear scaling would give: "MongoDB achieves 340% of the theoretical 600%"
when the cluster grows six-fold (small to medium) and its throughput 3.4-fold. Given each run's
database size (nodes, vCPUs, or any measure that should scale throughput linearly), the rows are,
for each run against the first (the smallest, usually):

- **achieved scaling %**: its throughput / the first run's, in percent;
- **theoretical scaling %**: its size / the first run's size, in percent (the linear ideal);
- **% of theoretical**: achieved / theoretical; 100% is linear scaling;
- **operations per $**: when the run has a price (``dbsurge cost RUN --database NAME:COUNT`` once per
  run: its cost_inputs are what compare prices), operations per dollar as study 002 compares them.

Throughput is the run's successful operations per second over its whole window (a YCSB run's own
figure, for ycsb-run), so the runs should each hold the database at its limit for their duration.

These rows are added to the kind's own table: the module only reads sides and builds rows, and
`compare` imports it; both take their `Row` and `Figure` from `collectors.figures`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dbsurge.collectors.figures import Figure, Row

from dbsurge.base.errors import UserError, clip
from dbsurge.rundir.reader import read_rows
from dbsurge.rundir.schema import SUMMARY_CSV
from dbsurge.rundir.summaries import summary_numbers

STAGE = "by database size"


def parse_sizes(text: str, runs: int) -> list[float]:
    """``--sizes 3,6,9``: one positive number per run directory, in the order the runs are given."""
    parts = [p.strip() for p in str(text).split(",")]
    usage = f"give one database size per run directory ({runs}), comma-separated, e.g. 3,6,9"
    if len(parts) != runs:
        raise UserError(f"bad --sizes '{clip(text)}': {usage}")
    sizes = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise UserError(f"bad --sizes '{clip(text)}': '{clip(part, 20)}' is not a number: {usage}") from None
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"bad --sizes '{clip(text)}': sizes must be above 0: {usage}")
        sizes.append(value)
    return sizes


def run_throughput(side: Any, run_dir: Any) -> float | None:
    """Successful operations per second of one run: a YCSB run's own figure, else operations over the window."""
    from dbsurge.collectors.cost import successful_operations
    from dbsurge.collectors.rundata import open_run, read_stages, read_summary, read_timeline

    if side.kind in ("ycsb", "consistency"):
        value = summary_numbers(read_rows(run_dir, SUMMARY_CSV)).get("throughput_ops_s")
        return None if value is None else float(value)
    run = open_run(run_dir)
    window = run.window()
    if window is None or (window[1] - window[0]).total_seconds() <= 0:
        return None
    total, _ = successful_operations(read_stages(run.path), read_summary(run.path), read_timeline(run.path))
    return None if total is None else total / (window[1] - window[0]).total_seconds()


def size_rows(sides: Sequence[Any], sizes: Sequence[float],
              ops_per_usd: Callable[[Any], Figure]) -> tuple[list[Any], list[str]]:
    """The rows of throughput against the linear ideal (and ops per $ where priced, by ``ops_per_usd``), and a
    note on reading them."""
    throughput = []
    for side in sides:
        values = [v for v in (run_throughput(side, d) for d in side.runs) if v is not None]
        throughput.append(Figure(values))
    base_size, base = sizes[0], throughput[0].value

    def scaled(f: Figure) -> Figure:
        return Figure([100.0 * v / base for v in f.values] if base else [])

    achieved = [scaled(f) for f in throughput]
    theoretical = [Figure([100.0 * s / base_size]) for s in sizes]
    share = [Figure([100.0 * a.value / t.value]) if a.value is not None else Figure([])
             for a, t in zip(achieved, theoretical)]
    rows = [Row(STAGE, "database size", "count", [Figure([s]) for s in sizes]),
            Row(STAGE, "throughput ops/s", "tps", throughput),
            Row(STAGE, "achieved scaling %", "pct", achieved, False),
            Row(STAGE, "theoretical scaling %", "pct", theoretical, False),
            Row(STAGE, "% of theoretical", "pct", share, False)]
    per_usd = [ops_per_usd(side) for side in sides]
    if any(f.values for f in per_usd):
        rows.append(Row(STAGE, "operations per $", "ops", per_usd))
    notes = [(f"By database size: each run's throughput against the first's ({sides[0].label}, size "
              f"{base_size:g}) beside the linear ideal, as study 002 reads it (340% of the theoretical 600%: "
              "achieved scaling % of theoretical scaling %; 100% of theoretical is linear).")]
    if not any(f.values for f in per_usd):
        notes.append("No run has a price: `dbsurge cost RUN --database NAME:COUNT` on each run gives operations "
                     "per $ here.")
    return rows, notes
