"""The Prometheus endpoint: bucket conversion, and a real Prometheus server scraping a real run.

The end-to-end test needs Debian's ``prometheus`` package (``make test`` installs it when run as
root); without it that test is skipped, with the reason.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from runs import dbsurge, explain, only_run_dir, read_csv, run_files

from dbsurge.measure.histogram import Histogram
from dbsurge.measure.recorder import Recorder
from dbsurge.ui.prometheus import BUCKETS_S, PrometheusExporter, scrape_text

REPO = Path(__file__).resolve().parent.parent


def _bucket_of(seconds: float) -> tuple[float, float]:
    """(lower, upper] bounds of the Prometheus bucket holding ``seconds``."""
    lower = 0.0
    for b in BUCKETS_S:
        if seconds <= b + 1e-12:
            return lower, b
        lower = b
    return lower, math.inf


def _quantile_from_text(text: str, metric: str, q: float) -> float:
    """Prometheus' histogram_quantile over every series of ``metric`` in exposition text (summed by le)."""
    by_le: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(metric + "_bucket{"):
            labels, value = line.rsplit(" ", 1)
            le = labels.split('le="', 1)[1].split('"', 1)[0]
            key = math.inf if le == "+Inf" else float(le)
            by_le[key] = by_le.get(key, 0.0) + float(value)
    les = sorted(by_le)
    total = by_le[math.inf]
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le in les:
        c = by_le[le]
        if c >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    raise AssertionError("no bucket")


def test_wire_cells_become_cumulative_buckets():
    rng = np.random.default_rng(7)
    values_us = np.concatenate([rng.integers(40, 900, 5000), rng.integers(1000, 40_000, 500), [70_000_000]])
    rec = Recorder()
    op = rec.op_id("read")
    fail = rec.kind_id("timeout", "boom")
    for v in values_us.tolist():
        rec.record(op, 0, 0, 0, int(v) * 1000)
    rec.record(op, 0, 0, 0, 5_000_000, kind=fail)
    rec.count(0, op, "dropped", 3)
    rec.count(0, op, "not_sent:in_flight", 2)
    rec.count(0, op, "unknown:in_flight", 4)
    payload = rec.drain()
    exp = PrometheusExporter()
    exp.observe(payload)
    text = scrape_text(exp)
    assert 'dbsurge_operations_total{operation="read",outcome="ok",stage="0"} 5501.0' in text
    assert 'dbsurge_operations_total{operation="read",outcome="timeout",stage="0"} 1.0' in text
    assert 'dbsurge_dropped_total{operation="read",stage="0"} 3.0' in text
    assert 'dbsurge_not_sent_total{operation="read",reason="in_flight",stage="0"} 2.0' in text
    assert 'dbsurge_unknown_total{operation="read",reason="in_flight",stage="0"} 4.0' in text
    assert 'dbsurge_response_seconds_bucket{le="+Inf",operation="read"} 5501.0' in text
    assert 'dbsurge_response_seconds_bucket{le="60",operation="read"} 5500.0' in text  # the 70 s one
    assert 'dbsurge_failed_response_seconds_count{operation="read"} 1.0' in text
    # each bucket holds exactly the values up to its bound (sub-millisecond bounds are exact in HdrHistogram)
    for b in (0.00005, 0.0001, 0.00025, 0.0006, 0.001, 0.01):
        expected = int((values_us <= round(b * 1e6)).sum())
        assert f'dbsurge_response_seconds_bucket{{le="{b:.6f}'.rstrip("0").rstrip(".") + f'",operation="read"}} ' \
               f'{float(expected)}' in text, b
    # the quantile Prometheus would compute lies in the bucket of the HdrHistogram's p99
    h = Histogram()
    h.record_many(values_us)
    est = _quantile_from_text(text, "dbsurge_response_seconds", 0.99)
    assert _bucket_of(est) == _bucket_of(h.percentile(99) / 1e6)


# -- a real Prometheus server ------------------------------------------------------------------------


def _free_port() -> int:
    from dbsurge.embedded.servers import free_port

    return free_port()


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _query(base: str, expr: str, at: float) -> list:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    body = _get(f"{base}/api/v1/query?{q}")
    assert body["status"] == "success", body
    return body["data"]["result"]


def _scalar(base: str, expr: str, at: float) -> float:
    result = _query(base, expr, at)
    assert len(result) == 1, f"{expr} at {at}: {result}"
    return float(result[0]["value"][1])


