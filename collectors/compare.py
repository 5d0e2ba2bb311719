"""``dbsurge compare RUN_DIR RUN_DIR [...] [--labels D1,A2] [--html FILE] [--force]``: the studies' comparisons.

Every study is a comparison (DSQL vs Aurora Serverless v2 under one spike plan, warm vs cold,
MongoDB vs ScyllaDB per request distribution). This module reads two or more run directories of
one kind and prints the study's table with one column per run, ratios against the first run
where they mean something:

- **engine runs** (``dbsurge run``, ``dbsurge scenario spike``; stages.csv): per stage the arrival
  rate, successful TPS, per-operation p95/p99, failure rate, lag p99, capacity max when
  CloudWatch data is there; then each run's cost and operations per dollar;
- **cache** (``dbsurge scenario cache``): warm, cold and the delta per percentile, per run;
- **ycsb** (``dbsurge scenario ycsb-run``): throughput, read and update p99 per distribution;
- **scalability** (``ycsb-run --scale-workers``): throughput per worker count against the ideal;
- **the other scenarios** (idle, longscan, rewarm, ycsb-load, ``ycsb-run --consistency``, capacity): their own
  tables side by side (`_table_rows`), row by row.

A directory written by ``--repeat N`` counts as one run whose figures are the repetitions'
medians with their [min-max] spread; when both sides have repetitions, a column gives a 95%
bootstrap interval of the difference from the repetitions' per-second values
(`collectors.bootstrap`), and another says whether the difference is beyond the spread (the
interval excludes 0; without per-second values, the ranges do not overlap) or not.

Before comparing, `differences` checks that the runs are comparable (plan, workload, data size,
operation mix, arrival process; for the scenarios their own settings) and prints what differs;
incomparable runs are refused (exit 2) unless ``--force``. The HTML (self-contained, base64 PNG
like report.html) holds the table and plots overlaid on the elapsed time since each plan's time
zero: response-time p99 per operation, achieved rate, capacity. `report_section` is the same as a
section of report.html (``dbsurge report A B``).
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbsurge.collectors.bootstrap import difference_interval, per_second
from dbsurge.collectors.figures import MIN_OPERATIONS, Figure, Row
from dbsurge.collectors.scenario_hooks import scenarios
from dbsurge.collectors.sizes import parse_sizes, size_rows

from dbsurge.base.errors import UserError
from dbsurge.config.help_examples import epilog
from dbsurge.config.option_names import OneLineParser
from dbsurge.rundir.reader import check_run_dirs, check_run_json, read_meta, read_rows
from dbsurge.rundir.schema import CLOUDWATCH, CSV_SUFFIX, MERGED, METRICS, RUN_JSON, RUNS, STAGES, SUMMARY_CSV, TIMELINE
from dbsurge.rundir.summaries import read_stage_rows, stage_values, summary_numbers
from dbsurge.rundir.writer import write_text
from dbsurge.workloads import WORKLOADS, parse_workload_options
from dbsurge.workloads.base import resolve_options

KINDS = ("engine", "cache", "ycsb", "scalability", "idle", "longscan", "rewarm", "ycsb-load", "consistency",
         "capacity")
#: Scenario kinds compared table by table from the scenario's own report (`_table_rows`): each row of its tables
#: (by its first column) and each numeric column is a figure. kind -> the scenario whose ``report(run_dir)`` builds it.
TABLE_KINDS = {"idle": "idle", "longscan": "longscan", "rewarm": "rewarm", "ycsb-load": "ycsb-load",
               "consistency": "ycsb-run", "capacity": "capacity"}
#: What each kind's table is, for its title and first column.
_TITLES = {"engine": "Per stage", "cache": "Warm vs cold snapshots", "ycsb": "YCSB workload A",
           "scalability": "Throughput against the ideal line", "idle": "First request after idle (study 001)",
           "longscan": "Long scan during scale-out (study 000, test 3)", "rewarm": "Cold-cache re-warm (study 000)",
           "ycsb-load": "YCSB load phase: insert throughput (study 002)",
           "consistency": "YCSB workload A per consistency level (study 002)", "capacity": "Capacity search"}
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass
class Side:
    """One column of the comparison: a run, or a set of repetitions of one run."""

    label: str
    path: Path
    meta: dict
    kind: str
    runs: list[Path] = field(default_factory=list)  # the run directories (one, or the repetitions)

    @property
    def repeated(self) -> bool:
        return len(self.runs) > 1

    @property
    def first_meta(self) -> dict:
        return _meta(self.runs[0]) if self.runs else self.meta

    @property
    def target(self) -> str:
        m = self.first_meta
        target = m.get("target")
        shown = target.get("display") if isinstance(target, dict) else target  # older run.json: the URI as text
        return str(m.get("target_display") or m.get("target_name") or shown or "")


def _meta(path: Path) -> dict:
    return read_meta(path)


def open_side(path: str | Path, label: str) -> Side:
    """Read a run directory (or a parent of repetitions) and tell its kind; `UserError` for others."""
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"{p} is not a directory: give run directories such as results/<run-id>")
    meta = _meta(p)
    runs = [p]
    if meta.get("kind") == "repetitions":
        runs = [p / str(r["run_dir"]) for r in (meta.get("repetitions") or {}).get("runs") or []]
        runs = [r for r in runs if (r / RUN_JSON).is_file()]
        if not runs:
            raise UserError(f"{p}: a set of repetitions with no finished repetition")
    first = _meta(runs[0])
    scenario = first.get("scenario")
    if scenario == "cache":
        kind = "cache"
    elif scenario == "ycsb-run":
        mode = first.get("mode")
        kind = "scalability" if mode == "scale" else "consistency" if mode == "consistency" else "ycsb"
    elif scenario in TABLE_KINDS:
        kind = str(scenario)
    elif (runs[0] / STAGES).is_file():
        kind = "engine"
    else:
        what = f"a run of scenario {scenario}" if scenario else f"not a finished run (no {STAGES})"
        raise UserError(f"{p} is {what}, which compare cannot read: it reads engine runs (dbsurge run, scenario "
                        f"spike), and scenarios cache, ycsb-run (one distribution, --consistency, --scale-workers), "
                        f"idle, longscan, rewarm, ycsb-load and capacity")
    return Side(label=label, path=p, meta=meta, kind=kind, runs=runs)


def open_sides(paths: Sequence[str | Path], labels: str | None = None) -> list[Side]:
    if len(paths) < 2:
        raise UserError("compare needs two or more run directories")
    names = [x.strip() for x in labels.split(",")] if labels else []
    if labels and (len(names) != len(paths) or not all(names)):
        raise UserError(f"--labels '{labels}': give one label per run directory ({len(paths)}), comma-separated")
    if len(set(names)) != len(names):
        raise UserError(f"--labels '{labels}': labels must differ")
    sides = [open_side(p, names[i] if names else _default_label(Path(p), i)) for i, p in enumerate(paths)]
    kinds = {s.kind for s in sides}
    if len(kinds) > 1:
        raise UserError("runs of different kinds cannot be compared: " + ", ".join(f"{s.label} {s.kind}"
                                                                                  for s in sides))
    return sides


def _default_label(path: Path, i: int) -> str:
    name = path.resolve().name
    return name if len(name) <= 24 else f"run{i + 1}"


# -- comparability ------------------------------------------------------------------------------------------


def facts(side: Side) -> dict[str, str]:  # noqa: C901 - one comparable fact per branch, flat
    """What must be equal for two runs to be compared, as text (key -> value)."""
    m = side.first_meta
    out: dict[str, str] = {}
    if side.kind in ("engine", "ycsb", "scalability"):
        workload = m.get("workload")
        name = workload[0] if isinstance(workload, list) and len(workload) == 1 else workload
        out["workload"] = str(name)
        if side.kind == "engine":
            plan = m.get("plan") or {}
            text = plan.get("text") or "closed model"
            if plan.get("baseline_tps") and "%" in text:
                text += f" of {float(plan['baseline_tps']):g} TPS"
            out["plan"] = text
            out["arrival process"] = str(m.get("arrivals"))
            ops = m.get("operations") or []
            out["operation mix"] = ", ".join(f"{o[0]}={float(o[1]):g}" for o in ops if len(o) == 2) or "-"
        if side.kind in ("ycsb", "scalability"):
            settings = m.get("scenario_settings") or {}
            out["duration"] = str(settings.get("duration"))
        if side.kind == "ycsb":
            out["target TPS"] = str(m.get("target_tps") or "flat out")
        if side.kind == "scalability":
            out["workers"] = str(m.get("workers"))
            out["clients per process"] = str(m.get("users_per_process"))
            out["distribution"] = str(m.get("distribution"))
        for k, v in _workload_options(side).items():
            if side.kind == "ycsb" and (k == "requestdistribution" or k.startswith("hotspot")):
                continue  # a dimension of the table, not a difference
            out[f"workload option {k}"] = str(v)
    elif side.kind == "cache" or side.kind in TABLE_KINDS:
        dimensions = _DIMENSIONS.get(side.kind, set())
        for k, v in (m.get("scenario_settings") or m.get("settings") or {}).items():
            if k not in dimensions:
                out[f"setting {k}"] = str(v)
        for k, v in (m.get("workload_options") or {}).items():
            if k not in dimensions:
                out[f"workload option {k}"] = str(v)
    return out


#: Settings that are what a comparison of the kind is about (study 002's batched against unbatched inserts,
#: consistency levels), so they may differ: every other setting must be equal.
_DIMENSIONS = {"ycsb-load": {"batch_size", "batchsize", "clients"}, "consistency": {"consistency", "levels"}}


def _workload_options(side: Side) -> dict[str, Any]:
    """The workload's options with defaults filled in (data size and mix), from the first run."""
    m = side.first_meta
    given = dict(m.get("workload_options") or {})
    if side.kind == "scalability":
        sub = side.runs[0] / RUNS
        firsts = sorted(sub.glob(f"*/{RUN_JSON}")) if sub.is_dir() else []
        if firsts:
            given = dict(check_run_json(firsts[0]).get("workload_options") or {})
    workload = m.get("workload")
    name = workload[0] if isinstance(workload, list) and workload else workload or "ycsb"
    try:
        parsed = parse_workload_options([f"{k}={v}" for k, v in given.items()])
        return resolve_options(str(name), WORKLOADS[str(name)].OPTIONS, parsed)
    except (UserError, KeyError):
        return given


