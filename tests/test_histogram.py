"""Microsecond histograms: HdrHistogram's percentiles, exact merges across workers."""

from __future__ import annotations

import random

from hdrh.histogram import HdrHistogram

from dbsurge.measure.histogram import Histogram
from dbsurge.measure.recorder import Recorder


def test_percentiles_match_hdrhistogram():
    rng = random.Random(3)
    values = [rng.randint(1, 5_000_000) for _ in range(20000)] + [3_599_999_999]
    ref = HdrHistogram(1, 3_600_000_000, 3)
    for v in values:
        ref.record_value(v)
    h = Histogram()
    h.record_many(values)
    for p in (1, 50, 90, 99, 99.9, 100):
        assert h.percentile(p) == ref.get_value_at_percentile(p)
    assert h.max_value == ref.get_max_value()


def test_standard_encoding_round_trip():
    h = Histogram()
    h.record_many([680, 700, 720, 29780])
    back = HdrHistogram(1, 3_600_000_000, 3)
    back.decode_and_add(h.to_hdr().encode())
    assert back.get_total_count() == 4
    assert back.get_value_at_percentile(50) == h.percentile(50)


def test_merged_workers_equal_all_samples_together():
    rng = random.Random(5)
    whole = Histogram()
    merged = Histogram()
    for _ in range(3):  # three workers
        vals = [int(rng.lognormvariate(6.5, 1.0)) + 1 for _ in range(5000)]
        whole.record_many(vals)
        merged.add_wire(Histogram.from_wire(Histogram.from_wire(_wire(vals)).to_wire()).to_wire())
    assert merged.count == whole.count == 15000
    for p in (50, 99, 99.9):
        assert merged.percentile(p) == whole.percentile(p)


def test_the_wire_packs_counts_narrow_and_exactly():
    """Indices as uint16 and counts in the narrowest type: a second's worth of samples ships in a quarter of
    int32 + int64's bytes, and counts past 255 or 65,535 come back exact."""
    import numpy as np
    import pytest

    from dbsurge.measure.cells import sparse_wire
    from dbsurge.measure.histogram import decode_sparse

    rng = random.Random(9)
    second = [int(rng.lognormvariate(6.7, 0.6)) for _ in range(2500)]
    wire = sparse_wire(np.array(second, dtype=np.int64))
    buckets = len(wire[0]) // 2
    assert len(wire[1]) == buckets  # uint8 counts: 3 bytes a bucket, not 12
    for many in (300, 70_000, 5_000_000_000):  # uint16, uint32, uint64 counts
        h = Histogram()
        h.counts[1000] = many
        h._track(1000, 1000, many, 1000 * many)
        back = Histogram.from_wire(h.to_wire())
        assert back.counts[1000] == many and back.count == many
    idx, cnt = decode_sparse(sparse_wire(np.zeros(0, dtype=np.int64)))
    assert idx.size == 0 and cnt.size == 0
    with pytest.raises(ValueError, match="bytes of counts"):
        decode_sparse([np.array([1, 2], dtype=np.uint16).tobytes(), b"\x01\x02\x03", 0, 0, 0])
    merged = Histogram()
    merged.add_wire(wire)
    whole = Histogram()
    whole.record_many(second)
    assert merged.percentile(99) == whole.percentile(99) and merged.count == 2500


def _wire(vals):
    h = Histogram()
    h.record_many(vals)
    return h.to_wire()


