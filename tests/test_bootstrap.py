"""The bootstrap interval `dbsurge compare` puts on a difference between two sets of repetitions."""

from __future__ import annotations

import numpy as np
from dbsurge.collectors.bootstrap import difference_interval


def _runs(rng: np.random.Generator, means: list[float], seconds: int = 30, noise: float = 1.0) -> list[list[float]]:
    return [list(rng.normal(m, noise, seconds)) for m in means]


def test_a_real_difference_excludes_zero_and_run_to_run_spread_widens_the_interval():
    rng = np.random.default_rng(1)
    a = _runs(rng, [10.0, 10.2, 9.9])
    b = _runs(rng, [12.0, 12.1, 11.8])
    point, low, high = difference_interval(a, b)
    assert 1.5 < point < 2.5 and 0 < low < point < high
    # the same means, but repetitions far apart: the runs' spread counts, so zero is inside
    wide_a, wide_b = _runs(rng, [6.0, 10.0, 14.0]), _runs(rng, [8.0, 12.0, 16.0])
    _point, low, high = difference_interval(wide_a, wide_b)
    assert low < 0 < high


def test_no_difference_includes_zero_and_is_reproducible():
    rng = np.random.default_rng(2)
    a, b = _runs(rng, [10.0, 10.0, 10.0]), _runs(rng, [10.0, 10.0])
    result = difference_interval(a, b)
    assert result is not None and result[1] < 0 < result[2]
    assert difference_interval(a, b) == result  # seeded: the same files give the same interval
    assert difference_interval(a, [[], []]) is None
