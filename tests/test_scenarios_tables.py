"""The scenarios' pure parts: option precedence, latency arithmetic and the study-shaped tables."""

from __future__ import annotations

import argparse
from datetime import UTC

import pytest

from dbsurge.base.errors import UserError
from dbsurge.scenarios import SCENARIOS, scenario_help, scenario_main
from dbsurge.scenarios.cache import cache_rows, verdict
from dbsurge.scenarios.idle import idle_rows
from dbsurge.scenarios.latency import change_pct, delta_text, summarize_ms
from dbsurge.scenarios.longscan import longscan_rows, segments, throughput
from dbsurge.scenarios.rewarm import bucket_rows, first_window_rows, run_maximum
from dbsurge.scenarios.scenario_run import apply_defaults, parse_key_values
from dbsurge.scenarios.spike import spike_rows
from dbsurge.scenarios.ycsb_load import load_row
from dbsurge.scenarios.ycsb_run import parse_workers, scale_rows, summary_numbers


def test_help_lists_every_scenario_on_one_line(capsys):
    assert scenario_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out == scenario_help() + "\n"
    for name in ("spike", "idle", "cache", "rewarm", "longscan", "ycsb-load", "ycsb-run"):
        assert name in SCENARIOS
        lines = [line for line in out.splitlines() if line.strip().startswith(name + " ")]
        assert len(lines) == 1, name


def test_unknown_scenario_is_a_user_error():
    with pytest.raises(UserError, match="unknown scenario 'nope'"):
        scenario_main(["nope"])


def test_defaults_explicit_beats_quick_beats_study():
    args = argparse.Namespace(quick=True, reads=None, idle="5s", documents=None)
    study, quick = {"reads": 1000, "idle": "20m", "documents": 2_000_000}, {"idle": "1s", "documents": 20_000}
    chosen = apply_defaults(args, study, quick)
    assert chosen == {"reads": 1000, "idle": "5s", "documents": 20_000}
    args = argparse.Namespace(quick=False, reads=None, idle=None, documents=None)
    assert apply_defaults(args, {"reads": 1000, "idle": "20m", "documents": 2}, {"idle": "1s"})["idle"] == "20m"


def test_key_values_and_worker_lists():
    assert parse_key_values(["w=1", " j = false "], "--target-option") == {"w": "1", "j": "false"}
    with pytest.raises(UserError, match="--target-option 'w'"):
        parse_key_values(["w"], "--target-option")
    assert parse_workers("1,2,4") == [1, 2, 4]
    for bad in ("0,1", "a", ""):
        with pytest.raises(UserError):
            parse_workers(bad)


def test_latency_summary_and_delta():
    s = summarize_ms([0.68] * 98 + [7.65, 29.78])
    assert s["count"] == 100 and s["p50_ms"] == pytest.approx(0.68, rel=1e-3)
    assert s["p99_ms"] == pytest.approx(7.65, rel=1e-3) and s["max_ms"] == pytest.approx(29.78, rel=1e-3)
    assert summarize_ms([])["p50_ms"] is None
    assert change_pct(0.68, 3.14) == pytest.approx(361.76, abs=0.01)
    assert delta_text(0.68, 3.14) == "+362% (4.62x)"
    assert delta_text(None, 1.0) == "-"


def test_cache_rows_and_verdict_say_what_the_numbers_say():
    warm = [0.5] * 100
    cold = [5.0] + [0.6] * 99
    rows = cache_rows(warm, cold, 0, 1, {"warm": {"hit_pct": "100.0"}, "cold": {"hit_pct": "60.5"}})
    by = {r["metric"]: r for r in rows}
    assert by["P50"]["cold"] == pytest.approx(0.6, rel=1e-3) and by["P50"]["delta_pct"] == pytest.approx(20, rel=1e-2)
    assert by["MAX"]["ratio"] == pytest.approx(10, rel=1e-2)
    assert by["first read"]["cold"] == 5.0 and by["errors"]["cold"] == 1
    assert by["server cache hit %"]["cold"] == 60.5
    assert verdict(rows).startswith("COLD was slower than WARM at every percentile: P50 0.500 -> 0.600 ms (+20%)")
    same = cache_rows(warm, [0.4] * 100, 0, 0, {})
    assert verdict(same).startswith("COLD was NOT slower than WARM at any percentile")
    mixed = cache_rows(warm, [0.4] * 99 + [9.0], 0, 0, {})
    text = verdict(mixed)
    assert "COLD was slower than WARM at MAX" in text and "NOT slower at P50" in text


def test_idle_rows_record_a_failed_connection_with_its_time():
    probes = [
        {"run": "1", "step": "connect", "index": "0", "latency_ms": "2003.5", "ok": "0",
         "error": "OperationalError: connection timeout expired"},
        {"run": "2", "step": "connect", "index": "0", "latency_ms": "3.1", "ok": "1", "error": ""},
        {"run": "2", "step": "first_query", "index": "0", "latency_ms": "1.5", "ok": "1", "error": ""},
    ] + [{"run": "2", "step": "lookup", "index": str(k), "latency_ms": str(0.1 * k), "ok": "1", "error": ""}
         for k in range(1, 21)]
    rows = idle_rows(probes)
    assert rows[0]["first_connection_ms"] == 2003.5 and rows[0]["first_query_ms"] is None
    assert rows[0]["result"].startswith("connection failed after 2.0 s: OperationalError")
    assert rows[1]["result"] == "success" and rows[1]["next_count"] == 20
    assert rows[1]["next_p50_ms"] == pytest.approx(1.0, rel=1e-3)


