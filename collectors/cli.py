"""``dbsurge collect``, ``dbsurge report`` and ``dbsurge cost``: entry functions for the CLI.

Each takes its arguments (without the sub-command name) and returns an exit code; a problem the
user can fix raises `UserError`, which the CLI prints as one line.

    dbsurge collect results/<run> [--cloudwatch PRESET:ID ...] [--region R] [--profile P]
                                  [--endpoint-url URL] [--margin 5m]
    dbsurge report results/<run> [results/<other> ...]   (several: with a comparison section)
    dbsurge cost results/<run> [--prices FILE] [--region R] [--runner TYPE[:COUNT] ...]
                               [--database NAME[:COUNT] ...] [--database-price USD]
                               [--storage-gb GB] [--io-requests N]
                               [--actual [--actual-granularity DAILY|HOURLY] [--actual-tag K=V ...]
                                         [--actual-service NAME ...] [--profile P] [--endpoint-url URL]]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from dbsurge.collectors.billing import (
    RUNNER_SERVICE,
    SERVICE_OF_UNIT,
    actual_charges,
    check_granularity,
    likely_causes,
    make_client,
    parse_tag,
)
from dbsurge.collectors.cloudwatch import CloudWatchCollector, parse_presets
from dbsurge.collectors.cost import check_database_price, estimate_cost
from dbsurge.collectors.merge import merge_run
from dbsurge.collectors.report import build_report, cost_tables, markdown_table
from dbsurge.collectors.rundata import format_utc, open_run, read_cloudwatch, update_run_json, write_cloudwatch

from dbsurge.base.errors import PlanError, UserError, clip
from dbsurge.config.help_examples import epilog
from dbsurge.config.option_names import OneLineParser
from dbsurge.plan import stage_plan
from dbsurge.rundir.reader import check_run_dir, check_run_dirs
from dbsurge.rundir.schema import (
    CLOUDWATCH,
    COST,
    COST_ACTUAL,
    MERGED,
    METRICS,
    REPORT_HTML,
    RUN_JSON,
    STAGES,
    SUMMARY_MD,
    TIMELINE_PNG,
)
from dbsurge.rundir.writer import atomic_path

#: argparse that raises `UserError` (one line) instead of printing usage and exiting: the engine's own.
_Parser = OneLineParser


def parse_duration(text: str) -> float:
    """``5m``, ``30s``, ``1h``, ``250ms`` or plain seconds -> seconds (`dbsurge.plan.stage_plan.parse_duration`)."""
    try:
        return stage_plan.parse_duration(str(text))
    except PlanError:
        raise UserError(f"malformed duration {text!r}: use a number with s, m or h (5m, 30s)") from None


def check_writable(run_dir: str | Path, what: str) -> None:
    """`UserError` (one line naming the directory) unless a file can be made in `run_dir`, before anything is built.

    A read-only copy (``chmod a-w``, a read-only mount: EROFS, which even root meets) was a traceback from the
    first write, after minutes of work, with some files written and others not.
    """
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=run_dir, prefix=".dbsurge-probe-"):
            pass
    except OSError as e:
        raise UserError(f"cannot write {what} into {clip(run_dir, 160)}: {e.strerror or type(e).__name__}: copy the "
                        f"run directory somewhere writable (cp -r) and run the command on the copy") from None


def _writing(what: str):
    """A context that turns an `OSError` while writing (a full disk, a file made read-only) into one line."""
    import contextlib

    @contextlib.contextmanager
    def guard():
        try:
            yield
        except OSError as e:
            where = f" ({clip(e.filename, 160)})" if e.filename else ""
            raise UserError(f"cannot write {what}{where}: {e.strerror or type(e).__name__}") from None

    return guard()


def _say(text: str) -> None:
    print(text, file=sys.stdout, flush=True)


def collect_main(argv: Sequence[str]) -> int:
    """Fetch CloudWatch for a finished run's window (plus a margin) and rewrite merged.csv."""
    parser = _Parser(prog="dbsurge collect", description="Fetch CloudWatch metrics for a run and merge them.",
                     epilog=epilog("collect"), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="the run directory, results/<run-id>")
    parser.add_argument("--cloudwatch", action="append", default=[], metavar="PRESET:ID",
                        help="docdb:ID, aurora:CLUSTER[/writer|/reader], dsql:CLUSTER-ID or metric:NS:NAME[...]; "
                             f"default: the presets recorded in {RUN_JSON}")
    parser.add_argument("--region", help="AWS region (default: AWS_DEFAULT_REGION / the profile's)")
    parser.add_argument("--profile", help="AWS profile (default: AWS_PROFILE)")
    parser.add_argument("--endpoint-url", help="CloudWatch endpoint (default: AWS_ENDPOINT_URL / AWS's)")
    parser.add_argument("--margin", default="5m", help="fetch this much before and after the run (default 5m)")
    args = parser.parse_args(list(argv))
    check_run_dir(args.run_dir)  # a damaged run is one line, before any fetch or write
    run = open_run(args.run_dir)
    margin = parse_duration(args.margin)
    specs = parse_presets([*run.cloudwatch, *args.cloudwatch])
    if specs:
        window = run.window()
        if window is None:
            raise UserError(f"{run.path}: {RUN_JSON} has no started_utc: cannot tell which window to fetch")
        start, end = window
        if run.ended is None:
            end = max(end, _now())
        collector = CloudWatchCollector(specs, region=args.region, profile=args.profile,
                                        endpoint_url=args.endpoint_url)
        collector.check()
        fetched = collector.fetch(start.value / 1e9 - margin, end.value / 1e9 + margin)
        existing = read_cloudwatch(run.path)
        write_cloudwatch(run.path, existing if fetched.empty else _concat(existing, fetched))
        recorded = list(dict.fromkeys([*run.cloudwatch, *(s.spec for s in specs)]))
        if recorded != run.cloudwatch:
            update_run_json(run.path, cloudwatch=recorded)
        series = fetched.groupby(["preset", "id", "metric", "stat"]).ngroups if not fetched.empty else 0
        _say(f"fetched {len(fetched)} datapoints in {series} series from CloudWatch ({collector.where}) for "
             f"{format_utc(start)} to {format_utc(end)} with a {args.margin} margin")
        if not fetched.empty:
            last = fetched["time_utc"].max()
            _say(f"last datapoint {format_utc(last)}")
        if _now() - end.value / 1e9 < 900:
            _say("CloudWatch publishes minutes late: run `dbsurge collect` again in a few minutes for the last ones")
    else:
        _say(f"no CloudWatch presets (none recorded in {RUN_JSON}, none given with --cloudwatch): merging the run's "
             "own metrics")
    merged = merge_run(run.path)
    _say(f"wrote {run.path / METRICS / CLOUDWATCH} and {run.path / MERGED} ({len(merged)} rows)"
         if specs else f"wrote {run.path / MERGED} ({len(merged)} rows)")
    return 0