def differences(sides: Sequence[Side]) -> tuple[list[str], list[str]]:
    """(what differs and blocks the comparison, what differs but does not): one line each."""
    base = facts(sides[0])
    blocking: list[str] = []
    for s in sides[1:]:
        other = facts(s)
        for key in dict.fromkeys([*base, *other]):
            a, b = base.get(key, "-"), other.get(key, "-")
            if a != b:
                blocking.append(f"{key}: {sides[0].label} {a!r} vs {s.label} {b!r}")
    notes: list[str] = []
    seeds = [str(s.first_meta.get("seed")) for s in sides]
    if len(set(seeds)) > 1:
        notes.append("seeds differ (" + ", ".join(f"{s.label} {x}" for s, x in zip(sides, seeds)) +
                     "): the same plan, but other arrival times and keys")
    reps = [len(s.runs) for s in sides]
    if len(set(reps)) > 1:
        notes.append("repetitions differ: " + ", ".join(f"{s.label} {n}" for s, n in zip(sides, reps)))
    return blocking, run_warnings(sides) + notes + what_differed(sides)


def run_warnings(sides: Sequence[Side]) -> list[str]:
    """The warnings each run printed at its end (run.json's ``behind_plan``), one line each, named by side.

    A ratio of p99s means the databases' difference only when neither run's response times hold the tool's lag
    or a queue: Cassandra's read p99 read "2.98x" while its run's lag p99 was 103 ms against 22 ms, and the
    warning that run printed was nowhere in the comparison.
    """
    out = []
    for s in sides:
        for i, d in enumerate(s.runs):
            findings = ((_meta(d).get("results") or {}).get("behind_plan") or []) if (d / RUN_JSON).is_file() else []
            where = f"{s.label}, repetition {i + 1}" if s.repeated else s.label
            out += [f"WARNING ({where}): {f}" for f in findings if isinstance(f, str)]
    return out


