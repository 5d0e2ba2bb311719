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
