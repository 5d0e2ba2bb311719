"""CloudWatch presets, the collector and the poller, against moto's server mode on 127.0.0.1.

boto3 talks HTTP to a real endpoint (`ThreadedMotoServer`), seeded with `put_metric_data` under the
AWS namespaces; `dbsurge collect` is run end to end on a copy of the golden run directory.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pandas as pd
import pytest
from dbsurge.collectors import cloudwatch as cw
from dbsurge.collectors.cli import collect_main
from dbsurge.collectors.cloudwatch import CloudWatchCollector, CloudWatchPoller, parse_preset
from dbsurge.collectors.cost import estimate_cost
from dbsurge.collectors.merge import stage_capacity
from dbsurge.collectors.rundata import read_cloudwatch, read_events

from dbsurge.base.errors import UserError

FIXTURE = Path(__file__).parent / "fixtures" / "run_spike"
T0 = datetime(2026, 9, 29, 8, 40, tzinfo=UTC)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    """Fake credentials and a region; nothing from the developer's own AWS setup."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_CLOUDWATCH", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)


def boto(url: str):
    return boto3.client("cloudwatch", region_name="us-east-1", endpoint_url=url)


def seed(url: str, namespace: str, metric: str, dims: dict[str, str], values: list[float], start: datetime = T0,
         maxima: list[float] | None = None) -> None:
    """One datapoint a minute from ``start``; with ``maxima``, as statistic sets (Average value, Maximum max)."""
    data = []
    for k, value in enumerate(values):
        item = {"MetricName": metric, "Dimensions": [{"Name": n, "Value": v} for n, v in dims.items()],
                "Timestamp": start + timedelta(minutes=k)}
        if maxima:
            item["StatisticValues"] = {"SampleCount": 60.0, "Sum": value * 60, "Minimum": min(value, maxima[k]),
                                       "Maximum": maxima[k]}
        else:
            item["Value"] = value
        data.append(item)
    for i in range(0, len(data), 500):
        boto(url).put_metric_data(Namespace=namespace, MetricData=data[i : i + 500])