def _now() -> float:
    return time.time()


def _concat(existing, fetched):  # type: ignore[no-untyped-def]
    return fetched if existing.empty else pd.concat([existing, fetched], ignore_index=True)


def report_main(argv: Sequence[str]) -> int:
    """Write report.html, timeline.png and summary.md (and merged.csv, cost.csv) for a run."""
    parser = _Parser(prog="dbsurge report", description="Build the run's report (several runs: with a comparison).",
                     epilog=epilog("report"), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", metavar="run_dir", help="the run directory, results/<run-id>")
    args = parser.parse_args(list(argv))
    check_run_dirs(args.run_dirs)  # never a report ("Verdict: OK") from a partial read
    for run_dir in args.run_dirs:
        check_writable(run_dir, "the report")
    with _writing("the report"):
        return _build_reports(args.run_dirs)


def _build_reports(run_dirs: list[str]) -> int:
    if len(run_dirs) > 1:
        from dbsurge.collectors.compare import add_section, open_sides, report_section

        open_sides(run_dirs)  # refuse kinds that cannot be compared before writing anything
        section = report_section(run_dirs)
        for run_dir in run_dirs:
            path = build_report(run_dir) if (Path(run_dir) / STAGES).is_file() else None
            if path is None:
                continue
            add_section(path, section)
            _say(f"wrote {_report_files(path, f' (with the comparison of {len(run_dirs)} runs)')}")
        return 0
    path = build_report(run_dirs[0])
    _say(f"wrote {_report_files(path)}")
    return 0


def _report_files(report: Path, note: str = "") -> str:
    """The report's files that were written (a run without a timeline has no timeline.png)."""
    others = [str(report.with_name(n)) for n in (TIMELINE_PNG, SUMMARY_MD) if report.with_name(n).exists()]
    return f"{report}{note}, " + " and ".join(others) if others else f"{report}{note}"


def cost_main(argv: Sequence[str]) -> int:
    """Print (and write cost.csv) the run's cost: total, per stage, operations per dollar."""
    parser = _Parser(prog="dbsurge cost", description="Estimate what a run cost.", epilog=epilog("cost"),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="the run directory, results/<run-id>")
    parser.add_argument("--prices", help="a prices TOML file laid over the us-east-1 defaults")
    parser.add_argument("--region", help=f"the region to price (default: {RUN_JSON}'s, AWS_DEFAULT_REGION, us-east-1)")
    parser.add_argument("--runner", action="append", default=[], metavar="TYPE[:COUNT]",
                        help="load-generator instance type and count, e.g. c6g.4xlarge:2 (repeatable)")
    parser.add_argument("--database", action="append", default=[], metavar="NAME[:COUNT]",
                        help="a database of fixed size, billed by the hour: an entry of the prices file's "
                             "[database_hour] and how many, e.g. atlas-m40 or scylla-cloud-i4i.2xlarge:3 (repeatable)")
    parser.add_argument("--database-price", metavar="USD",
                        help="the fixed-size database's price per hour when the prices file has no entry, e.g. 12.5")
    parser.add_argument("--storage-gb", type=float, help="database storage in GB, priced per GB-month")
    parser.add_argument("--io-requests", type=float, help="billed I/O requests during the run")
    actual = parser.add_argument_group("cost as billed (Cost Explorer)")
    actual.add_argument("--actual", action="store_true",
                        help="also read Cost Explorer's charges for the days (or hours) of the run, by usage type, "
                             "and print them beside the estimate with the difference and its likely causes")
    actual.add_argument("--actual-granularity", default="DAILY", metavar="DAILY|HOURLY",
                        help="Cost Explorer's period: DAILY (UTC days, the default) or HOURLY (only if enabled for "
                             "the account, last 14 days)")
    actual.add_argument("--actual-tag", action="append", default=[], metavar="KEY=VALUE",
                        help="only charges of resources with this cost-allocation tag (repeatable)")
    actual.add_argument("--actual-service", action="append", default=[], metavar="NAME",
                        help="only this Cost Explorer service (default: the run's: its capacity series' service, "
                             "EC2 for runners) (repeatable)")
    actual.add_argument("--profile", help="AWS profile for Cost Explorer (default: the standard AWS settings)")
    actual.add_argument("--endpoint-url", help="Cost Explorer endpoint (default: AWS's)")
    args = parser.parse_args(list(argv))
    if args.actual:
        args.actual_granularity = check_granularity(args.actual_granularity)
        args.actual_tag = [parse_tag(t) for t in args.actual_tag]
        args.ce_client = make_client(args.profile, args.endpoint_url)  # a bad URL or profile before any estimate
    check_run_dir(args.run_dir)
    check_writable(args.run_dir, COST)
    with _writing("the cost"):
        return _cost(args)


def _cost(args: argparse.Namespace) -> int:
    report = estimate_cost(args.run_dir, args.prices, region=args.region, runners=args.runner or None,
                           storage_gb=args.storage_gb, io_requests=args.io_requests,
                           databases=args.database or None, database_price=args.database_price)
    _keep_cost_inputs(Path(args.run_dir), args)
    (items_h, items), (stages_h, stages) = cost_tables(report)
    _say(markdown_table(items_h, items))
    if stages:
        _say("")
        _say(markdown_table(stages_h, stages))
    _say("")
    _say("Prices: " + "; ".join([report.prices.note, *report.notes]))
    _say(f"wrote {Path(args.run_dir) / COST}")
    if args.actual:
        _actual(args, report)
    if (Path(args.run_dir) / REPORT_HTML).is_file():  # the report shows the same bill, not the one before
        _say(f"rebuilt {build_report(args.run_dir)} with this cost")
    return 0


def _actual(args: argparse.Namespace, report: Any) -> None:
    """Cost Explorer's charges beside the estimate, the difference and what can explain it; cost_actual.csv."""
    start, end = open_run(args.run_dir).window()  # estimate_cost has checked there is one
    services = list(args.actual_service) or [SERVICE_OF_UNIT[u] for u in report.units if u in SERVICE_OF_UNIT]
    priced_runners = any(i.name.startswith("runner ") and i.unit_price_usd for i in report.items)
    if services and priced_runners and not args.actual_service:
        services.append(RUNNER_SERVICE)
    got = actual_charges(start, end, granularity=args.actual_granularity, services=services, tags=args.actual_tag,
                         endpoint_url=args.endpoint_url, client=args.ce_client)
    rows = [[line.usage_type, f"{line.quantity:,.4g} {line.unit}".strip(), f"${line.amount_usd:.4f}"]
            for line in got.lines]
    rows.append(["Total", "", f"${got.total_usd:.4f}"])
    _say("")
    where = "; ".join(got.filters) or "the whole account (no service or tag to filter by: give --actual-tag)"
    span = "whole UTC days" if got.granularity == "DAILY" else "whole hours"
    _say(f"Cost Explorer, {got.granularity} {got.start} to {got.end} (end exclusive: {span}, not the run's minutes), "
         f"{where}:")
    _say(markdown_table(["Usage type", "Usage", "Actual charge"], rows))
    diff = got.total_usd - report.total_usd
    pct = f" ({diff / report.total_usd * 100:+.0f}%)" if report.total_usd > 0 else ""
    _say(f"Estimate ${report.total_usd:.4f}, actual ${got.total_usd:.4f}: difference {diff:+.4f} USD{pct}")
    gaps = any("no datapoint" in i.note for i in report.items)
    outside = sum(i.cost_usd for i in report.items if i.name.startswith("database ") and "rds-" not in i.name)
    causes = likely_causes(got, report.total_usd, report.window_s, has_runners=priced_runners, gaps=gaps,
                           default_prices=report.prices.defaults, outside_aws_usd=outside)
    if causes and abs(diff) > 0.005:
        _say("Likely causes (study 001):")
        for cause in causes:
            _say(f"  - {cause}")
    _write_actual(Path(args.run_dir), got)


def _write_actual(run_dir: Path, got: Any) -> None:
    import csv

    with atomic_path(run_dir / COST_ACTUAL) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["usage_type", "usage", "unit", "actual_usd", "period_start", "period_end", "granularity",
                    "estimated"])
        for line in got.lines:
            w.writerow([line.usage_type, line.quantity, line.unit, line.amount_usd, got.start, got.end,
                        got.granularity, got.estimated])
    _say(f"wrote {run_dir / COST_ACTUAL}")


def _keep_cost_inputs(run_dir: Path, args: argparse.Namespace) -> None:
    """run.json's ``cost_inputs``: what this ``dbsurge cost`` priced, for every later report of the run."""
    given = {"runners": args.runner or None, "storage_gb": args.storage_gb, "io_requests": args.io_requests,
             "database": args.database or None,
             "database_price": None if args.database_price is None else check_database_price(args.database_price),
             "prices": str(Path(args.prices).resolve()) if args.prices else None, "region": args.region}
    given = {k: v for k, v in given.items() if v is not None}
    if given and (run_dir / RUN_JSON).is_file():
        update_run_json(run_dir, cost_inputs=given)