def lagged_stages(sides: Sequence[Side]) -> set[str]:
    """The stages a run's warning names (``... in stage 200% ...``): their latency ratios are marked."""
    stages = {str(r.get("stage")) for s in sides for d in s.runs[:1] for r in _stage_csv(d)} if sides else set()
    text = " ".join(run_warnings(sides))
    return {st for st in stages if re.search(rf"in stage {re.escape(st)}(?=[:;,() ]|$)", text)}


#: run.json options that differ between any two runs by design (names, ports, paths) or are secret-free noise.
_OPTIONS_NOT_COMPARED = frozenset({
    "run_id", "results_dir", "target", "config", "csv_prefix", "html_file", "json_file", "logfile", "master_port",
    "master_bind_port", "master_bind_host", "master_host", "web_port", "web_host", "prometheus_port",
    "prometheus_host", "join_token", "target_secret", "target_secret_endpoint_url", "cloudwatch_endpoint_url",
    "locustfile", "locustfile_list", "tags", "exclude_tags", "user_classes",
})


def what_differed(sides: Sequence[Side]) -> list[str]:
    """What run.json says differed between the runs beyond the plan: options, target, versions (one line each).

    The runs passed `differences`' checks (or ``--force``): these are the settings a reader should know
    changed, such as ``--users``, the target or a driver's version, before reading a ratio as the target's.
    """
    out = []
    first = sides[0]
    for s in sides[1:]:
        a_meta, b_meta = first.first_meta, s.first_meta
        changes = []
        a_opts, b_opts = a_meta.get("options") or {}, b_meta.get("options") or {}
        for key in sorted(set(a_opts) | set(b_opts)):
            if key in _OPTIONS_NOT_COMPARED or a_opts.get(key) == b_opts.get(key):
                continue
            changes.append(f"--{key.replace('_', '-')} {_shown(a_opts.get(key))} vs {_shown(b_opts.get(key))}")
        a_target = a_meta.get("target_name") or first.target
        b_target = b_meta.get("target_name") or s.target
        if a_target != b_target or first.target != s.target:
            changes.append(f"target {first.target or a_target} vs {s.target or b_target}")
        a_ver, b_ver = a_meta.get("versions") or {}, b_meta.get("versions") or {}
        for key in sorted(set(a_ver) | set(b_ver)):
            if a_ver.get(key) != b_ver.get(key):
                changes.append(f"{key} {_shown(a_ver.get(key))} vs {_shown(b_ver.get(key))}")
        if changes:
            out.append(f"What differed, {first.label} vs {s.label}: " + "; ".join(changes))
        else:
            out.append(f"What differed, {first.label} vs {s.label}: nothing in {RUN_JSON}'s options, target or "
                       "versions")
    return out


def _shown(value: Any) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "(none)"
    return str(value)


# -- figures ------------------------------------------------------------------------------------------------


