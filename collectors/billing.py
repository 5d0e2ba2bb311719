"""What a run was billed: Cost Explorer's charges for the run's window, beside the estimate (``dbsurge cost --actual``).

Study 001 reports each line twice, the estimate (CloudWatch usage times list prices) and the charge
Cost Explorer shows a day later, and explains the differences: usage after the harness's last
measurement, Spot runners billed at the Spot price, lines shared with another run on the same day,
items the estimate leaves out (cross-AZ transfer, EBS, public IPv4, a restored copy). This module
asks Cost Explorer (``ce:GetCostAndUsage``) for the same window grouped by usage type and lists the
causes that can apply to the difference it finds.

Cost Explorer's granularity is a day (``DAILY``, UTC days) or an hour (``HOURLY``, only when hourly
data is enabled for the account, and only for the last 14 days): its charge covers the whole days
(or hours) the run touched, never the run's minutes alone, so anything else billed on those lines
in those days is in it. Its figures also lag by up to a day and are marked estimated until the
month closes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dbsurge.base.errors import UserError, clip

#: Cost Explorer's single endpoint region (the API is global; its endpoint is in us-east-1).
CE_REGION = "us-east-1"
GRANULARITIES = ("DAILY", "HOURLY")
#: The service (Cost Explorer's SERVICE dimension) billed for each of the estimate's capacity units, and for runners.
SERVICE_OF_UNIT = {
    "ACU": "Amazon Relational Database Service",
    "DCU": "Amazon DocumentDB (with MongoDB compatibility)",
    "DPU": "Amazon Aurora DSQL",
    "RRU": "Amazon DynamoDB",
    "WRU": "Amazon DynamoDB",
}
RUNNER_SERVICE = "Amazon Elastic Compute Cloud - Compute"
#: Usage types (fragments) the estimate has a line for; any other usage type is a charge it does not estimate.
ESTIMATED_USAGE = ("ServerlessV2Usage", "ServerlessUsage", "DPU", "ReadRequestUnits", "WriteRequestUnits", "BoxUsage",
                   "SpotUsage", "StorageUsage", "StorageIOUsage", "IO-Usage", "InstanceUsage")
_TAG = re.compile(r"([^=\s]{1,128})=(.{0,256})")
#: Pages of results read at most: a run's window is a few days of a few dozen usage types, one page.
MAX_PAGES = 20


@dataclass
class ActualLine:
    """One usage type's charge over the queried periods."""

    usage_type: str
    amount_usd: float
    quantity: float
    unit: str


@dataclass
class Actual:
    """Cost Explorer's answer for a run: its lines, the periods it covers and whether they are final."""

    start: str
    end: str
    granularity: str
    lines: list[ActualLine]
    estimated: bool
    filters: list[str] = field(default_factory=list)

    @property
    def total_usd(self) -> float:
        return float(sum(line.amount_usd for line in self.lines))

    @property
    def hours(self) -> float:
        return (_parse(self.end) - _parse(self.start)).total_seconds() / 3600.0


def _parse(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def query_period(start: datetime, end: datetime, granularity: str) -> tuple[str, str]:
    """Cost Explorer's TimePeriod covering ``[start, end)``: whole UTC days (End exclusive), or whole hours.

        >>> query_period(datetime(2026, 9, 29, 8, 20, tzinfo=UTC), datetime(2026, 9, 29, 10, 20, tzinfo=UTC), "DAILY")
        ('2026-09-29', '2026-09-30')
        >>> query_period(datetime(2026, 9, 29, 8, 20, tzinfo=UTC), datetime(2026, 9, 29, 10, 0, tzinfo=UTC), "HOURLY")
        ('2026-09-29T08:00:00Z', '2026-09-29T10:00:00Z')
    """
    if granularity == "HOURLY":
        lo = start.replace(minute=0, second=0, microsecond=0)
        hi = end.replace(minute=0, second=0, microsecond=0)
        hi = hi if hi >= end else hi + timedelta(hours=1)
        return lo.strftime("%Y-%m-%dT%H:00:00Z"), max(hi, lo + timedelta(hours=1)).strftime("%Y-%m-%dT%H:00:00Z")
    lo_day = start.date()
    hi_day = end.date() if end.time() == datetime.min.time() and end.date() > lo_day else end.date() + timedelta(days=1)
    return lo_day.isoformat(), hi_day.isoformat()


def parse_tag(text: str) -> tuple[str, str]:
    """``--actual-tag KEY=VALUE`` -> (key, value): the cost-allocation tag that names the run's resources."""
    match = _TAG.fullmatch(str(text).strip())
    if not match:
        raise UserError(f"bad --actual-tag '{clip(text)}': use KEY=VALUE, e.g. dbsurge-run=e002-20260929t082035z")
    return match.group(1), match.group(2)


def check_granularity(text: str) -> str:
    value = str(text).strip().upper()
    if value not in GRANULARITIES:
        raise UserError(f"bad --actual-granularity '{clip(text)}': use DAILY or HOURLY")
    return value


def build_filter(services: list[str], tags: list[tuple[str, str]]) -> dict | None:
    """The ``Filter`` expression: the run's services, and its tags (each tag key with its value)."""
    parts: list[dict] = []
    if services:
        parts.append({"Dimensions": {"Key": "SERVICE", "Values": sorted(set(services))}})
    for key, value in tags:
        parts.append({"Tags": {"Key": key, "Values": [value]}})
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"And": parts}


