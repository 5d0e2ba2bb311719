"""DynamoDB's CloudWatch preset and its on-demand prices: moto's CloudWatch on 127.0.0.1, then the cost model.

The preset reads ConsumedReadCapacityUnits / ConsumedWriteCapacityUnits (the request units an on-demand
table is billed for), the throttle events, and ThrottledRequests per operation; the cost model prices the
request units per million at the prices.toml defaults.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from dbsurge.collectors.cloudwatch import CloudWatchCollector, capacity_unit, parse_preset
from dbsurge.collectors.cost import estimate_cost, load_prices
from dbsurge.collectors.rundata import format_utc

from dbsurge.base.errors import UserError

T0 = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Placeholder credentials and a region; nothing from the developer's own AWS setup."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_CLOUDWATCH", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)


def _seed(url: str, metric: str, dims: dict[str, str], values: list[float]) -> None:
    data = [{"MetricName": metric, "Dimensions": [{"Name": n, "Value": v} for n, v in dims.items()],
             "Timestamp": T0 + timedelta(minutes=k), "Value": value} for k, value in enumerate(values)]
    boto3.client("cloudwatch", region_name="us-east-1", endpoint_url=url).put_metric_data(
        Namespace="AWS/DynamoDB", MetricData=data)


def test_preset_expands_to_capacity_throttles_and_throttled_requests_per_operation() -> None:
    specs = parse_preset("dynamodb:usertable")
    got = {(q.series_id, q.metric, q.stat, q.dimensions) for q in specs.queries}
    table = (("TableName", "usertable"),)
    for metric in ("ConsumedReadCapacityUnits", "ConsumedWriteCapacityUnits", "ReadThrottleEvents",
                   "WriteThrottleEvents"):
        assert ("usertable", metric, "Sum", table) in got
    for operation in ("GetItem", "PutItem", "UpdateItem", "BatchWriteItem"):
        assert (f"usertable/{operation}", "ThrottledRequests", "Sum", table + (("Operation", operation),)) in got
    assert all(q.namespace == "AWS/DynamoDB" for q in specs.queries)
    assert capacity_unit("dynamodb", "usertable", "ConsumedReadCapacityUnits") == "RRU"
    assert capacity_unit("dynamodb", "usertable", "ConsumedWriteCapacityUnits") == "WRU"
    assert capacity_unit("dynamodb", "usertable/GetItem", "ThrottledRequests") is None
    with pytest.raises(UserError, match="malformed id"):
        parse_preset("dynamodb:bad table")


def test_request_units_from_cloudwatch_are_priced_on_demand(moto_url: str, tmp_path: Path) -> None:
    prices = load_prices()
    assert prices.get("dynamodb", "read_request_per_million") == 0.125
    assert prices.get("dynamodb", "write_request_per_million") == 0.625
    _seed(moto_url, "ConsumedReadCapacityUnits", {"TableName": "cw_ut"}, [1e6, 1.5e6, 0.5e6])
    _seed(moto_url, "ConsumedWriteCapacityUnits", {"TableName": "cw_ut"}, [0.2e6, 0.3e6, 0.5e6])
    _seed(moto_url, "ThrottledRequests", {"TableName": "cw_ut", "Operation": "UpdateItem"}, [0.0, 12.0, 3.0])
    collector = CloudWatchCollector("dynamodb:cw_ut", endpoint_url=moto_url)
    collector.check()
    frame = collector.fetch(T0, T0 + timedelta(minutes=3))
    throttled = frame[(frame["id"] == "cw_ut/UpdateItem") & (frame["metric"] == "ThrottledRequests")]
    assert throttled["value"].tolist() == [0.0, 12.0, 3.0]
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "run", "started_utc": format_utc(T0),
                                              "ended_utc": format_utc(T0 + timedelta(minutes=3)),
                                              "plan": {"stages": []}, "region": "us-east-1"}))
    frame.assign(time_utc=frame["time_utc"].map(format_utc)).to_csv(run / "metrics" / "cloudwatch.csv", index=False)
    items = {item.name: item for item in estimate_cost(run).items}
    reads, writes = items["DynamoDB cw_ut RRUs"], items["DynamoDB cw_ut WRUs"]
    assert reads.usage == pytest.approx(3e6) and reads.cost_usd == pytest.approx(0.375)  # $0.125 per million
    assert writes.usage == pytest.approx(1e6) and writes.cost_usd == pytest.approx(0.625)  # $0.625 per million
    assert estimate_cost(run).total_usd == pytest.approx(1.0)
