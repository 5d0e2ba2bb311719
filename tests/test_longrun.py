"""``dbsurge scenario longrun``: windows, exact window P99s from intervals.hlog, spikes, and a short real run.

The unit tests write an interval log the way the engine does (`RunDirectory.hlog_interval` with the
engine's histograms) with known latencies, so each window's count, P99 and spike is known in
advance. The end-to-end test runs the scenario for 60 s at 200 ops/s on embedded PostgreSQL and
recomputes a window's P99 from the log with the `hdrh` package, independently of the scenario's code.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from runs import dbsurge, explain, only_run_dir, read_csv, read_json

from dbsurge.base.errors import UserError
from dbsurge.measure.histogram import Histogram
from dbsurge.rundir import RunDirectory
from dbsurge.scenarios.windows import STATE_NAME, build_windows, p99_summary, parse_windows, target_over, window_rows

BASE = 1_800_000_000.356  # the plan starts 0.356 s into an epoch second, as a real run does
OPS = ["read", "update"]


def _write_log(run: Path, seconds: range, latency_us) -> None:
    """One line per second and operation: 100 reads and 50 updates, at ``latency_us(second, op)``."""
    rd = RunDirectory(run.parent, run.name)
    try:
        for sec in seconds:
            for op, n in (("read", 100), ("update", 50)):
                h = Histogram()
                values = [latency_us(sec, op)] * (n - 1) + [latency_us(sec, op) * 2]
                h.record_many(values)
                rd.hlog_interval(op, int(BASE) + sec, 1.0, h.max_value / 1000, h.to_hdr().encode(), BASE)
    finally:
        rd.close()


def _latency(sec: int, op: str) -> int:
    """1 ms reads, 3 ms updates; the reads of seconds 30-39 (the 4th 10 s window) at 40 ms: a spike."""
    if op == "read" and 30 <= sec < 40:
        return 40_000
    return 1_000 if op == "read" else 3_000


STAGES = [{"start_s": 0.0, "duration_s": 60.0, "start_tps": 150.0, "end_tps": 150.0, "target_tps": 150.0}]


def test_windows_counts_p99s_and_spikes_of_a_known_log(tmp_path):
    run = tmp_path / "run"
    _write_log(run, range(61), _latency)  # the second the plan starts in, 59 more and the one it ends in
    hw = build_windows(run, [10.0, 30.0], 60.0, ended=True)
    rows = window_rows(hw.windows[10.0], OPS, STAGES, 3.0)
    assert [r["window"] for r in rows] == [1, 2, 3, 4, 5, 6]
    # window k holds the seconds whose middle falls in it; its span runs from its first second's start
    assert rows[0]["start_s"] == 0 and rows[1]["start_s"] == pytest.approx(9.644)
    assert rows[-1]["end_s"] == 60.0 and sum(r["seconds"] for r in rows) == pytest.approx(60.0)
    assert [r["read_count"] for r in rows] == [1000] * 5 + [1100]  # the last gets the second after the plan's end
    for r in rows[:5]:
        assert r["throughput_ops_s"] == pytest.approx(150 * 10 / r["seconds"], rel=0.05)
        assert r["target_tps"] == 150.0
    # each window's P99 is of the merge: 1 in 100 reads at twice the latency sits at the P99 rank
    assert [r["read_p99_ms"] for r in rows] == [1.0, 1.0, 1.0, 40.031, 1.0, 1.0]
    assert all(r["update_p99_ms"] == 6.003 for r in rows)  # 1 in 50 updates at 6 ms: above the P99 rank
    assert [r["read_spike"] for r in rows] == [False, False, False, True, False, False]
    assert not any(r["update_spike"] for r in rows)
    s = p99_summary(rows, "read", 3.0)
    assert (s["windows"], s["spikes"], s["median_p99_ms"]) == (6, 1, 1.0)
    assert s["avg_p99_ms"] == pytest.approx((5 * 1.0 + 40.031) / 6, abs=1e-3)

    rows30 = window_rows(hw.windows[30.0], OPS, STAGES, 3.0)
    assert len(rows30) == 2 and [r["read_count"] for r in rows30] == [3000, 3100]
    # 1,000 of the second window's 3,100 reads are at 40 ms (10 of them at 80): the P99 rank (3,069th) is at 40;
    # the median of two windows is their mean, 20.5 ms, and 40 ms is not above 3 x that
    assert [r["read_p99_ms"] for r in rows30] == [1.0, 40.031] and not any(r["read_spike"] for r in rows30)


def test_building_again_reads_only_the_new_lines_and_gives_the_same_windows(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    _write_log(whole, range(61), _latency)
    expected = window_rows(build_windows(whole, [10.0], 60.0, ended=True).windows[10.0], OPS, STAGES, 3.0)

    _write_log(parts, range(33), _latency)  # the run is still going: the newest windows stay open
    first = build_windows(parts, [10.0], 60.0, ended=False)
    assert first.lines == 66 and sorted(first.windows[10.0].open) == [2, 3]
    state = json.loads((parts / STATE_NAME).read_text())
    assert state["offset"] == (parts / "intervals.hlog").stat().st_size
    _write_log(parts, range(33, 61), _latency)
    again = build_windows(parts, [10.0], 60.0, ended=True)
    assert again.lines == 66 + 56 and not again.windows[10.0].open
    assert window_rows(again.windows[10.0], OPS, STAGES, 3.0) == expected
    # other window lengths: the saved state does not fit, the log is read again from its start
    assert build_windows(parts, [20.0], 60.0, ended=True).lines == 122


def test_a_line_being_written_is_read_by_the_next_build(tmp_path):
    run = tmp_path / "run"
    _write_log(run, range(5), _latency)
    hlog = run / "intervals.hlog"
    lines = hlog.read_text().splitlines(keepends=True)
    hlog.write_text("".join(lines[:-1]) + lines[-1][:40])  # the engine is half way through its last line
    first = build_windows(run, [10.0], 60.0, ended=False)
    assert first.lines == 9 and first.offset == hlog.stat().st_size - 40
    hlog.write_text("".join(lines))
    again = build_windows(run, [10.0], 60.0, ended=False)
    assert again.lines == 10
    assert window_rows(again.windows[10.0], OPS, STAGES, 3.0)[0]["update_count"] == 5 * 50


def test_an_interrupted_run_ends_its_last_window_where_it_stopped(tmp_path):
    run = tmp_path / "run"
    _write_log(run, range(25), _latency)
    rows = window_rows(build_windows(run, [10.0], 60.0, ended=True).windows[10.0], OPS, STAGES, 3.0, end_s=25.0)
    assert len(rows) == 3 and rows[-1]["end_s"] == 25.0
    assert rows[-1]["throughput_ops_s"] == pytest.approx(150, rel=0.1)


def test_target_over_a_ramp_and_window_parsing():
    ramp = [{"start_s": 0, "duration_s": 100, "start_tps": 0, "end_tps": 100},
            {"start_s": 100, "duration_s": 100, "start_tps": 100, "end_tps": 100}]
    assert target_over(ramp, 0, 100) == pytest.approx(50)
    assert target_over(ramp, 50, 150) == pytest.approx((75 * 50 + 100 * 50) / 100)
    assert target_over(ramp, 300, 400) is None
    assert parse_windows("1m,10m") == [60.0, 600.0] and parse_windows("10s, 10s,1h") == [10.0, 3600.0]
    for bad in ("", "0s", "1.5s", "soon", ","):
        with pytest.raises(UserError):
            parse_windows(bad)


def test_bad_options_fail_in_one_line(tmp_path, pg_uri):
    for args in (["--windows", "0s"], ["--spike-factor", "1"], ["--rate", "-1"], ["--duration", "1m", "--windows",
                 "2m"], ["--baseline", str(tmp_path / "nothing")], ["--no-such-option", "1"],
                 ["--repeat", "2"]):
        proc = dbsurge("scenario", "longrun", "--quick", "--target", pg_uri, *args, cwd=tmp_path, timeout=60)
        assert proc.returncode == 2, explain(proc)
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("dbsurge: "), proc.stderr
        assert not (tmp_path / "results").exists()


def _hdrh_p99_ms(hlog: Path, op: str, first_start: float, last_start: float) -> tuple[int, float]:
    """Count and P99 of ``op``'s lines starting in [first_start, last_start], merged by the hdrh package."""
    merged = HdrHistogram(1, 3_600_000_000, 3)
    for line in hlog.read_text().splitlines():
        if line.startswith(f"Tag={op},"):
            _tag, start, _length, _max, encoded = line.split(",")
            if first_start <= float(start) <= last_start:
                merged.add(HdrHistogram.decode(encoded))
    return merged.get_total_count(), merged.get_value_at_percentile(99.0) / 1000.0