def _engine_rows(sides: Sequence[Side]) -> list[Row]:  # noqa: C901 - one table row per figure, flat
    per_side = []
    for s in sides:
        order, values = stage_values(s.runs)
        for d in s.runs:  # successful TPS: ok over the stage's duration; the operations behind each percentile
            for r in _stage_csv(d):
                if r.get("count") not in (None, ""):
                    values.setdefault((r["stage"], r["operation"], "count"), []).append(float(r["count"]))
                if r.get("ok") not in (None, "") and r.get("duration_s") not in (None, "", "0", "0.0"):
                    values.setdefault((r["stage"], r["operation"], "ok_tps"), []).append(
                        float(r["ok"]) / float(r["duration_s"]))
                if r.get("delivered_tps") not in (None, ""):  # completed inside the stage's window (newer runs)
                    values.setdefault((r["stage"], r["operation"], "delivered_tps"), []).append(
                        float(r["delivered_tps"]))
        per_side.append((order, values, _capacity(s)))
    stages = list(dict.fromkeys(st for st, _ in per_side[0][0]))
    ops = [op for op in dict.fromkeys(op for _, op in per_side[0][0]) if op != "ALL"]
    rows: list[Row] = []
    for stage in stages:
        # successful TPS as delivered (completed inside the stage's window) where the runs recorded it, and the
        # successes of the stage's own arrivals by intended start beside it (docs/measurement.md)
        delivered = all(values.get((stage, "ALL", "delivered_tps")) for _, values, _ in per_side)
        spec = [("ALL", "target_tps", "arrival rate TPS", "tps", False)]
        if delivered:
            spec += [("ALL", "delivered_tps", "successful TPS", "tps", True),
                     ("ALL", "ok_tps", "successful TPS by intended start", "tps", True)]
        else:
            spec += [("ALL", "ok_tps", "successful TPS", "tps", True)]
        for op in ops:
            spec += [(op, "p95_ms", f"{op} p95 ms", "ms", True), (op, "p99_ms", f"{op} p99 ms", "ms", True)]
        spec += [("ALL", "failure_rate", "failure rate", "rate", False),
                 ("ALL", "lag_p99_ms", "lag p99 ms", "ms", False), ("ALL", "dropped", "dropped", "count", False)]
        for op, fig, label, unit, ratio in spec:
            cells = [Figure(values.get((stage, op, fig), [])) for _, values, _ in per_side]
            if any(c.values for c in cells):
                counts = [min(values.get((stage, op, "count"), [0.0]) or [0.0]) for _, values, _ in per_side]
                # the timeline's per-second successes are by completion: the delivered rate's own series (or, in
                # runs without it, the headline's)
                headline = "delivered_tps" if delivered else "ok_tps"
                series = {headline: (op, "achieved_tps"), "p95_ms": (op, "p95_ms"), "p99_ms": (op, "p99_ms")}.get(fig)
                rows.append(Row(stage, label, unit, cells, ratio,
                                operations=[int(n) for n in counts] if unit == "ms" and op != "ALL" else None,
                                series=series if op != "ALL" or fig == headline else None))
        labels = list(dict.fromkeys(k for _, _, cap in per_side for k in cap.get(stage, {})))
        for label in labels:
            cells = [Figure(cap.get(stage, {}).get(label, [])) for _, _, cap in per_side]
            rows.append(Row(stage, f"{label} max", "capacity", cells, True))
    costs = [_cost(s) for s in sides]
    if any(c[0].values for c in costs):
        rows.append(Row("run", "cost USD", "usd", [c[0] for c in costs], True))
        rows.append(Row("run", "operations per $", "ops", [c[1] for c in costs], True))
    return rows


def _stage_csv(run_dir: Path) -> list[dict]:
    return read_stage_rows(run_dir)


def _capacity(side: Side) -> dict[str, dict[str, list[float]]]:
    """stage -> capacity series -> the max per repetition (CloudWatch data only)."""
    out: dict[str, dict[str, list[float]]] = {}
    for d in side.runs:
        if not (d / METRICS / CLOUDWATCH).is_file():
            continue
        from dbsurge.collectors.merge import stage_capacity

        try:
            frame = stage_capacity(d)
        except UserError:
            continue
        if frame is None or frame.empty:
            continue
        for _, row in frame.iterrows():
            for column in frame.columns:
                if column.endswith(" (max)") and row[column] == row[column]:
                    out.setdefault(str(row["stage"]), {}).setdefault(column[: -len(" (max)")], []).append(
                        float(row[column]))
    return out


def _cost(side: Side) -> tuple[Figure, Figure]:
    from dbsurge.collectors.cost import estimate_cost

    usd, per = [], []
    for d in side.runs:
        try:
            report = estimate_cost(d)
        except (UserError, OSError, ValueError):
            continue
        if report.total_usd > 0:
            usd.append(report.total_usd)
            if report.ops_per_usd:
                per.append(float(report.ops_per_usd))
    return Figure(usd), Figure(per)


def _cache_rows(sides: Sequence[Side]) -> list[Row]:
    tables = [scenarios().report("cache", s.runs[0]).tables[0].csv_rows for s in sides]
    rows = []
    for metric in ("P50", "P95", "P99", "MAX", "MEAN", "first read"):
        per = [{r["metric"]: r for r in t}.get(metric, {}) for t in tables]
        for key, label in (("warm", "WARM ms"), ("cold", "COLD ms"), ("delta_pct", "delta %")):
            cells = [Figure([float(p[key])] if p.get(key) not in (None, "") else []) for p in per]
            rows.append(Row(metric, label, "pct" if key == "delta_pct" else "ms", cells, key != "delta_pct"))
    return rows


