"""The merge on UTC time: the golden run directory against its golden merged.csv, and the rules behind it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from dbsurge.collectors.merge import merge_run, stage_capacity, stage_capacity_frame
from dbsurge.collectors.rundata import Stage, normalize_cloudwatch, open_run

FIXTURES = Path(__file__).parent / "fixtures"
GOLDEN = FIXTURES / "run_spike_merged.csv"
WRITER_MAX = "cw.aurora:a2-spike/writer.ServerlessDatabaseCapacity.Maximum"


@pytest.fixture
def run(tmp_path) -> Path:
    path = tmp_path / "run_spike"
    shutil.copytree(FIXTURES / "run_spike", path)
    return path


@pytest.fixture
def merged(run) -> pd.DataFrame:
    merge_run(run)
    return pd.read_csv(run / "merged.csv")


def test_merged_csv_matches_the_golden_file(merged):
    golden = pd.read_csv(GOLDEN)
    assert list(merged.columns) == list(golden.columns)
    pd.testing.assert_frame_equal(merged, golden, check_dtype=False, rtol=1e-9)


def test_one_row_per_second_of_the_run(merged):
    times = pd.to_datetime(merged["time_utc"], utc=True)
    assert times.iloc[0] == pd.Timestamp("2026-09-29T08:43:07Z")  # floor of the start, 08:43:07.250
    assert times.iloc[-1] == pd.Timestamp("2026-09-29T08:49:07Z")  # the second holding the end, 08:49:07.600
    assert (times.diff().dropna() == pd.Timedelta(seconds=1)).all()
    assert merged["time_utc"].str.endswith("Z").all()


def test_plan_stage_and_target_rate_per_second(merged):
    by_time = merged.set_index("time_utc")
    assert by_time.loc["2026-09-29T08:45:07.000Z", "stage"] == "20%"  # the 200% stage starts at 07.250
    assert by_time.loc["2026-09-29T08:45:08.000Z", ["stage", "target_tps"]].tolist() == ["200%", 2000]
    assert by_time.loc["2026-09-29T08:48:30.000Z", ["stage", "target_tps"]].tolist() == ["5%", 50]
    row = by_time.loc["2026-09-29T08:45:30.000Z"]
    assert row["achieved_tps"] == pytest.approx(row["create_order.achieved_tps"] + row["get_product.achieved_tps"])
    assert row["count"] == row["create_order.count"] + row["get_product.count"]


def test_capacity_step_lands_in_the_spike_stage_at_its_own_resolution(merged):
    values = merged[["time_utc", "stage", WRITER_MAX]].dropna()
    # one value a minute, on the row of its own timestamp, nothing in between
    assert pd.to_datetime(values["time_utc"], utc=True).dt.second.eq(0).all()
    assert len(values) == 6  # 08:44 .. 08:49 inside the run
    assert values.set_index("time_utc").loc["2026-09-29T08:46:00.000Z"].tolist() == ["200%", 21.0]
    assert values.set_index("time_utc").loc["2026-09-29T08:45:00.000Z"].tolist() == ["20%", 15.0]
    assert merged.loc[merged["time_utc"] == "2026-09-29T08:46:01.000Z", WRITER_MAX].isna().all()


def test_sampler_rows_cover_the_second_before_they_were_read(merged):
    by_time = merged.set_index("time_utc")
    # the sample read at 08:43:09.005 covers 08:43:08-08:43:09
    assert by_time.loc["2026-09-29T08:43:08.000Z", "pg.buffer_hit_ratio"] == pytest.approx(56.4394)
    assert pd.isna(by_time.loc["2026-09-29T08:43:07.000Z", "pg.buffer_hit_ratio"])  # first sample: no delta


def test_a_sampler_gap_is_not_filled(merged):
    by_time = merged.set_index("time_utc")
    gap = [f"2026-09-29T08:47:{s}.000Z" for s in (30, 31, 32, 33)]
    # samples 08:47:31-33 are missing; 08:47:34 has no previous sample, so its delta is blank too
    assert by_time.loc[gap, "pg.buffer_hit_ratio"].isna().all()
    assert by_time.loc[gap[:3], "pg.xact_commit"].isna().all()
    assert by_time.loc["2026-09-29T08:47:33.000Z", "pg.xact_commit"] == 118815
    assert by_time.loc["2026-09-29T08:47:29.000Z", "pg.buffer_hit_ratio"] > 99


def test_stage_capacity_has_max_and_mean_per_stage(run):
    table = stage_capacity(run).set_index("stage")
    assert list(table.index) == ["20%", "200%", "100%", "5%"]
    assert table["a2-spike/writer ACU (max)"].tolist() == [15.0, 21.0, 21.0, 10.5]
    assert table["a2-spike/writer ACU (mean)"].tolist() == [15.0, 21.0, 15.5, 10.5]
    assert table["a2-spike/reader ACU (max)"].tolist() == [4.0, 4.5, 4.0, 4.0]
    # the same maxima can be read off merged.csv, stage by stage
    merged = merge_run(run, write=False)
    assert merged.groupby("stage", sort=False)[WRITER_MAX].max().to_dict() == {
        "20%": 15.0, "200%": 21.0, "100%": 21.0, "5%": 10.5,
    }


def test_a_stage_shorter_than_a_period_takes_the_overlapping_datapoint():
    cw = normalize_cloudwatch(pd.DataFrame({
        "time_utc": ["2026-09-29T08:00:00Z", "2026-09-29T08:01:00Z"], "preset": "docdb", "id": "ddb",
        "metric": "ServerlessDatabaseCapacity", "stat": "Maximum", "value": [0.5, 1.6],
    }))
    t = pd.Timestamp
    stages = [Stage("burst", t("2026-09-29T08:00:20Z"), t("2026-09-29T08:00:50Z")),
              Stage("after", t("2026-09-29T08:00:50Z"), t("2026-09-29T08:01:30Z"))]
    table = stage_capacity_frame(stages, cw).set_index("stage")
    assert table.loc["burst", "ddb DCU (max)"] == 0.5
    assert table.loc["after", "ddb DCU (max)"] == 1.6


def test_a_run_without_metrics_still_merges(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({
        "run_id": "bare", "started_utc": "2026-09-29T08:00:00.500Z", "ended_utc": "2026-09-29T08:00:03.000Z",
        "plan": {"stages": [{"name": "only", "start_utc": "2026-09-29T08:00:00.500Z",
                             "end_utc": "2026-09-29T08:00:03.000Z", "target_tps": 10}]},
    }))
    (run / "timeline.csv").write_text(
        "time_utc,stage,operation,target_tps,count,failures,retries,achieved_tps,p50_ms,p95_ms,p99_ms,p999_ms,"
        "max_ms,service_p50_ms,service_p99_ms,lag_p99_ms,dropped\n"
        "2026-09-29T08:00:01.000Z,only,read,10,10,0,0,10,1,1,2,2,2,1,2,0,0\n"
    )
    merged = merge_run(run)
    assert len(merged) == 3 and merged["stage"].tolist() == ["only"] * 3
    assert merged["read.p99_ms"].tolist()[1] == 2 and pd.isna(merged["read.p99_ms"].iloc[0])
    assert (run / "merged.csv").is_file()
    assert stage_capacity(run).columns.tolist() == ["stage", "start_utc", "end_utc"]


def test_open_run_needs_run_json(tmp_path):
    from dbsurge.base.errors import UserError

    with pytest.raises(UserError, match="no run.json"):
        open_run(tmp_path)
    with pytest.raises(UserError, match="not a directory"):
        open_run(tmp_path / "missing")