def set_auth(url: str, count: str) -> None:
    request = urllib.request.Request(f"{url}/moto-api/reset-auth", data=count.encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(request).read()


# -- presets -----------------------------------------------------------------------------------------


def test_presets_expand_to_the_studies_metrics():
    docdb = parse_preset("docdb:ddb-1")
    assert {q.metric for q in docdb.queries} == {
        "ServerlessDatabaseCapacity", "DCUUtilization", "BufferCacheHitRatio", "DatabaseConnections",
        "CPUUtilization", "ReadIOPS",
    }
    assert docdb.namespace == "AWS/DocDB" and docdb.discover == ("DBClusterIdentifier", "DBInstanceIdentifier")

    aurora = parse_preset("aurora:a2")
    assert {q.series_id for q in aurora.queries} == {"a2", "a2/writer", "a2/reader"}
    writer = [q for q in aurora.queries if q.series_id == "a2/writer" and q.metric == "ServerlessDatabaseCapacity"]
    assert {q.stat for q in writer} == {"Average", "Maximum"}
    assert writer[0].dimensions == (("DBClusterIdentifier", "a2"), ("Role", "WRITER"))
    assert {q.metric for q in aurora.queries} >= {"ACUUtilization", "DatabaseConnections", "CPUUtilization"}
    assert {q.series_id for q in parse_preset("aurora:a2/writer").queries} == {"a2/writer"}

    dsql = parse_preset("dsql:abc123")
    assert {q.metric for q in dsql.queries} == {
        "TotalDPU", "ReadDPU", "WriteDPU", "ComputeDPU", "TotalTransactions", "OccConflicts", "CommitLatency",
    }
    assert dsql.discover == () and not dsql.queries[0].resolved

    generic = parse_preset("metric:AWS/RDS:ReadIOPS:DBInstanceIdentifier=db-1,Role=WRITER:p99:300")
    (query,) = generic.queries
    assert (query.namespace, query.metric, query.stat, query.period_s) == ("AWS/RDS", "ReadIOPS", "p99", 300)
    assert query.dimensions == (("DBInstanceIdentifier", "db-1"), ("Role", "WRITER"))
    assert generic.id == "AWS/RDS:DBInstanceIdentifier=db-1,Role=WRITER"


@pytest.mark.parametrize(
    "spec",
    ["redis:cache-1", "aurora", "aurora:", "aurora:a2/primary", "docdb:bad id", "metric:AWS/RDS",
     "metric:AWS/RDS:CPUUtilization:Foo", "metric:AWS/RDS:CPUUtilization:17", "metric:NS:M:Dim="],
)
def test_unknown_or_malformed_specs_are_one_line(spec):
    with pytest.raises(UserError) as err:
        parse_preset(spec)
    assert "\n" not in str(err.value) and spec.split(":")[0] in str(err.value)


# -- fetching ---------------------------------------------------------------------------------------


def test_fetch_returns_long_form_rows_on_period_boundaries(moto_url):
    seed(moto_url, "AWS/RDS", "ServerlessDatabaseCapacity", {"DBClusterIdentifier": "fetch-a2", "Role": "WRITER"},
         [4.0, 4.0, 21.0], maxima=[4.0, 6.0, 21.0])
    seed(moto_url, "AWS/RDS", "ServerlessDatabaseCapacity", {"DBClusterIdentifier": "fetch-a2"}, [3.0, 3.0, 12.5])
    seed(moto_url, "AWS/RDS", "CPUUtilization", {"DBClusterIdentifier": "fetch-a2", "Role": "WRITER"}, [10.0, 20.0, 90.0])
    collector = CloudWatchCollector([parse_preset("aurora:fetch-a2")], endpoint_url=moto_url)
    collector.check()
    frame = collector.fetch(T0 + timedelta(seconds=20), T0 + timedelta(minutes=2, seconds=10))
    assert list(frame.columns) == ["time_utc", "preset", "id", "metric", "stat", "value"]
    assert set(frame["preset"]) == {"aurora"} and set(frame["id"]) == {"fetch-a2", "fetch-a2/writer"}
    assert (frame["time_utc"].dt.second == 0).all()
    writer = frame[(frame["id"] == "fetch-a2/writer") & (frame["metric"] == "ServerlessDatabaseCapacity")]
    average = writer[writer["stat"] == "Average"].set_index("time_utc")["value"]
    maximum = writer[writer["stat"] == "Maximum"].set_index("time_utc")["value"]
    assert average.tolist() == [4.0, 4.0, 21.0]  # the window was widened to whole minutes
    assert maximum.tolist() == [4.0, 6.0, 21.0]
    assert average.index[0] == pd.Timestamp(T0)
    cluster = frame[(frame["id"] == "fetch-a2") & (frame["metric"] == "ServerlessDatabaseCapacity")]
    assert cluster[cluster["stat"] == "Average"]["value"].tolist() == [3.0, 3.0, 12.5]


class CountingClient:
    """A real boto3 client that remembers how many queries each get_metric_data call carried."""

    def __init__(self, client):
        self.client, self.calls = client, []

    def get_metric_data(self, **kwargs):
        self.calls.append(len(kwargs["MetricDataQueries"]))
        return self.client.get_metric_data(**kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


def test_more_than_500_queries_are_split_across_calls(moto_url):
    seed(moto_url, "Custom/Batch", "M7", {}, [1.0, 2.0])
    seed(moto_url, "Custom/Batch", "M503", {}, [5.0])
    specs = [parse_preset(f"metric:Custom/Batch:M{i}") for i in range(505)]
    client = CountingClient(boto(moto_url))
    frame = CloudWatchCollector(specs, client=client).fetch(T0, T0 + timedelta(minutes=3))
    assert client.calls == [500, 5]
    got = frame.groupby("metric")["value"].apply(list).to_dict()
    assert got == {"M7": [1.0, 2.0], "M503": [5.0]}


class PagedClient:
    """Answers get_metric_data in two pages linked by a NextToken, as CloudWatch does for big answers."""

    def __init__(self):
        self.tokens = []

    def get_metric_data(self, **kwargs):
        self.tokens.append(kwargs.get("NextToken"))
        qid = kwargs["MetricDataQueries"][0]["Id"]
        if kwargs.get("NextToken") is None:
            return {"MetricDataResults": [{"Id": qid, "Timestamps": [T0], "Values": [1.0]}], "NextToken": "page-2"}
        return {"MetricDataResults": [{"Id": qid, "Timestamps": [T0 + timedelta(minutes=1)], "Values": [2.0]}]}


def test_fetch_follows_next_token():
    client = PagedClient()
    frame = CloudWatchCollector([parse_preset("metric:Custom/Paged:M")], client=client).fetch(T0, T0 + timedelta(minutes=2))
    assert client.tokens == [None, "page-2"]
    assert frame["value"].tolist() == [1.0, 2.0]


def test_dsql_dimension_name_is_found_with_list_metrics(moto_url):
    # an unusual dimension name on purpose: the collector must look it up, not assume "ClusterId"
    seed(moto_url, "AWS/AuroraDSQL", "TotalDPU", {"ResourceKey": "dsql-xyz"}, [1200.0, 3400.0])
    seed(moto_url, "AWS/AuroraDSQL", "OccConflicts", {"ResourceKey": "dsql-xyz"}, [2.0])
    collector = CloudWatchCollector("dsql:dsql-xyz", endpoint_url=moto_url)
    (resolved,) = collector.resolve()
    assert {q.dimensions for q in resolved.queries} == {(("ResourceKey", "dsql-xyz"),)}
    frame = collector.fetch(T0, T0 + timedelta(minutes=2))
    dpu = frame[frame["metric"] == "TotalDPU"]
    assert dpu["stat"].unique().tolist() == ["Sum"] and dpu["value"].tolist() == [1200.0, 3400.0]
    assert frame[frame["metric"] == "OccConflicts"]["value"].tolist() == [2.0]


def test_docdb_id_is_a_cluster_or_an_instance(moto_url):
    seed(moto_url, "AWS/DocDB", "ServerlessDatabaseCapacity", {"DBInstanceIdentifier": "ddb-inst-1"}, [0.5, 1.6])
    seed(moto_url, "AWS/DocDB", "BufferCacheHitRatio", {"DBInstanceIdentifier": "ddb-inst-1"}, [100.0, 99.0])
    seed(moto_url, "AWS/DocDB", "ServerlessDatabaseCapacity", {"DBClusterIdentifier": "ddb-cluster"}, [8.0])
    instance = CloudWatchCollector("docdb:ddb-inst-1", endpoint_url=moto_url)
    assert instance.resolve()[0].queries[0].dimensions == (("DBInstanceIdentifier", "ddb-inst-1"),)
    frame = instance.fetch(T0, T0 + timedelta(minutes=2))
    assert frame[frame["metric"] == "BufferCacheHitRatio"]["value"].tolist() == [100.0, 99.0]
    cluster = CloudWatchCollector("docdb:ddb-cluster", endpoint_url=moto_url)
    assert cluster.resolve()[0].queries[0].dimensions == (("DBClusterIdentifier", "ddb-cluster"),)


# -- errors a user can cause --------------------------------------------------------------------------


def test_wrong_credentials_are_one_clear_line(moto_url):
    set_auth(moto_url, "0")  # from now on moto checks the keys against its IAM
    try:
        with pytest.raises(UserError) as err:
            CloudWatchCollector("aurora:a2", endpoint_url=moto_url).check()
    finally:
        set_auth(moto_url, "inf")
    message = str(err.value)
    assert "\n" not in message and "credentials" in message and "InvalidClientTokenId" in message


def test_missing_region_is_one_clear_line(monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(UserError) as err:
        CloudWatchCollector("aurora:a2").check()
    assert str(err.value) == "no AWS region for CloudWatch: pass --region or set AWS_DEFAULT_REGION"


def test_unreachable_endpoint_is_one_clear_line():
    with pytest.raises(UserError) as err:
        CloudWatchCollector("aurora:a2", endpoint_url="http://127.0.0.1:9").check()
    assert "\n" not in str(err.value) and "cannot reach http://127.0.0.1:9" in str(err.value)


def test_unknown_profile_is_one_clear_line():
    with pytest.raises(UserError) as err:
        CloudWatchCollector("aurora:a2", profile="no-such-profile").check()
    assert "\n" not in str(err.value) and "no-such-profile" in str(err.value)


# -- the poller ---------------------------------------------------------------------------------------


def test_poller_appends_new_and_changed_rows_once(moto_url, tmp_path):
    run = tmp_path / "run"
    (run / "metrics").mkdir(parents=True)
    start = T0 + timedelta(hours=1)
    seed(moto_url, "AWS/RDS", "ServerlessDatabaseCapacity", {"DBClusterIdentifier": "poll-a2"}, [4.0, 4.0], start=start)
    now = [(start + timedelta(minutes=2)).timestamp()]
    collector = CloudWatchCollector("aurora:poll-a2", endpoint_url=moto_url, clock=lambda: now[0])
    poller = CloudWatchPoller(collector, run, interval_s=60, started=start.timestamp(), margin_s=0)
    assert poller.poll_once() == 4  # Average and Maximum for two minutes
    assert poller.poll_once() == 0  # nothing new: nothing appended
    # CloudWatch fills the second minute further (its average changes) and a third minute arrives
    seed(moto_url, "AWS/RDS", "ServerlessDatabaseCapacity", {"DBClusterIdentifier": "poll-a2"}, [8.0, 21.0],
         start=start + timedelta(minutes=1))
    now[0] += 60
    assert poller.poll_once() == 4
    lines = (run / "metrics" / "cloudwatch.csv").read_text().splitlines()
    assert lines[0] == "time_utc,preset,id,metric,stat,value" and len(lines) == 9
    frame = read_cloudwatch(run)
    average = frame[frame["stat"] == "Average"]["value"].tolist()
    assert average == [4.0, 6.0, 21.0]  # the last row of a key wins
    # a new poller on the same run directory does not write what is already there
    again = CloudWatchPoller(collector, run, started=start.timestamp(), margin_s=0)
    assert again.poll_once() == 0


def test_poller_greenlet_logs_errors_and_goes_on(tmp_path):
    import gevent

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "r", "started_utc": "2026-09-29T08:40:00.000Z"}))
    from botocore.config import Config

    client = boto3.client("cloudwatch", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                          config=Config(retries={"max_attempts": 1}))
    collector = CloudWatchCollector("aurora:a2", client=client, endpoint_url="http://127.0.0.1:9")
    poller = CloudWatchPoller(collector, run, interval_s=0.05).start()
    deadline = time.monotonic() + 10
    while poller.errors < 2 and time.monotonic() < deadline:
        gevent.sleep(0.05)
    assert poller._greenlet is not None and not poller._greenlet.dead
    poller.stop(final_poll=False)
    assert poller.errors >= 2 and poller.polls == 0
    errors = [e for e in read_events(run) if e["kind"] == "error"]
    assert errors and errors[0]["source"] == "cloudwatch" and "cannot reach" in errors[0]["message"]
    assert errors[0]["time_utc"].endswith("Z")


