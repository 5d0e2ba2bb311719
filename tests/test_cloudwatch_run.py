"""A run with --cloudwatch against a real AWS-compatible endpoint (moto's server on 127.0.0.1).

The run lines its stages up with CloudWatch's one-minute periods (--align-start 60): the first
stage is the first minute, the second (10 s, to keep the test short) starts the next one. Aurora's
capacity series is seeded after the run, as CloudWatch publishes it minutes late: 4 ACU in the
first stage's minute, 21 ACU in the second's. ``dbsurge collect`` fetches it, ``dbsurge report``
and ``dbsurge cost`` use it: the step lands in the right stage, the stage maxima are right, and
the cost matches the hand computation to the cent.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import boto3
import pandas as pd
import pytest
from runs import dbsurge, explain, only_run_dir, read_csv, read_json

ACU_PRICE = 0.12  # us-east-1 default in collectors/prices.toml


@pytest.fixture
def aws_env(tmp_path):
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}


def _utc(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


@pytest.mark.slow
def test_capacity_step_lands_in_its_stage_and_costs_what_it_should(tmp_path, pg_uri, moto_url, aws_env, monkeypatch):
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "stages",
                   "--stages", "1m@20tps,10s@60tps", "--align-start", "60", "--operation", "product_lookup",
                   "--cloudwatch", "aurora:e2e", "--cloudwatch-endpoint-url", moto_url, "--cloudwatch-interval", "5",
                   "--quiet", "--workload-option", "products=2000", cwd=tmp_path, env=aws_env, timeout=300)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    meta = read_json(run / "run.json")
    assert meta["cloudwatch"] == ["aurora:e2e"]
    start, end = _utc(meta["started_utc"]), _utc(meta["ended_utc"])
    assert start.second == 0 and start.microsecond == 0  # aligned on the minute

    # CloudWatch publishes late: seed the series now, one datapoint a minute around the run
    for k, v in aws_env.items():
        monkeypatch.setenv(k, v)
    minutes = [start + timedelta(minutes=m) for m in range(-2, 4)]
    values = {m: (21.0 if m == start + timedelta(minutes=1) else 4.0) for m in minutes}
    cw = boto3.client("cloudwatch", region_name="us-east-1", endpoint_url=moto_url)
    cw.put_metric_data(Namespace="AWS/RDS", MetricData=[
        {"MetricName": "ServerlessDatabaseCapacity", "Dimensions": [{"Name": "DBClusterIdentifier", "Value": "e2e"}],
         "Timestamp": m, "Value": v} for m, v in values.items()])

    for cmd in (["collect", str(run), "--endpoint-url", moto_url], ["report", str(run)], ["cost", str(run)]):
        p = dbsurge(*cmd, cwd=tmp_path, env=aws_env, timeout=120)
        assert p.returncode == 0, explain(p)

    # the step lands in the second stage, at its own (minute) resolution, beside the load
    merged = pd.read_csv(run / "merged.csv")
    cap_cols = [c for c in merged.columns if "ServerlessDatabaseCapacity" in c and c.startswith("cw.")]
    assert cap_cols, merged.columns.tolist()
    col = next(c for c in cap_cols if "Maximum" in c or "Average" in c)
    rows = merged[merged[col].notna()]
    assert set(rows[rows["stage"] == "60tps"][col]) == {21.0}
    assert set(rows[rows["stage"] == "20tps"][col]) == {4.0}

    from dbsurge.collectors.merge import stage_capacity

    cap = stage_capacity(run).set_index("stage")
    max_col = next(c for c in cap.columns if c.endswith("(max)") and c.startswith("e2e "))
    assert cap.loc["20tps", max_col] == 4.0 and cap.loc["60tps", max_col] == 21.0

    # ACU-hours by hand: each minute's value over the part of the minute the run covered
    acu_seconds = 0.0
    for m, v in values.items():
        overlap = (min(end, m + timedelta(minutes=1)) - max(start, m)).total_seconds()
        acu_seconds += v * max(0.0, overlap)
    expected = round(acu_seconds / 3600 * ACU_PRICE, 2)
    cost = read_csv(run / "cost.csv")
    total = next(r for r in cost if r["scope"] == "total")
    assert round(float(total["cost_usd"]), 2) == expected, cost
    assert "21" in (run / "summary.md").read_text()
