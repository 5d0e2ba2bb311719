"""The console a person reads under ``dbsurge run``: stage lines, progress lines, no Locust chatter."""

from __future__ import annotations

import logging
import re

from runs import dbsurge, explain, only_run_dir, read_csv

from dbsurge.base.utc import utc_iso
from dbsurge.engine.console import Progress, ShortFormatter, stage_line
from dbsurge.plan.stage_plan import Schedule, StagePlan

START = 1_796_000_000.0  # a whole second, so each row's second is easy to read


def _row(second: int, stage: str, achieved: float, target: float, p99: float, failures: int = 0, dropped: int = 0,
         lag: float = 1.0, operation: str = "ALL") -> dict:
    return {"time_utc": utc_iso(START + second), "stage": stage, "operation": operation, "achieved_tps": achieved,
            "target_tps": target, "p99_ms": p99, "failures": failures, "dropped": dropped, "lag_p99_ms": lag}


def test_stage_line_names_the_stage_its_rate_and_when():
    plan = StagePlan.parse("20s@20%,20s@200%,10s@ramp(100%..5%)", 200)
    assert stage_line(plan, 1, START) == "stage 2/3 200%: 400 TPS from " + utc_iso(START + 20)[11:19] + "Z for 20 s"
    assert stage_line(plan, 2, START).startswith("stage 3/3 ") and ": 200→10 TPS from " in stage_line(plan, 2, START)
    assert stage_line(StagePlan.constant(50), 0, START).endswith(": 50 TPS from " + utc_iso(START)[11:19]
                                                                  + "Z until stopped")


def test_progress_line_is_the_timeline_rows_and_never_mixes_stages():
    progress = Progress(START, ["20%", "200%"], every_s=3600)  # no timed line: only the stage change makes one
    assert progress.add([_row(0, "20%", 10, 10, 2.5), _row(0, "20%", 9, 0, 9.0, operation="op")]) == []
    lines = progress.add([_row(1, "20%", 8, 10, 3.25, failures=2, dropped=1), _row(2, "200%", 100, 100, 7.0)])
    # the two 20% seconds: mean rate, the worst second's p99, failures and drops summed; ALL rows only
    assert lines == ["t=2s stage 1/2 20%: 9.0/10.0 TPS, p99 3.250 ms, lag p99 1.000 ms, 2 failed (2 in all), "
                     "1 dropped (last 2 s)"]
    progress.every_s = 0.0
    [line] = progress.add([_row(3, "200%", 98, 100, 12.0, failures=1, lag=4.5)])
    assert line.startswith("t=4s stage 2/2 200%: 99.0/100.0 TPS, p99 12.000 ms, lag p99 4.500 ms, 1 failed (3 in all)")


def test_short_format_keeps_the_level_of_warnings():
    fmt = ShortFormatter()
    info = logging.LogRecord("dbsurge", logging.INFO, __file__, 1, "probe: 1.2 ms", None, None)
    warn = logging.LogRecord("locust.runners", logging.WARNING, __file__, 1, "worker lost", None, None)
    assert re.fullmatch(r"\d\d:\d\d:\d\dZ probe: 1.2 ms", fmt.format(info))
    assert re.fullmatch(r"\d\d:\d\d:\d\dZ WARNING locust.runners: worker lost", fmt.format(warn))


LOCUST_CHATTER = ("Starting Locust", "Shutting down", "All users spawned", "Ramping to", "/INFO/locust")
LOCUST_TABLES = ("Aggregated", "Response time percentiles", "# reqs")


def _spike(tmp_path, pg_uri, *extra: str):
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "spike", "--baseline-tps", "20",
                   "--stage-seconds", "3", "--align-start", "1", "--workload-option", "products=300", "--no-db-sampler",
                   "--results-dir", str(tmp_path / "results"), *extra, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    return proc


