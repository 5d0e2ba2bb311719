"""What a run cost: capacity-unit-hours, DPUs, runner hours, storage and I/O, priced from a TOML file.

The studies report cost per run, per stage, and as operations per dollar (study 002). The rules:

- **Capacity units (ACU, DCU)** are integrated from the CloudWatch ``ServerlessDatabaseCapacity``
  series (the ``Average`` statistic): a datapoint at ``t`` with period ``p`` is the mean capacity
  over ``[t, t+p)``, so it adds ``value * overlap / 3600`` unit-hours, where ``overlap`` is the
  part of ``[t, t+p)`` inside the window (the run, or a stage). ACU 4 for 30 minutes then 21 for
  5 minutes is ``4 * 0.5 + 21 * 5/60 = 3.75`` ACU-hours; at $0.12 that is $0.45. For an
  ``aurora:CLUSTER`` preset the writer and reader series are summed when they exist (each role
  is billed), else the cluster series is used.
- **DPUs** are the ``TotalDPU`` ``Sum`` per period, prorated by the same overlap, priced per million;
  DynamoDB's **request units** (RRU, WRU: the ``Sum`` of ``ConsumedRead/WriteCapacityUnits`` of an on-demand
  table) likewise, at the on-demand prices per million read and write request units.
- **Runner hours** are the window's hours times the number of load generators of each instance
  type (``--runner c6g.4xlarge:2``, or ``runners`` in run.json); without one, the hours are shown
  at no price.
- **A database of fixed size** (MongoDB Atlas, ScyllaDB Cloud, a provisioned RDS instance) is billed by the
  hour whatever it serves: ``--database NAME[:COUNT]`` prices COUNT of a ``[database_hour]`` entry (an Atlas
  tier is its whole replica set, a ScyllaDB Cloud or RDS entry one node) for the window's hours, and
  ``--database-price USD`` (per hour, the whole database) prices one the file has no entry for. With it,
  ops per dollar is study 002's figure: the cluster's hours and the generators' for the operations served;
  without it, a fixed-size database costs nothing here and ops per dollar is the generator's cost alone.
- **Storage** (``--storage-gb``) is priced per GB-month, prorated over 730 hours; **I/O**
  (``--io-requests``) per million requests; both for the service whose capacity series the run has.
- Minutes that CloudWatch has no datapoint for are *not* filled in: the report says how much of
  the window was measured. (`CostGuard`, which must decide during the run, is the one that
  assumes a capacity for the minutes not yet measured.)
- **Operations** are the successful operations (``count - failures``) from stages.csv's and
  summary.csv's ``ALL`` rows (or the timeline), and ops per dollar is operations / cost.

`estimate_cost` writes ``cost.csv``: ``scope`` is ``item`` (a line of the run's bill), ``stage``
or ``total``, with ``name, usage, unit, unit_price_usd, cost_usd, operations, ops_per_usd, note``.
"""

from __future__ import annotations

import math
import os
import re
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from dbsurge.collectors.merge import capacity_frames, infer_period_s
from dbsurge.collectors.rundata import (
    RunInfo,
    Stage,
    epoch_s,
    format_utc,
    open_run,
    parse_utc,
    read_cloudwatch,
    read_stages,
    read_summary,
    read_timeline,
)

from dbsurge.base.errors import UserError, clip
from dbsurge.config.size_limits import FileRefused, read_bounded
from dbsurge.engine.validate import parse_name_count, parse_runner
from dbsurge.rundir.schema import CLOUDWATCH, COST, METRICS, RUN_JSON, RUNNERS
from dbsurge.rundir.writer import atomic_path

