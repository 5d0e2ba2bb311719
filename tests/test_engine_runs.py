"""End to end: real `dbsurge run` / `locust` processes against the embedded servers.

These are the acceptance checks of the arrival-rate engine: stage rates within 1% of the plan
with 1 and 2 worker processes, exact stage boundaries, counts and merged percentiles across
workers equal to all samples together, and an honest summary when the plan is beyond reach.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest
from runs import REPO, dbsurge, explain, locust, only_run_dir, read_csv, read_json

from dbsurge.embedded.servers import free_port
from dbsurge.measure.histogram import Histogram


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("processes, stage_seconds", [(1, 3), (2, 3)])
def test_spike_plan_rates_within_one_percent(tmp_path, pg_uri, processes, stage_seconds):
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "spike", "--baseline-tps", "200",
                   "--stage-seconds", str(stage_seconds), "--processes", str(processes), "--quiet",
                   "--workload-option", "products=2000", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    stages = [r for r in read_csv(run / "stages.csv") if r["operation"] == "ALL"]
    assert [r["stage"] for r in stages] == ["20%", "200%", "100%", "5%"]
    for r, target in zip(stages, [40, 400, 200, 10]):
        assert float(r["target_tps"]) == pytest.approx(target)
        assert abs(float(r["achieved_tps"]) - target) <= 0.01 * target, r
        assert int(r["failures"]) == 0
    # boundaries exact to the millisecond: consecutive, each exactly stage_seconds long
    for a, b in zip(stages, stages[1:]):
        assert a["end_utc"] == b["start_utc"]
    for r in stages:
        assert _ts(r["end_utc"]) - _ts(r["start_utc"]) == pytest.approx(stage_seconds, abs=0.001)
    meta = read_json(run / "run.json")
    assert meta["results"]["operations"] == meta["results"]["planned_operations"] == stage_seconds * 650
    assert meta["results"]["dropped"] == 0
    # the table is printed at the end of a headless run
    assert "successful TPS" in proc.stdout and "200%" in proc.stdout


def test_two_processes_merge_counts_and_percentiles(tmp_path, mongo_uri):
    raw = tmp_path / "raw"
    raw.mkdir()
    proc = dbsurge("run", "--workload", "ycsb", "--target", mongo_uri, "--users", "6", "--duration", "5s",
                   "--processes", "2", "--quiet", "--workload-option", "recordcount=500", cwd=tmp_path,
                   env={"DBSURGE_RAW_SAMPLES_DIR": str(raw)}, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    meta = read_json(run / "run.json")
    per_worker = meta["results"]["operations_per_worker"]
    assert len(per_worker) == 2 and all(n > 0 for n in per_worker.values())
    timeline = read_csv(run / "timeline.csv")
    timeline_count = sum(int(r["count"]) for r in timeline if r["operation"] != "ALL")
    assert timeline_count == sum(per_worker.values()) == meta["results"]["operations"]
    # the merged p99 is the p99 of every sample from both workers together
    files = sorted(raw.glob("samples-*.bin"))
    assert len(files) == 2
    everything = Histogram()
    everything.record_many(np.concatenate([np.fromfile(f, dtype=np.int64) for f in files]))
    summary = {r["operation"]: r for r in read_csv(run / "summary.csv")}
    assert everything.count == int(summary["ALL"]["count"]) - int(summary["ALL"]["failures"])
    for p, col in ((50, "p50_ms"), (99, "p99_ms"), (99.9, "p999_ms")):
        assert float(summary["ALL"][col]) == pytest.approx(everything.percentile(p) / 1000, abs=0.0005)
    # sub-millisecond values are printed with three decimals
    assert any(len(c.split(".")[-1]) == 3 for c in proc.stdout.split() if c.replace(".", "").isdigit())


def test_plain_locust_headless_with_processes(tmp_path, mongo_uri):
    port = str(free_port())  # never the default 5557: concurrent runs on this host must not mix workers
    proc = locust("-f", str(REPO / "locustfiles" / "ycsb.py"), "--headless", "-u", "8", "-r", "8", "-t", "5s",
                  "--target", mongo_uri, "--processes", "2", "--master-bind-port", port, "--master-port", port, "--workload-option", "recordcount=500",
                  "--results-dir", str(tmp_path / "results"), "--csv", str(tmp_path / "locust"), cwd=tmp_path,
                  timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    summary = {r["operation"]: r for r in read_csv(run / "summary.csv")}
    assert set(summary) == {"read", "update", "ALL"}
    assert int(summary["ALL"]["count"]) > 100
    assert (run / "intervals.hlog").read_text().count("Tag=read") >= 2
    # Locust's own table, fed from the workers' recorders (dbsurge.load.locust_stats), counts what dbsurge counted
    locust_rows = {r["Name"]: r for r in read_csv(tmp_path / "locust_stats.csv")}
    for op in ("read", "update", "ALL"):
        row = locust_rows["Aggregated" if op == "ALL" else op]
        assert int(row["Request Count"]) == int(summary[op]["count"]), (op, row, summary[op])
        assert int(row["Failure Count"]) == int(summary[op]["failures"]), (op, row, summary[op])
    assert float(locust_rows["Aggregated"]["Median Response Time"]) > 0


def test_plan_beyond_the_machine_states_the_shortfall(tmp_path, pg_uri):
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "stages",
                   "--stages", "2s@50tps,2s@100000tps", "--operation", "product_lookup", "--max-lag", "50ms",
                   "--users", "4", "--fail-on-lag", "--quiet", "--workload-option", "products=2000",
                   cwd=tmp_path, timeout=120)
    # the generator itself could not keep up: the measurement is incomplete (3), not the database's fault (1)
    assert proc.returncode == 3, explain(proc)
    run = only_run_dir(tmp_path / "results")
    meta = read_json(run / "run.json")
    assert meta["results"]["dropped"] > 0
    behind = " ".join(meta["results"]["behind_plan"])
    assert "100000tps" in behind and "dropped" in behind
    # the event loop stalls or the 4 users are all busy: either way the tool is the limit, never the target
    assert ("generator fell behind the plan in stage 100000tps" in proc.stdout
            or "capped by --max-users 4 in stage 100000tps" in proc.stdout)
    stages = {r["stage"]: r for r in read_csv(run / "stages.csv") if r["operation"] == "ALL"}
    assert int(stages["100000tps"]["dropped"]) > 0
    assert float(stages["100000tps"]["achieved_tps"]) < 100000
    # what was planned = sent + dropped + not sent: nothing disappears
    planned = meta["results"]["planned_operations"]
    assert planned == 100 + 200000
    assert meta["results"]["operations"] + meta["results"]["dropped"] + (meta["results"]["not_sent"] or 0) == planned


def test_check_thresholds_set_the_exit_code(tmp_path, pg_uri):
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--rate", "50",
                   "--duration", "3s", "--operation", "product_lookup", "--quiet",
                   "--check", "product_lookup.p99<10s,failure_rate<1%,p50<0.001ms",
                   "--workload-option", "products=2000", cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, explain(proc)
    assert "check FAILED: p50<0.001ms" in proc.stdout
    assert "check passed: product_lookup.p99<10s" in proc.stdout


@pytest.mark.parametrize("model", [["--shape", "constant", "--rate", "100"], ["--users", "4"]])
def test_huge_operation_weights_run_the_mix_run_json_records(tmp_path, pg_uri, model):
    """Weights of 1e308 each (run.json: equal, 50/50) summed to inf: every operation was order_create. Under a
    plan and in the closed model, both operations now run, about half each."""
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, *model, "--duration", "2s", "--quiet",
                   "--operation", "product_lookup=1e308", "--operation", "order_create=1e308",
                   "--workload-option", "products=2000", "--no-db-sampler", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    assert dict(read_json(run / "run.json")["operations"]) == {"product_lookup": 1e308, "order_create": 1e308}
    counts = {r["operation"]: int(r["count"]) for r in read_csv(run / "summary.csv") if r["operation"] != "ALL"}
    total = sum(counts.values())
    assert total >= 100, counts
    assert 0.35 < counts.get("product_lookup", 0) / total < 0.65, counts


def test_a_closed_model_run_of_transactions_ends_without_warnings(tmp_path, pg_uri):
    # every user is inside an order's transaction when the run's end stops it: psycopg's "error ignored in
    # rollback" (the rollback cannot be sent over a statement in flight) is not the user's business
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--users", "8", "--duration", "2s",
                   "--operation", "order_create", "--workload-option", "products=2000", "--no-db-sampler",
                   cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout + proc.stderr
    assert "WARNING" not in out and "error ignored" not in out, out[-3000:]
    total = next(r for r in read_csv(only_run_dir(tmp_path / "results") / "summary.csv") if r["operation"] == "ALL")
    assert int(total["ok"]) > 0 and int(total["failures"]) == 0, total


def test_no_password_in_output_or_run_directory(tmp_path, pg_uri):
    secret = "s3cret-Pw-42"
    uri = pg_uri.replace("postgres@", f"postgres:{secret}@")  # trust auth: any password is accepted
    proc = dbsurge("run", "--workload", "orders", "--target", uri, "--shape", "constant", "--rate", "20",
                   "--duration", "2s", "--workload-option", "products=2000", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    assert secret not in proc.stdout + proc.stderr
    run = only_run_dir(tmp_path / "results")
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "report.html" for p in files) and any(p.name == "run.json" for p in files)
    for p in files:
        assert secret.encode() not in p.read_bytes(), p
    assert "***" in (run / "run.json").read_text()