def test_console_by_default_stage_lines_progress_and_the_tables_once(tmp_path, pg_uri):
    proc = _spike(tmp_path, pg_uri)
    out, err = proc.stdout, proc.stderr
    for text in LOCUST_CHATTER + LOCUST_TABLES:
        assert text not in out + err, (text, explain(proc))
    stage_lines = re.findall(r"^\d\d:\d\d:\d\dZ (stage \d/4 \S+): \d+ TPS from \d\d:\d\d:\d\dZ for 3 s$", err, re.M)
    assert stage_lines == ["stage 1/4 20%", "stage 2/4 200%", "stage 3/4 100%", "stage 4/4 5%"], err
    progress = re.findall(r"^\d\d:\d\d:\d\dZ t=(\d+)s stage \d/4 \S+: ([\d.]+)/([\d.]+) TPS, p99 \d+\.\d{3} ms, "
                          r"lag p99 \d+\.\d{3} ms, (\d+) failed \(\d+ in all\), (\d+) dropped \(last \d+ s\)$",
                          err, re.M)
    assert len(progress) >= 2, err
    assert [int(p[0]) for p in progress] == sorted(int(p[0]) for p in progress)
    # the progress lines' rates are the timeline's: stages start on whole seconds (--align-start 1), so
    # the 200% stage's seconds are all 40 TPS planned
    assert any(float(p[2]) == 40.0 for p in progress), progress
    assert out.count("Operations (") == 1 and out.count("Ledger (") == 1 and out.count("results: ") == 1, out
    run = only_run_dir(tmp_path / "results")
    assert {r["stage"] for r in read_csv(run / "stages.csv")} == {"20%", "200%", "100%", "5%"}


def _constant(tmp_path, pg_uri, *extra: str):
    tmp_path.mkdir()
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--rate", "20",
                   "--duration", "2s", "--workload-option", "products=300", "--no-db-sampler",
                   "--results-dir", str(tmp_path / "results"), *extra, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    return proc


def test_console_quiet_and_verbose(tmp_path, pg_uri):
    quiet = _constant(tmp_path / "q", pg_uri, "--quiet")
    assert " t=" not in quiet.stderr and len(re.findall(r"Z stage 1/1 20tps: 20 TPS from ", quiet.stderr)) == 1
    assert quiet.stdout.count("Operations (") == 1 and "Aggregated" not in quiet.stdout + quiet.stderr
    verbose = _constant(tmp_path / "v", pg_uri, "--verbose")
    assert "Starting Locust" in verbose.stderr and "Aggregated" in verbose.stdout + verbose.stderr
    assert verbose.stdout.count("Operations (") == 1


def test_the_partial_first_second_does_not_lower_the_first_lines_rates():
    """Time zero 0.6 s into a second: that second holds 40% of a second's arrivals. The first line of a 20 TPS
    stage read "18.3/18.3 TPS"; its rates come from whole seconds."""
    progress = Progress(START + 0.6, ["20tps", "40tps"], every_s=3600)
    progress.add([_row(0, "20tps", 8, 8, 1.0), _row(1, "20tps", 20, 20, 1.0), _row(2, "20tps", 19, 20, 1.0)])
    [line] = progress.add([_row(3, "40tps", 40, 40, 1.0)])
    assert "stage 1/2 20tps: 19.5/20.0 TPS" in line and line.endswith("(last 3 s)"), line


def test_the_partial_last_second_of_the_plan_does_not_lower_the_last_lines_rates():
    """``6s@20tps,6s@60tps`` with time zero 0.3 s into a second: the last stage's last second holds 30% of a
    second's arrivals. Its line read "t=13s stage 2/2 60tps: 53.0/53.0 TPS ... (last 6 s)": rates from whole
    seconds of the plan; no second of stage 1 is in stage 2's line."""
    progress = Progress(START + 0.3, ["20tps", "60tps"], every_s=3600, stage_starts=[0.0, 6.0], plan_end_s=12.0)
    rows = [_row(k, "20tps", 20, 20, 1.0) for k in range(6)] + [_row(6, "20tps", 48, 48, 1.0)]
    rows += [_row(k, "60tps", 60, 60, 1.0) for k in range(7, 12)] + [_row(12, "60tps", 18, 18, 1.0)]
    lines = progress.add(rows) + progress.finish([])
    assert [line.split(":", 1)[0] for line in lines] == ["t=6s stage 1/2 20tps", "t=7s stage 1→2/2 20tps→60tps",
                                                         "t=13s stage 2/2 60tps"], lines
    assert "60tps: 60.0/60.0 TPS" in lines[-1] and lines[-1].endswith("(last 6 s)"), lines[-1]