DEFAULT_PRICES = Path(__file__).with_name("prices.toml")
HOURS_PER_MONTH = 730.0
DEFAULT_REGION = "us-east-1"
COST_COLUMNS = ["scope", "name", "usage", "unit", "unit_price_usd", "cost_usd", "operations", "ops_per_usd", "note"]
_SERVICE_OF_UNIT = {"ACU": "aurora", "DCU": "docdb", "DPU": "dsql", "RRU": "dynamodb", "WRU": "dynamodb"}
_PRICE_OF_UNIT = {"ACU": ("aurora", "acu_hour"), "DCU": ("docdb", "dcu_hour"), "DPU": ("dsql", "dpu_per_million"),
                  "RRU": ("dynamodb", "read_request_per_million"), "WRU": ("dynamodb", "write_request_per_million")}
_SERVICE_NAMES = {"aurora": "Aurora", "docdb": "DocumentDB", "dsql": "DSQL", "dynamodb": "DynamoDB"}
#: Units counted per period (the Sum statistic) and priced per million, not integrated over hours.
SUMMED_UNITS = frozenset({"DPU", "RRU", "WRU"})


# -- prices ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """One region's prices and where they came from (``note`` is what reports print)."""

    region: str
    table: dict
    note: str
    defaults: bool = False

    def get(self, section: str, key: str) -> float | None:
        value = self.table.get(section, {}).get(key) if isinstance(self.table.get(section), dict) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def runner(self, instance_type: str) -> float | None:
        return self.get("runner_hour", instance_type)

    def database(self, name: str) -> float | None:
        """Dollars per hour of one ``name`` (a cluster, node or instance of a fixed-size database)."""
        return self.get("database_hour", name)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


#: A prices file is a few dozen lines of TOML.
MAX_PRICES_BYTES = 1024 * 1024


def _read_toml(path: Path) -> dict:
    """The TOML file, or one line: a FIFO or /dev/zero (st_size 0) is refused unread, a larger file after its
    bound, and text that is not UTF-8 or nests past the parser's recursion is not a traceback."""
    try:
        return tomllib.loads(read_bounded(path, MAX_PRICES_BYTES).decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"prices file {path} not found") from None
    except FileRefused as exc:
        raise UserError(f"prices file {path} {exc.reason}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"prices file {path} is not UTF-8 text (byte at offset {exc.start})") from None
    except RecursionError:
        raise UserError(f"prices file {path} cannot be read: nested too deeply") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"prices file {path} cannot be read: {exc}") from None


def load_prices(path: str | Path | None = None, region: str | None = None) -> Prices:
    """The prices for ``region`` from the defaults, with the user's file (if any) laid over them.

    A region that no file gives falls back to the us-east-1 defaults, and says so in ``note``.
    """
    data = _read_toml(DEFAULT_PRICES)
    if path is not None:
        data = _merge(data, _read_toml(Path(path)))
    regions = data.get("regions", {})
    wanted = region or DEFAULT_REGION
    table, fallback = regions.get(wanted), False
    if not isinstance(table, dict):
        table, fallback = regions.get(DEFAULT_REGION, {}), True
    is_default = bool(table.get("defaults"))
    where = DEFAULT_REGION if fallback else wanted
    note = f"{where} " + (f"defaults as of {table.get('as_of', '?')} (verify against AWS pricing)" if is_default
                          else f"prices from {path}" + (f" as of {table['as_of']}" if table.get("as_of") else ""))
    if fallback:
        note += f"; no prices for {wanted}: add [regions.{wanted}] to a prices file"
    return Prices(region=where, table=table, note=note, defaults=is_default)


# -- integration ----------------------------------------------------------------------------------------


def integrate(series: pd.DataFrame, period_s: float, start: Any, end: Any) -> tuple[float, float]:
    """``(value-seconds, measured seconds)`` of a per-period series over ``[start, end)``.

    Each row (``time_utc``, ``value``) stands for ``[time_utc, time_utc + period_s)``; the part of
    that span inside the window counts. Pure.
    """
    lo, hi = epoch_s(start), epoch_s(end)
    if series is None or series.empty or hi <= lo:
        return 0.0, 0.0
    t0 = series["time_utc"].astype("int64").to_numpy() / 1e9
    values = series["value"].to_numpy(dtype=float)
    overlap = (pd.Series(t0 + period_s).clip(upper=hi) - pd.Series(t0).clip(lower=lo)).clip(lower=0).to_numpy()
    ok = ~pd.isna(values)
    return float((values[ok] * overlap[ok]).sum()), float(overlap[ok].sum())


