"""The figures the comparisons take from finished run directories, read through `dbsurge.rundir.reader`.

The scenarios build their tables from these files, and `dbsurge compare` and ``dbsurge run --repeat`` read the
same figures: the summary CSV's headline numbers of a run (`summary_numbers`) and the stage table's figures per
stage across runs (`stage_values`). Reading only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dbsurge.rundir.reader import read_rows
from dbsurge.rundir.schema import STAGES

#: the stage table's columns summarised across repetitions
FIGURES = ("target_tps", "achieved_tps", "failure_rate", "p50_ms", "p95_ms", "p99_ms", "lag_p99_ms", "dropped",
           "planned")


def opt_float(v: Any) -> float | None:
    """A cell as a float, None when blank."""
    return None if v in (None, "") else float(v)


def summary_numbers(summary_rows: list[dict]) -> dict:
    """Throughput (successful ops/s), read and update p99, operations and failures of one engine run."""
    by_op = {r["operation"]: r for r in summary_rows}
    total = by_op.get("ALL", {})
    count = int(total.get("count") or 0)
    failures = int(total.get("failures") or 0)
    return {"throughput_ops_s": opt_float(total.get("achieved_tps")),
            "read_p99_ms": opt_float(by_op.get("read", {}).get("p99_ms")),
            "update_p99_ms": opt_float(by_op.get("update", {}).get("p99_ms")),
            "operations": count, "failures": failures,
            "failure_rate": round(failures / count, 6) if count else None}


def read_stage_rows(run_dir: Path) -> list[dict]:
    """The stage table's rows (``[]`` without one)."""
    return read_rows(run_dir, STAGES)


def stage_values(run_dirs: Sequence[Path]) -> tuple[list[tuple[str, str]], dict[tuple[str, str, str], list[float]]]:
    """(stage, operation) pairs in the first run's order, and each (stage, operation, figure)'s values across runs."""
    order: list[tuple[str, str]] = []
    values: dict[tuple[str, str, str], list[float]] = {}
    for d in run_dirs:
        for r in read_stage_rows(d):
            key = (r.get("stage", ""), r.get("operation", ""))
            if key not in order:
                order.append(key)
            for fig in FIGURES:
                v = r.get(fig)
                if fig.endswith("_ms") and str(r.get("count") or "0") == "0":
                    continue  # no operation: no latency
                if v not in (None, ""):
                    values.setdefault((*key, fig), []).append(float(v))
    return order, values
