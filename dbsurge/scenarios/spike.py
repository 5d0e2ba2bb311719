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

from dbsurge.errors import UserError
from dbsurge.rundir import new_run_id
from dbsurge.scenarios.engine_run import annotate_run, pairs, run_engine
from dbsurge.scenarios.latency import ms, number
from dbsurge.scenarios.scenario_run import (
    Report,
    Table,
    apply_defaults,
    opt_float,
    print_from,
    read_meta,
    read_rows,
    scenario_parser,
    write_report,
)

NAME = "spike"
STUDY = {"baseline_tps": 1000.0, "stage_seconds": 0.0}
QUICK = {"baseline_tps": 100.0, "stage_seconds": 5.0, "products": 2000}
OPERATIONS = (("order_create", "order creation"), ("product_lookup", "product lookup"))
TABLE_COLUMNS = ["stage", "arrival_rate_tps", "successful_tps", "order_create_p95_ms", "order_create_p99_ms",
                 "product_lookup_p95_ms", "product_lookup_p99_ms", "failures", "failure_rate", "max_capacity"]


def build_parser() -> argparse.ArgumentParser:
    p = scenario_parser(NAME, "Study 001: the 20%->200%->100%->5% spike on the orders workload.", cloudwatch=True)
    p.add_argument("--baseline-tps", type=float, default=None, help="the 100%% rate (study 1000; quick 100)")
    p.add_argument("--stage-seconds", type=float, default=None,
                   help="make every stage this long (study: 2m, 1m, 2m, 1m; quick 5)")
    p.add_argument("--processes", type=int, default=None, help="Locust worker processes on this host")
    return p


def main(argv: list[str]) -> int:
    args, rest = build_parser().parse_known_args(argv)
    if args.from_run:
        return print_from(args.from_run, report, NAME)
    settings = apply_defaults(args, STUDY, QUICK)
    if args.baseline_tps <= 0:
        raise UserError("--baseline-tps must be positive")
    if args.stage_seconds < 0:
        raise UserError("--stage-seconds must not be negative")
    if not args.target:
        raise UserError("no target: pass --target URI (or embedded-postgres / embedded-mongo), or set DBSURGE_TARGET")
    from dbsurge.embedded import resolve_embedded

    run_id = args.run_id or new_run_id(NAME)
    uri, handle = resolve_embedded(args.target)
    try:
        wopts = list(args.workload_option or [])
        if args.quick and not any(o.strip().startswith("products=") for o in wopts):
            wopts.append(f"products={QUICK['products']}")
        cmd = ["--workload", "orders", "--shape", "spike", "--target", uri, "--baseline-tps", f"{args.baseline_tps:g}",
               "--quiet", "--results-dir", args.results_dir, "--run-id", run_id, "--seed", str(args.seed)]
        if args.stage_seconds:
            cmd += ["--stage-seconds", f"{args.stage_seconds:g}"]
        if args.processes:
            cmd += ["--processes", str(args.processes)]
        cmd += pairs("--target-option", args.target_option) + pairs("--workload-option", wopts)
        cmd += pairs("--cloudwatch", args.cloudwatch) + _cloudwatch_options(args) + rest
        code = run_engine(cmd)
    finally:
        if handle is not None:
            handle.stop()
    run_dir = Path(args.results_dir) / run_id
    if (run_dir / "repetitions.csv").is_file():  # --repeat N went to dbsurge run: one table per repetition
        for sub in sorted((d for d in run_dir.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)):
            if (sub / "stages.csv").is_file():
                annotate_run(sub, scenario=NAME, scenario_settings=settings, target_name=args.target)
                write_report(sub, report(sub), title=f"dbsurge scenario spike: {run_id}/{sub.name}")
        print(f"\nresults: {run_dir} (repetitions 1..N; `dbsurge scenario spike --from {run_dir}/1` prints one)")
        return code
    if not (run_dir / "stages.csv").is_file():
        return code or 1
    annotate_run(run_dir, scenario=NAME, scenario_settings=settings, target_name=args.target)
    result = report(run_dir)
    write_report(run_dir, result, title=f"dbsurge scenario spike: {run_id}")
    print("\n" + result.text() + f"\n\nresults: {run_dir}", flush=True)
    return code


def _cloudwatch_options(args: argparse.Namespace) -> list[str]:
    out = []
    if args.cloudwatch_region:
        out += ["--cloudwatch-region", args.cloudwatch_region]
    if args.cloudwatch_endpoint_url:
        out += ["--cloudwatch-endpoint-url", args.cloudwatch_endpoint_url]
    return out


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
               "successful_tps": opt_float(total.get("achieved_tps")),
               "failures": int(total.get("failures") or 0), "failure_rate": opt_float(total.get("failure_rate")),
               "max_capacity": capacity.get(stage, "")}
        for op, _ in OPERATIONS:
            r = by_op.get(op, {})
            row[f"{op}_p95_ms"] = opt_float(r.get("p95_ms")) if r.get("count") not in (None, "", "0") else None
            row[f"{op}_p99_ms"] = opt_float(r.get("p99_ms")) if r.get("count") not in (None, "", "0") else None
        out.append(row)
    return out


def stage_capacity_text(run_dir: Path) -> dict[str, str]:
    """Per stage, the maximum of each capacity series, from metrics/cloudwatch.csv (empty without one)."""
    if not (run_dir / "metrics" / "cloudwatch.csv").is_file():
        return {}
    from dbsurge.collectors.merge import stage_capacity

    frame = stage_capacity(run_dir)
    out: dict[str, str] = {}
    if frame is None or frame.empty:
        return out
    columns = [c for c in frame.columns if c.endswith(" (max)")]
    for _, row in frame.iterrows():
        parts = [f"{c[:-len(' (max)')]} {row[c]:g}" for c in columns if row[c] == row[c]]
        out[str(row["stage"])] = "; ".join(parts)
    return out


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    rows = spike_rows(read_rows(run_dir, "stages.csv"), stage_capacity_text(run_dir))
    display = []
    for r in rows:
        line = [r["stage"], number(r["arrival_rate_tps"], 0), number(r["successful_tps"], 1)]
        line += [f"{ms(r[f'{op}_p95_ms'])} / {ms(r[f'{op}_p99_ms'])}" for op, _ in OPERATIONS]
        line += [f"{(r['failure_rate'] or 0) * 100:.4f}%", r["max_capacity"]]
        display.append(line)
    headers = ["stage", "arrival rate", "successful TPS"] + [f"{label} p95 / p99 ms" for _, label in OPERATIONS]
    headers += ["failure rate", "max capacity"]
    plan = (meta.get("plan") or {}).get("text", "")
    table = Table(title=f"Spike ({plan} of {number((meta.get('plan') or {}).get('baseline_tps'), 0)} TPS)",
                  headers=headers, rows=display, csv_name=f"{NAME}.csv", csv_columns=TABLE_COLUMNS, csv_rows=rows)
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