@dataclass
class Usage:
    """A billable series: ``amount`` is unit-hours (ACU, DCU) or DPUs, over ``window_s`` seconds."""

    unit: str
    preset: str
    series_id: str
    amount: float
    measured_s: float
    window_s: float
    stat: str = "Average"

    @property
    def coverage(self) -> float:
        return 1.0 if self.window_s <= 0 else min(1.0, self.measured_s / self.window_s)


def billable_series(cloudwatch: pd.DataFrame) -> list[tuple[str, str, str, str, pd.DataFrame]]:
    """``(unit, preset, id, stat, frame)`` for each series that is billed (roles over the cluster series)."""
    frames = capacity_frames(cloudwatch)
    roles = {(p, i.split("/")[0]) for (p, i, _) in frames if p == "aurora" and "/" in i}
    chosen = []
    for (preset, series_id, unit), data in frames.items():
        if preset == "aurora" and "/" not in series_id and (preset, series_id) in roles:
            continue  # the writer and reader are billed; the cluster series is their average
        for stat in ("Sum",) if unit in SUMMED_UNITS else ("Average", "Maximum"):
            picked = data[data["stat"] == stat]
            if not picked.empty:
                chosen.append((unit, preset, series_id, stat, picked[["time_utc", "value"]].reset_index(drop=True)))
                break
    return chosen


def usage_in(cloudwatch: pd.DataFrame, start: Any, end: Any) -> list[Usage]:
    """The billable usage of every capacity series within ``[start, end)``. Pure."""
    window_s = max(0.0, epoch_s(end) - epoch_s(start))
    out = []
    for unit, preset, series_id, stat, data in billable_series(cloudwatch):
        period = infer_period_s(data["time_utc"])
        value_s, measured = integrate(data, period, start, end)
        amount = value_s / period if unit in SUMMED_UNITS else value_s / 3600.0
        out.append(Usage(unit, preset, series_id, amount, measured, window_s, stat))
    return out


# -- the report -------------------------------------------------------------------------------------


@dataclass
class CostItem:
    """One line of a run's bill."""

    name: str
    usage: float
    unit: str
    unit_price_usd: float | None
    cost_usd: float
    note: str = ""


@dataclass
class CostReport:
    """Cost of a run: its items, the total, per stage, and operations per dollar."""

    run_id: str
    prices: Prices
    window_s: float
    items: list[CostItem]
    stages: pd.DataFrame
    operations: int | None
    notes: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)  # the capacity units billed (ACU, DPU, ...): which services

    @property
    def total_usd(self) -> float:
        return float(sum(item.cost_usd for item in self.items))

    @property
    def ops_per_usd(self) -> float | None:
        return _per_usd(self.operations, self.total_usd)

    def to_frame(self) -> pd.DataFrame:
        """The rows of cost.csv."""
        rows = [
            {"scope": "item", "name": i.name, "usage": i.usage, "unit": i.unit, "unit_price_usd": i.unit_price_usd,
             "cost_usd": i.cost_usd, "note": i.note}
            for i in self.items
        ]
        for stage in self.stages.itertuples(index=False):
            rows.append({"scope": "stage", "name": stage.stage, "usage": stage.duration_s, "unit": "s",
                         "cost_usd": stage.cost_usd, "operations": stage.operations, "ops_per_usd": stage.ops_per_usd})
        rows.append({"scope": "total", "name": "run", "usage": self.window_s, "unit": "s", "cost_usd": self.total_usd,
                     "operations": self.operations, "ops_per_usd": self.ops_per_usd,
                     "note": "; ".join([self.prices.note, *self.notes])})
        return pd.DataFrame(rows, columns=COST_COLUMNS)


