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
