"""CloudWatch metrics for a run: presets, a collector on `get_metric_data`, and a poller.

A *preset* names a database and expands to the metrics the studies read beside the client's
histograms. ``dbsurge run --cloudwatch PRESET:ID`` (repeatable) polls them during the run and
``dbsurge collect results/<run>`` fetches the run's window afterwards; both write
``metrics/cloudwatch.csv`` in long form (``time_utc, preset, id, metric, stat, value``).

The presets and what each expands to are `dbsurge.config.cloudwatch_presets`'s (the engine checks the
syntax before a run).

Standard AWS metrics have a 60-second period and arrive minutes late, so the poller re-reads a
trailing window on every poll and ``dbsurge collect`` can be run again later; a later value for
the same (time, preset, id, metric, stat) replaces the earlier one. A datapoint's ``time_utc`` is
the start of its period: the Average at 08:45:00 covers 08:45:00 to 08:46:00.

The standard boto3 settings (``AWS_PROFILE``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``) are
honoured; ``region``, ``profile`` and ``endpoint_url`` override them.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from dbsurge.collectors.rundata import (
    CLOUDWATCH_COLUMNS,
    append_event,
    format_utc,
    normalize_cloudwatch,
    open_run,
    parse_utc,
)

from dbsurge.base.errors import UserError
from dbsurge.config.cloudwatch_presets import (  # noqa: F401 - parse_preset and capacity_unit: the collectors' names too
    UNRESOLVED,
    MetricQuery,
    MetricSpecs,
    capacity_unit,
    parse_preset,
    parse_presets,
)
from dbsurge.rundir.schema import CLOUDWATCH, METRICS
from dbsurge.rundir.writer import CsvAppender

log = logging.getLogger("dbsurge.collectors.cloudwatch")

MAX_QUERIES_PER_CALL = 500  # the GetMetricData limit
_AUTH_CODES = {
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "AccessDenied",
    "AccessDeniedException",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
    "InvalidSignatureException",
    "AuthFailure",
}



# -- errors --------------------------------------------------------------------------------------


def user_error(exc: BaseException, *, endpoint_url: str | None = None) -> UserError:  # noqa: C901 - one branch per AWS error code, a table read top to bottom
    """One line for an AWS error a user can cause (credentials, region, endpoint), else the error itself."""
    from botocore import exceptions as bx

    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, bx.ClientError):
        code, text, status = _client_error_parts(exc)
        if code in _AUTH_CODES or status in (401, 403):
            return UserError(f"CloudWatch refused the AWS credentials ({code}: {text}): check AWS_PROFILE or the keys")
        return UserError(f"CloudWatch error {code}: {text}")
    if isinstance(exc, bx.NoRegionError):
        return UserError("no AWS region for CloudWatch: pass --region or set AWS_DEFAULT_REGION")
    if isinstance(exc, bx.NoCredentialsError):
        return UserError("no AWS credentials found: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    if isinstance(exc, bx.ProfileNotFound):
        return UserError(f"AWS profile not found ({exc}): check --profile or AWS_PROFILE")
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
        where = getattr(exc, "kwargs", {}).get("endpoint_url") or endpoint_url or "the CloudWatch endpoint"
        return UserError(f"cannot reach {where}: check --endpoint-url, AWS_ENDPOINT_URL or the network")
    if isinstance(exc, bx.ReadTimeoutError):
        return UserError(f"CloudWatch did not answer in time ({endpoint_url or 'default endpoint'})")
    if isinstance(exc, (bx.PartialCredentialsError, bx.InvalidConfigError, bx.ParamValidationError)):
        return UserError(f"AWS configuration problem: {str(exc).splitlines()[0]}")
    if isinstance(exc, bx.BotoCoreError):
        return UserError(f"CloudWatch: {str(exc).splitlines()[0]}")
    return UserError(f"CloudWatch: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _client_error_parts(exc: Any) -> tuple[str, str, int | None]:
    """Code, first message line and HTTP status of a botocore ClientError.

    An endpoint that answers an RPC-protocol call with an XML error body (moto does, for a bad
    token) leaves the code as the HTTP status and the XML in the message: read them from it.
    """
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code") or "Error"), str(error.get("Message") or "").strip()
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    inner_code = re.search(r"<Code>([^<]+)</Code>", message)
    if inner_code:
        code = inner_code.group(1)
        inner_message = re.search(r"<Message>([^<]*)</Message>", message)
        message = inner_message.group(1) if inner_message else ""
    lines = message.splitlines()
    return code, (lines[0].strip() if lines else ""), status


def make_client(region: str | None = None, profile: str | None = None, endpoint_url: str | None = None) -> Any:
    """A boto3 CloudWatch client with short timeouts and few retries (so a bad endpoint fails fast)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.session.Session(profile_name=profile or None, region_name=region or None)
        # one retry: a poll that fails is tried again at the next poll anyway
        config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=30)
        return session.client("cloudwatch", endpoint_url=endpoint_url or None, config=config)
    except BotoCoreError as exc:
        raise user_error(exc, endpoint_url=endpoint_url) from None
    except ValueError as exc:  # botocore: "Invalid endpoint: ..."
        raise UserError(f"invalid CloudWatch endpoint URL {endpoint_url!r}: {exc}") from None


