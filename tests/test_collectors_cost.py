"""Cost: exact figures for known capacity series, prices files, per-stage cost, ops per dollar, the cost guard."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from dbsurge.collectors.cli import cost_main
from dbsurge.collectors.cost import CostGuard, cost_frames, estimate_cost, integrate, load_prices
from dbsurge.collectors.rundata import format_utc, normalize_cloudwatch, open_run
from runs import dbsurge

from dbsurge.base.errors import UserError

FIXTURE = Path(__file__).parent / "fixtures" / "run_spike"
T0 = datetime(2026, 9, 29, 8, 0, tzinfo=UTC)


def minutes(values: list[float], preset: str = "aurora", series_id: str = "a2/writer",
            metric: str = "ServerlessDatabaseCapacity", stat: str = "Average", start: datetime = T0) -> pd.DataFrame:
    return pd.DataFrame({
        "time_utc": [format_utc(start + timedelta(minutes=k)) for k in range(len(values))],
        "preset": preset, "id": series_id, "metric": metric, "stat": stat, "value": values,
    })


def make_run(path: Path, start: datetime, end: datetime, stages: list[tuple[str, datetime, datetime]],
             series: pd.DataFrame, **meta) -> Path:
    path.mkdir(parents=True)
    (path / "metrics").mkdir()
    (path / "run.json").write_text(json.dumps({
        "run_id": path.name, "started_utc": format_utc(start), "ended_utc": format_utc(end),
        "plan": {"stages": [{"name": n, "start_utc": format_utc(a), "end_utc": format_utc(b)} for n, a, b in stages]},
        **meta,
    }))
    series.to_csv(path / "metrics" / "cloudwatch.csv", index=False)
    return path


def test_acu_4_for_30_minutes_then_21_for_5_minutes(tmp_path):
    end = T0 + timedelta(minutes=35)
    run = make_run(tmp_path / "known", T0, end, [("steady", T0, T0 + timedelta(minutes=30)),
                                                 ("spike", T0 + timedelta(minutes=30), end)],
                   minutes([4.0] * 30 + [21.0] * 5), region="us-east-1")
    report = estimate_cost(run)
    (acu, runner) = report.items
    assert acu.unit == "ACU-hours" and acu.usage == pytest.approx(3.75, abs=1e-12)  # 4 x 0.5 h + 21 x 5/60 h
    assert acu.unit_price_usd == 0.12 and acu.cost_usd == pytest.approx(0.45, abs=1e-12)
    assert runner.cost_usd == 0 and runner.usage == pytest.approx(35 / 60)
    assert report.total_usd == pytest.approx(0.45, abs=1e-12)
    stages = report.stages.set_index("stage")["cost_usd"]
    assert stages["steady"] == pytest.approx(4 * 0.5 * 0.12) and stages["spike"] == pytest.approx(21 * 5 / 60 * 0.12)
    frame = pd.read_csv(run / "cost.csv")
    total = frame[frame["scope"] == "total"].iloc[0]
    assert total["cost_usd"] == pytest.approx(0.45) and "us-east-1 defaults as of" in total["note"]


def test_partial_periods_at_the_edges_are_prorated():
    series = normalize_cloudwatch(minutes([10.0, 20.0, 30.0]))[["time_utc", "value"]]
    start, end = T0 + timedelta(seconds=30), T0 + timedelta(minutes=2, seconds=15)
    value_s, measured = integrate(series, 60, start, end)
    assert measured == pytest.approx(30 + 60 + 15)
    assert value_s == pytest.approx(10 * 30 + 20 * 60 + 30 * 15)


def test_the_golden_spike_run_costs_what_the_hand_computation_says(tmp_path):
    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    report = estimate_cost(run, runners=["m7g.4xlarge"], storage_gb=2, io_requests=1_198_000)
    items = {item.name: item for item in report.items}
    # run 08:43:07.250-08:49:07.600: 52.75 s of the 08:43 minute ... 7.6 s of the 08:49 minute
    writer = (12 * 52.75 + 15 * 60 + 15 * 60 + 21 * 60 + 19 * 60 + 12 * 60 + 10.5 * 7.6) / 3600
    reader = (4 * 52.75 + 4 * 60 + 4 * 60 + 4.5 * 60 + 4 * 60 + 4 * 60 + 4 * 7.6) / 3600
    hours = 360.35 / 3600
    assert items["Aurora a2-spike/writer ACU-hours"].usage == pytest.approx(writer)
    assert items["Aurora a2-spike/reader ACU-hours"].usage == pytest.approx(reader)
    assert items["runner m7g.4xlarge x1"].cost_usd == pytest.approx(hours * 0.6528)
    assert items["Aurora storage 2 GB"].cost_usd == pytest.approx(2 * 0.10 * hours / 730)
    assert items["Aurora I/O"].cost_usd == pytest.approx(1.198 * 0.20)
    expected = (writer + reader) * 0.12 + hours * 0.6528 + 2 * 0.10 * hours / 730 + 1.198 * 0.20
    assert report.total_usd == pytest.approx(expected, abs=1e-9)
    assert round(report.total_usd, 2) == 0.54
    assert report.operations == 263_884 - 3  # ALL count less failures (summary.csv)
    assert report.ops_per_usd == pytest.approx(report.operations / expected)
    stages = report.stages.set_index("stage")
    assert stages.loc["200%", "operations"] == 117_588 - 3
    spike = (15 * 52.75 + 21 * 7.25 + 4 * 52.75 + 4.5 * 7.25) / 3600 * 0.12 + 60 / 3600 * 0.6528 + 2 * 0.1 * 60 / 3600 / 730
    assert stages.loc["200%", "cost_usd"] == pytest.approx(spike)
    assert stages.loc["200%", "ops_per_usd"] == pytest.approx((117_588 - 3) / spike)


def test_aurora_roles_are_billed_and_the_cluster_average_is_not(tmp_path):
    cw = pd.concat([minutes([6.0] * 10, series_id="a2"), minutes([8.0] * 10, series_id="a2/writer"),
                    minutes([4.0] * 10, series_id="a2/reader")])
    end = T0 + timedelta(minutes=10)
    run = make_run(tmp_path / "roles", T0, end, [], cw)
    names = [item.name for item in estimate_cost(run).items]
    assert names[:2] == ["Aurora a2/writer ACU-hours", "Aurora a2/reader ACU-hours"]
    assert estimate_cost(run).total_usd == pytest.approx(12 * 10 / 60 * 0.12)
    only_cluster = make_run(tmp_path / "cluster", T0, end, [], minutes([6.0] * 10, series_id="a2"))
    assert estimate_cost(only_cluster).total_usd == pytest.approx(6 * 10 / 60 * 0.12)


def test_dsql_dpus_are_summed_and_priced_per_million(tmp_path):
    cw = pd.concat([minutes([30_000.0, 50_000.0, 20_000.0], preset="dsql", series_id="abc", metric="TotalDPU", stat="Sum"),
                    minutes([9e9] * 3, preset="dsql", series_id="abc", metric="ReadDPU", stat="Sum")])
    run = make_run(tmp_path / "dsql", T0, T0 + timedelta(minutes=3), [], cw)
    (dpu, _runner) = estimate_cost(run).items
    assert (dpu.name, dpu.usage, dpu.unit) == ("DSQL abc DPUs", 100_000.0, "DPUs")
    assert dpu.cost_usd == pytest.approx(0.80)  # $8.00 per million DPUs


def test_docdb_dcu_hours_and_missing_minutes_are_reported(tmp_path):
    cw = minutes([0.5] * 10 + [10.0] * 10, preset="docdb", series_id="ddb")
    cw = cw.drop(index=[3, 4])  # two minutes CloudWatch never delivered: not filled in
    run = make_run(tmp_path / "docdb", T0, T0 + timedelta(minutes=20), [], cw)
    (dcu, _runner) = estimate_cost(run).items
    assert dcu.usage == pytest.approx((0.5 * 8 + 10 * 10) / 60)
    assert dcu.cost_usd == pytest.approx(dcu.usage * 0.0822)
    assert dcu.note == "10% of the window has no datapoint"


def test_prices_defaults_are_marked_and_dated():
    prices = load_prices()
    assert prices.region == "us-east-1" and prices.defaults
    assert prices.note.startswith("us-east-1 defaults as of 20")
    assert prices.get("aurora", "acu_hour") == 0.12 and prices.get("docdb", "dcu_hour") == 0.0822
    assert prices.get("dsql", "dpu_per_million") == 8.0 and prices.runner("c6g.4xlarge") == 0.544


def test_a_users_prices_file_adds_a_region(tmp_path):
    path = tmp_path / "seoul.toml"
    path.write_text('[regions.ap-northeast-2]\nas_of = "2026-09-29"\n[regions.ap-northeast-2.aurora]\nacu_hour = 0.20\n'
                    '[regions.ap-northeast-2.runner_hour]\n"m7g.4xlarge" = 0.19\n')
    prices = load_prices(path, "ap-northeast-2")
    assert prices.get("aurora", "acu_hour") == 0.20 and prices.runner("m7g.4xlarge") == 0.19 and not prices.defaults
    assert "ap-northeast-2 prices from" in prices.note
    fallback = load_prices(None, "eu-west-1")
    assert fallback.region == "us-east-1" and "no prices for eu-west-1" in fallback.note
    with pytest.raises(UserError, match="not found"):
        load_prices(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[regions\n")
    with pytest.raises(UserError, match="cannot be read"):
        load_prices(bad)


def test_unknown_runner_type_is_a_user_error(tmp_path):
    run = make_run(tmp_path / "r", T0, T0 + timedelta(minutes=1), [], minutes([1.0]))
    with pytest.raises(UserError, match="no runner price for 'x9.huge'"):
        estimate_cost(run, runners=["x9.huge"])
    with pytest.raises(UserError, match="bad --runner"):
        estimate_cost(run, runners=["m5.large:zero"])


def test_cost_guard_counts_unmeasured_minutes_and_trips(tmp_path):
    # 10 minutes into a run, CloudWatch has delivered 6 minutes at 4 ACU (the last 4 are late)
    run = make_run(tmp_path / "guard", T0, T0 + timedelta(hours=1), [], minutes([4.0] * 6))
    now = (T0 + timedelta(minutes=10)).timestamp()
    guard = CostGuard(0.10, run_dir=run, clock=lambda: now)
    assert guard.estimate() == pytest.approx(4 * 10 / 60 * 0.12)  # the late minutes at the highest level seen
    assert not guard.check()
    strict = CostGuard(0.10, run_dir=run, clock=lambda: now, assume_capacity={"ACU": 32})
    assert strict.estimate() == pytest.approx((4 * 6 + 32 * 4) / 60 * 0.12)
    assert strict.check() and strict.check(now - 300)  # latched
    event = strict.event()
    assert event["kind"] == "cost_cap" and event["cap_usd"] == 0.10 and event["estimate_usd"] == pytest.approx(0.304)
    assert event["time_utc"] == format_utc(now)


def test_cost_guard_before_any_datapoint_and_with_runners(tmp_path):
    run = make_run(tmp_path / "early", T0, T0 + timedelta(hours=1), [], minutes([])[:0],
                   cloudwatch=["aurora:a2"])
    now = (T0 + timedelta(minutes=30)).timestamp()
    assert CostGuard(1.0, run_dir=run, clock=lambda: now).estimate() == 0.0
    assumed = CostGuard(1.0, run_dir=run, clock=lambda: now, assume_capacity={"ACU": 10})
    assert assumed.estimate() == pytest.approx(10 * 0.5 * 0.12)
    runners = CostGuard(0.5, run_dir=run, clock=lambda: now, runners=["c6g.4xlarge:2"])
    assert runners.estimate() == pytest.approx(2 * 0.5 * 0.544) and runners.check()
    with pytest.raises(UserError, match="positive"):
        CostGuard(0, run_dir=run)


def test_cost_frames_is_pure_and_needs_a_window(tmp_path):
    run = make_run(tmp_path / "nowin", T0, T0, [], minutes([1.0]))
    info = open_run(run)
    info.started = info.ended = None
    with pytest.raises(UserError, match="no start and end time"):
        cost_frames(info, normalize_cloudwatch(None), load_prices())


def test_cost_command_prints_the_tables(tmp_path, capsys):
    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    assert cost_main([str(run), "--runner", "m7g.4xlarge", "--region", "us-east-1"]) == 0
    out = capsys.readouterr().out
    assert "| Aurora a2-spike/writer ACU-hours | 1.5647 ACU-hours | $0.1200 | $0.1878 |" in out
    assert "| 200% | 60.0 |" in out and "Prices: us-east-1 defaults" in out
    assert (run / "cost.csv").is_file()


def test_a_fixed_size_database_is_billed_by_the_hour_and_ops_per_dollar_includes_it(tmp_path, capsys):
    """Study 002 prices Atlas and ScyllaDB Cloud clusters by the hour: a 3-node cluster for the run's window."""
    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    hours = 360.35 / 3600
    alone = estimate_cost(run, runners=["m7g.4xlarge"], write=False)
    sized = estimate_cost(run, runners=["m7g.4xlarge"], databases=["scylla-cloud-i4i.2xlarge:3"], write=False)
    items = {item.name: item for item in sized.items}
    db = items["database scylla-cloud-i4i.2xlarge x3"]
    assert db.usage == pytest.approx(3 * hours) and db.unit_price_usd == 1.56
    assert db.cost_usd == pytest.approx(3 * hours * 1.56)
    assert sized.total_usd == pytest.approx(alone.total_usd + 3 * hours * 1.56)
    assert sized.ops_per_usd == pytest.approx(sized.operations / (alone.total_usd + 3 * hours * 1.56))
    stages = sized.stages.set_index("stage")
    before = alone.stages.set_index("stage")
    assert stages.loc["200%", "cost_usd"] == pytest.approx(before.loc["200%", "cost_usd"] + 3 * 60 / 3600 * 1.56)
    # an Atlas tier is priced as a whole cluster; a price not in the file is given per hour
    atlas = estimate_cost(run, databases=["atlas-m40"], database_price="12.5", write=False)
    names = {i.name: i.cost_usd for i in atlas.items}
    assert names["database atlas-m40 x1"] == pytest.approx(hours * 1.04)
    assert names["database (--database-price)"] == pytest.approx(hours * 12.5)
    # the command keeps what it priced: a later report of the run prices the same database
    assert cost_main([str(run), "--database", "atlas-m40:2"]) == 0
    out = capsys.readouterr().out
    assert "| database atlas-m40 x2 |" in out
    assert json.loads((run / "run.json").read_text())["cost_inputs"]["database"] == ["atlas-m40:2"]
    again = estimate_cost(run, write=False)
    assert {i.name for i in again.items} >= {"database atlas-m40 x2"}
    meta = json.loads((run / "run.json").read_text())  # a hand-edited run.json: one name, not a list
    del meta["cost_inputs"]
    meta["database"] = {"name": "scylla-cloud-i4i.xlarge", "count": 6}
    (run / "run.json").write_text(json.dumps(meta))
    assert "database scylla-cloud-i4i.xlarge x6" in {i.name for i in estimate_cost(run, write=False).items}
    meta["cost_inputs"] = {"database": "atlas-m30"}
    (run / "run.json").write_text(json.dumps(meta))
    assert [i.name for i in estimate_cost(run, write=False).items if i.name.startswith("database")] == [
        "database atlas-m30 x1"]