def _per_usd(operations: float | None, usd: float) -> float | None:
    if operations is None or usd <= 0 or (isinstance(operations, float) and math.isnan(operations)):
        return None
    return float(operations) / usd


def runners_from_meta(meta: dict) -> list[tuple[str, int]]:
    """run.json's optional ``runners``: a list of ``{"instance_type": ..., "count": ...}`` or strings."""
    out = []
    for item in meta.get("runners") or []:
        if isinstance(item, dict) and item.get("instance_type"):
            out.append((str(item["instance_type"]), int(item.get("count", 1) or 1)))
        elif isinstance(item, str):
            out.append(parse_runner(item))
    return out


def runners_from_csv(run_dir: str | Path) -> tuple[list[tuple[str, int]], dict[str, float]]:
    """``metrics/runners.csv`` (written by ``dbsurge runners status --run-dir``): the runners and their hours.

    Returns ``(instance type, count)`` per type and, for each type whose every instance has its
    hours (launch to termination, or to the status call), the summed instance-hours.
    """
    path = Path(run_dir) / METRICS / RUNNERS
    if not path.is_file():
        return [], {}
    frame = pd.read_csv(path, dtype={"instance_type": str})
    if frame.empty or "instance_type" not in frame.columns:
        return [], {}
    counts = frame.groupby("instance_type", sort=True).size()
    hours = {}
    if "hours" in frame.columns:
        for name, group in frame.groupby("instance_type", sort=True):
            if group["hours"].notna().all():
                hours[str(name)] = float(group["hours"].sum())
    return [(str(t), int(n)) for t, n in counts.items()], hours


_DATABASE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
#: A database of a few thousand nodes is the most anyone prices; more is a typo.
MAX_DATABASE_COUNT = 10_000


def parse_database(text: Any) -> tuple[str, int]:
    """``--database atlas-m40`` or ``scylla-cloud-i4i.2xlarge:3`` -> (price-file entry, count); else `UserError`.

        >>> parse_database("scylla-cloud-i4i.2xlarge:3")
        ('scylla-cloud-i4i.2xlarge', 3)
    """
    return parse_name_count(text, "--database", _DATABASE_NAME, "is not a price-file database name",
                            "use NAME or NAME:COUNT, e.g. atlas-m40 or scylla-cloud-i4i.2xlarge:3", MAX_DATABASE_COUNT)


def check_database_price(value: Any) -> float:
    """``--database-price``: dollars per hour, a finite number above 0 (a free database needs no option)."""
    try:
        price = float(str(value).strip().removesuffix("/h").removeprefix("$"))
    except ValueError:
        price = float("nan")
    if not (math.isfinite(price) and price > 0):
        raise UserError(f"bad --database-price '{clip(value)}': give the database's dollars per hour, e.g. 12.5")
    return price


def databases_from_meta(meta: dict) -> list[tuple[str, int]]:
    """run.json's optional ``database``: ``"atlas-m40"``, ``"NAME:COUNT"``, ``{"name": ..., "count": ...}`` or a list."""
    given = meta.get("database")
    out = []
    for item in given if isinstance(given, list) else [given] if given else []:
        if isinstance(item, dict) and item.get("name"):
            out.append(parse_database(f"{item['name']}:{item.get('count', 1)}"))
        elif isinstance(item, str):
            out.append(parse_database(item))
    return out


def database_items(prices: Prices, databases: Iterable[tuple[str, int]], price_per_hour: float | None,
                   hours: float) -> list[CostItem]:
    """The fixed-size database's lines of the bill: its hours in the window at its hourly price."""
    items = []
    for name, count in databases:
        price = prices.database(name)
        if price is None:
            known = ", ".join(sorted(prices.table.get("database_hour", {}))[:6])
            raise UserError(f"no database price for {name!r} in {prices.region}: add it under "
                            f"[regions.{prices.region}.database_hour] in a prices file (--prices), or give "
                            f"--database-price USD per hour" + (f" (known: {known}, ...)" if known else ""))
        items.append(CostItem(f"database {name} x{count}", hours * count, "hours", price, hours * count * price,
                              "fixed size: billed by the hour"))
    if price_per_hour is not None:
        items.append(CostItem("database (--database-price)", hours, "hours", price_per_hour, hours * price_per_hour,
                              "fixed size: billed by the hour"))
    return items