def test_poller_reports_errors_through_the_engine_callback(tmp_path):
    seen = []
    collector = CloudWatchCollector("aurora:a2", endpoint_url="http://127.0.0.1:9", clock=lambda: 1.8e9)
    poller = CloudWatchPoller(collector, tmp_path, events=seen.append, started=1.8e9 - 60)
    assert poller.poll_once() == 0
    assert [e["kind"] for e in seen] == ["error"] and seen[0]["source"] == "cloudwatch"


# -- dbsurge collect, end to end --------------------------------------------------------------------------


def test_collect_fetches_the_run_window_and_merges(moto_url, tmp_path, capsys):
    run = tmp_path / "run_spike"
    shutil.copytree(FIXTURE, run)
    golden = read_cloudwatch(run)
    (run / "metrics" / "cloudwatch.csv").unlink()
    # seed moto with the golden capacity series, 5 minutes either side of the run
    for series_id, role in (("a2-spike/writer", "WRITER"), ("a2-spike/reader", "READER")):
        rows = golden[(golden["id"] == series_id) & (golden["metric"] == "ServerlessDatabaseCapacity")]
        average = rows[rows["stat"] == "Average"].sort_values("time_utc")
        maximum = rows[rows["stat"] == "Maximum"].sort_values("time_utc")
        seed(moto_url, "AWS/RDS", "ServerlessDatabaseCapacity", {"DBClusterIdentifier": "a2-spike", "Role": role},
             average["value"].tolist(), start=average["time_utc"].iloc[0].to_pydatetime(),
             maxima=maximum["value"].tolist())
    assert collect_main([str(run), "--endpoint-url", moto_url, "--margin", "5m"]) == 0
    out = capsys.readouterr().out
    assert "fetched 64 datapoints in 4 series" in out

    fetched = read_cloudwatch(run)
    assert fetched["time_utc"].min() == pd.Timestamp("2026-09-29T08:38:00Z")  # 08:43:07 less 5 minutes
    assert fetched["time_utc"].max() == pd.Timestamp("2026-09-29T08:53:00Z")
    merged = pd.read_csv(run / "merged.csv")
    column = "cw.aurora:a2-spike/writer.ServerlessDatabaseCapacity.Maximum"
    step = merged[merged[column] == 21.0]
    assert step["time_utc"].tolist() == ["2026-09-29T08:46:00.000Z", "2026-09-29T08:47:00.000Z"]
    assert step["stage"].tolist() == ["200%", "100%"]
    assert merged.loc[merged["time_utc"] == "2026-09-29T08:45:00.000Z", column].item() == 15.0
    capacity = stage_capacity(run).set_index("stage")
    assert capacity["a2-spike/writer ACU (max)"].to_dict() == {"20%": 15.0, "200%": 21.0, "100%": 21.0, "5%": 10.5}
    cost = estimate_cost(run)
    writer_s = 12 * 52.75 + 15 * 60 + 15 * 60 + 21 * 60 + 19 * 60 + 12 * 60 + 10.5 * 7.6
    reader_s = 4 * 52.75 + 4 * 60 + 4 * 60 + 4.5 * 60 + 4 * 60 + 4 * 60 + 4 * 7.6
    assert round(cost.total_usd, 2) == round((writer_s + reader_s) / 3600 * 0.12, 2) == 0.24
    assert cost.total_usd == pytest.approx((writer_s + reader_s) / 3600 * 0.12, abs=1e-9)
    # run again later: the same datapoints are not duplicated, the presets stay recorded once
    assert collect_main([str(run), "--endpoint-url", moto_url, "--cloudwatch", "aurora:a2-spike"]) == 0
    assert len(read_cloudwatch(run)) == len(fetched)
    assert len((run / "metrics" / "cloudwatch.csv").read_text().splitlines()) == len(fetched) + 1
    assert json.loads((run / "run.json").read_text())["cloudwatch"] == ["aurora:a2-spike"]


