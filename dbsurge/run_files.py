"""Reading a finished run directory: run.json, a CSV's rows, and the figures the comparisons take from them.

The scenarios build their tables from these files (`dbsurge.scenarios.files`), and `dbsurge compare`
and ``dbsurge repeat`` read the same figures: summary.csv's headline numbers of an engine run
(`summary_numbers`) and stages.csv's figures per stage across runs (`stage_values`). Reading only.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import UserError
from .json_input import load_json

#: stages.csv columns summarised across repetitions
FIGURES = ("target_tps", "achieved_tps", "failure_rate", "p50_ms", "p95_ms", "p99_ms", "lag_p99_ms", "dropped",
           "planned")


def read_meta(run_dir: Path) -> dict:
    """run.json of a run directory; `UserError` when there is none."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no run.json)")
    try:
        return load_json(path.read_text())
    except (OSError, ValueError) as e:  # ValueError: not JSON, not UTF-8, nested too deeply
        raise UserError(f"{path} cannot be read: {e}") from None


def read_rows(run_dir: Path, name: str) -> list[dict]:
    """A CSV of the run directory as dicts (``[]`` when it does not exist)."""
    return list(iter_rows(run_dir, name))


def iter_rows(run_dir: Path, name: str) -> Iterator[dict]:
    """The rows of a CSV of the run directory, one at a time (nothing when it does not exist)."""
    path = Path(run_dir) / name
    if not path.is_file():
        return
    with open(path, newline="") as f:
        yield from csv.DictReader(f)


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
    path = Path(run_dir) / "stages.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


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