def test_a_stage_of_a_fraction_of_a_second_says_how_long():
    plan = StagePlan.parse("3.5s@20tps,2s@40tps")
    assert stage_line(plan, 0, START).endswith(" for 3.5 s") and stage_line(plan, 1, START).endswith(" for 2 s")


def test_a_second_across_a_stage_boundary_is_named_by_both_stages():
    # stages at 0 s and 2.3 s: the second from 2 s to 3 s is 30% of the 20% stage and 70% of the 200% one
    progress = Progress(START, ["20%", "200%"], every_s=3600, stage_starts=[0.0, 2.3])
    assert progress.add([_row(0, "20%", 10, 10, 1.0), _row(1, "20%", 10, 10, 1.0)]) == []
    lines = progress.add([_row(2, "20%", 73, 73, 2.0), _row(3, "200%", 100, 100, 3.0)])
    assert lines == [("t=2s stage 1/2 20%: 10.0/10.0 TPS, p99 1.000 ms, lag p99 1.000 ms, 0 failed (0 in all), "
                      "0 dropped (last 2 s)"),
                     ("t=3s stage 1→2/2 20%→200%: 73.0/73.0 TPS, p99 2.000 ms, lag p99 1.000 ms, 0 failed (0 in all), "
                      "0 dropped (last 1 s)")]
    # the last stage's seconds get their line when the run ends
    [last] = progress.finish([_row(4, "200%", 100, 100, 4.0)])
    assert last.startswith("t=5s stage 2/2 200%: 100.0/100.0 TPS, p99 4.000 ms") and last.endswith("(last 2 s)")
    assert progress.finish([]) == []


def test_stages_of_the_same_name_are_told_apart_by_time():
    progress = Progress(START, ["100%", "200%", "100%"], every_s=3600, stage_starts=[0.0, 1.0, 2.0])
    lines = progress.add([_row(0, "100%", 5, 5, 1.0), _row(1, "200%", 9, 9, 1.0), _row(2, "100%", 5, 5, 1.0)])
    assert [line.split(":")[0] for line in lines] == ["t=1s stage 1/3 100%", "t=2s stage 2/3 200%"]
    assert progress.finish([])[0].startswith("t=3s stage 3/3 100%:")


def test_an_override_shows_its_own_rate_in_the_stage_and_progress_lines():
    plan = StagePlan.parse("20s@20%,20s@200%,10s@100%", 100)
    changes = [[25.0, None, 2.0]]  # plan x2 from t = 25 s, in the 200% stage
    schedule = Schedule.from_plan(plan).changed(25.0, scale=2.0)
    line = stage_line(plan, 2, START, schedule=schedule, changes=changes)
    assert line.startswith("stage 3/3 100%: 200 TPS (plan 100 TPS; override 1: plan x2) from "), line
    assert stage_line(plan, 1, START, schedule=schedule, changes=changes).startswith("stage 2/3 200%: 200 TPS from ")
    progress = Progress(START, [s.name for s in plan.stages], every_s=3600, stage_starts=list(plan.starts),
                        changes=lambda: changes)
    lines = progress.add([_row(24, "200%", 200, 200, 1.0), _row(25, "200%", 400, 400, 1.0)])
    assert lines == [("t=25s stage 2/3 200%: 200.0/200.0 TPS, p99 1.000 ms, lag p99 1.000 ms, 0 failed (0 in all), "
                      "0 dropped (last 1 s)")]
    [line] = progress.finish([])
    assert line.startswith("t=26s stage 2/3 200% under override 1: plan x2: 400.0/400.0 TPS"), line


