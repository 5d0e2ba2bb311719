"""``dbsurge scenario spike``: study 001, the load spike on the orders workload.

The plan is the study's: 20% (2 min), 200% (1 min), 100% (2 min), 5% (1 min) of a 1,000 TPS
baseline (``--baseline-tps``; ``--stage-seconds`` makes every stage that long). It runs through
the engine, exactly as

    dbsurge run --workload orders --shape spike --target ... --baseline-tps 1000 [--stage-seconds S]

(which is ``locust -f locustfiles/orders.py,shapes/spike.py``), and then reads the run
directory's stages.csv to print the study's table: per stage the arrival rate, successful TPS,
order-creation and product-lookup p95/p99, failure rate, and the maximum capacity (ACU/DPU) when a
collector is attached with ``--cloudwatch aurora:ID`` (the engine polls CloudWatch during the run; the last
minutes arrive late, so run ``dbsurge collect results/<run>`` later and ``--from results/<run>`` to
print the table again).
Options this scenario does not know go to ``dbsurge run`` (``--max-users``, ``--arrivals``, ...);
``--repeat N`` runs the spike N times into ``<run-id>/1..N`` and prints the spread across them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.rundir.schema import STAGES, scenario_table
from dbsurge.scenarios.arguments import cloudwatch_flags
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.capacity import stage_capacity_text
from dbsurge.scenarios.engine_run import annotate_run, pairs, repetitions, run_engine
from dbsurge.scenarios.files import opt_float, read_meta, read_rows
from dbsurge.scenarios.latency import ms, number
from dbsurge.scenarios.report import Report, Table, write_html, write_report

NAME = "spike"
STUDY = {"baseline_tps": 1000.0, "stage_seconds": 0.0}
QUICK = {"baseline_tps": 100.0, "stage_seconds": 5.0, "products": 2000}
OPERATIONS = (("order_create", "order creation"), ("product_lookup", "product lookup"))
TABLE_COLUMNS = ["stage", "arrival_rate_tps", "successful_tps", "order_create_p95_ms", "order_create_p99_ms",
                 "product_lookup_p95_ms", "product_lookup_p99_ms", "failures", "failure_rate", "max_capacity"]


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline-tps", type=float, default=None, help="the 100%% rate (study 1000; quick 100)")
    p.add_argument("--stage-seconds", type=float, default=None,
                   help="make every stage this long (study: 2m, 1m, 2m, 1m; quick 5)")
    p.add_argument("--processes", type=int, default=None, help="Locust worker processes on this host")
    p.add_argument("--repeat", default=None, metavar="N",
                   help="run it N times into <run-id>/1..N and print the spread (median, min, max) across them")


def check(setup: Setup) -> None:
    args = setup.args
    if args.baseline_tps <= 0:
        raise UserError("--baseline-tps must be positive")
    if args.stage_seconds < 0:
        raise UserError("--stage-seconds must not be negative")


def launch(setup: Setup, uri: str, run_id: str) -> int:
    """``dbsurge run --workload orders --shape spike`` with this scenario's options and the rest."""
    args = setup.args
    wopts = list(args.workload_option or [])
    if args.quick and not any(o.strip().startswith("products=") for o in wopts):
        wopts.append(f"products={QUICK['products']}")
    cmd = ["--workload", "orders", "--shape", "spike", "--target", uri, "--baseline-tps", f"{args.baseline_tps:g}",
           "--quiet", "--results-dir", args.results_dir, "--run-id", run_id, "--seed", str(args.seed)]
    if args.stage_seconds:
        cmd += ["--stage-seconds", f"{args.stage_seconds:g}"]
    if args.processes:
        cmd += ["--processes", str(args.processes)]
    if args.repeat is not None:
        cmd += ["--repeat", args.repeat]  # dbsurge run's: it checks the number and runs the set
    cmd += pairs("--target-option", args.target_option) + pairs("--workload-option", wopts)
    return run_engine(cmd + cloudwatch_flags(args) + setup.rest)