def _read_lines(hlog: Path) -> int:
    return hlog.read_text().count("Tag=read,") if hlog.is_file() else 0


def test_a_short_long_run_on_postgres(tmp_path, pg_uri):
    base = tmp_path / "base"  # a finished shorter run: only its summary.csv is read (whole-run P99 per operation)
    base.mkdir()
    (base / "summary.csv").write_text("stage,operation,count,p99_ms\nall,read,900,10.0\nall,update,900,20.0\n"
                                      "all,ALL,1800,15.0\n")
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with open(out, "w") as fo, open(err, "w") as fe:
        child = subprocess.Popen([sys.executable, "-m", "dbsurge.commands.cli", "scenario", "longrun", "--quick", "--target",
                                  pg_uri, "--rate", "200", "--duration", "60s", "--windows", "10s,30s", "--baseline",
                                  str(base), "--run-id", "lr"], cwd=tmp_path, stdout=fo, stderr=fe, text=True)
        try:
            run = tmp_path / "results" / "lr"
            # the tables half way through the run: the windows so far, from the settings written before the engine
            deadline = time.monotonic() + 150
            while _read_lines(run / "intervals.hlog") < 27 and time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.5)
            during = dbsurge("scenario", "longrun", "--from", str(run), cwd=tmp_path, timeout=60)
            assert during.returncode == 0, explain(during)
            assert "has not ended" in during.stdout
            assert 3 <= len(read_csv(run / "longrun-windows-10s.csv")) <= 5
            assert read_json(run / STATE_NAME)["offset"] > 0
            code = child.wait(timeout=240)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert code == 0, f"exit {code}\n{out.read_text()[-3000:]}\n{err.read_text()[-3000:]}"
    assert only_run_dir(tmp_path / "results") == run  # the settings written first and the engine's files: one run
    assert read_json(run / "run.json")["longrun"]["windows"] == [10.0, 30.0]
    w10, w30 = read_csv(run / "longrun-windows-10s.csv"), read_csv(run / "longrun-windows-30s.csv")
    assert (len(w10), len(w30)) == (6, 2)
    assert float(w10[-1]["end_s"]) == pytest.approx(60.0) and float(w30[1]["start_s"]) == float(w10[3]["start_s"])
    for r in w10 + w30:
        assert float(r["target_tps"]) == 200.0
        assert abs(float(r["throughput_ops_s"]) - 200) <= 0.15 * 200, r
        assert float(r["read_p99_ms"]) > 0 and float(r["update_p99_ms"]) > 0
    # the 10 s windows hold every success the hlog has, and so do the 30 s ones
    assert sum(int(r["ok"]) for r in w10) == sum(int(r["ok"]) for r in w30)

    # window 2 (10 s): its lines are those starting from its start to the next window's start, merged
    hlog = run / "intervals.hlog"
    start, end = float(w10[1]["start_s"]), float(w10[1]["end_s"])
    for op in ("read", "update"):
        count, p99 = _hdrh_p99_ms(hlog, op, start - 0.01, end - 0.5)
        assert int(w10[1][f"{op}_count"]) == count
        assert float(w10[1][f"{op}_p99_ms"]) == pytest.approx(p99, abs=1e-6)

    # spikes: the rows flagged are those above 3 x the median window P99, and the summary counts them
    summary = {(r["window"], r["operation"]): r for r in read_csv(run / "longrun.csv")}
    spikes = read_csv(run / "longrun-spikes.csv")
    for label, rows in (("10s", w10), ("30s", w30)):
        for op in ("read", "update"):
            p99s = [float(r[f"{op}_p99_ms"]) for r in rows]
            flagged = [r["window"] for r in rows if r[f"{op}_spike"] == "1"]
            assert flagged == [r["window"] for r in rows if float(r[f"{op}_p99_ms"]) > 3 * statistics.median(p99s)]
            s = summary[(label, op)]
            assert int(s["spikes"]) == len(flagged) == sum(1 for x in spikes if (x["window"], x["operation"]) == (
                label, op))
            assert float(s["avg_p99_ms"]) == pytest.approx(statistics.fmean(p99s), abs=1e-3)
            assert float(s["median_p99_ms"]) == pytest.approx(statistics.median(p99s), abs=1e-6)
            baseline = {"read": 10.0, "update": 20.0}[op]
            assert float(s["baseline_p99_ms"]) == baseline
            assert float(s["avg_vs_baseline"]) == pytest.approx(float(s["avg_p99_ms"]) / baseline, abs=1e-3)

    # once a minute the engine samples its memory and the run directory: hour 1 of the table
    hours = read_csv(run / "longrun-hours.csv")
    assert len(hours) == 1 and int(hours[0]["samples"]) >= 1 and float(hours[0]["rss_mb_max"]) > 10
    assert "P99 per window" in (run / "summary.md").read_text()
    page = (run / "report.html").read_text()
    assert 'id="plot-windows-10s-p99"' in page and 'id="plot-windows-30s-throughput"' in page
    assert "rss_mb=" not in page  # the samples are the hours table, not rows of the page's events table
    # --from again: nothing new in the log, the same tables
    before = (run / "longrun.csv").read_text()
    again = dbsurge("scenario", "longrun", "--from", str(run), cwd=tmp_path, timeout=60)
    assert again.returncode == 0, explain(again)
    assert (run / "longrun.csv").read_text() == before