def successful_operations(stages: pd.DataFrame | None, summary: pd.DataFrame | None, timeline: pd.DataFrame | None
                          ) -> tuple[int | None, dict[str, int]]:
    """Successful operations in the run and per stage (``count - failures``, from the ALL rows)."""
    per_stage: dict[str, int] = {}
    if stages is not None and not stages.empty and {"stage", "operation", "count"} <= set(stages.columns):
        for name, group in stages.groupby("stage", sort=False):
            per_stage[str(name)] = _ok(group)
    total = None
    if summary is not None and not summary.empty and {"operation", "count"} <= set(summary.columns):
        total = _ok(summary)
    elif per_stage:
        total = sum(per_stage.values())
    elif timeline is not None and not timeline.empty and {"operation", "count"} <= set(timeline.columns):
        total = _ok(timeline)
        if "stage" in timeline.columns:
            per_stage = {str(n): _ok(g) for n, g in timeline.groupby("stage", sort=False)}
    return total, per_stage


def _ok(frame: pd.DataFrame) -> int:
    ops = frame["operation"].astype(str)
    rows = frame[ops == "ALL"] if (ops == "ALL").any() else frame[ops != "ALL"]
    failures = rows["failures"].fillna(0).sum() if "failures" in rows.columns else 0
    return int(rows["count"].fillna(0).sum() - failures)