def after(setup: Setup, run_id: str, code: int) -> int:
    """Annotate the engine's run.json and show the table (one per repetition with --repeat N)."""
    run_dir = Path(setup.args.results_dir) / run_id
    annotation = {"scenario": NAME, "scenario_settings": setup.settings, "target_name": setup.args.target}
    if (reps := repetitions(run_dir)) is not None:  # --repeat N went to dbsurge run: a table per repetition
        for sub in reps:
            annotate_run(sub, **annotation)
            table = report(sub)
            write_report(sub, table, title=f"dbsurge scenario spike: {run_id}/{sub.name}")
            write_html(sub, table)  # each repetition's report.html with its table, as a single run's
        print(f"\nresults: {run_dir} (repetitions 1..N; `dbsurge scenario spike --from {run_dir}/1` prints one)")
        return code
    if not (run_dir / STAGES).is_file():
        return code or 1
    annotate_run(run_dir, **annotation)
    SCENARIO.show(run_dir)
    return code


# -- the table (pure, from stages.csv and metrics/cloudwatch.csv) ---------------------------------------


def spike_rows(stage_rows: list[dict], capacity: dict[str, str]) -> list[dict]:
    """One row per stage: the study's columns as numbers."""
    order: list[str] = []
    for r in stage_rows:
        if r["stage"] not in order:
            order.append(r["stage"])
    out = []
    for stage in order:
        by_op = {r["operation"]: r for r in stage_rows if r["stage"] == stage}
        total = by_op.get("ALL", {})
        row = {"stage": stage, "arrival_rate_tps": opt_float(total.get("target_tps")),
               # the study's "successful TPS": what the database delivered in the stage, successes counted in the
               # stage whose window holds their completion (stages.csv's delivered_tps); an older stages.csv
               # without that column: the successes of the stage's arrivals
               "successful_tps": opt_float(total.get("delivered_tps") or total.get("achieved_tps")),
               "failures": int(total.get("failures") or 0),
               # a stage nothing was sent in (a signal came first) has no failure rate, not one of 0%
               "failure_rate": opt_float(total.get("failure_rate")) if _sent(total) else None,
               "max_capacity": capacity.get(stage, "")}
        for op, _ in OPERATIONS:
            r = by_op.get(op, {})
            row[f"{op}_p95_ms"] = opt_float(r.get("p95_ms")) if r.get("count") not in (None, "", "0") else None
            row[f"{op}_p99_ms"] = opt_float(r.get("p99_ms")) if r.get("count") not in (None, "", "0") else None
        out.append(row)
    return out


def _sent(total: dict) -> bool:
    """Whether any of the stage's operations completed (ok or failed); an old stages.csv without counts: yes."""
    count = total.get("count")
    return count in (None, "") or float(count) > 0


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    rows = spike_rows(read_rows(run_dir, STAGES), stage_capacity_text(run_dir))
    display = []
    for r in rows:
        line = [r["stage"], number(r["arrival_rate_tps"], 0), number(r["successful_tps"], 1)]
        line += [f"{ms(r[f'{op}_p95_ms'])} / {ms(r[f'{op}_p99_ms'])}" for op, _ in OPERATIONS]
        line += ["-" if r["failure_rate"] is None else f"{r['failure_rate'] * 100:.3f}%", r["max_capacity"]]
        display.append(line)
    headers = ["stage", "arrival rate", "successful TPS"] + [f"{label} p95 / p99 ms" for _, label in OPERATIONS]
    headers += ["failure rate", "max capacity"]
    plan = (meta.get("plan") or {}).get("text", "")
    table = Table(title=f"Spike ({plan} of {number((meta.get('plan') or {}).get('baseline_tps'), 0)} TPS)",
                  headers=headers, rows=display, csv_name=scenario_table(NAME), csv_columns=TABLE_COLUMNS,
                  csv_rows=rows)
    notes = []
    results = meta.get("results") or {}
    for finding in results.get("behind_plan") or []:
        notes.append(f"WARNING: {finding}")
    if not meta.get("cloudwatch"):
        notes.append("No collector attached (--cloudwatch aurora:ID, dsql:ID): the max capacity column is blank.")
    else:
        notes.append(f"CloudWatch publishes minutes late: a blank capacity fills in after `dbsurge collect {run_dir}` "
                     f"and `dbsurge scenario spike --from {run_dir}`.")
    notes.append(f"Latency is response time from the intended start (open model); {results.get('operations', 0):,} "
                 f"operations sent, {results.get('dropped', 0):,} dropped.")
    return Report(heading=f"dbsurge scenario spike (study 001): {meta.get('target_display')}", tables=[table],
                  notes=notes)


SCENARIO = Scenario(NAME, "Study 001: the 20%->200%->100%->5% spike on the orders workload.", STUDY, QUICK,
                    report=report, options=add_options, check=check, launch=launch, after=after, cloudwatch=True,
                    engine_workload="orders")


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