def _ycsb_rows(sides: Sequence[Side]) -> list[Row]:
    rows = []
    dist = [str(s.first_meta.get("distribution") or "") for s in sides]
    nums = [summary_numbers(read_rows(s.runs[0], SUMMARY_CSV)) for s in sides]
    costs = [_cost(s) for s in sides]
    for d in dict.fromkeys(dist):
        def cells(key: str, d: str = d) -> list[Figure]:
            return [Figure([float(n[key])] if n.get(key) is not None and x == d else []) for n, x in zip(nums, dist)]

        rows += [Row(d, "throughput ops/s", "tps", cells("throughput_ops_s")),
                 Row(d, "read p99 ms", "ms", cells("read_p99_ms")),
                 Row(d, "update p99 ms", "ms", cells("update_p99_ms")),
                 Row(d, "failure rate", "rate", cells("failure_rate"), False)]
        per = [c[1] if x == d else Figure([]) for c, x in zip(costs, dist)]
        if any(f.values for f in per):
            rows.append(Row(d, "operations per $", "ops", per))
    return rows


def _scale_rows(sides: Sequence[Side]) -> list[Row]:
    tables = [scenarios().report("ycsb-run", s.runs[0]).tables[0].csv_rows for s in sides]
    workers = list(dict.fromkeys(int(r["workers"]) for t in tables for r in t))
    rows = []
    for n in workers:
        per = [{int(r["workers"]): r for r in t}.get(n, {}) for t in tables]
        for key, label, unit, ratio in (("throughput_ops_s", "throughput ops/s", "tps", True),
                                        ("ideal_ops_s", "ideal ops/s", "tps", True),
                                        ("pct_of_ideal", "% of ideal", "pct", False),
                                        ("scaling_pct", "achieved scaling %", "pct", False)):
            cells = [Figure([float(p[key])] if p.get(key) not in (None, "") else []) for p in per]
            rows.append(Row(f"{n} workers", label, unit, cells, ratio))
    return rows


def _unit(column: str) -> tuple[str, bool]:
    """(unit, whether a ratio means something) of a scenario table's column, from its name."""
    name = column.lower()
    if name.endswith("_ms") or name.endswith("ms"):
        return "ms", True
    if name.endswith("_pct") or "pct" in name:
        return "pct", False
    if name.endswith(("_per_s", "_ops_s", "_tps")) or name in ("tps", "rate_tps"):
        return "tps", True
    if "rate" in name:
        return "rate", False
    if name in ("seconds", "duration_s") or name.endswith(("_s", "_seconds")):
        return "s", True
    return "count", True


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _table_rows(sides: Sequence[Side]) -> list[Row]:
    """A scenario's own tables, side by side: a row per table row (by its first column) and numeric column.

    The tables are the ones the scenario prints and writes (`report(run_dir)`), so compare can never read a
    run differently from its own summary. A row one side lacks is blank on that side."""
    name = TABLE_KINDS[sides[0].kind]
    reports = [scenarios().report(name, s.runs[0]) for s in sides]
    rows: list[Row] = []
    for t in range(min(len(r.tables) for r in reports)):
        tables = [r.tables[t] for r in reports]
        columns = tables[0].csv_columns
        key = columns[0]
        many = len(tables) > 1 and min(len(x.csv_rows) for x in tables) > 1
        keys = list(dict.fromkeys(str(row.get(key, "")) for x in tables for row in x.csv_rows))
        for k in keys:
            per = [next((row for row in x.csv_rows if str(row.get(key, "")) == k), {}) for x in tables]
            stage = f"{tables[0].title}: {k}" if many and len(reports[0].tables) > 1 else k
            for column in columns[1:]:
                values = [_number(row.get(column)) for row in per]
                if all(v is None for v in values):
                    continue
                unit, ratio = _unit(column)
                rows.append(Row(stage, column, unit, [Figure([] if v is None else [v]) for v in values], ratio))
    return rows


def comparison_rows(sides: Sequence[Side]) -> list[Row]:
    kind = sides[0].kind
    if kind in TABLE_KINDS:
        return _table_rows(sides)
    return {"engine": _engine_rows, "cache": _cache_rows, "ycsb": _ycsb_rows, "scalability": _scale_rows}[kind](sides)


# -- formatting ---------------------------------------------------------------------------------------------


