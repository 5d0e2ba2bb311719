"""The DynamoDB-API target against a real DynamoDB-API server (moto's, as `embedded-dynamodb` runs it).

- URIs and options: one-line errors, no credentials in the URI, the region, Alternator's defaults;
- `DynamoTarget.classify` on botocore's own exception objects;
- the ycsb workload: the load (PutItem and BatchWriteItem), reads with and without ConsistentRead, updates
  of missing records (YCSB's NOT_FOUND), all through a real boto3 client over HTTP;
- throttling for real: the embedded server's rate limit answers ProvisionedThroughputExceededException;
  the session's retries and the ``throttled`` failures add up to what the server refused;
- end to end: `dbsurge run` at a constant rate on `embedded-dynamodb` (ledger, µs latencies, run.json), a
  throttled run (its own ledger column), the ycsb-load (batched and not) and ycsb-run scenarios, and
  `dbsurge compare` of a MongoDB-wire run with a DynamoDB-API run of the same plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore import exceptions as bce
from ledger_checks import ledger
from runs import SHOWN_1, cell, dbsurge, explain, only_run_dir, read_csv, read_json, scenario_report

from dbsurge.base.errors import TargetError, WorkloadError
from dbsurge.embedded.servers import EmbeddedDynamo
from dbsurge.targets import open_target
from dbsurge.targets.dynamodb import DynamoSession, ThrottledError
from dbsurge.workloads import get_workload

RECORDS = 300


@pytest.fixture(scope="module")
def dynamo(embedded_root: Path) -> Iterator[EmbeddedDynamo]:
    """An embedded DynamoDB-API server without a rate limit, for this module."""
    server = EmbeddedDynamo(embedded_root / "dynamodb-plain", delete_on_stop=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def throttled(server_dir: Path) -> Iterator[EmbeddedDynamo]:
    """A fresh embedded DynamoDB-API server that admits 10 data-plane requests a second (no bursts).

    Far below what the tests send, so that throttling happens even when a loaded machine slows the client.
    """
    server = EmbeddedDynamo(server_dir, delete_on_stop=True, throttle_rate=10, throttle_burst=1)
    server.start()
    yield server
    server.stop()


def _client_error(code: str, status: int = 400) -> bce.ClientError:
    return bce.ClientError({"Error": {"Code": code, "Message": f"{code} message"},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "GetItem")


# ---- URIs, options, classify (no server) ------------------------------------------------------------------


def test_uris_choose_endpoint_region_and_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    amazon = open_target("dynamodb://dynamodb.eu-west-1.amazonaws.com")
    assert (amazon.flavor, amazon.region, amazon.tls) == ("dynamodb", "eu-west-1", True)
    assert amazon.endpoint_url == "https://dynamodb.eu-west-1.amazonaws.com:443"
    bare = open_target("dynamodb://", {"region": "ap-south-1", "consistent_read": "true"})
    assert bare.endpoint_url is None and bare.region == "ap-south-1" and bare.consistent_read is True
    scylla = open_target("alternator://scylla-1")
    assert (scylla.flavor, scylla.endpoint_url, scylla.tls) == ("alternator", "http://scylla-1:8000", False)
    assert open_target("alternator://scylla-1:8043", {"tls": "true"}).endpoint_url == "https://scylla-1:8043"
    local = open_target("dynamodb://127.0.0.1:8000?region=us-west-2")
    assert (local.endpoint_url, local.region) == ("http://127.0.0.1:8000", "us-west-2")
    assert open_target("dynamodb://127.0.0.1:8000", op_timeout_s=2.5).op_timeout_s == 2.5
    described = json.dumps(scylla.describe())
    assert "alternator" in described and "secret" not in described.lower()


@pytest.mark.parametrize(("uri", "options", "expected"), [
    ("dynamodb://AKIAEXAMPLE:hunter2@127.0.0.1:8000", None, "credentials do not go in the URI"),
    ("dynamodb://127.0.0.1:8000/usertable", None, "the table is a workload option"),
    ("dynamodb://", None, "no AWS region"),
    ("alternator://", None, "alternator:// needs a host"),
    ("dynamodb://127.0.0.1:8000", {"consistent_reads": "true"}, "did you mean consistent_read"),
    ("dynamodb://127.0.0.1:8000", {"throttle_retries": "-1"}, "must be at least 0"),
    ("dynamodb://127.0.0.1:8000", {"flavor": "cassandra"}, "expected dynamodb or alternator"),
    ("dynamodb://127.0.0.1:99999", None, "bad target URI"),
])
def test_bad_uris_and_options_fail_in_one_line(uri: str, options: dict | None, expected: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(TargetError) as err:
        open_target(uri, options)
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert "hunter2" not in str(err.value)


def test_classify_books_throttling_apart_from_server_errors() -> None:
    target = open_target("dynamodb://127.0.0.1:8000")
    assert target.classify(ThrottledError("ThrottlingException", 3, "slow down")) == "throttled"
    assert target.classify(_client_error("ProvisionedThroughputExceededException")) == "throttled"
    assert target.classify(_client_error("ThrottlingException")) == "throttled"
    assert target.classify(_client_error("ValidationException")) == "server:ValidationException"
    assert target.classify(_client_error("ResourceNotFoundException")) == "server:ResourceNotFoundException"
    assert target.classify(_client_error("UnrecognizedClientException")) == "connect:UnrecognizedClientException"
    # a server that answers in the XML form of AWS's query APIs: botocore's JSON parser sees the status as the code
    xml = "<ErrorResponse><Errors><Error><Code>SignatureDoesNotMatch</Code></Error></Errors></ErrorResponse>"
    refused = bce.ClientError({"Error": {"Code": "403", "Message": xml}, "ResponseMetadata": {"HTTPStatusCode": 403}},
                              "GetItem")
    assert target.classify(refused) == "connect:SignatureDoesNotMatch"
    assert target.classify(bce.EndpointConnectionError(endpoint_url="http://127.0.0.1:1")) == "connect"
    assert target.classify(bce.ConnectTimeoutError(endpoint_url="http://127.0.0.1:1")) == "connect"
    assert target.classify(bce.NoCredentialsError()) == "connect"
    assert target.classify(bce.ReadTimeoutError(endpoint_url="http://127.0.0.1:1")) == "timeout"
    assert target.classify(bce.ConnectionClosedError(endpoint_url="http://127.0.0.1:1")) == "disconnect"
    assert target.classify(TimeoutError()) == "timeout"
    assert target.classify(LookupError("ycsb read: no record user1")) == "other"


def test_ycsb_refuses_a_batch_above_dynamodbs_limit_and_mongo_options() -> None:
    target = open_target("dynamodb://127.0.0.1:8000")
    with pytest.raises(WorkloadError, match="at most 25 items"):
        get_workload("ycsb", target, {"batchsize": "100"})
    with pytest.raises(WorkloadError, match="MongoDB targets only"):
        get_workload("ycsb", target, {"readpreference": "nearest"})


# ---- against the server ------------------------------------------------------------------------------------


def _items(target, table: str) -> dict[str, dict]:
    client = target.new_client()
    items: dict[str, dict] = {}
    for page in client.get_paginator("scan").paginate(TableName=table):
        items.update({i["ycsb_key"]["S"]: {k: v["S"] for k, v in i.items()} for i in page["Items"]})
    return items


def test_load_unbatched_and_batched_write_the_same_items(dynamo: EmbeddedDynamo) -> None:
    target = open_target(dynamo.uri)
    target.check()
    single = get_workload("ycsb", target, {"recordcount": str(RECORDS), "table": "ut_single"})
    batched = get_workload("ycsb", target, {"recordcount": str(RECORDS), "table": "ut_batched", "batchsize": "25"})
    assert not single.has_data()
    assert single.load(progress=False) == RECORDS and single.last_load_inserted == RECORDS
    assert batched.load(progress=False) == RECORDS and batched.last_load_inserted == RECORDS
    one, other = _items(target, "ut_single"), _items(target, "ut_batched")
    assert one == other and len(one) == RECORDS
    assert set(one) == {single.key_for(i) for i in range(RECORDS)}
    item = one[single.key_for(7)]
    assert sorted(item) == sorted(["ycsb_key", *single.fields]) and all(len(item[f]) == 100 for f in single.fields)
    # a second load finds everything in place and writes nothing
    assert single.has_data() and single.load(progress=False) == RECORDS and single.last_load_inserted == 0


def test_operations_read_update_and_not_found(dynamo: EmbeddedDynamo) -> None:
    target = open_target(dynamo.uri, {"consistent_read": "true"})
    workload = get_workload("ycsb", target, {"recordcount": str(RECORDS), "table": "ut_ops"})
    workload.load(progress=False)
    session = target.connect()
    sent: list[dict] = []
    session.client.meta.events.register("provide-client-params.dynamodb.GetItem",
                                        lambda params, **_: sent.append(dict(params)))
    ops = workload.new_client(session, seed=5)
    for _ in range(20):
        assert ops["read"]()["ycsb_key"]["S"].startswith("user")
        assert ops["update"]() == 1
    assert sent and all(p["ConsistentRead"] is True for p in sent)
    before = _items(target, "ut_ops")
    # an update of a missing record fails as YCSB's NOT_FOUND, and creates nothing
    tiny = get_workload("ycsb", target, {"recordcount": str(RECORDS * 100), "table": "ut_ops"})
    missing = tiny.new_client(session, seed=5)
    failures = []
    for _ in range(20):
        try:
            missing["update"]()
        except LookupError as exc:
            failures.append(target.classify(exc))
    assert failures and set(failures) == {"other"}
    assert len(_items(target, "ut_ops")) == len(before) == RECORDS
    session.close()
    session.close()  # twice is fine


def test_throttling_is_retried_counted_and_booked_as_its_own_kind(throttled: EmbeddedDynamo) -> None:
    target = open_target(throttled.uri, {"throttle_retries": "2", "throttle_backoff": "5ms"})
    workload = get_workload("ycsb", target, {"recordcount": "50", "table": "ut_throttle", "batchsize": "25"})
    workload.load(progress=False)
    session = target.connect()
    assert isinstance(session, DynamoSession)
    ops = workload.new_client(session, seed=1)
    start = throttled.throttle_counts()
    kinds = []
    for _ in range(150):
        try:
            ops["read"]()
            kinds.append("ok")
        except Exception as exc:  # noqa: BLE001 - every failure is classified, as the engine does
            kinds.append(target.classify(exc))
    end = throttled.throttle_counts()
    assert set(kinds) == {"ok", "throttled"}, kinds
    refused = end["throttled"] - start["throttled"]
    # every throttled answer was either retried (counted apart) or ended the operation as "throttled"
    assert refused == session.retries + kinds.count("throttled")
    assert session.retries > 0 and kinds.count("throttled") > 0
    # and each successful read was one admitted request
    assert end["admitted"] - start["admitted"] == kinds.count("ok")


# ---- end to end --------------------------------------------------------------------------------------------


def _summary(run: Path) -> dict[str, dict]:
    return {r["operation"]: r for r in read_csv(run / "summary.csv")}


SECRET_KEY = "dbsurge-test-secret-Zq8w"  # moto accepts any key: it must still appear nowhere


def test_run_at_a_constant_rate_on_embedded_dynamodb(tmp_path: Path) -> None:
    proc = dbsurge("run", "--workload", "ycsb", "--target", "embedded-dynamodb", "--shape", "constant", "--rate", "50",
                   "--duration", "3s", "--workload-option", f"recordcount={RECORDS}", "--results-dir",
                   str(tmp_path / "results"), cwd=tmp_path, timeout=240,
                   env={"AWS_ACCESS_KEY_ID": "AKIADBSURGETEST", "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 150 and total["ok"] == 150 and total["failures"] == 0
    meta = read_json(run / "run.json")
    assert meta["target"]["kind"] == "dynamodb" and meta["target"]["endpoint_url"].startswith("http://127.0.0.1:")
    summary = _summary(run)
    assert set(summary) == {"read", "update", "ALL"}
    # microsecond resolution: the percentiles are not whole milliseconds
    values = [float(summary[op][col]) for op in ("read", "update") for col in ("p50_ms", "p99_ms")]
    assert any(abs(v - round(v)) > 0.0005 for v in values), values
    assert (run / "intervals.hlog").read_text().count("Tag=read") >= 2
    # the credentials came from the environment and went nowhere: not the run directory, not the output
    assert SECRET_KEY not in proc.stdout + proc.stderr
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET_KEY.encode() not in path.read_bytes(), path


def test_a_throttled_run_books_throttling_in_its_own_ledger_column(tmp_path: Path, throttled: EmbeddedDynamo) -> None:
    load = dbsurge("load", "--workload", "ycsb", "--target", throttled.uri, "--workload-option", "recordcount=200",
                   "--workload-option", "batchsize=25", cwd=tmp_path, timeout=120)
    assert load.returncode == 0, explain(load)
    proc = dbsurge("run", "--workload", "ycsb", "--target", throttled.uri, "--shape", "constant", "--rate", "60",
                   "--duration", "3s", "--workload-option", "recordcount=200", "--target-option", "throttle_retries=1",
                   "--quiet", "--results-dir", str(tmp_path / "results"), cwd=tmp_path, timeout=240)
    assert proc.returncode == 1, explain(proc)  # failures and no --check: Locust's --exit-code-on-error (1)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 180
    assert total["failed_throttled"] > 0 and total["failed_throttled"] == total["failures"]
    all_row = _summary(run)["ALL"]
    assert int(all_row["retries"]) > 0 and f"throttled={total['failed_throttled']}" in all_row["failed_detail"]
    assert "failed throttled" in proc.stdout and "FAILED: every arrival accounted for" in proc.stdout
    # the failed operations have their own response-time histogram
    assert float(all_row["failed_p99_ms"]) > 0


def test_ycsb_load_scenario_batched_and_not_then_ycsb_run(tmp_path: Path, dynamo: EmbeddedDynamo) -> None:
    for batch, table, calls in (("1", "ut_scen_single", RECORDS), ("25", "ut_scen_batch", RECORDS // 25)):
        proc = dbsurge("scenario", "ycsb-load", "--quick", "--target", dynamo.uri, "--records", str(RECORDS),
                       "--batch-size", batch, "--drop", "--workload-option", f"table={table}",
                       "--results-dir", str(tmp_path / f"load{batch}"), cwd=tmp_path, timeout=180)
        assert proc.returncode == 0, explain(proc)
        row = read_csv(only_run_dir(tmp_path / f"load{batch}") / "ycsb-load.csv")[0]
        assert row["inserted"] == str(RECORDS) and row["calls"] == str(calls) and row["failures"] == "0", row
    target = open_target(dynamo.uri)
    assert len(_items(target, "ut_scen_single")) == len(_items(target, "ut_scen_batch")) == RECORDS
    again = dbsurge("scenario", "ycsb-load", "--quick", "--target", dynamo.uri, "--records", str(RECORDS),
                    "--workload-option", "table=ut_scen_single", "--results-dir", str(tmp_path / "again"),
                    cwd=tmp_path, timeout=60)
    assert again.returncode == 2 and "already holds records" in again.stderr
    run = dbsurge("scenario", "ycsb-run", "--quick", "--target", dynamo.uri, "--records", str(RECORDS),
                  "--duration", "2s", "--target-tps", "40", "--workload-option", "table=ut_scen_single",
                  "--target-option", "consistent_read=true", "--results-dir", str(tmp_path / "run"),
                  cwd=tmp_path, timeout=180)
    assert run.returncode == 0, explain(run)
    run_dir = only_run_dir(tmp_path / "run")
    [row] = read_csv(run_dir / "ycsb-run.csv")
    assert int(row["operations"]) == 80 and row["failures"] == "0" and float(row["read_p99_ms"]) > 0
    assert "consistent_read=true" in row["consistency"]
    ledger(run_dir)


def test_compare_a_mongodb_wire_run_with_a_dynamodb_api_run(tmp_path: Path, mongo_uri: str,
                                                            dynamo: EmbeddedDynamo) -> None:
    results = tmp_path / "results"
    plan = ["--workload", "ycsb", "--shape", "stages", "--stages", "2s@20tps,2s@40tps", "--seed", "3", "--quiet",
            "--workload-option", f"recordcount={RECORDS}", "--workload-option", "table=ut_compare",
            "--results-dir", str(results)]
    for run_id, uri in (("mongo", mongo_uri), ("dynamo", dynamo.uri)):
        proc = dbsurge("run", *plan, "--target", uri, "--run-id", run_id, cwd=tmp_path, timeout=240)
        assert proc.returncode == 0, explain(proc)
        assert ledger(results / run_id)["planned"] == 120
    out = dbsurge("compare", str(results / "mongo"), str(results / "dynamo"), "--labels", "MongoDB,DynamoDB",
                  cwd=tmp_path, timeout=120)
    assert out.returncode == 0, explain(out)
    assert "MongoDB vs DynamoDB" in out.stdout or "DynamoDB vs MongoDB" in out.stdout
    assert "read p99 ms" in out.stdout and "update p99 ms" in out.stdout
    csvs = list(results.glob("compare-*.csv"))
    assert csvs and "DynamoDB" in csvs[0].read_text()


def test_ycsb_run_compares_eventual_and_strong_reads(tmp_path: Path, dynamo: EmbeddedDynamo) -> None:
    load = dbsurge("load", "--workload", "ycsb", "--target", dynamo.uri, "--workload-option", f"recordcount={RECORDS}",
                   "--workload-option", "table=ut_levels", "--workload-option", "batchsize=25", cwd=tmp_path,
                   timeout=120)
    assert load.returncode == 0, explain(load)
    proc = dbsurge("scenario", "ycsb-run", "--quick", "--target", dynamo.uri, "--records", str(RECORDS),
                   "--duration", "2s", "--target-tps", "30", "--consistency", "eventual,strong",
                   "--workload-option", "table=ut_levels", "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    rows = read_csv(run / "ycsb-run.csv")
    assert [r["consistency"] for r in rows] == ["EVENTUAL", "STRONG"]
    assert rows[0]["throughput_vs_first"] == "1.0" and all(int(r["operations"]) == 60 for r in rows)
    for level, expected in (("EVENTUAL", False), ("STRONG", True)):
        sub = run / "runs" / f"consistency-{level}"
        assert read_json(sub / "run.json")["target"]["consistent_read"] is expected
        assert ledger(sub)["planned"] == 60
    assert "read p99 vs EVENTUAL" in proc.stdout
    page = scenario_report(run, tmp_path)
    [(headers, shown)] = page.tables.values()
    assert headers[:4] == ["consistency", "throughput ops/s", "read p99 ms", "update p99 ms"]
    assert [r[0] for r in shown] == ["EVENTUAL", "STRONG"]
    assert [cell(r[1]) for r in shown] == pytest.approx([float(r["throughput_ops_s"]) for r in rows], abs=SHOWN_1)
    assert page.figures == ["ycsb-run"]
    assert page.links == ["runs/consistency-EVENTUAL/report.html", "runs/consistency-STRONG/report.html"]
    bad = dbsurge("scenario", "ycsb-run", "--quick", "--target", dynamo.uri, "--consistency", "ONE,QUORUM",
                  cwd=tmp_path, timeout=60)
    assert bad.returncode == 2 and "eventual, strong" in bad.stderr and "Traceback" not in bad.stderr


def test_embedded_start_status_stop_dynamodb(capsys: pytest.CaptureFixture[str]) -> None:
    from dbsurge.embedded.servers import embedded_main

    assert embedded_main(["start", "dynamodb"]) == 0
    uri = capsys.readouterr().out.strip()
    try:
        assert uri.startswith("dynamodb://127.0.0.1:")
        open_target(uri).check()
        embedded_main(["status", "dynamodb"])
        assert capsys.readouterr().out.strip() == f"dynamodb: running {uri}"
    finally:
        embedded_main(["stop", "dynamodb"])
    embedded_main(["status", "dynamodb"])
    assert capsys.readouterr().out.strip() == "dynamodb: stopped"


def test_a_local_endpoint_never_asks_the_instance_metadata_service(tmp_path: Path, dynamo: EmbeddedDynamo) -> None:
    """Without AWS credentials, a DynamoDB-API target that is not Amazon's signs with placeholder keys found
    without the network: boto3's chain used to end at the EC2 metadata service, 169.254.169.254, per user
    ("Connection pool is full, discarding connection: 169.254.169.254" in `make demo`). Run in a child process
    whose environment has no AWS variable at all (not even the suite's AWS_EC2_METADATA_DISABLED), with
    urllib3's and botocore's debug logs: no connection to that address, no look at the iam-role provider."""
    import os
    import subprocess
    import sys

    script = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stdout)\n"
        "from dbsurge.targets import open_target\n"
        "t = open_target(sys.argv[1])\n"
        "s = t.connect()\n"
        "print('chain', [p.METHOD for p in t._boto_session._session.get_component('credential_provider').providers])\n"
        "s.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = str(tmp_path)  # no ~/.aws either
    proc = subprocess.run([sys.executable, "-c", script, dynamo.uri], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    asked = [line for line in (proc.stdout + proc.stderr).splitlines()
             if "169.254.169.254" in line and ("connection" in line.lower() or "Looking for credentials via: iam-role"
                                               in line)]
    assert not asked, asked[:5]
    chain = next(line for line in proc.stdout.splitlines() if line.startswith("chain"))
    assert "iam-role" not in chain and "container-role" not in chain, chain