@pytest.fixture
def prometheus_server(tmp_path: Path):
    """A Prometheus server scraping 127.0.0.1:<port> every second; yields (base URL, scraped port)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian's prometheus package is not installed (`make test` installs it when run as root)")
    port, web_port = _free_port(), _free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: dbsurge\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    log = open(tmp_path / "prometheus.log", "w")
    proc = subprocess.Popen([binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{web_port}"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"prometheus did not start: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield base, port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_prometheus_scrapes_a_run(prometheus_server, pg_uri: str, tmp_path: Path):
    base, port = prometheus_server
    results = tmp_path / "results"
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--rate", "100",
                   "--duration", "16s", "--prometheus-port", str(port), "--quiet", "--results-dir", str(results),
                   cwd=tmp_path)
    assert proc.returncode == 0, explain(proc)
    ended = time.time()
    rows = [r for r in read_csv(only_run_dir(results) / "timeline.csv") if r["operation"] == "ALL"]
    rows = [r for r in rows if r["target_tps"] and float(r["target_tps"]) > 0]
    assert len(rows) >= 14, rows
    secs = [_epoch(r["time_utc"]) for r in rows]

    # late in the run, once the counters' series are older than the 10 s window (a series that starts
    # inside the window makes rate() low): the achieved rate over 10 s, by counter and by gauge,
    # against timeline.csv (the counters lag the seconds they count by about one report interval)
    at = secs[13] + 1.0  # the end of the run's fourteenth second
    window = [float(r["achieved_tps"]) for r, s in zip(rows, secs) if at - 11 <= s < at - 1]
    expected = sum(window) / len(window)
    assert _scalar(base, 'up{job="dbsurge"}', at) == 1.0
    by_counter = _scalar(base, 'sum(rate(dbsurge_operations_total{outcome="ok"}[10s]))', at)
    assert abs(by_counter - expected) <= 0.15 * expected, (by_counter, expected)
    # the gauge is the mean of the last complete seconds at the scrape before `at` (up to ten, so it may
    # reach back to the run's partial first second): within the range of timeline.csv's seconds up to then
    gauge = _scalar(base, "dbsurge_achieved_tps", at)
    recent = [float(r["achieved_tps"]) for r, s in zip(rows, secs) if s < at]
    assert min(recent) - 1 <= gauge <= max(recent) + 1, (gauge, recent)
    assert _scalar(base, "dbsurge_target_tps", at) == pytest.approx(100.0)

    # p99 over the last 10 s of the plan: a mixture's p99 lies between its seconds' p99s, and
    # Prometheus' estimate lies in the bucket of the true p99
    at = secs[-1] + 1.0
    p99 = _scalar(base, "histogram_quantile(0.99, sum by (le) (rate(dbsurge_response_seconds_bucket[10s])))", at)
    per_second = [float(r["p99_ms"]) / 1000 for r, s in zip(rows, secs) if at - 10 <= s < at and int(r["achieved_tps"])]
    lo, hi = _bucket_of(p99)
    assert lo <= max(per_second) * 1.001 and hi >= min(per_second), (p99, (lo, hi), per_second)

    # the whole run (the last scrape): the p99 against summary.csv, one bucket's precision
    summary = [r for r in read_csv(only_run_dir(results) / "summary.csv") if r["operation"] == "ALL"][0]
    whole = _scalar(base, "histogram_quantile(0.99, sum by (le) (last_over_time(dbsurge_response_seconds_bucket[1m])))",
                    ended)
    true_p99 = float(summary["p99_ms"]) / 1000
    i_est = BUCKETS_S.index(_bucket_of(whole)[1]) if math.isfinite(_bucket_of(whole)[1]) else len(BUCKETS_S)
    i_true = BUCKETS_S.index(_bucket_of(true_p99)[1]) if math.isfinite(_bucket_of(true_p99)[1]) else len(BUCKETS_S)
    assert abs(i_est - i_true) <= 1, (whole, true_p99)
    total_ok = _scalar(base, 'sum(last_over_time(dbsurge_operations_total{outcome="ok"}[1m]))', ended)
    assert 0.9 * int(summary["ok"]) <= total_ok <= int(summary["ok"]), (total_ok, summary["ok"])


def _fake_run():
    """Enough of a DbSurgeRun for the run-level families: a 60 s plan at 100 TPS, 5 s in."""
    from types import SimpleNamespace

    from dbsurge.plan.stage_plan import Schedule, StagePlan

    agg = SimpleNamespace(stage_names=["100tps"], recent_achieved_tps=lambda: 99.0)
    return SimpleNamespace(
        aggregator=agg, schedule=Schedule.from_plan(StagePlan.constant(100.0, 60.0)), elapsed_s=lambda: 5.0,
        environment=SimpleNamespace(runner=SimpleNamespace(user_count=4, worker_count=2)), role="master",
        has_workers=True, ending=SimpleNamespace(finished=False),
        shares={"w1": 0, "w2": 1}, clock_offsets={"w1": 0.0012, "w2": -0.0004},
        rundir=SimpleNamespace(run_id="r1"), target=SimpleNamespace(display="postgresql://u@h/db"))


def test_run_level_metrics():
    exp = PrometheusExporter(_fake_run())
    text = scrape_text(exp)
    assert "dbsurge_target_tps 100.0" in text
    assert "dbsurge_achieved_tps 99.0" in text
    assert "dbsurge_planned_arrivals_total 500.0" in text
    assert 'dbsurge_stage{index="1",stage="100tps"} 1.0' in text  # 1-based, as the console's "stage 1/1"
    assert "dbsurge_users 4.0" in text and "dbsurge_workers 2.0" in text
    assert 'dbsurge_worker_clock_offset_seconds{worker="w1"} 0.0012' in text


def test_counters_are_whole_numbers_and_every_series_starts_at_zero():
    run = _fake_run()
    run.elapsed_s = lambda: 5.0031  # 500.31 arrivals' worth of plan: arrival 500 is due, 501 are planned
    exp = PrometheusExporter(run)
    rec = Recorder()
    rec.record(rec.op_id("read"), 0, 0, 0, 1000)
    exp.observe(rec.drain())
    text = scrape_text(exp)
    assert "dbsurge_planned_arrivals_total 501.0" in text
    # nothing was retried, dropped or written off: the series are there, at 0, for a dashboard to show
    assert 'dbsurge_retries_total{operation="read",stage="100tps"} 0.0' in text
    assert 'dbsurge_dropped_total{operation="read",stage="100tps"} 0.0' in text
    for reason in ("worker_lost", "no_connect", "interrupted", "in_flight", "users_exhausted", "unaccounted"):
        assert f'dbsurge_not_sent_total{{operation="read",reason="{reason}",stage="100tps"}} 0.0' in text, reason
    for reason in ("in_flight", "interrupted"):
        assert f'dbsurge_unknown_total{{operation="read",reason="{reason}",stage="100tps"}} 0.0' in text, reason
    assert 'dbsurge_operations_total{operation="read",outcome="ok",stage="100tps"} 1.0' in text
    # after the run: the ledger's exact count, and no stage under way
    run.ending.finished, run.elapsed_s = True, lambda: 61.0
    run.aggregator.planned_arrivals = lambda: 6000
    text = scrape_text(exp)
    assert "dbsurge_planned_arrivals_total 6000.0" in text and 'dbsurge_stage{' not in text


def test_the_endpoint_outlives_the_run_by_its_grace_with_the_final_values(pg_uri: str, tmp_path: Path):
    port = _free_port()
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", pg_uri, "--shape",
           "constant", "--rate", "20", "--duration", "2s", "--workload-option", "products=300", "--no-db-sampler",
           "--prometheus-port", str(port), "--prometheus-grace", "4", "--quiet", "--results-dir", str(results)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not run_files(results, "summary.md"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        run_dir = only_run_dir(results)
        ended = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        summary = next(r for r in read_csv(run_dir / "summary.csv") if r["operation"] == "ALL")
        assert f"dbsurge_planned_arrivals_total {float(summary['planned'])}" in text, text[:3000]
        ok = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("dbsurge_operations_total{") and 'outcome="ok"' in line)
        assert ok == float(summary["ok"]), (ok, summary["ok"])
        assert proc.wait(30) == 0
        assert time.monotonic() - ended >= 2.5  # it waited for the last scrape, then went
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_grafana_dashboard_uses_only_exported_metrics():
    """deploy/grafana/dbsurge.json is JSON and every dbsurge_* name in it is a sample the exporter serves."""
    import re

    dash = json.loads((REPO / "deploy" / "grafana" / "dbsurge.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", []) if "expr" in t]
    assert len(exprs) >= 8
    used = set(re.findall(r"\bdbsurge_[a-z_]+", " ".join(exprs)))
    exp = PrometheusExporter(_fake_run())
    rec = Recorder()
    op = rec.op_id("x")
    rec.record(op, 0, 0, 0, 1000)
    rec.record(op, 0, 0, 0, 1000, kind=rec.kind_id("timeout"), retries=1)
    rec.count(0, op, "dropped")
    rec.count(0, op, "not_sent:in_flight")
    exp.observe(rec.drain())
    served = {s.name for fam in exp.registry.collect() for s in fam.samples}
    assert used <= served, used - served


def test_port_in_use_is_one_line_before_load(pg_uri: str, tmp_path: Path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--rate", "10",
                       "--duration", "2s", "--prometheus-port", str(port), "--results-dir", str(tmp_path / "r"),
                       cwd=tmp_path)
    assert proc.returncode == 2, explain(proc)
    assert f"cannot listen on 127.0.0.1:{port} for --prometheus-port" in proc.stderr, explain(proc)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # no run directory