# -- the collector --------------------------------------------------------------------------------


class CloudWatchCollector:
    """Fetches the metrics of some presets for a time window with `get_metric_data`.

    Queries are batched 500 to a call and every call is followed through its ``NextToken``.
    Start and end are widened to whole periods (as CloudWatch itself rounds them), so the rows
    always sit on period boundaries::

        collector = CloudWatchCollector([parse_preset("aurora:a2")], region="us-east-1")
        collector.check()                               # one call; UserError with one line
        frame = collector.fetch(start, end)             # time_utc, preset, id, metric, stat, value

    The boto3 client and the clock are injected for tests; by default a client is made on first
    use from ``region``, ``profile`` and ``endpoint_url`` (or the standard AWS environment).
    """

    def __init__(
        self,
        specs: MetricSpecs | Sequence[MetricSpecs | str],
        *,
        client: Any = None,
        region: str | None = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        items = [specs] if isinstance(specs, (MetricSpecs, str)) else list(specs)
        self.specs = parse_presets(items)
        self._client = client
        self.region, self.profile, self.endpoint_url = region, profile, endpoint_url
        self.clock = clock
        self._found: dict[str, MetricSpecs] = {}
        self._warned: set[str] = set()

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = make_client(self.region, self.profile, self.endpoint_url)
        return self._client

    @property
    def where(self) -> str:
        """Region and endpoint, for messages."""
        try:
            meta = self.client.meta
            return f"{meta.region_name} at {meta.endpoint_url}"
        except Exception:  # noqa: BLE001 - only for a message
            return self.endpoint_url or self.region or "the default AWS settings"

    def check(self) -> None:
        """One cheap call: raises `UserError` with one line for credentials, region or endpoint trouble."""
        now = self.clock()
        probe = self.specs[0].queries[0] if self.specs else MetricQuery("metric", "-", "AWS/RDS", "CPUUtilization",
                                                                         "Average", ())
        if not probe.resolved:
            probe = replace(probe, dimensions=tuple(("Probe" if n == UNRESOLVED else n, v) for n, v in probe.dimensions))
        try:
            self.client.get_metric_data(
                MetricDataQueries=[probe.api_query("probe")],
                StartTime=_dt(_floor(now - 600, 60)),
                EndTime=_dt(_floor(now, 60) + 60),
                MaxDatapoints=10,
            )
        except Exception as exc:  # noqa: BLE001 - mapped to one line
            raise user_error(exc, endpoint_url=self.endpoint_url) from None

    def resolve(self) -> list[MetricSpecs]:
        """The specs with their dimension names found with `list_metrics`.

        A name that was found is kept; while CloudWatch has no metric for the id yet (a new
        cluster), the preset's usual dimension is used and the next call looks again.
        """
        return [self._resolve(s) if s.discover is not None else s for s in self.specs]

    def _resolve(self, specs: MetricSpecs) -> MetricSpecs:
        if specs.spec in self._found:
            return self._found[specs.spec]
        try:
            name = None
            if specs.discover:
                for candidate in specs.discover:
                    found = self.client.list_metrics(
                        Namespace=specs.namespace, Dimensions=[{"Name": candidate, "Value": specs.id}]
                    )
                    if found.get("Metrics"):
                        name = candidate
                        break
            else:
                name = self._dimension_carrying(specs.namespace, specs.id)
        except Exception as exc:  # noqa: BLE001 - mapped to one line
            raise user_error(exc, endpoint_url=self.endpoint_url) from None
        if name:
            self._found[specs.spec] = specs.with_dimension(name)
            return self._found[specs.spec]
        if specs.spec not in self._warned:
            self._warned.add(specs.spec)
            log.warning("CloudWatch has no %s metrics for %r yet; assuming the dimension %s", specs.namespace,
                        specs.id, specs.default_dimension)
        return specs.with_dimension(specs.default_dimension or "ClusterId")

    def _dimension_carrying(self, namespace: str, value: str, max_pages: int = 20) -> str | None:
        """The name of a dimension whose value is ``value`` among the namespace's metrics."""
        token = None
        for _ in range(max_pages):
            kwargs = {"Namespace": namespace, **({"NextToken": token} if token else {})}
            page = self.client.list_metrics(**kwargs)
            for metric in page.get("Metrics", []):
                for dim in metric.get("Dimensions", []):
                    if dim.get("Value") == value:
                        return str(dim["Name"])
            token = page.get("NextToken")
            if not token:
                break
        return None

    def queries(self) -> list[MetricQuery]:
        return [q for specs in self.resolve() for q in specs.queries]

    def fetch(self, start: Any, end: Any) -> pd.DataFrame:
        """All datapoints in ``[start, end)`` (widened to whole periods), in long form.

        ``time_utc`` holds timezone-aware UTC timestamps (the start of each period).
        """
        start_s, end_s = _epoch(start), _epoch(end)
        if end_s <= start_s:
            return normalize_cloudwatch(None)
        rows: list[dict] = []
        by_period: dict[int, list[MetricQuery]] = {}
        for query in self.queries():
            by_period.setdefault(query.period_s, []).append(query)
        try:
            for period, queries in by_period.items():
                lo, hi = _floor(start_s, period), _ceil(end_s, period)
                for i in range(0, len(queries), MAX_QUERIES_PER_CALL):
                    rows += self._fetch_batch(queries[i : i + MAX_QUERIES_PER_CALL], lo, hi)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to one line
            raise user_error(exc, endpoint_url=self.endpoint_url) from None
        return normalize_cloudwatch(pd.DataFrame(rows, columns=CLOUDWATCH_COLUMNS))

    def _fetch_batch(self, queries: list[MetricQuery], start_s: float, end_s: float) -> list[dict]:
        by_id = {f"q{i}": q for i, q in enumerate(queries)}
        rows: list[dict] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {
                "MetricDataQueries": [q.api_query(qid) for qid, q in by_id.items()],
                "StartTime": _dt(start_s),
                "EndTime": _dt(end_s),
                "ScanBy": "TimestampAscending",
            }
            if token:
                kwargs["NextToken"] = token
            page = self.client.get_metric_data(**kwargs)
            for result in page.get("MetricDataResults", []):
                query = by_id.get(result.get("Id", ""))
                if query is None:
                    continue
                for ts, value in zip(result.get("Timestamps", []), result.get("Values", [])):
                    rows.append(
                        {
                            "time_utc": parse_utc(ts),
                            "preset": query.preset,
                            "id": query.series_id,
                            "metric": query.metric,
                            "stat": query.stat,
                            "value": float(value),
                        }
                    )
            token = page.get("NextToken")
            if not token:
                return rows


def _epoch(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return parse_utc(value).value / 1e9


def _floor(t: float, period: int) -> float:
    return math.floor(t / period) * period


def _ceil(t: float, period: int) -> float:
    return math.ceil(t / period) * period


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


# -- the poller -----------------------------------------------------------------------------------


class CloudWatchAppender:
    """Appends new or changed rows to ``metrics/cloudwatch.csv`` (one flush per batch).

    A key (time, preset, id, metric, stat) is written again only when its value changed, which
    happens while CloudWatch is still filling a recent period; readers keep the last row of a key.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / METRICS / CLOUDWATCH
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._seen: dict[tuple, float] = {}
        existing = normalize_cloudwatch(pd.read_csv(self.path) if self._has_rows() else None)
        for row in existing.itertuples(index=False):
            self._seen[(format_utc(row.time_utc), row.preset, row.id, row.metric, row.stat)] = row.value

    def _has_rows(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def append(self, frame: pd.DataFrame) -> int:
        """Write the rows of ``frame`` that are new or changed; returns how many were written."""
        fresh = []
        for row in frame.itertuples(index=False):
            key = (format_utc(row.time_utc), row.preset, row.id, row.metric, row.stat)
            if self._seen.get(key) != row.value:
                self._seen[key] = row.value
                fresh.append([*key, repr(float(row.value))])
        if fresh:
            out = CsvAppender(self.path, CLOUDWATCH_COLUMNS)
            try:
                out.write(dict(zip(CLOUDWATCH_COLUMNS, row, strict=True)) for row in fresh)
            finally:
                out.close()
        return len(fresh)


class CloudWatchPoller:
    """A background greenlet that polls CloudWatch during a run and appends to ``metrics/cloudwatch.csv``.

    Every ``interval_s`` it fetches the trailing ``lookback_s`` (at first from the run's start, less
    ``margin_s``), because CloudWatch fills recent periods minutes late. An error is logged and
    written as an event ``{"kind": "error", "source": "cloudwatch", "message": ...}`` through
    ``events`` (a callable taking a dict; by default appended to the run's ``events.jsonl``) and the
    run goes on. ``stop()`` makes one last poll unless told not to.
    """

    def __init__(
        self,
        collector: CloudWatchCollector,
        run_dir: str | Path,
        interval_s: float = 60,
        events: Callable[[dict], None] | None = None,
        *,
        lookback_s: float = 900,
        margin_s: float = 300,
        started: Any = None,
    ) -> None:
        self.collector = collector
        self.run_dir = Path(run_dir)
        self.interval_s = float(interval_s)
        self.lookback_s = float(lookback_s)
        self.margin_s = float(margin_s)
        self.events = events or (lambda event: append_event(self.run_dir, event, collector.clock))
        self._started = _epoch(started) if started is not None else None
        self._appender = CloudWatchAppender(self.run_dir)
        self._greenlet: Any = None
        self._first = True
        self.polls = 0
        self.errors = 0
        self.rows_written = 0

    def _run_start(self) -> float:
        if self._started is None:
            try:
                run = open_run(self.run_dir)
                self._started = run.started.value / 1e9 if run.started is not None else None
            except UserError:
                self._started = None
            if self._started is None:
                self._started = self.collector.clock()
        return self._started

    def poll_once(self) -> int:
        """One poll; errors are logged and reported as events, never raised. Returns rows written."""
        now = self.collector.clock()
        start = self._run_start() - self.margin_s
        if not self._first:
            start = max(start, now - self.lookback_s)
        try:
            frame = self.collector.fetch(start, now)
            written = self._appender.append(frame)
        except Exception as exc:  # noqa: BLE001 - the run goes on
            self.errors += 1
            message = str(user_error(exc, endpoint_url=self.collector.endpoint_url))
            log.warning("CloudWatch poll failed: %s", message)
            try:
                self.events({"time_utc": format_utc(now), "kind": "error", "source": "cloudwatch", "message": message})
            except Exception:
                log.exception("could not record the CloudWatch error event")
            return 0
        self._first = False
        self.polls += 1
        self.rows_written += written
        return written

    def _loop(self) -> None:
        import gevent

        while True:
            self.poll_once()
            gevent.sleep(self.interval_s)

    def start(self) -> CloudWatchPoller:
        import gevent

        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)
        return self

    def stop(self, final_poll: bool = True) -> None:
        """Stop polling; by default poll once more so the data up to now is on disk."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None
            if final_poll:
                self.poll_once()


def cloudwatch_collector(specs: list[str] | None, region: str | None = None, endpoint_url: str | None = None) -> Any:
    """The checked collector of ``--cloudwatch PRESET:ID...``, None without specs.

    Parses the presets and makes one cheap CloudWatch call, so a wrong id, region or credentials
    fail before any load: a `UserError` with one line.
    """
    if not specs:
        return None
    collector = CloudWatchCollector(parse_presets(specs), region=region, endpoint_url=endpoint_url)
    collector.check()
    return collector