def test_collect_errors_are_user_errors(moto_url, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    with pytest.raises(UserError, match="unknown CloudWatch preset 'rds'"):
        collect_main([str(run), "--cloudwatch", "rds:x", "--endpoint-url", moto_url])
    with pytest.raises(UserError, match="malformed duration"):
        collect_main([str(run), "--margin", "five minutes", "--endpoint-url", moto_url])
    with pytest.raises(UserError, match="cannot reach"):
        collect_main([str(run), "--endpoint-url", "http://127.0.0.1:9"])
    with pytest.raises(UserError, match="not a run directory"):
        collect_main([str(tmp_path)])


def test_user_error_mapping_keeps_one_line():
    from botocore.exceptions import ClientError, NoCredentialsError

    expired = ClientError({"Error": {"Code": "ExpiredToken", "Message": "The security token included\nhas expired"}},
                          "GetMetricData")
    assert "\n" not in str(cw.user_error(expired)) and "ExpiredToken" in str(cw.user_error(expired))
    assert "no AWS credentials" in str(cw.user_error(NoCredentialsError()))


def test_the_standard_aws_environment_is_honoured(moto_url, monkeypatch, tmp_path):
    seed(moto_url, "AWS/RDS", "ServerlessDatabaseCapacity", {"DBClusterIdentifier": "env-a2"}, [2.0])
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    collector = CloudWatchCollector("aurora:env-a2")
    collector.check()
    assert moto_url in collector.where
    assert collector.fetch(T0, T0 + timedelta(minutes=1))["value"].tolist() == [2.0, 2.0]  # Average, Maximum
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    config = tmp_path / "aws-config"
    config.write_text(f"[profile lab]\nregion = us-east-1\nendpoint_url = {moto_url}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "lab")
    assert CloudWatchCollector("aurora:env-a2").fetch(T0, T0 + timedelta(minutes=1))["value"].tolist() == [2.0, 2.0]


def test_a_dimension_not_yet_in_cloudwatch_is_looked_up_again(moto_url):
    collector = CloudWatchCollector("dsql:dsql-late", endpoint_url=moto_url)
    assert collector.resolve()[0].queries[0].dimensions == (("ClusterId", "dsql-late"),)  # the usual name, for now
    seed(moto_url, "AWS/AuroraDSQL", "TotalDPU", {"ClusterIdentifier": "dsql-late"}, [5.0])
    assert collector.resolve()[0].queries[0].dimensions == (("ClusterIdentifier", "dsql-late"),)
