"""End to end: every scenario with ``--quick`` against the embedded servers, checked on its run directory.

Each test runs ``dbsurge scenario ...`` as a user would (a child process) and then recomputes the
printed table from the raw data the scenario wrote, so a number in the table is a number from the
run. The idle test freezes the PostgreSQL server (SIGSTOP) between the idle wait and the new
connection; the hotspot test counts, on the server, the keys the updates actually touched.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np
import psycopg
import pytest
from runs import SHOWN_1, SHOWN_3, cell, dbsurge, explain, only_run_dir, read_csv, read_json, scenario_report

from dbsurge.scenarios.latency import summarize_ms
from dbsurge.workloads.ycsb import YcsbWorkload


def _floats(rows: list[dict], column: str) -> list[float]:
    return [float(r[column]) for r in rows if r.get(column) not in (None, "")]


def test_bad_options_fail_in_one_line_before_any_run(tmp_path, pg_uri):
    for args in (["cache", "--target", pg_uri, "--restart-target", "--quick"],
                 ["ycsb-run", "--target", pg_uri, "--scale-workers", "1,x"],
                 ["ycsb-run", "--target", pg_uri, "--scale-workers", "1,2", "--repeat", "2"],
                 ["idle", "--target", pg_uri, "--idle", "soon"],
                 ["spike", "--target", pg_uri, "--baseline-tps", "-5"],
                 ["nosuch"]):
        proc = dbsurge("scenario", *args, cwd=tmp_path, timeout=60)
        assert proc.returncode == 2, explain(proc)
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("dbsurge: "), proc.stderr
        assert not (tmp_path / "results").exists()


def test_spike_prints_the_study_table_from_stages_csv(tmp_path, pg_uri):
    proc = dbsurge("scenario", "spike", "--quick", "--target", pg_uri, "--stage-seconds", "2", cwd=tmp_path,
                   timeout=180)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    rows = read_csv(run / "spike.csv")
    assert [r["stage"] for r in rows] == ["20%", "200%", "100%", "5%"]
    assert [float(r["arrival_rate_tps"]) for r in rows] == [20, 200, 100, 5]
    stages = read_csv(run / "stages.csv")
    for r in rows:
        by_op = {s["operation"]: s for s in stages if s["stage"] == r["stage"]}
        assert float(r["successful_tps"]) == float(by_op["ALL"]["delivered_tps"])  # completed in the stage
        assert abs(float(r["successful_tps"]) - float(r["arrival_rate_tps"])) <= 0.2 * float(r["arrival_rate_tps"])
        assert float(r["order_create_p99_ms"]) == float(by_op["order_create"]["p99_ms"])
        assert float(r["product_lookup_p95_ms"]) == float(by_op["product_lookup"]["p95_ms"])
        assert r["max_capacity"] == ""  # no collector: blank, not invented
    meta = read_json(run / "run.json")
    assert meta["scenario"] == "spike" and meta["plan"]["text"] == "2s@20%,2s@200%,2s@100%,2s@5%"
    summary = (run / "summary.md").read_text()
    assert "order creation p95 / p99 ms" in summary and "max capacity" in summary
    assert "successful TPS" in proc.stdout and "No collector attached" in proc.stdout
    # the study's table once, the engine's verdict once, one results line: no second copy of the tables
    assert proc.stdout.count("successful TPS") == 1 and proc.stdout.count("results: ") == 1, proc.stdout
    assert "Operations (" not in proc.stdout and proc.stdout.count("OK: the plan was delivered") == 1, proc.stdout
    # Once the collector has the capacity (as `dbsurge collect` writes it), --from fills the column.
    (run / "metrics").mkdir(exist_ok=True)
    lines = ["time_utc,preset,id,metric,stat,value"]
    for stage, acu in zip(meta["plan"]["stages"], (15, 21, 19, 10.5)):
        lines.append(f"{stage['start_utc']},aurora,a2/writer,ServerlessDatabaseCapacity,Maximum,{acu}")
    (run / "metrics" / "cloudwatch.csv").write_text("\n".join(lines) + "\n")
    meta["cloudwatch"] = ["aurora:a2/writer"]
    (run / "run.json").write_text(json.dumps(meta))
    again = dbsurge("scenario", "spike", "--from", str(run), cwd=tmp_path, timeout=60)
    assert again.returncode == 0, explain(again)
    filled = read_csv(run / "spike.csv")
    assert [r["max_capacity"] for r in filled] == ["a2/writer ACU 15", "a2/writer ACU 21", "a2/writer ACU 19",
                                                    "a2/writer ACU 10.5"]
    assert [r["successful_tps"] for r in filled] == [r["successful_tps"] for r in rows]
    assert "a2/writer ACU 21" in again.stdout and (run / "summary.md").read_text().count("max capacity") == 1


def test_idle_on_the_mongodb_wire_pings_at_connect_and_reads_documents(tmp_path, mongo_uri):
    """The binding's own connect timeout and first contact (pymongo connects lazily: a ping), not a branch on
    the database: the connect step is a round trip, the lookups are the documents workload's reads."""
    proc = dbsurge("scenario", "idle", "--quick", "--target", mongo_uri, "--idle", "1s", "--repeat", "1",
                   "--connect-timeout", "7s", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    probes = read_csv(run / "probes.csv")
    assert [p["step"] for p in probes] == ["connect", "first_query"] + ["lookup"] * 20 and all(p["ok"] == "1" for p in probes)
    assert float(probes[0]["latency_ms"]) > 0
    meta = read_json(run / "run.json")
    assert meta["workload"] == "documents" and meta["operation"] == "read_by_id"
    assert meta["target"]["connect_timeout_ms"] == 7000 and meta["target"]["server_selection_timeout_ms"] == 7000


def test_idle_quick_times_connection_first_query_and_twenty_more(tmp_path, pg_uri):
    # the embedded server trusts 127.0.0.1, so a password in the URI is ignored by it: it must not be written
    with_password = pg_uri.replace("postgres@", "postgres:s3cret-pw@")
    proc = dbsurge("scenario", "idle", "--quick", "--target", with_password, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    probes = read_csv(run / "probes.csv")
    table = read_csv(run / "idle.csv")
    assert [r["run"] for r in table] == ["1", "2"]
    # what the check negotiated, kept when the scenario reopened the target with its own connect timeout
    negotiated = read_json(run / "run.json")["negotiated"]
    assert negotiated["server_version"] and negotiated["tls"]["in_use"] is False and "s3cret-pw" not in str(negotiated)
    for r in table:
        mine = [p for p in probes if p["run"] == r["run"]]
        assert [p["step"] for p in mine] == ["connect", "first_query"] + ["lookup"] * 20
        assert r["result"] == "success"
        assert float(r["first_connection_ms"]) == float(mine[0]["latency_ms"]) > 0
        assert float(r["first_query_ms"]) == float(mine[1]["latency_ms"])
        p50 = summarize_ms(_floats(mine[2:], "latency_ms"))["p50_ms"]
        assert float(r["next_p50_ms"]) == pytest.approx(p50)
    # report.html holds the same table (rebuilt the same by `dbsurge report`) and the probes' figure
    page = scenario_report(run, tmp_path)
    [(headers, rows)] = page.tables.values()
    assert headers == ["run", "first connection", "first query", "p50 of next 20", "result"]
    assert [r[0] for r in rows] == [r["run"] for r in table] and [r[4] for r in rows] == ["success", "success"]
    for shown, r in zip(rows, table):
        for text, column in zip(shown[1:4], ("first_connection_ms", "first_query_ms", "next_p50_ms")):
            assert cell(text) == pytest.approx(float(r[column]), abs=SHOWN_3)
    assert page.figures == ["idle-probes"]
    meta = read_json(run / "run.json")
    assert meta["operation"] == "product_lookup" and meta["target"]["connect_timeout_s"] == 15
    for path in run.iterdir():
        if path.is_file():
            assert "s3cret-pw" not in path.read_text(), path
    assert "s3cret-pw" not in proc.stdout + proc.stderr


def _lines(proc: subprocess.Popen) -> queue.Queue:
    out: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            out.put(line)
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _wait_for(lines: queue.Queue, text: str, seen: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"never saw {text!r}; output so far:\n{''.join(seen)}")


def test_idle_against_a_frozen_server_records_the_timeout_and_goes_on(tmp_path, pg_server):
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "scenario", "idle", "--quick", "--target", pg_server.uri,
           "--idle", "2s", "--connect-timeout", "2", "--repeat", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    paused_at = None
    try:
        lines = _lines(proc)
        _wait_for(lines, "run 1/2: every connection closed", seen)
        pg_server.pause()
        paused_at = time.monotonic()
        _wait_for(lines, "run 1/2: connection failed", seen, timeout=30)
        pg_server.resume()
        paused_for = time.monotonic() - paused_at
        proc.wait(timeout=60)
    finally:
        pg_server.resume()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(seen)
    assert paused_for < 15  # the timeout fired: nothing waited for the server
    run = only_run_dir(tmp_path / "results")
    probes = read_csv(run / "probes.csv")
    first = [p for p in probes if p["run"] == "1"]
    assert len(first) == 1 and first[0]["step"] == "connect" and first[0]["ok"] == "0"
    assert 1500 <= float(first[0]["latency_ms"]) <= 8000  # libpq's connect_timeout: 2 s
    assert "timeout" in first[0]["error"].lower()
    table = read_csv(run / "idle.csv")
    assert table[0]["result"].startswith("connection failed after")
    assert float(table[0]["first_connection_ms"]) == float(first[0]["latency_ms"])
    assert table[0]["first_query_ms"] == ""
    assert table[1]["result"] == "success"  # the next run went on, against the resumed server
    assert "failed after" in (run / "summary.md").read_text()


def test_cache_restart_makes_the_cold_snapshot_cold_and_says_so(tmp_path):
    # data larger than shared_buffers (20 MB of documents, 16 MB of buffers)
    proc = dbsurge("scenario", "cache", "--quick", "--target", "embedded-postgres", "--restart-target",
                   "--embedded-shared-buffers", "16MB", "--documents", "60000", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    snaps = read_csv(run / "snapshots.csv")
    warm = [r for r in snaps if r["snapshot"] == "warm"]
    cold = [r for r in snaps if r["snapshot"] == "cold"]
    assert len(warm) == len(cold) == 1000
    assert [r["id"] for r in warm] == [r["id"] for r in cold]  # the same ids in the same order
    assert len({r["id"] for r in warm}) == 1000
    table = {r["metric"]: r for r in read_csv(run / "cache.csv")}
    sw, sc = summarize_ms(_floats(warm, "latency_ms")), summarize_ms(_floats(cold, "latency_ms"))
    for metric, key in (("P50", "p50_ms"), ("P95", "p95_ms"), ("P99", "p99_ms"), ("MAX", "max_ms")):
        assert float(table[metric]["warm"]) == pytest.approx(sw[key])
        assert float(table[metric]["cold"]) == pytest.approx(sc[key])
        delta = (sc[key] - sw[key]) / sw[key] * 100
        assert float(table[metric]["delta_pct"]) == pytest.approx(delta, abs=0.01)
    assert table["errors"]["warm"] == table["errors"]["cold"] == "0"
    page = scenario_report(run, tmp_path)
    [(headers, shown)] = page.tables.values()
    assert headers == ["", "WARM", "COLD", "delta"] and [r[0] for r in shown] == list(table)
    for r in shown[:7]:  # the percentiles, the first read and the first 10 reads: ms, and the change in %
        assert cell(r[1]) == pytest.approx(float(table[r[0]]["warm"]), abs=SHOWN_3)
        assert cell(r[2]) == pytest.approx(float(table[r[0]]["cold"]), abs=SHOWN_3)
        assert r[3].startswith(f"{float(table[r[0]]['delta_pct']):+.0f}%")
    assert page.figures == ["cache-percentiles", "cache-reads"]
    # The server says its own cache was empty for the cold snapshot...
    assert float(table["server cache hit %"]["cold"]) < float(table["server cache hit %"]["warm"])
    # ...and with the server's files evicted from the OS page cache too, cold reads go to storage: slower.
    meta = read_json(run / "run.json")
    assert meta["cold_start"]["os_cache_evicted_bytes"] > 20 * 2**20
    assert sc["p50_ms"] > sw["p50_ms"], (sw, sc)
    # the output states the comparison, in words and with the numbers
    summary = (run / "summary.md").read_text()
    sentence = next(line for line in summary.splitlines() if line.startswith("- COLD was"))
    assert sentence.startswith("- COLD was slower than WARM at") and "NOT slower at P50" not in sentence
    assert f"P50 {sw['p50_ms']:.3f} -> {sc['p50_ms']:.3f} ms" in sentence
    assert "evicted from the operating system's page cache" in summary
    assert meta["embedded"] == {"kind": "postgres", "own_server": True, "shared_buffers": "16MB"}
    assert meta["cold_start"]["restart"] is True and meta["cold_start"]["idle_s"] == 0


def test_rewarm_traces_every_read_and_buckets_them(tmp_path, mongo_uri):
    proc = dbsurge("scenario", "rewarm", "--quick", "--target", mongo_uri, "--duration", "2s", cwd=tmp_path,
                   timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    trace = read_csv(run / "trace.csv")
    assert len(trace) == 5 * 20 * 2  # clients x rate x seconds, every read traced
    assert {int(r["id"]) for r in trace} <= set(range(100))
    assert all(r["ok"] == "1" for r in trace)
    buckets = read_csv(run / "rewarm.csv")
    assert [int(b["count"]) for b in buckets] == [100, 100]
    in_first = [r for r in trace if float(r["t_since_start_s"]) < 1.0]
    assert float(buckets[0]["p50_ms"]) == pytest.approx(summarize_ms(_floats(in_first, "latency_ms"))["p50_ms"])
    first = read_csv(run / "rewarm-first-window.csv")
    assert len(first) == len(in_first) == 100
    page = scenario_report(run, tmp_path)
    (headers, shown), (_, traced) = page.tables.values()
    assert headers[:5] == ["bucket", "time window", "reads", "failures", "P50"]
    assert [r[2] for r in shown] == [b["count"] for b in buckets]
    assert [cell(r[4]) for r in shown] == pytest.approx([float(b["p50_ms"]) for b in buckets], abs=SHOWN_3)
    assert [cell(r[6]) for r in shown] == pytest.approx([float(b["p99_ms"]) for b in buckets], abs=SHOWN_3)
    assert [cell(r[3]) for r in traced] == pytest.approx([float(r["latency_ms"]) for r in first], abs=SHOWN_3)
    assert page.figures == ["rewarm-buckets", "rewarm-first-window"]
    top = max(trace, key=lambda r: float(r["latency_ms"]))
    assert f"Maximum of the run: {float(top['latency_ms']):.3f} ms at t={float(top['t_since_start_s']):.3f}s" \
        in proc.stdout


@pytest.mark.parametrize("server", ["pg_uri", "mongo_uri"])
def test_longscan_times_the_scan_batch_by_batch(tmp_path, server, request):
    uri = request.getfixturevalue(server)
    proc = dbsurge("scenario", "longscan", "--quick", "--target", uri, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    batches = read_csv(run / "batches.csv")
    assert len(batches) == 40 and sum(int(b["documents"]) for b in batches) == 200  # 1% of 20,000, 5 a batch
    rows = {r["metric"]: r for r in read_csv(run / "longscan.csv")}
    assert rows["batches"]["value"] == "40"

    def tp(part):
        return sum(int(b["documents"]) for b in part) / (sum(float(b["elapsed_ms"]) for b in part) / 1000)

    first, middle, last = tp(batches[:10]), tp(batches[15:25]), tp(batches[30:])
    assert float(rows["first 10 batches"]["value"]) == pytest.approx(first, rel=1e-6)
    assert float(rows["middle 10 batches"]["value"]) == pytest.approx(middle, rel=1e-6)
    assert float(rows["last 10 batches"]["change_pct"]) == pytest.approx((last - first) / first * 100, rel=1e-6)
    assert float(rows["query time"]["value"]) >= sum(float(b["elapsed_ms"]) for b in batches) / 1000 * 0.99
    assert rows["capacity at start"]["value"] == rows["capacity at end"]["value"] == ""
    page = scenario_report(run, tmp_path)
    [(_, shown)] = page.tables.values()
    by = {r[0]: r for r in shown}
    assert list(by) == list(rows) and by["batches"][1] == "40"
    for name in ("first 10 batches", "middle 10 batches", "last 10 batches"):
        assert cell(by[name][1]) == pytest.approx(float(rows[name]["value"]), abs=SHOWN_1)
    assert by["last 10 batches"][2] == f"{float(rows['last 10 batches']['change_pct']):+.1f}% vs first"
    assert page.figures == ["longscan-batches"]


def _docdb_minutes(moto_url: str, cluster: str, monkeypatch, tmp_path) -> tuple[dict, dict]:
    """Seed a DocumentDB cluster's capacity (0.5, 1.5, ... DCU, one a minute around now) and hit ratio."""
    import boto3

    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    minutes = {now + timedelta(minutes=m): 0.5 + m + 3 for m in range(-3, 3)}
    cw = boto3.client("cloudwatch", region_name="us-east-1", endpoint_url=moto_url)
    dims = [{"Name": "DBClusterIdentifier", "Value": cluster}]
    cw.put_metric_data(Namespace="AWS/DocDB", MetricData=[
        {"MetricName": name, "Dimensions": dims, "Timestamp": t, "Value": v if name != "BufferCacheHitRatio" else 100.0}
        for t, v in minutes.items() for name in ("ServerlessDatabaseCapacity", "BufferCacheHitRatio")])
    return env, minutes


def _minute_value(minutes: dict, at: str) -> float:
    return minutes[datetime.fromisoformat(at).replace(second=0, microsecond=0)]


def test_longscan_with_a_collector_gives_capacity_at_start_and_end(tmp_path, pg_uri, moto_url, monkeypatch):
    env, minutes = _docdb_minutes(moto_url, "scan1", monkeypatch, tmp_path)
    proc = dbsurge("scenario", "longscan", "--quick", "--target", pg_uri, "--cloudwatch", "docdb:scan1",
                   "--cloudwatch-endpoint-url", moto_url, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    query = read_json(run / "run.json")["query"]
    rows = {r["metric"]: r for r in read_csv(run / "longscan.csv")}
    assert rows["capacity at start"]["value"] == f"scan1 DCU {_minute_value(minutes, query['started_utc']):g}"
    assert rows["capacity at end"]["value"] == f"scan1 DCU {_minute_value(minutes, query['ended_utc']):g}"
    assert (run / "metrics" / "cloudwatch.csv").is_file()


def test_cache_with_a_collector_puts_capacity_and_hit_ratio_beside_each_snapshot(tmp_path, pg_uri, moto_url,
                                                                                monkeypatch):
    env, minutes = _docdb_minutes(moto_url, "cache1", monkeypatch, tmp_path)
    proc = dbsurge("scenario", "cache", "--quick", "--target", pg_uri, "--warm-duration", "1s", "--reads", "200",
                   "--idle", "0s", "--cloudwatch", "docdb:cache1", "--cloudwatch-endpoint-url", moto_url,
                   cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    times = read_json(run / "run.json")["snapshot_times"]
    table = {r["metric"]: r for r in read_csv(run / "cache.csv")}
    for snap in ("warm", "cold"):
        dcu = _minute_value(minutes, times[snap]["started_utc"])
        assert table["capacity (CloudWatch)"][snap] == f"cache1 DCU {dcu:g}"
        assert table["BufferCacheHitRatio (CloudWatch)"][snap] == "cache1 100%"
    assert "BufferCacheHitRatio (CloudWatch)" in proc.stdout


def test_ycsb_load_inserts_the_workloads_own_records(tmp_path, pg_uri):
    proc = dbsurge("scenario", "ycsb-load", "--quick", "--target", pg_uri, "--workload-option", "table=ut_scen_load",
                   "--drop", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    inserts = read_csv(run / "inserts.csv")
    assert len(inserts) == 2000 and all(r["ok"] == "1" for r in inserts)
    assert sorted(int(r["first_record"]) for r in inserts) == list(range(2000))
    row = read_csv(run / "ycsb-load.csv")[0]
    assert row["inserted"] == "2000" and row["latency_per"] == "insert" and row["clients"] == "4"
    assert float(row["p99_ms"]) == pytest.approx(summarize_ms(_floats(inserts, "latency_ms"))["p99_ms"])
    assert "p50 ms per insert" in proc.stdout
    page = scenario_report(run, tmp_path)
    [(headers, [shown])] = page.tables.values()
    assert headers[:5] == ["records", "clients", "batch size", "seconds", "inserts/s"]
    assert shown[:3] == ["2,000", "4", "1"] and cell(shown[4]) == pytest.approx(float(row["inserts_per_s"]), abs=SHOWN_1)
    assert cell(shown[6]) == pytest.approx(float(row["p99_ms"]), abs=SHOWN_3)
    assert page.figures == ["ycsb-load-throughput", "ycsb-load-latency"]
    # the same rows `dbsurge load` would write
    from dbsurge.targets import open_target
    from dbsurge.workloads import get_workload

    target = open_target(pg_uri)
    ref = get_workload("ycsb", target, {"recordcount": "2000", "table": "ut_scen_ref"})
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("drop table if exists ut_scen_ref")
        ref.load(progress=False)
        mine = conn.execute("select * from ut_scen_load order by ycsb_key").fetchall()
        theirs = conn.execute("select * from ut_scen_ref order by ycsb_key").fetchall()
        assert mine == theirs and len(mine) == 2000
    # a second load into the same table is refused, in one line, unless --drop
    again = dbsurge("scenario", "ycsb-load", "--quick", "--target", pg_uri, "--workload-option",
                    "table=ut_scen_load", cwd=tmp_path, timeout=60)
    assert again.returncode == 2 and "already holds records" in again.stderr


def test_a_killed_ycsb_load_reports_what_it_inserted(tmp_path, pg_uri):
    """SIGTERM in the middle of the load phase: the command said "nothing was sent (exit 143)" while its
    inserts.csv held 16,000 inserts. Now: the table of what was inserted, run.json interrupted, exit 143."""
    import signal

    from faults import start_run

    proc = start_run(["scenario", "ycsb-load", "--target", pg_uri, "--records", "5000000", "--clients", "2",
                      "--workload-option", "table=ut_scen_killed", "--drop", "--results-dir", "results"], tmp_path)
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            files = list((tmp_path / "results").glob("*/inserts.csv"))
            if files and files[0].read_text().count("\n") > 200:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = proc.output()
    assert code == 143, proc.explain()
    assert "nothing was sent" not in err and "Traceback" not in out + err, proc.explain()
    assert "interrupted after its load began" in err, err
    run = only_run_dir(tmp_path / "results")
    inserted = [r for r in read_csv(run / "inserts.csv") if r["ok"] == "1"]
    assert len(inserted) > 200
    row = read_csv(run / "ycsb-load.csv")[0]
    assert int(row["inserted"]) == len(inserted), row
    meta = read_json(run / "run.json")
    assert meta["interrupted"]["signal"] == "SIGTERM" and meta["exit_code"] == 143 and meta["complete"] is False


def test_ycsb_load_batched_on_mongo_reports_per_batch(tmp_path, mongo_uri):
    proc = dbsurge("scenario", "ycsb-load", "--quick", "--target", mongo_uri, "--batch-size", "100", "--drop",
                   "--workload-option", "table=ut_scen_batched", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    assert len(read_csv(run / "inserts.csv")) == 20
    row = read_csv(run / "ycsb-load.csv")[0]
    assert row["latency_per"] == "batch of 100" and row["inserted"] == "2000" and row["calls"] == "20"
    assert "p99 ms per batch of 100" in proc.stdout


HOT_LOG = """
create table if not exists ycsb_key_log (k text);
delete from ycsb_key_log;
create or replace function ycsb_log_key() returns trigger language plpgsql as
  $$ begin insert into ycsb_key_log values (new.ycsb_key); return new; end $$;
create or replace trigger ut_scen_hot_log after update on ut_scen_hot for each row execute function ycsb_log_key();
"""


def test_ycsb_run_hotspot_sends_the_configured_share_to_the_hot_keys(tmp_path, pg_uri):
    load = dbsurge("scenario", "ycsb-load", "--quick", "--target", pg_uri, "--workload-option", "table=ut_scen_hot",
                   "--drop", "--results-dir", "loads", cwd=tmp_path, timeout=120)
    assert load.returncode == 0, explain(load)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for statement in HOT_LOG.split(";\n"):
            if statement.strip():
                conn.execute(statement)
    trace = tmp_path / "keys"
    proc = dbsurge("scenario", "ycsb-run", "--quick", "--target", pg_uri, "--distribution", "hotspot",
                   "--target-tps", "300", "--workload-option", "table=ut_scen_hot",
                   "--workload-option", f"tracekeys={trace}", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        keys = [row[0] for row in conn.execute("select k from ycsb_key_log")]
        conn.execute("drop trigger ut_scen_hot_log on ut_scen_hot")
    # The study's hotspot: 1.3% of the 2,000 records (26) get 95% of the operations.
    workload = YcsbWorkload(SimpleNamespace(kind="postgres"), {"recordcount": "2000"})
    hot = {workload.key_for(i) for i in range(26)}
    assert len(keys) > 400  # about half of 4 s x 300 operations are updates
    share = sum(k in hot for k in keys) / len(keys)
    assert share == pytest.approx(0.95, abs=0.04), share
    # every key requested, reads included, as the workload drew them (record numbers; hot: 0..25)
    requested = np.concatenate([np.fromfile(f, dtype=np.int64) for f in tmp_path.glob("keys-*.bin")])
    assert len(requested) >= 1000  # 4 s x 300 operations
    assert float(np.mean(requested < 26)) == pytest.approx(0.95, abs=0.03)
    meta = read_json(run / "run.json")
    assert float(meta["workload_options"]["hotspotdatafraction"]) == 0.013
    row = read_csv(run / "ycsb-run.csv")[0]
    summary = {r["operation"]: r for r in read_csv(run / "summary.csv")}
    assert float(row["throughput_ops_s"]) == float(summary["ALL"]["achieved_tps"])
    assert abs(float(row["throughput_ops_s"]) - 300) <= 15
    assert float(row["read_p99_ms"]) == float(summary["read"]["p99_ms"])
    assert float(row["update_p99_ms"]) == float(summary["update"]["p99_ms"])
    assert row["failures"] == "0" and row["distribution"] == "hotspot"
    # the engine's report with the study's table and figure above its own sections
    page = scenario_report(run, tmp_path)
    [(headers, [shown])] = page.tables.values()
    assert headers[:5] == ["distribution", "target TPS", "throughput ops/s", "read p99 ms", "update p99 ms"]
    assert shown[0] == "hotspot" and cell(shown[2]) == pytest.approx(float(row["throughput_ops_s"]), abs=SHOWN_1)
    assert cell(shown[3]) == pytest.approx(float(row["read_p99_ms"]), abs=SHOWN_3)
    assert page.figures == ["ycsb-run"]
    html = (run / "report.html").read_text()
    assert html.index('id="scenario"') < html.index("<h2>Operations</h2>") < html.index("<h2>Timeline</h2>")


def test_ycsb_run_repeat_writes_each_repetition_and_the_spread(tmp_path, mongo_uri):
    proc = dbsurge("scenario", "ycsb-run", "--quick", "--target", mongo_uri, "--duration", "1s", "--target-tps",
                   "50", "--repeat", "2", "--run-id", "rep", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, explain(proc)
    parent = tmp_path / "results" / "rep"
    spread = read_csv(parent / "repetitions.csv")
    assert {r["n"] for r in spread if r["operation"] == "ALL"} == {"2"}
    for i in ("1", "2"):
        meta = read_json(parent / i / "run.json")
        assert meta["scenario"] == "ycsb-run" and meta["distribution"] == "uniform", meta
        [row] = read_csv(parent / i / "ycsb-run.csv")
        assert float(row["throughput_ops_s"]) > 0, row
    # the spread once (from dbsurge run --repeat), then the study's table of each repetition
    assert proc.stdout.count("Repetitions (2 runs") == 1 and proc.stdout.count("YCSB workload A") == 2, proc.stdout


def test_ycsb_run_scalability_against_the_ideal_line(tmp_path, mongo_uri):
    proc = dbsurge("scenario", "ycsb-run", "--quick", "--target", mongo_uri, "--scale-workers", "1,2",
                   "--duration", "3s", "--target-option", "w=1", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    rows = read_csv(run / "ycsb-run.csv")
    assert [r["workers"] for r in rows] == ["1", "2"] and [r["users"] for r in rows] == ["4", "8"]
    one = float(rows[0]["throughput_ops_s"])
    assert one > 0
    assert float(rows[1]["ideal_ops_s"]) == pytest.approx(2 * one)
    assert float(rows[1]["pct_of_ideal"]) == pytest.approx(100 * float(rows[1]["throughput_ops_s"]) / (2 * one),
                                                           rel=1e-4)
    for r in rows:
        sub = run / "runs" / f"workers-{r['workers']}"
        summary = {s["operation"]: s for s in read_csv(sub / "summary.csv")}
        assert float(r["throughput_ops_s"]) == float(summary["ALL"]["achieved_tps"])
        assert json.loads((sub / "run.json").read_text())["workers"] == int(r["workers"])
    meta = read_json(run / "run.json")
    assert meta["mode"] == "scale" and meta["consistency"] == {"w": "1"}
    assert "% of ideal" in proc.stdout
    # compare and report read it: both failed "run.json is damaged: workers is [1, 2], not a count"
    compared = dbsurge("compare", str(run), str(run), "--labels", "a,b", cwd=tmp_path, timeout=120)
    assert compared.returncode == 0 and "% of ideal" in compared.stdout, explain(compared)
    reported = dbsurge("report", str(run), cwd=tmp_path, timeout=120)
    assert reported.returncode == 0 and "damaged" not in reported.stderr, explain(reported)
    page = scenario_report(run, tmp_path)
    [(headers, shown)] = page.tables.values()
    assert headers[:5] == ["workers", "clients", "throughput ops/s", "ideal ops/s", "% of ideal"]
    assert [r[0] for r in shown] == ["1", "2"]
    assert [cell(r[2]) for r in shown] == pytest.approx([float(r["throughput_ops_s"]) for r in rows], abs=SHOWN_1)
    assert [cell(r[3]) for r in shown] == pytest.approx([float(r["ideal_ops_s"]) for r in rows], abs=SHOWN_1)
    assert page.figures == ["ycsb-run-scale"]
    assert page.links == ["runs/workers-1/report.html", "runs/workers-2/report.html"]
    assert all((run / link).is_file() for link in page.links)