def test_recorder_separates_response_service_and_lag():
    r = Recorder(clock_ns=lambda: 0, wall_ns=lambda: 0)
    op = r.op_id("read")
    # intended at 0, started 0.5 ms late, took 1 ms (values below 2,048 us are exact)
    r.record(op, 0, 0, 500_000, 1_500_000, 0, 0)
    r.record(op, 0, 0, 0, 1_000_000, r.kind_id("timeout", "took too long"), 2)
    payload = r.drain()
    (_, _, wire), = payload["stages"]
    from dbsurge.measure.recorder import Cell

    cell = Cell()
    cell.add_wire(wire)
    assert (cell.ok, cell.failures, cell.retries) == (1, 1, 2)
    assert dict(cell.failed) == {"timeout": 1} and payload["errors"] == {"timeout": "took too long"}
    assert cell.failed_response.percentile(50) == 1000  # failures keep their own latency
    assert cell.response.percentile(50) == 1500 and cell.service.percentile(50) == 1000
    assert cell.lag.max_value_raw == 500


def test_the_one_value_index_functions_agree_with_the_array_form_and_hdrhistogram():
    """`index_of` gives what `counts_index` gives, and `highest_equivalent_of` what HdrHistogram reports as a
    bucket's highest equivalent value, at every bucket edge of the range and past both ends."""
    import numpy as np

    from dbsurge.measure.histogram import COUNTS_LEN, HIGHEST_US, counts_index, highest_equivalent_of, index_of

    ref = HdrHistogram(1, HIGHEST_US, 3)
    tops = np.array([ref.get_highest_equivalent_value(ref.get_value_from_index(i)) for i in range(COUNTS_LEN)])
    assert [highest_equivalent_of(i) for i in range(COUNTS_LEN)] == tops.tolist()
    values = np.unique(np.concatenate([tops, tops + 1, tops - 1, [0, 1, 2, HIGHEST_US, HIGHEST_US + 5, -3]]))
    values = values[values <= HIGHEST_US + 5]
    assert [index_of(v) for v in values.tolist()] == counts_index(values).tolist()