def cost_frames(  # noqa: C901 - one validated option or cost item per line, flat
    run: RunInfo,
    cloudwatch: pd.DataFrame,
    prices: Prices,
    *,
    stages_csv: pd.DataFrame | None = None,
    summary_csv: pd.DataFrame | None = None,
    timeline: pd.DataFrame | None = None,
    runners: Iterable[tuple[str, int]] = (),
    runner_hours: dict[str, float] | None = None,
    storage_gb: float | None = None,
    io_requests: float | None = None,
    databases: Iterable[tuple[str, int]] = (),
    database_price: float | None = None,
) -> CostReport:
    """The cost report of a run from its frames. Pure.

    ``runner_hours`` (instance type -> instance-hours, from metrics/runners.csv) replaces the
    window's hours times the count for the run's bill; the per-stage rows keep the window's share.
    """
    window = run.window()
    if window is None:
        raise UserError(f"{run.path}: {RUN_JSON} has no start and end time (started_utc, ended_utc)")
    start, end = window
    window_s = (end - start).total_seconds()
    hours = window_s / 3600.0
    items: list[CostItem] = []
    notes: list[str] = []
    usages = usage_in(cloudwatch, start, end)
    services = []
    for use in usages:
        section, key = _PRICE_OF_UNIT[use.unit]
        services.append(section)
        price = prices.get(section, key)
        if price is None:
            notes.append(f"no price {section}.{key} for {prices.region}")
        per_unit = None if price is None else (price / 1e6 if use.unit in SUMMED_UNITS else price)
        gap = "" if use.coverage >= 0.999 else f"{100 * (1 - use.coverage):.0f}% of the window has no datapoint"
        label = f"{use.unit}s" if use.unit in SUMMED_UNITS else f"{use.unit}-hours"
        items.append(CostItem(f"{_SERVICE_NAMES[section]} {use.series_id} {label}", use.amount, label, per_unit,
                              use.amount * (per_unit or 0.0), gap))
    service = services[0] if services else None
    database_list = list(databases)
    items += database_items(prices, database_list, database_price, hours)
    runner_list = list(runners)
    if runner_list:
        for instance_type, count in runner_list:
            price = prices.runner(instance_type)
            if price is None:
                raise UserError(
                    f"no runner price for {instance_type!r} in {prices.region}: add it under "
                    f"[regions.{prices.region}.runner_hour] in a prices file (--prices)"
                )
            usage = (runner_hours or {}).get(instance_type)
            note = f"launch to termination ({METRICS}/{RUNNERS})" if usage is not None else ""
            usage = hours * count if usage is None else usage
            items.append(CostItem(f"runner {instance_type} x{count}", usage, "instance-hours", price,
                                  usage * price, note))
    else:
        items.append(CostItem("runner (instance type not given)", hours, "instance-hours", None, 0.0,
                              "give --runner TYPE[:COUNT] to price the load generators"))
    if storage_gb is not None:
        if service is None:
            notes.append("storage not priced: the run has no capacity series to tell the service")
        else:
            price = prices.get(service, "storage_gb_month")
            usage = storage_gb * hours / HOURS_PER_MONTH
            items.append(CostItem(f"{_SERVICE_NAMES[service]} storage {storage_gb:g} GB", usage, "GB-months", price,
                                  usage * (price or 0.0)))
    if io_requests is not None:
        price = prices.get(service, "io_per_million") if service else None
        if price is None:
            notes.append("I/O not priced: no I/O price for this run's service (DSQL bills I/O as DPUs)")
        else:
            items.append(CostItem(f"{_SERVICE_NAMES[service]} I/O", io_requests / 1e6, "million requests", price,
                                  io_requests / 1e6 * price))
    operations, per_stage_ops = successful_operations(stages_csv, summary_csv, timeline)
    stage_rows = [
        _stage_row(stage, cloudwatch, prices, runner_list, storage_gb, service, per_stage_ops.get(stage.name),
                   database_items(prices, database_list, database_price, stage.duration_s / 3600.0))
        for stage in run.stages
    ]
    stage_frame = pd.DataFrame(stage_rows, columns=["stage", "start_utc", "end_utc", "duration_s", "cost_usd",
                                                    "operations", "ops_per_usd"])
    if io_requests is not None and run.stages:
        notes.append("per-stage costs leave out I/O")
    return CostReport(run.run_id, prices, window_s, items, stage_frame, operations, notes,
                      list(dict.fromkeys(use.unit for use in usages)))


def _stage_row(stage: Stage, cloudwatch: pd.DataFrame, prices: Prices, runners: list[tuple[str, int]],
               storage_gb: float | None, service: str | None, operations: int | None,
               database: Iterable[CostItem] = ()) -> dict:
    hours = stage.duration_s / 3600.0
    cost = sum(item.cost_usd for item in database)
    for use in usage_in(cloudwatch, stage.start, stage.end):
        section, key = _PRICE_OF_UNIT[use.unit]
        price = prices.get(section, key) or 0.0
        cost += use.amount * (price / 1e6 if use.unit in SUMMED_UNITS else price)
    cost += sum(hours * count * (prices.runner(t) or 0.0) for t, count in runners)
    if storage_gb is not None and service:
        cost += storage_gb * hours / HOURS_PER_MONTH * (prices.get(service, "storage_gb_month") or 0.0)
    return {"stage": stage.name, "start_utc": stage.start, "end_utc": stage.end, "duration_s": stage.duration_s,
            "cost_usd": cost, "operations": operations, "ops_per_usd": _per_usd(operations, cost)}


def region_of(run: RunInfo, region: str | None = None) -> str:
    """The region to price: the argument, run.json's ``region``, the AWS environment, else us-east-1."""
    return (
        region
        or str(run.meta.get("region") or "")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or DEFAULT_REGION
    )