def _fmt(unit: str, v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if unit == "rate":
        return f"{v * 100:.3f}%"
    if unit == "ms":
        return f"{v:.3f}" if v < 100 else f"{v:,.1f}"
    if unit == "usd":
        return f"${v:.4f}" if v < 100 else f"${v:,.2f}"
    if unit == "pct":
        return f"{v:.0f}%"
    if unit in ("count", "ops"):
        return f"{v:,.0f}"
    if unit == "s":
        return f"{v:,.3f}"
    return f"{v:,.1f}" if unit == "tps" else f"{v:g}"


def _cell(row: Row, f: Figure, repeated: bool) -> str:
    text = _fmt(row.unit, f.value)
    if repeated and len(f.values) > 1:
        text += f" [{_fmt(row.unit, f.low)}-{_fmt(row.unit, f.high)}]"
    return text


def _ratio(row: Row, a: Figure, b: Figure) -> str:
    if a.value is None or b.value is None:
        return ""
    if row.unit == "rate":
        return f"{(b.value - a.value) * 100:+.3f} pp"
    if not row.ratio:
        return ""
    if a.value == 0:
        return "-"
    return f"{b.value / a.value:.2f}x"


def _interval(row: Row, a: Side, b: Side) -> tuple[float, float, float] | None:
    """The bootstrap interval of B minus A for a row with per-second values (`collectors.bootstrap`)."""
    if row.series is None:
        return None
    op, column = row.series
    return difference_interval([per_second(d, row.stage, op, column) for d in a.runs],
                               [per_second(d, row.stage, op, column) for d in b.runs])


def beyond_spread(a: Figure, b: Figure) -> bool | None:
    """Whether b differs from a by more than their repetitions' spread (ranges do not overlap); None without spread."""
    if len(a.values) < 2 or len(b.values) < 2:
        return None
    return b.low > a.high or b.high < a.low  # type: ignore[operator]


def table(sides: Sequence[Side], rows: Sequence[Row]) -> tuple[list[str], list[list[str]], list[str]]:  # noqa: C901 - one dispatch per kind of run
    """Headers, display rows and the notes about spread."""
    first = sides[0]
    first_column = {"engine": "stage", "cache": "percentile", "ycsb": "distribution", "scalability": "workers"}
    headers = [first_column.get(first.kind, "row"), "figure"] + [s.label for s in sides]
    spread = all(s.repeated for s in sides)
    intervals = spread and first.kind == "engine"
    for s in sides[1:]:
        headers.append(f"{s.label} vs {first.label}")
        if intervals:
            headers.append(f"{s.label} - {first.label} (95% CI)")
        if spread:
            headers.append("beyond spread?")
    out, within, beyond, thin = [], [], [], []
    lagged = lagged_stages(sides) if first.kind == "engine" else set()
    for r in rows:
        line = [r.stage, r.figure] + [_cell(r, c, s.repeated) for c, s in zip(r.cells, sides)]
        if r.too_few():
            thin.append(f"{r.stage} {r.figure}")
        for c, s in zip(r.cells[1:], sides[1:]):
            ratio = "not enough operations" if r.too_few() else _ratio(r, r.cells[0], c)
            if ratio and r.unit == "ms" and r.stage in lagged:
                ratio += " (a run warned: see WARNING)"
            line.append(ratio)
            ci = _interval(r, first, s) if intervals and not r.too_few() else None
            if intervals:
                line.append("" if ci is None else f"{ci[0]:+.3g} [{ci[1]:+.3g}, {ci[2]:+.3g}]")
            if spread:
                judged = (r.ratio or r.unit == "rate") and not r.too_few()
                verdict = (ci[1] > 0 or ci[2] < 0) if ci is not None else beyond_spread(r.cells[0], c) if judged \
                    else None
                line.append("" if verdict is None else "yes" if verdict else "no")
                if verdict is not None:
                    (beyond if verdict else within).append(f"{r.stage} {r.figure} ({s.label})")
        out.append(line)
    notes = []
    if spread:
        n = min(len(s.runs) for s in sides)
        notes.append(f"Each cell is the median of the repetitions [min-max] (at least {n} per run).")
        if intervals:
            notes.append("The 95% CI is of the difference in the per-second mean (successful TPS, p95, p99 of each "
                         f"second in the stage), by a two-level bootstrap over the repetitions' {TIMELINE}: runs "
                         "drawn with replacement, then seconds within each run, 2,000 resamples, seeded. Where it "
                         "has one, 'beyond spread?' says yes when the interval excludes 0; elsewhere, when the "
                         "repetitions' ranges do not overlap.")
        if beyond:
            notes.append(f"Larger than the spread across repetitions ({len(beyond)}): " + "; ".join(beyond) + ".")
        if within:
            notes.append(f"NOT larger than the spread across repetitions ({len(within)}), so not shown to be a "
                         "difference: " + "; ".join(within) + ".")
    elif first.kind == "engine":
        notes.append("Single runs: there is no spread to judge a difference by; run each side with --repeat N "
                     "(at least 3) to know whether a difference is larger than run-to-run variation.")
    if thin:
        notes.append(f"Not enough operations ({len(thin)} rows, marked): fewer than {MIN_OPERATIONS} operations "
                     "in the stage on some side, so the percentile is close to the maximum and no difference is "
                     "judged from it.")
    return headers, out, notes


def text_report(sides: Sequence[Side], rows: Sequence[Row], blocking: list[str], notes: list[str]) -> str:
    from dbsurge.measure.tables import render

    headers, lines, spread_notes = table(sides, rows)
    titles = _TITLES
    parts = ["Runs: " + "; ".join(f"{s.label} = {s.path} ({s.target}"
                                  f"{f', {len(s.runs)} repetitions' if s.repeated else ''})" for s in sides)]
    if blocking:
        parts.append("Compared with --force although they differ:\n" + "\n".join(f"  - {b}" for b in blocking))
    parts.append(render(headers, lines, f"{titles[sides[0].kind]}: {' vs '.join(s.label for s in sides)}"))
    extra = [*notes, *spread_notes]
    if extra:
        parts.append("\n".join(extra))
    return "\n\n".join(parts)


# -- plots ----------------------------------------------------------------------------------------------------


def _zero(meta: dict) -> Any:
    import pandas as pd

    stages = (meta.get("plan") or {}).get("stages") or []
    start = stages[0].get("start_utc") if stages else None
    value = start or meta.get("started_utc")
    return pd.Timestamp(value).tz_convert("UTC") if value else None


def render_plot(sides: Sequence[Side]) -> bytes | None:  # noqa: C901 - one panel per figure, flat
    """PNG of the overlaid panels for engine and scalability runs; None for the others."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    if sides[0].kind == "scalability":
        fig = MplFigure(figsize=(8, 4), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        rows = comparison_rows(sides)
        for i, s in enumerate(sides):
            color = _COLORS[i % len(_COLORS)]
            pts = [(int(r.stage.split()[0]), r.cells[i].value) for r in rows if r.figure == "throughput ops/s"]
            ideal = [(int(r.stage.split()[0]), r.cells[i].value) for r in rows if r.figure == "ideal ops/s"]
            ax.plot(*zip(*[p for p in pts if p[1] is not None]), marker="o", color=color, label=f"{s.label}")
            ax.plot(*zip(*[p for p in ideal if p[1] is not None]), ls="--", color=color, label=f"{s.label} ideal")
        ax.set_xlabel("worker processes")
        ax.set_ylabel("throughput (ops/s)")
        ax.legend(fontsize=8)
        ax.set_title("Throughput against the ideal line", fontsize=10, loc="left")
        return _png(fig)
    if sides[0].kind != "engine":
        return None
    import pandas as pd
    from dbsurge.collectors.merge import capacity_frames, merge_run
    from dbsurge.collectors.rundata import read_cloudwatch

    loaded = []  # (side index, repetition index, run directory, merged.csv)
    for i, s in enumerate(sides):
        for j, d in enumerate(s.runs):
            path = d / MERGED
            try:
                merged = pd.read_csv(path) if path.is_file() else merge_run(d)
            except (UserError, OSError, ValueError):
                continue
            if not merged.empty and "elapsed_s" in merged:
                loaded.append((i, j, d, merged))
    ops = list(dict.fromkeys(c[: -len(".p99_ms")] for _, _, _, m in loaded for c in m.columns
                             if c.endswith(".p99_ms") and not c.startswith(("pg.", "mongo.", "cw.", "ALL."))))
    # one small panel per operation (each side one colour) rather than every line in one crowded overlay
    fig = MplFigure(figsize=(11, 2.2 * len(ops) + 5.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(ops) + 2, 1, sharex=True, squeeze=False)[:, 0]
    ax_ops, ax_rate, ax_cap = dict(zip(ops, axes[:len(ops)])), axes[-2], axes[-1]
    capacity_drawn = False
    for i, j, d, merged in loaded:
        s = sides[i]
        color = _COLORS[i % len(_COLORS)]
        alpha = 1.0 if j == 0 else 0.35
        label = s.label if j == 0 else None
        x = merged["elapsed_s"] + 0.5
        for op, ax in ax_ops.items():
            if f"{op}.p99_ms" in merged:
                ax.plot(x, merged[f"{op}.p99_ms"], color=color, lw=1.2, alpha=alpha, label=label)
        ax_rate.step(merged["elapsed_s"], merged["achieved_tps"], where="post", color=color, lw=1.2, alpha=alpha,
                     label=f"{label} achieved" if label else None)
        if i == 0 and j == 0 and merged["target_tps"].notna().any():
            ax_rate.step(merged["elapsed_s"], merged["target_tps"], where="post", color="#555555", ls="--", lw=1,
                         label="target")
        zero = _zero(_meta(d))
        cw = read_cloudwatch(d)
        if zero is not None and not cw.empty:
            for key, frame in capacity_frames(cw).items():
                chosen = frame[frame["stat"] == "Maximum"]
                chosen = chosen if not chosen.empty else frame
                chosen = chosen.sort_values("time_utc")
                xs = (chosen["time_utc"] - zero).dt.total_seconds()
                ax_cap.step(xs, chosen["value"], where="post", color=color, alpha=alpha,
                            label=f"{s.label} {'/'.join(str(k) for k in key[1:3])}" if j == 0 else None)
                capacity_drawn = True
    for op, ax in ax_ops.items():
        ax.set_yscale("log")
        ax.set_ylabel("p99 (ms)")
        ax.set_title(f"{op}: response-time p99 per second (later repetitions lighter)", fontsize=10, loc="left")
    ax_rate.set_ylabel("operations/s")
    ax_rate.set_title("Achieved rate against the plan", fontsize=10, loc="left")
    ax_cap.set_ylabel("capacity units")
    ax_cap.set_title("Capacity (CloudWatch)", fontsize=10, loc="left")
    if not capacity_drawn:
        ax_cap.text(0.5, 0.5, "no CloudWatch capacity in these runs", transform=ax_cap.transAxes, ha="center",
                    va="center", color="#777777")
    ax_cap.set_xlabel("seconds since the plan's time zero")
    for ax in axes:
        ax.grid(True, color="#dddddd", lw=0.6)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", ncol=2, framealpha=0.8)
    return _png(fig)


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


# -- HTML -----------------------------------------------------------------------------------------------------


def section_html(sides: Sequence[Side], rows: Sequence[Row], blocking: list[str], notes: list[str],
                 png: bytes | None) -> str:
    """The comparison as an HTML fragment (a section of report.html, or the body of compare.html)."""
    from dbsurge.collectors.report import html_table

    headers, lines, spread_notes = table(sides, rows)
    parts = ['<section id="comparison"><h2>Comparison: ' + html.escape(" vs ".join(s.label for s in sides)) + "</h2>"]
    parts.append("<ul>" + "".join(f"<li><b>{html.escape(s.label)}</b>: {html.escape(str(s.path))} "
                                  f"({html.escape(s.target)}; {len(s.runs)} run{'s' if len(s.runs) > 1 else ''})</li>"
                                  for s in sides) + "</ul>")
    if blocking:
        parts.append('<p class="note"><b>These runs differ</b>:</p><ul>' +
                     "".join(f"<li>{html.escape(b)}</li>" for b in blocking) + "</ul>")
    parts.append(html_table(headers, lines))
    for n in [*notes, *spread_notes]:
        parts.append(f'<p class="note">{html.escape(n)}</p>')
    if png:
        encoded = base64.b64encode(png).decode()
        parts.append(f'<figure id="plot-compare"><img src="data:image/png;base64,{encoded}" alt="overlaid runs">'
                     "<figcaption>Runs overlaid on the elapsed time since each plan's time zero.</figcaption></figure>")
    parts.append("</section>")
    return "\n".join(parts)


def page_html(body: str, title: str) -> str:
    from dbsurge.collectors.report import _CSS

    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><link rel=\"icon\" href=\"data:,\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>\n"
            f"{body}\n</body></html>\n")


def report_section(paths: Sequence[str | Path]) -> str:
    """The comparison section that ``dbsurge report A B`` adds to each report.html (differences listed, not refused)."""
    sides = open_sides(paths)
    blocking, notes = differences(sides)
    rows = comparison_rows(sides)
    return section_html(sides, rows, blocking, notes, render_plot(sides))


def add_section(report_path: Path, section: str) -> None:
    text = report_path.read_text()
    marker = '<section id="comparison">'
    if marker in text:
        text = text[: text.index(marker)] + text[text.index("</section>", text.index(marker)) + len("</section>"):]
    end = text.rfind("</body>")
    text = text[:end] + section + "\n" + text[end:] if end >= 0 else text + section
    write_text(report_path, text)


def write_csv(path: Path, sides: Sequence[Side], rows: Sequence[Row]) -> None:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["stage", "figure", "label", "run_dir", "value", "min", "max", "n", "ratio_to_first"])
        for r in rows:
            base = r.cells[0].value
            for s, c in zip(sides, r.cells):
                ratio = "" if base in (None, 0) or c.value is None or not r.ratio else round(c.value / base, 6)
                w.writerow([r.stage, r.figure, s.label, str(s.path), "" if c.value is None else c.value,
                            "" if c.low is None else c.low, "" if c.high is None else c.high, len(c.values), ratio])


def compare_main(argv: Sequence[str]) -> int:
    """``dbsurge compare``."""
    parser = OneLineParser(prog="dbsurge compare", description="Compare runs of one plan on several targets.",
                     epilog=epilog("compare"), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", help="two or more run directories (or --repeat parents)")
    parser.add_argument("--labels", help="one label per run, comma-separated, e.g. D1,A2")
    parser.add_argument("--html", help="write the table and the overlaid plots here (default: compare.html beside "
                                       "the first run)")
    parser.add_argument("--csv", help="write the table in long form here (default: beside the HTML)")
    parser.add_argument("--force", action="store_true", help="compare even when plans, workloads or data differ")
    parser.add_argument("--sizes", metavar="N,N,...", help="each run's database size (nodes, vCPUs), e.g. 3,6,9: adds "
                                                          "throughput against the linear ideal and ops per $")
    args = parser.parse_args(list(argv))
    sizes = parse_sizes(args.sizes, len(args.run_dirs)) if args.sizes else None
    check_run_dirs(args.run_dirs)  # a damaged run is one line naming its file, before any table
    sides = open_sides(args.run_dirs, args.labels)
    blocking, notes = differences(sides)
    if blocking and not args.force:
        for b in blocking:
            sys.stderr.write(f"  - {b}\n")
        raise UserError(f"the runs are not comparable ({len(blocking)} difference{'s' if len(blocking) > 1 else ''}"
                        " listed above): pass --force to compare them anyway")
    rows = comparison_rows(sides)
    if sizes:
        extra, size_notes = size_rows(sides, sizes, ops_per_usd=lambda side: _cost(side)[1])
        rows, notes = rows + extra, notes + size_notes
    print(text_report(sides, rows, blocking, notes), flush=True)
    name = f"compare-{'-vs-'.join(_safe(s.label) for s in sides)}.html"
    out = Path(args.html) if args.html else sides[0].path.parent / name
    title = f"dbsurge compare: {' vs '.join(s.label for s in sides)}"
    out.write_text(page_html(section_html(sides, rows, blocking, notes, render_plot(sides)), title))
    csv_path = Path(args.csv) if args.csv else out.with_suffix(CSV_SUFFIX)
    write_csv(csv_path, sides, rows)
    print(f"\nwrote {out} and {csv_path}", flush=True)
    return 0


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in label)[:40]