def make_client(profile: str | None = None, endpoint_url: str | None = None) -> Any:
    """A boto3 Cost Explorer client with short timeouts (a wrong endpoint fails in seconds, not minutes)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.session.Session(profile_name=profile or None, region_name=CE_REGION)
        config = Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=30)
        return session.client("ce", endpoint_url=endpoint_url or None, config=config)
    except BotoCoreError as exc:
        raise ce_error(exc, endpoint_url) from None
    except ValueError as exc:  # botocore: "Invalid endpoint: ..."
        raise UserError(f"invalid Cost Explorer endpoint URL {clip(endpoint_url)!r}: {exc}") from None


def ce_error(exc: BaseException, endpoint_url: str | None = None) -> UserError:
    """One line for what Cost Explorer or the AWS setup refused (no keys are ever quoted)."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code, text = str(error.get("Code") or "Error"), str(error.get("Message") or "").strip().splitlines()
        hint = ": enable hourly granularity in Cost Explorer's settings, or use DAILY" \
            if "hourly" in " ".join(text).lower() else ""
        return UserError(f"Cost Explorer error {code}: {text[0] if text else ''}{hint}")
    if isinstance(exc, bx.NoCredentialsError):
        return UserError("no AWS credentials found for Cost Explorer: set AWS_PROFILE or the access keys")
    if isinstance(exc, bx.ProfileNotFound):
        return UserError(f"AWS profile not found ({exc}): check --profile or AWS_PROFILE")
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError)):
        return UserError(f"cannot reach Cost Explorer at {endpoint_url or 'its AWS endpoint'}: check --endpoint-url "
                         "or the network")
    if isinstance(exc, bx.BotoCoreError):
        return UserError(f"Cost Explorer: {str(exc).splitlines()[0]}")
    return UserError(f"Cost Explorer: {type(exc).__name__}")


def _amount(metrics: dict, name: str) -> tuple[float, str]:
    value = metrics.get(name) or {}
    try:
        amount = float(value.get("Amount", 0) or 0)
    except (TypeError, ValueError):
        amount = 0.0
    return (amount if math.isfinite(amount) else 0.0), str(value.get("Unit") or "")


def read_lines(pages: list[dict]) -> tuple[list[ActualLine], bool]:
    """Sum each usage type's cost and usage over the periods of the answer; whether any period is estimated.

    An answer without groups (``Total`` only) is one line, ``(all usage types)``.
    """
    lines: dict[str, ActualLine] = {}
    estimated = False
    for page in pages:
        for period in page.get("ResultsByTime") or []:
            estimated = estimated or bool(period.get("Estimated"))
            groups = period.get("Groups") or []
            pairs = [((g.get("Keys") or ["?"])[0], g.get("Metrics") or {}) for g in groups] or \
                [("(all usage types)", period.get("Total") or {})]
            for usage_type, metrics in pairs:
                cost, _ = _amount(metrics, "UnblendedCost")
                quantity, unit = _amount(metrics, "UsageQuantity")
                line = lines.setdefault(str(usage_type), ActualLine(str(usage_type), 0.0, 0.0, unit))
                line.amount_usd += cost
                line.quantity += quantity
    return sorted(lines.values(), key=lambda x: -x.amount_usd), estimated