def test_a_drain_in_parts_is_the_one_drain_merged():
    """A local run drains its recorder in parts and lets the pacer run between them: merged, the parts
    give the same cells, ledger and counts as one drain of the same operations, to the last sample."""
    from dbsurge.measure.aggregator import Aggregator

    def fill(rec: Recorder, rng: random.Random) -> None:
        ops = [rec.op_id("read"), rec.op_id("update")]
        timeout = rec.kind_id("timeout", "TimeoutError: slow")
        base = rec.clock_ns()
        for i in range(2_345):
            t = base + i * 400_000
            start = t + rng.randint(0, 3_000_000)
            rec.record(ops[i % 2], i // 1000, t, start, start + rng.randint(50_000, 90_000_000),
                       timeout if i % 97 == 0 else 0, 1 if i % 50 == 0 else 0)
        rec.count(0, ops[0], "dropped", 3, epoch_s=(base + rec.wall_offset_ns) // 1_000_000_000)
        rec.count(1, ops[1], "not_sent:interrupted", 5)

    import time

    # both recorders on one fixed clock: filled a moment apart, they must not straddle a second's boundary
    now_ns, wall_ns = time.perf_counter_ns(), time.time_ns()
    whole, parts = (Recorder(clock_ns=lambda: now_ns, wall_ns=lambda: wall_ns) for _ in range(2))
    fill(whole, random.Random(4))
    fill(parts, random.Random(4))
    one, many = Aggregator(stage_names=["a", "b", "c"]), Aggregator(stage_names=["a", "b", "c"])
    one.merge(whole.drain())
    payloads = list(parts.drain_in_parts(400))
    assert len(payloads) == 6  # 2,345 operations, 400 a part
    for p in payloads:
        many.merge(p)
    assert sorted(one.stage_cells) == sorted(many.stage_cells)
    for key, cell in one.stage_cells.items():
        other = many.stage_cells[key]
        assert (cell.count, cell.ok, cell.retries, cell.dropped, dict(cell.failed), dict(cell.not_sent)) == \
            (other.count, other.ok, other.retries, other.dropped, dict(other.failed), dict(other.not_sent))
        for name in ("response", "service", "lag", "failed_response"):
            a, b = getattr(cell, name), getattr(other, name)
            assert (a.count, a.max_value, a.total_us, a.percentiles([50, 99, 99.9])) == \
                (b.count, b.max_value, b.total_us, b.percentiles([50, 99, 99.9]))
    assert sorted(one.open_seconds) == sorted(many.open_seconds)
    assert one.first_errors == many.first_errors and dict(one.per_source) == dict(many.per_source)
    assert list(Recorder().drain_in_parts(400))[0]["stages"] == []  # nothing recorded: one empty part


_DRAIN_KILLED = """
import gevent
from dbsurge.measure.aggregator import Aggregator
from dbsurge.measure.recorder import Recorder
from dbsurge.engine.run_state import drain_recorder


class Run:  # what drain_recorder uses of a DbSurgeRun
    def __init__(self):
        self.recorder, self.problems = Recorder(), []

    def note_problem(self, what, e):
        self.problems.append(what)

    def feed_locust_stats(self, pause):
        raise RuntimeError("a bug in the tables")


def filled(n):
    run = Run()
    op, base = run.recorder.op_id("read"), run.recorder.clock_ns()
    for i in range(n):
        run.recorder.record(op, 0, base + i * 1000, base + i * 1000, base + i * 1000 + 50_000, 0, 0)
    return run


run, taken, breaths = filled(1_000), [], []

def breathe():
    breaths.append(1)
    if len(breaths) == 1:
        gevent.sleep(10)  # killed here, after the first part

loop = gevent.spawn(drain_recorder, run, taken.append, breathe)
gevent.sleep(0.05)
loop.kill(block=True)
merged = Aggregator(stage_names=["a"])
for payload in taken:
    merged.merge(payload)
print(len(taken), sum(cell.count for cell in merged.stage_cells.values()))
run, taken = filled(1), []
drain_recorder(run, taken.append, lambda: None)
print(len(taken), run.problems)
"""


def test_a_drain_killed_between_its_parts_still_hands_over_every_part():
    """`drain_recorder` (a worker's drains ahead of its report, a local run's drain each second): killed while
    the users run between two parts, it hands over the parts not taken yet at once (the local run's loop
    lost them before); a failure in Locust's tables is noted and loses no measurement. In a child process:
    the drain imports Locust, which monkey-patches."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _DRAIN_KILLED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    killed, problem = out.stdout.splitlines()
    assert killed == "3 1000", out.stdout  # 1,000 operations in parts of 400: every part, every operation
    assert problem == "1 ['draining the recorder']", out.stdout


def test_a_part_of_one_operation_stage_and_second_ships_its_one_cell_for_both_groupings():
    """The usual part (one operation, one stage, one second) is grouped once: its stage row and its second's
    row carry the cell of every value in it, as dense histograms of the same values give it. A part across
    a second's boundary is grouped per second, and its seconds add up to the stage's cell."""
    from dbsurge.measure.cells import Cell

    def values(rec: Recorder, seconds: int) -> tuple[Recorder, list[int], list[int], list[int]]:
        rng, resp, serv, lag = random.Random(seconds), [], [], []
        # the recorder's seconds are wall seconds: start its clock where a second begins
        wall0 = (rec.clock_ns() + rec.wall_offset_ns) // 1_000_000_000 * 1_000_000_000 + 1_000_000_000
        base = wall0 - rec.wall_offset_ns
        for i in range(1_200):
            t = base + i * (seconds * 1_000_000_000 // 1_300)
            start = t + rng.randint(0, 2_000_000)
            end = start + rng.randint(50_000, 30_000_000)
            rec.record(0, 0, t, start, end, rec.kind_id("timeout") if i % 101 == 0 else 0, i % 2)
            if i % 101:
                resp.append((end - t) // 1000)
                serv.append((end - start) // 1000)
            lag.append((start - t) // 1000)
        return rec, resp, serv, lag

    rec, resp, serv, lag = values(Recorder(), 1)
    (payload,) = list(rec.drain_in_parts(None))
    (stage_row,), (second_row,) = payload["stages"], payload["intervals"]
    assert stage_row[:2] == [0, 0] and second_row[1] == 0 and second_row[2] == stage_row[2]
    for wire, expected in ((stage_row[2][0], resp), (stage_row[2][1], serv), (stage_row[2][2], lag)):
        dense = Histogram()
        dense.record_many(expected)
        assert Histogram.from_wire(wire).percentiles([50, 99, 100]) == dense.percentiles([50, 99, 100])
        assert Histogram.from_wire(wire).count == len(expected)
    assert stage_row[2][4] == len(resp) and stage_row[2][6] == {"timeout": 1_200 - len(resp)}

    rec, resp, _, _ = values(Recorder(), 3)  # three seconds in one part
    (payload,) = list(rec.drain_in_parts(None))
    assert len(payload["intervals"]) == 3
    stage, seconds = Cell(), Cell()
    stage.add_wire(payload["stages"][0][2])
    for _, _, wire in payload["intervals"]:
        seconds.add_wire(wire)
    assert (seconds.ok, seconds.retries, dict(seconds.failed)) == (stage.ok, stage.retries, dict(stage.failed))
    assert seconds.response.percentiles([50, 99, 100]) == stage.response.percentiles([50, 99, 100])


def test_recording_makes_no_object_the_cycle_collector_tracks():
    """A record is packed bytes, not a tuple per operation: tuples are tracked by the cycle collector, and a young
    collection during the once-a-second drain found 6,000-8,000 of them, a pause of every user of 1.1-1.5 ms
    at 16,000 TPS. A drain in parts still adds up to the payload of one drain."""
    import gc

    from dbsurge.measure.cells import Cell

    def recorded() -> Recorder:
        rec, rng = Recorder(), random.Random(3)
        base = rec.clock_ns()
        for i in range(2_000):
            t = base + i * 500_000
            start = t + rng.randint(0, 2_000_000)
            rec.record(0, 0, t, start, start + rng.randint(50_000, 30_000_000), 0, i % 2)
        return rec

    rec = Recorder()
    base = rec.clock_ns()
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        for i in range(10_000):
            rec.record(0, 0, base + i, base + i + 10, base + i + 5_000)
        made = len(gc.get_objects()) - before
    finally:
        gc.enable()
    assert made < 100, made  # a tuple per record made 10,000

    whole, parts = Cell(), Cell()
    for _, _, wire in recorded().drain()["stages"]:
        whole.add_wire(wire)
    rec = recorded()
    for payload in rec.drain_in_parts(400):
        for _, _, wire in payload["stages"]:
            parts.add_wire(wire)
    assert (parts.ok, parts.retries, parts.lag.count) == (whole.ok, whole.retries, whole.lag.count) == (2_000, 1_000,
                                                                                                       2_000)
    for name in ("response", "service", "lag"):
        assert getattr(parts, name).percentiles([1, 50, 99, 100]) == getattr(whole, name).percentiles([1, 50, 99, 100])
    assert rec.drain()["stages"] == []  # the buffer was taken at the first part


def test_a_flush_that_lets_the_pacer_run_writes_the_rows_of_one_that_does_not():
    """A local run's flush lets the pacer run after each second, and within a second after each operation's
    rows and after its histogram (one piece was 2-4 ms at 8,000 TPS): what it writes is unchanged."""
    from dbsurge.measure.aggregator import Aggregator

    def drained() -> dict:
        rec, rng = Recorder(), random.Random(7)
        ops = [rec.op_id("read"), rec.op_id("update")]
        # from the start of a wall second: 3 full seconds and the ends spilling into a 4th, both operations in
        # each (from wherever the clock was, an edge second with one operation had no ALL row to pause after)
        base = (rec.clock_ns() + rec.wall_offset_ns) // 1_000_000_000 * 1_000_000_000 - rec.wall_offset_ns
        for i in range(3_000):
            t = base + i * 1_000_000
            rec.record(ops[i % 2], 0, t, t + rng.randint(0, 900_000), t + rng.randint(1_000_000, 40_000_000), 0, 0)
        return rec.drain()

    import copy

    payload = drained()
    still, paused = Aggregator(stage_names=["a"]), Aggregator(stage_names=["a"])
    still.merge(copy.deepcopy(payload))
    paused.merge(payload)
    pauses: list[int] = []
    a = still.flush(final=True)
    b = paused.flush(final=True, between_seconds=lambda: pauses.append(1))
    assert a.rows and (a.rows, a.worker_rows, a.intervals) == (b.rows, b.worker_rows, b.intervals)
    seconds = len({row["time_utc"] for row in a.rows})
    # after each second; within it, after each operation's rows and histogram, after the ALL row, and
    # before the workers' rows
    assert seconds >= 3 and len(pauses) == seconds * (1 + 2 * 2 + 1 + 1)


def test_a_second_of_one_operation_has_the_all_row_a_merged_cell_gives():
    """A second of one operation reads its ALL row from that operation's cell (no merged copy is made): the
    row is the one a cell holding everything of the second gives, with the second's target."""
    from dbsurge.measure.aggregator import ALL, Aggregator
    from dbsurge.measure.cells import Cell

    rec, rng = Recorder(), random.Random(11)
    op = rec.op_id("read")
    base = rec.clock_ns()
    for i in range(3_000):
        t = base + i * 1_000_000
        kind = rec.kind_id("timeout") if i % 97 == 0 else 0
        rec.record(op, 0, t, t + rng.randint(0, 900_000), t + rng.randint(1_000_000, 40_000_000), kind, i % 3)
    agg = Aggregator(stage_names=["a"])
    agg.merge(rec.drain())
    expected = {}
    for sec, cells in agg.open_seconds.items():
        total = Cell()
        for cell in cells.values():
            total.add(cell)
        expected[sec] = Aggregator._timeline_row(sec, agg._stage_name_at(sec), ALL, agg.target_tps_at(sec), total)
    rows = [r for r in agg.flush(final=True).rows if r["operation"] == ALL]
    assert len(rows) == len(expected) >= 3 and any(r["failures"] for r in rows)
    assert rows == [expected[sec] for sec in sorted(expected)]


def test_a_worker_second_reads_the_percentiles_a_full_cell_reads():
    """workers.csv's per-worker second keeps the reports' sparse pairs (no 23,552-bucket arrays): its lag and
    response p99 are those of a full `Cell` fed the same reports, a report at a time."""
    import numpy as np

    from dbsurge.measure.cells import _SORT_PAIRS_BELOW, Cell, WorkerSecond

    rng = random.Random(11)
    cell, light = Cell(), WorkerSecond()
    for _ in range(14):  # reports of one worker about the same second: few pairs (sorted), then many (summed)
        rec = Recorder()
        op, timeout = rec.op_id("op"), rec.kind_id("timeout")
        base = rec.clock_ns()
        for i in range(rng.randint(0, 900)):
            t = base + i * 1_000_000
            start = t + int(rng.lognormvariate(4, 2) * 1000)
            rec.record(op, 0, t, start, start + int(rng.lognormvariate(7, 1.5) * 1000),
                       timeout if i % 41 == 0 else 0)
        for _sec, _op, wire in rec.drain()["intervals"]:
            cell.add_wire(wire)
            light.add_wire(wire)
        assert (light.count, light.ok, light.failures) == (cell.count, cell.ok, cell.failures)
        assert light.lag_p99_us() == cell.lag.percentile(99)
        assert light.response_p99_us() == cell.response.percentile(99)
    assert sum(i.size for i, _, _ in light._response) >= _SORT_PAIRS_BELOW  # both ways were taken
    assert WorkerSecond().lag_p99_us() == 0 and np.int64(cell.lag.count) > 0
