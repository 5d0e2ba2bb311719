"""Locust's own tables, fed from the recorder's drains (dbsurge.load.locust_stats), against Locust's per-request path.

Importing Locust monkey-patches the process for gevent, which the test runner's own workers do not
survive: the tests that need Locust's `RequestStats` run their checks in a child process
(`_in_a_child`), importing dbsurge's plugin there as a run does (it installs dbsurge's bucket rule).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dbsurge.load.locust_stats import LocustStatsFeed, bucket_keys_us
from dbsurge.measure.latency_buckets import bucket_response_time
from dbsurge.measure.recorder import Recorder

NS = 1_000_000_000


def test_the_vectorised_bucket_rule_is_the_rule_locust_is_given():
    rng = np.random.default_rng(7)
    us = np.concatenate([rng.integers(1, 200_000_000, 20_000), rng.lognormal(6, 2, 20_000).astype(np.int64) + 1])
    keys = bucket_keys_us(us).tolist()
    # Python's round() rounds halves to even, the vectorised rule up: they may differ by one step on an exact half
    for v, k in zip(us.tolist(), keys):
        want = bucket_response_time(v / 1000)
        got = k / 1000 if k < 100_000 else k // 1000
        step = next((s for bound, s in ((1_000, 1), (10_000, 10), (100_000, 100), (1_000_000, 10_000),
                                        (10_000_000, 100_000)) if v < bound), 1_000_000)
        assert got == want or abs(got - want) * 1000 == pytest.approx(step), (v, got, want)


def _in_a_child(check: str) -> None:
    """Run ``check`` (a function of this module) in a fresh interpreter with Locust and dbsurge's plugin loaded."""
    code = (f"import dbsurge.locust_plugin, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import test_locust_stats as t; t.{check}(); print('checked')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert proc.returncode == 0 and "checked" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_a_drain_fed_table_is_the_table_of_one_event_per_operation():
    """The same operations, logged one by one (Locust's request event) and fed from a drain: the same table."""
    _in_a_child("_check_drain_fed_table")


def test_failures_are_not_fed_twice():
    _in_a_child("_check_failures_not_fed")


def _check_drain_fed_table():
    from locust.stats import RequestStats

    rng = np.random.default_rng(3)
    n = 5_000
    t0 = 1_800_000_000 * NS
    ops = rng.integers(0, 2, n)
    resp_us = np.concatenate([rng.integers(50, 3_000, n - 10), rng.integers(100_000, 5_000_000, 10)])
    end_wall = t0 + np.sort(rng.integers(0, 3 * NS, n))
    names = ["read", "update"]

    by_event = RequestStats()
    for o, r in zip(ops.tolist(), resp_us.tolist()):
        by_event.log_request("ycsb", names[o], r / 1000, 0)

    recorder = Recorder(wall_ns=lambda: 0, clock_ns=lambda: 0)  # wall = perf_counter: end_ns is the wall time
    ids = [recorder.op_id(name) for name in names]
    fed = RequestStats()
    feed = LocustStatsFeed(fed, recorder.operations)
    feed.method.update((i, "ycsb") for i in ids)
    recorder.stats_sink = feed
    for part in np.array_split(np.arange(n), 7):  # several drains before one apply, as in a second of a local run
        for i in part.tolist():
            recorder.record(int(ops[i]), 0, int(end_wall[i] - resp_us[i] * 1000), int(end_wall[i]) - 1000,
                            int(end_wall[i]))
        recorder.drain()
    pauses = []
    feed.apply(lambda: pauses.append(1))
    assert pauses, "a second's buckets are added in pieces, with pauses between them"

    secs = end_wall // NS
    assert dict(fed.total.num_reqs_per_sec) == dict(zip(*(a.tolist() for a in np.unique(secs, return_counts=True))))
    for o, m in enumerate(names):  # each second as the operations completed (Locust's own path logs "now")
        per = fed.get(m, "ycsb").num_reqs_per_sec
        assert dict(per) == dict(zip(*(a.tolist() for a in np.unique(secs[ops == o], return_counts=True))))
    for want, got in [(by_event.total, fed.total)] + [(by_event.get(m, "ycsb"), fed.get(m, "ycsb")) for m in names]:
        assert got.num_requests == want.num_requests
        assert got.min_response_time == pytest.approx(want.min_response_time)
        assert got.max_response_time == pytest.approx(want.max_response_time)
        assert got.total_response_time == pytest.approx(want.total_response_time)
        assert sum(got.response_times.values()) == want.num_requests
        for p in (0.5, 0.9, 0.99, 0.999):
            assert got.get_response_time_percentile(p) == pytest.approx(want.get_response_time_percentile(p),
                                                                        rel=0.011)


def _check_failures_not_fed():
    from locust.stats import RequestStats

    recorder = Recorder(wall_ns=lambda: 0, clock_ns=lambda: 0)
    op = recorder.op_id("read")
    fed = RequestStats()
    feed = LocustStatsFeed(fed, recorder.operations)
    recorder.stats_sink = feed
    kind = recorder.kind_id("timeout", "no answer")
    recorder.record(op, 0, NS, NS, 2 * NS)
    recorder.record(op, 0, NS, NS, 2 * NS, kind)  # a failure: Locust hears it from the request event
    recorder.drain()
    feed.apply()
    assert fed.total.num_requests == 1 and fed.total.num_failures == 0
    feed.apply()  # nothing new: nothing added
    assert fed.total.num_requests == 1