def test_rewarm_buckets_first_window_and_maximum():
    trace = [{"t_since_start_s": str(t / 10), "client": str(t % 2), "id": str(t), "latency_ms": str(100.0 if t == 1
                                                                                                    else 1.0),
              "ok": "1"} for t in range(40)]
    buckets = bucket_rows(trace, 2.0, 4.0)
    assert [b["count"] for b in buckets] == [20, 20]
    assert buckets[0]["max_ms"] == pytest.approx(100.0, rel=1e-3) and buckets[1]["p50_ms"] == pytest.approx(1.0)
    first = first_window_rows(trace, 1.0)
    assert len(first) == 10 and first[1]["latency_ms"] == 100.0
    assert run_maximum(trace)["t_since_start_s"] == pytest.approx(0.1)


def test_longscan_segments_and_change():
    batches = [{"batch": i, "documents": 10, "elapsed_ms": 10.0 if i < 10 else 20.0} for i in range(30)]
    parts = segments(batches, 10)
    assert [b["batch"] for b in parts["middle"]] == list(range(10, 20))
    assert throughput(parts["first"]) == pytest.approx(1000.0)
    rows = {r["metric"]: r for r in longscan_rows(batches, 0.5, 10, "", "")}
    assert rows["last 10 batches"]["value"] == pytest.approx(500.0)
    assert rows["last 10 batches"]["change_pct"] == pytest.approx(-50.0)
    assert rows["capacity at start"]["value"] == ""
    assert len(segments(batches[:5], 10)["first"]) == 5


def test_spike_rows_from_stages_csv_leave_capacity_blank():
    stages = []
    for name, tps in (("20%", 200), ("200%", 2000)):
        stages.append({"stage": name, "operation": "ALL", "target_tps": str(tps), "achieved_tps": str(tps * 0.98),
                       "failures": "0", "failure_rate": "0.0", "count": "10"})
        for op, p95 in (("order_create", 29.2), ("product_lookup", 2.0)):
            stages.append({"stage": name, "operation": op, "p95_ms": str(p95), "p99_ms": str(p95 * 2), "count": "5"})
    rows = spike_rows(stages, {})
    assert [r["stage"] for r in rows] == ["20%", "200%"]
    assert rows[1]["arrival_rate_tps"] == 2000 and rows[1]["successful_tps"] == pytest.approx(1960)
    assert rows[0]["order_create_p99_ms"] == pytest.approx(58.4) and rows[0]["max_capacity"] == ""
    assert spike_rows(stages, {"200%": "a2/writer ACU 21"})[1]["max_capacity"] == "a2/writer ACU 21"


def test_ycsb_load_row_and_scalability_against_the_ideal_line():
    inserts = [{"records": "100", "t_since_start_s": str(i * 0.1), "latency_ms": "50", "ok": "1"} for i in range(10)]
    row = load_row(inserts, 1000, 2, 100)
    assert row["inserted"] == 1000 and row["seconds"] == pytest.approx(0.95)
    assert row["latency_per"] == "batch of 100" and row["p50_ms"] == pytest.approx(50, rel=1e-3)
    summary = [{"operation": "ALL", "achieved_tps": "1000", "count": "1000", "failures": "0"},
               {"operation": "read", "p99_ms": "2.0"}, {"operation": "update", "p99_ms": "3.0"}]
    one = summary_numbers(summary)
    two = dict(one, throughput_ops_s=1700.0)
    rows = scale_rows([(1, 4, one), (2, 8, two)])
    assert rows[1]["ideal_ops_s"] == 2000 and rows[1]["pct_of_ideal"] == pytest.approx(85.0)
    assert rows[1]["scaling_pct"] == pytest.approx(170.0) and rows[1]["theoretical_pct"] == 200


def test_capacity_at_reads_the_period_that_holds_the_moment(tmp_path):
    from dbsurge.scenarios.capacity import capacity_at, capacity_text

    assert capacity_at(tmp_path, 0.0) == {}
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "cloudwatch.csv").write_text(
        "time_utc,preset,id,metric,stat,value\n"
        "2026-09-29T08:43:00.000Z,docdb,c1,ServerlessDatabaseCapacity,Average,0.5\n"
        "2026-09-29T08:44:00.000Z,docdb,c1,ServerlessDatabaseCapacity,Average,2\n"
        "2026-09-29T08:45:00.000Z,docdb,c1,ServerlessDatabaseCapacity,Average,9\n"
        "2026-09-29T08:45:00.000Z,docdb,c1,CPUUtilization,Average,80\n")
    from datetime import datetime

    at = datetime(2026, 9, 29, 8, 44, 30, tzinfo=UTC).timestamp()
    values = capacity_at(tmp_path, at)
    assert values == {"c1 DCU": 2.0} and capacity_text(values) == "c1 DCU 2"
    assert capacity_at(tmp_path, at + 60) == {"c1 DCU": 9.0}
    assert capacity_at(tmp_path, at + 3600) == {}