@pytest.mark.parametrize("args, message", [
    (["--database", "no-such-db"], "no database price for 'no-such-db'"),
    (["--database", "atlas-m40:0"], "bad --database 'atlas-m40:0'"),
    (["--database", "atlas m40"], "bad --database"),
    (["--database-price", "-3"], "bad --database-price '-3'"),
    (["--database-price", "nan"], "bad --database-price 'nan'"),
])
def test_bad_database_options_are_user_errors(tmp_path, args, message):
    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    with pytest.raises(UserError, match=re.escape(message)):
        cost_main([str(run), *args])
    assert not (run / "cost.csv").exists()


def test_an_unknown_database_is_one_line_from_the_command(tmp_path):
    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    proc = dbsurge("cost", str(run), "--database", "no-such-db", cwd=tmp_path, timeout=120)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("dbsurge: no database price for 'no-such-db'") and "Traceback" not in proc.stderr


# -- cost as billed: Cost Explorer (moto's server is the endpoint) -------------------------------------------------


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """Fake credentials; nothing from the developer's own AWS setup, and no real endpoint."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_CE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def _queue_ce_results(moto_url: str, *results: dict) -> None:
    """Cost Explorer's answers, queued on the moto server through its own HTTP API (it tracks no cost itself)."""
    import urllib.request

    body = json.dumps({"results": list(results)}).encode()
    request = urllib.request.Request(f"{moto_url}/moto-api/static/ce/cost-and-usage-results", data=body,
                                     method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 201


def _group(usage_type: str, usd: float, quantity: float, unit: str) -> dict:
    return {"Keys": [usage_type], "Metrics": {"UnblendedCost": {"Amount": str(usd), "Unit": "USD"},
                                              "UsageQuantity": {"Amount": str(quantity), "Unit": unit}}}


def test_actual_charges_are_printed_beside_the_estimate_with_the_likely_causes(tmp_path, capsys, aws_env, moto_url):
    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    _queue_ce_results(moto_url, {"ResultsByTime": [{
        "TimePeriod": {"Start": "2026-09-29", "End": "2026-09-30"}, "Total": {}, "Estimated": True,
        "Groups": [_group("USE1-Aurora:ServerlessV2Usage", 0.30, 2.5, "ACU-Hr"),
                   _group("USE1-SpotUsage:m7g.4xlarge", 0.02, 0.1, "Hrs"),
                   _group("USE1-DataTransfer-Regional-Bytes", 0.05, 5.0, "GB")]}]})
    assert cost_main([str(run), "--runner", "m7g.4xlarge", "--actual", "--endpoint-url", moto_url]) == 0
    out = capsys.readouterr().out
    estimate = estimate_cost(run, write=False).total_usd
    assert ("Cost Explorer, DAILY 2026-09-29 to 2026-09-30 (end exclusive: whole UTC days, not the run's minutes), "
            "services Amazon Elastic Compute Cloud") in out
    assert "| USE1-Aurora:ServerlessV2Usage | 2.5 ACU-Hr | $0.3000 |" in out
    assert "| Total |  | $0.3700 |" in out
    assert f"Estimate ${estimate:.4f}, actual $0.3700: difference {0.37 - estimate:+.4f} USD" in out
    causes = out.split("Likely causes (study 001):")[1]
    assert "daily periods cover 24 h for a 0.10 h run" in causes
    assert "USE1-DataTransfer-Regional-Bytes $0.05" in causes and "USE1-SpotUsage" not in causes
    assert "usage after the harness's last measurement" in causes and "marks these charges estimated" in causes
    assert "billed at the Spot price" not in causes  # a charge above the estimate: not what over-prices it
    frame = pd.read_csv(run / "cost_actual.csv")
    assert list(frame["usage_type"]) == ["USE1-Aurora:ServerlessV2Usage", "USE1-DataTransfer-Regional-Bytes",
                                         "USE1-SpotUsage:m7g.4xlarge"]
    assert frame["actual_usd"].sum() == pytest.approx(0.37) and set(frame["granularity"]) == {"DAILY"}
    # the same query (moto answers it the same) with an Atlas cluster priced: the estimate is now above the charge
    assert cost_main([str(run), "--database", "atlas-m40", "--actual", "--endpoint-url", moto_url]) == 0
    causes = capsys.readouterr().out.split("Likely causes (study 001):")[1]
    assert f"${360.35 / 3600 * 1.04:.4f} of the estimate is a database billed by its vendor" in causes
    assert "billed at the Spot price" in causes and "daily periods cover" not in causes


def test_cost_explorer_periods_and_filter():
    from dbsurge.collectors.billing import build_filter, query_period

    a, b = datetime(2026, 9, 29, 8, 20, tzinfo=UTC), datetime(2026, 9, 29, 10, 20, tzinfo=UTC)
    assert query_period(a, b, "DAILY") == ("2026-09-29", "2026-09-30")
    assert query_period(a, datetime(2026, 9, 30, 0, 0, tzinfo=UTC), "DAILY") == ("2026-09-29", "2026-09-30")
    assert query_period(datetime(2026, 9, 29, 23, 50, tzinfo=UTC), datetime(2026, 9, 30, 0, 10, tzinfo=UTC),
                        "DAILY") == ("2026-09-29", "2026-10-01")
    assert query_period(a, b, "HOURLY") == ("2026-09-29T08:00:00Z", "2026-09-29T11:00:00Z")
    assert build_filter([], []) is None
    assert build_filter(["Amazon DynamoDB"], [("run", "e002")]) == {"And": [
        {"Dimensions": {"Key": "SERVICE", "Values": ["Amazon DynamoDB"]}}, {"Tags": {"Key": "run", "Values": ["e002"]}}]}


def test_cost_explorer_unreachable_or_bad_options_are_one_line(tmp_path, aws_env):
    import socket

    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    with pytest.raises(UserError, match="bad --actual-granularity 'MONTHLY'"):
        cost_main([str(run), "--actual", "--actual-granularity", "MONTHLY"])
    with pytest.raises(UserError, match="bad --actual-tag"):
        cost_main([str(run), "--actual", "--actual-tag", "novalue"])
    with pytest.raises(UserError, match="invalid Cost Explorer endpoint URL 'notaurl'"):
        cost_main([str(run), "--actual", "--endpoint-url", "notaurl"])
    assert not (run / "cost.csv").exists()  # refused before any estimate
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match="cannot reach Cost Explorer at http://127.0.0.1"):
        cost_main([str(run), "--actual", "--endpoint-url", f"http://127.0.0.1:{port}"])