def estimate_cost(
    run_dir: str | Path,
    prices_path: str | Path | None = None,
    *,
    region: str | None = None,
    runners: Iterable[str | tuple[str, int]] | None = None,
    storage_gb: float | None = None,
    io_requests: float | None = None,
    databases: Iterable[str | tuple[str, int]] | None = None,
    database_price: float | str | None = None,
    write: bool = True,
) -> CostReport:
    """Estimate a run's cost from its directory; writes ``cost.csv``.

    What is not given comes from run.json's ``cost_inputs`` (what ``dbsurge cost`` was last asked:
    runners, database, storage, I/O, prices file, region), so the report built later prices the same run the
    same way instead of falling back to a bill of nothing.
    """
    run = open_run(run_dir)
    saved = run.meta.get("cost_inputs") if isinstance(run.meta.get("cost_inputs"), dict) else {}
    prices_path = prices_path or saved.get("prices")
    region = region or saved.get("region")
    runners = runners or saved.get("runners") or None
    storage_gb = storage_gb if storage_gb is not None else saved.get("storage_gb")
    io_requests = io_requests if io_requests is not None else saved.get("io_requests")
    databases = databases or saved.get("database") or None
    databases = [databases] if isinstance(databases, str) else databases
    database_price = database_price if database_price is not None else saved.get("database_price")
    database_list = ([parse_database(d) if isinstance(d, str) else d for d in databases] if databases
                     else databases_from_meta(run.meta))
    prices = load_prices(prices_path, region_of(run, region))
    runner_list = [parse_runner(r) if isinstance(r, str) else r for r in runners] if runners else runners_from_meta(run.meta)
    runner_hours: dict[str, float] = {}
    if not runner_list:  # the runners `dbsurge runners status --run-dir` listed, with their real hours
        runner_list, runner_hours = runners_from_csv(run.path)
    report = cost_frames(
        run,
        read_cloudwatch(run.path),
        prices,
        stages_csv=read_stages(run.path),
        summary_csv=read_summary(run.path),
        timeline=read_timeline(run.path),
        runners=runner_list,
        runner_hours=runner_hours,
        storage_gb=storage_gb,
        io_requests=io_requests,
        databases=database_list,
        database_price=None if database_price is None else check_database_price(database_price),
    )
    if write:
        frame = report.to_frame()
        with atomic_path(run.path / COST) as tmp:
            frame.to_csv(tmp, index=False)
    return report


# -- the guard --------------------------------------------------------------------------------------------