def test_a_stage_never_reached_shows_no_latency():
    """A Stop before the last stage: its row had 0.000 ms latencies, as if measured; now a dash."""
    from dbsurge.measure.tables import stage_table

    def row(stage, op, count, p):
        return {"stage": stage, "operation": op, "target_tps": "100", "achieved_tps": "100" if count else "0",
                "count": str(count), "p95_ms": p, "p99_ms": p, "service_p99_ms": p, "failure_rate": "0",
                "lag_p99_ms": p, "dropped": "0"}

    _headers, rows = stage_table([row("100tps", "ALL", 500, "2.5"), row("100tps", "read", 500, "2.5"),
                                  row("200tps", "ALL", 0, "0"), row("200tps", "read", 0, "0")])
    assert "2.500" in rows[0][4] and rows[0][5] == "2.500"
    assert rows[1][4] == "-" and rows[1][5] == "-" and rows[1][7] == "-", rows[1]


def test_a_long_start_delay_says_when_the_load_begins(tmp_path, pg_uri):
    """A wait of 6 s before time zero (a long --start-delay or --align-start) is one line, before the wait: when the
    load begins (UTC) and in how long. It waited without a word, and looked hung."""
    proc = _constant(tmp_path / "d", pg_uri, "--quiet", "--start-delay", "6")
    lines = proc.stderr.splitlines()
    said = [i for i, line in enumerate(lines) if "load begins at" in line]
    assert len(said) == 1, proc.stderr
    assert re.search(r"load begins at \d\d:\d\d:\d\dZ, in [56] s \(--start-delay 6\)$", lines[said[0]]), lines[said[0]]
    stage = next(i for i, line in enumerate(lines) if "stage 1/1" in line)
    assert said[0] < stage  # before the wait, not when the load starts
    default = _constant(tmp_path / "n", pg_uri, "--quiet")  # the default 1 s: no line
    assert "load begins at" not in default.stderr


def test_a_failure_kind_is_shown_with_its_first_message():
    from dbsurge.engine.console import failure_line
    from dbsurge.measure.tables import failure_lines

    first = {"server:42P01": 'UndefinedTable: relation "orders" does not exist\nLINE 1: insert into orders ...',
             "timeout": "TimeoutError: " + "x" * 500}
    lines = failure_lines({"timeout": 3, "server:42P01": 30, "other": 0}, first)
    assert lines[0] == ('server:42P01: 30 failed; first: UndefinedTable: relation "orders" does not exist '
                        'LINE 1: insert into orders ...')
    assert lines[1].startswith("timeout: 3 failed; first: TimeoutError: xxx") and len(lines[1]) < 260
    assert len(lines) == 2  # a kind that never failed has no line
    assert failure_line("server:42P01", first["server:42P01"], "w1 (10.0.0.2)").startswith(
        'first failure server:42P01 from w1 (10.0.0.2): UndefinedTable: relation "orders" does not exist LINE 1')


def test_a_second_in_which_everything_failed_has_no_p99():
    progress = Progress(START, ["20tps"], every_s=3600)
    rows = [{**_row(0, "20tps", 0, 20, 0.0, failures=20), "count": 20},
            {**_row(1, "20tps", 0, 20, 0.0, failures=20), "count": 20}]
    [line] = progress.finish(rows)
    assert ", p99 -, " in line, line


def test_failures_name_their_first_message_live_at_the_end_and_in_the_files(tmp_path, pg_uri):
    """A table that does not exist: the console says why the operations fail, not only ``server:42P01=40``."""
    proc = dbsurge("run", "--workload", "ycsb", "--target", pg_uri, "--no-load", "--workload-option",
                   "table=no_such_table_h5", "--shape", "constant", "--rate", "20", "--duration", "2s",
                   "--no-db-sampler", "--results-dir", str(tmp_path / "results"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, explain(proc)
    why = 'UndefinedTable: relation "no_such_table_h5" does not exist'
    # live, once: the first failure of its kind, as pgbench prints the SQL error
    assert proc.stderr.count(f"first failure server:42P01: {why}") == 1, explain(proc)
    # at the end: the kind, its count and its first message
    assert re.search(rf"^  server:42P01: \d+ failed; first: {re.escape(why)}", proc.stdout, re.MULTILINE), proc.stdout
    run = only_run_dir(tmp_path / "results")
    assert re.search(rf"^- server:42P01: \d+ failed; first: {re.escape(why)}",
                     (run / "summary.md").read_text(), re.MULTILINE)
    assert why.replace('"', "&quot;") in (run / "report.html").read_text()