def actual_charges(start: datetime, end: datetime, *, granularity: str = "DAILY", services: list[str] | None = None,
                   tags: list[tuple[str, str]] | None = None, profile: str | None = None,
                   endpoint_url: str | None = None, client: Any = None) -> Actual:
    """Cost Explorer's charges for the periods covering ``[start, end)``, grouped by usage type."""
    from botocore.exceptions import BotoCoreError, ClientError

    granularity = check_granularity(granularity)
    lo, hi = query_period(start, end, granularity)
    request: dict[str, Any] = {"TimePeriod": {"Start": lo, "End": hi}, "Granularity": granularity,
                               "Metrics": ["UnblendedCost", "UsageQuantity"],
                               "GroupBy": [{"Type": "DIMENSION", "Key": "USAGE_TYPE"}]}
    flt = build_filter(list(services or []), list(tags or []))
    if flt is not None:
        request["Filter"] = flt
    ce = client or make_client(profile, endpoint_url)
    pages = []
    try:
        for _ in range(MAX_PAGES):
            page = ce.get_cost_and_usage(**request)
            pages.append(page)
            token = page.get("NextPageToken")
            if not token:
                break
            request["NextPageToken"] = token
    except (BotoCoreError, ClientError) as exc:
        raise ce_error(exc, endpoint_url) from None
    lines, estimated = read_lines(pages)
    shown = [f"services {', '.join(sorted(set(services)))}" for _ in [0] if services] + \
        [f"tag {k}={v}" for k, v in tags or []]
    return Actual(lo, hi, granularity, lines, estimated, shown)


def likely_causes(actual: Actual, estimate_usd: float, window_s: float, *, has_runners: bool, gaps: bool,
                  default_prices: bool, outside_aws_usd: float = 0.0) -> list[str]:
    """The causes study 001 names for an estimate and a charge that differ, those that can apply here.

    A charge above the estimate points at what the charge holds and the estimate does not (the rest of
    the day, unmeasured minutes, unestimated lines); one below it at what the estimate over-prices
    (on-demand prices for Spot runners, a database billed by another vendor).
    """
    causes = []
    window_h = window_s / 3600.0
    higher = actual.total_usd > estimate_usd
    if not actual.lines:
        causes.append("Cost Explorer has no charges for these periods: it lags up to a day behind usage, or the "
                      "filter (services, tags) matches nothing; is the tag activated as a cost-allocation tag?")
    if outside_aws_usd > 0:
        causes.append(f"${outside_aws_usd:.4f} of the estimate is a database billed by its vendor (Atlas, ScyllaDB "
                      "Cloud), not by AWS: Cost Explorer cannot show it")
    if higher and actual.hours > window_h * 1.01:
        causes.append(f"Cost Explorer's {actual.granularity.lower()} periods cover {actual.hours:g} h for a "
                      f"{window_h:.2f} h run: other runs, idle minimum capacity and anything else on the same lines "
                      f"in those {'days' if actual.granularity == 'DAILY' else 'hours'} are in the charge (study "
                      "001 split shared lines by each cluster's CloudWatch values and each runner's hours)")
    unestimated = [line for line in actual.lines
                   if line.amount_usd > 0 and not any(k in line.usage_type for k in ESTIMATED_USAGE)]
    if unestimated:
        names = ", ".join(f"{line.usage_type} ${line.amount_usd:.2f}" for line in unestimated[:6])
        causes.append(f"charges the estimate has no line for (cross-AZ transfer, EBS, public IPv4, restores): {names}")
    if higher:
        causes.append("usage after the harness's last measurement is not in the estimate"
                      + (" (the run's capacity series have minutes without a datapoint)" if gaps else "")
                      + ": collect again with a wider --margin")
    if has_runners and not higher:
        causes.append("Spot runners are billed at the Spot price, the prices file holds on-demand prices unless "
                      "you put your Spot price in your own file")
    if default_prices:
        causes.append("the estimate uses the default us-east-1 list prices: another region's or a newer price differs")
    if actual.estimated:
        causes.append("Cost Explorer marks these charges estimated: they can still change (it lags up to a day)")
    return causes