class CostGuard:
    """Stops a run whose estimated cost passes a cap (``--cost-cap``).

    The estimate covers ``[started, now]``: the capacity CloudWatch has measured so far, plus the
    minutes it has not measured yet (it reports minutes late) at an assumed capacity, plus the
    runners. The assumption is ``assume_capacity[unit]`` when given (a strict guard passes the
    configured maximum, 32 ACU say), else the highest value seen so far in the run, so a guard
    neither ignores the unmeasured minutes nor counts them all at the maximum (which in study 001
    estimated $9.5 for a $5.1 run). The engine calls `check` on its tick and, once it returns
    True, stops the runner and writes `event` to events.jsonl::

        guard = CostGuard(5.0, run_dir=run_dir, runners=[("m7g.4xlarge", 1)])
        if guard.check():
            runner.quit(); rundir.event(**guard.event())
    """

    def __init__(
        self,
        cap_usd: float,
        *,
        run_dir: str | Path | None = None,
        prices: Prices | None = None,
        prices_path: str | Path | None = None,
        region: str | None = None,
        runners: Iterable[str | tuple[str, int]] = (),
        started: Any = None,
        assume_capacity: dict[str, float] | None = None,
        presets: Iterable[str] | None = None,
        clock: Callable[[], float] = time.time,
        cloudwatch: Callable[[], pd.DataFrame] | None = None,
    ) -> None:
        if not (isinstance(cap_usd, (int, float)) and cap_usd > 0 and math.isfinite(cap_usd)):
            raise UserError(f"--cost-cap must be a positive number of dollars, not {cap_usd!r}")
        self.cap_usd = float(cap_usd)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.clock = clock
        self.assume = dict(assume_capacity or {})
        run = open_run(self.run_dir) if self.run_dir is not None and (self.run_dir / RUN_JSON).is_file() else None
        self.prices = prices or load_prices(prices_path, region or (region_of(run) if run else None))
        self.runners = [parse_runner(r) if isinstance(r, str) else r for r in runners]
        for instance_type, _ in self.runners:
            if self.prices.runner(instance_type) is None:
                raise UserError(f"no runner price for {instance_type!r} in {self.prices.region}: add it to a prices file")
        if started is None and run is not None and run.started is not None:
            started = run.started
        self.started = epoch_s(started) if started is not None else clock()
        presets = list(presets) if presets is not None else (run.cloudwatch if run else [])
        self.units_expected = {u for p in presets for u in _units_of_preset(p)}
        self._cloudwatch = cloudwatch or self._read_cloudwatch
        self._cache: tuple[tuple[float, int], pd.DataFrame] | None = None
        self.exceeded = False
        self.last_estimate = 0.0

    def _read_cloudwatch(self) -> pd.DataFrame:
        if self.run_dir is None:
            return read_cloudwatch(Path("/nonexistent"))
        path = self.run_dir / METRICS / CLOUDWATCH
        try:
            stat = path.stat()
            key = (stat.st_mtime, stat.st_size)
        except OSError:
            return read_cloudwatch(self.run_dir)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, read_cloudwatch(self.run_dir))
        return self._cache[1]

    def estimate(self, now: float | None = None) -> float:
        """Estimated dollars from the start to ``now``, the unmeasured minutes included."""
        now = self.clock() if now is None else float(now)
        window_s = max(0.0, now - self.started)
        start, end = parse_utc(self.started), parse_utc(now)
        cloudwatch = self._cloudwatch()
        total = sum(window_s / 3600.0 * count * (self.prices.runner(t) or 0.0) for t, count in self.runners)
        seen_units = set()
        for unit, _preset, _sid, _stat, data in billable_series(cloudwatch):
            seen_units.add(unit)
            section, key = _PRICE_OF_UNIT[unit]
            price = self.prices.get(section, key) or 0.0
            period = infer_period_s(data["time_utc"])
            value_s, measured = integrate(data, period, start, end)
            past = data[data["time_utc"] <= end]["value"]
            if unit in SUMMED_UNITS:
                rate = self.assume.get(unit, float(past.max()) / period if len(past) else 0.0)  # DPU per second
                total += (value_s / period + rate * max(0.0, window_s - measured)) * price / 1e6
            else:
                level = self.assume.get(unit, float(past.max()) if len(past) else 0.0)
                total += (value_s + level * max(0.0, window_s - measured)) / 3600.0 * price
        for unit in self.units_expected - seen_units:
            if unit in self.assume:  # no datapoint yet: the whole window at the assumed capacity
                section, key = _PRICE_OF_UNIT[unit]
                price = self.prices.get(section, key) or 0.0
                total += self.assume[unit] * window_s * (price / 1e6 if unit in SUMMED_UNITS else price / 3600.0)
        self.last_estimate = total
        return total

    def check(self, now: float | None = None) -> bool:
        """True once the estimate has passed the cap (it stays True)."""
        if not self.exceeded and self.estimate(now) > self.cap_usd:
            self.exceeded = True
        return self.exceeded

    def event(self, now: float | None = None) -> dict:
        """The ``cost_cap`` event for events.jsonl."""
        now = self.clock() if now is None else float(now)
        return {
            "time_utc": format_utc(now),
            "kind": "cost_cap",
            "cap_usd": self.cap_usd,
            "estimate_usd": round(self.last_estimate, 4),
            "message": f"estimated cost ${self.last_estimate:.2f} passed the cap ${self.cap_usd:.2f}: run stopped",
        }


def _units_of_preset(spec: str) -> tuple[str, ...]:
    preset = str(spec).partition(":")[0].strip().lower()
    return {"aurora": ("ACU",), "docdb": ("DCU",), "dsql": ("DPU",), "dynamodb": ("RRU", "WRU")}.get(preset, ())
