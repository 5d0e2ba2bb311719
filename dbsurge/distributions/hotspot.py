"""Hotspot integers: a fraction of the operations goes to a fraction of the items.

Algorithm: YCSB's ``HotspotIntegerGenerator``. The range ``[lower, upper]`` is split into a hot
set (its first ``hot_data_fraction`` of the items) and the cold rest. With probability
``hot_op_fraction`` a draw is uniform over the hot set, otherwise uniform over the cold set.
The study of MongoDB vs ScyllaDB (seed 002) ran YCSB with data fraction 0.013 and operation
fraction 0.95; YCSB's defaults are 0.2 and 0.8.
"""

from __future__ import annotations

import random

HOT_DATA_FRACTION = 0.2
HOT_OP_FRACTION = 0.8


class HotspotGenerator:
    """Integers in ``[lower, upper]``, ``hot_op_fraction`` of them inside the first ``hot_data_fraction``.

    Over 1,000 items with the defaults, the hot set is items 0..199 and gets 80% of the draws:

        >>> gen = HotspotGenerator(random.Random(3), 0, 999)
        >>> gen.hot_count
        200
        >>> draws = [gen.next() for _ in range(100_000)]
        >>> round(sum(d < 200 for d in draws) / len(draws), 2)
        0.8

    YCSB truncates the hot set size (``(int)(count * fraction)``); we keep at least one hot item
    when the fraction is positive, so a small key space with a small fraction still has a hot
    spot (YCSB would throw on ``nextInt(0)``).
    """

    __slots__ = ("_random", "cold_count", "hot_count", "hot_op_fraction", "lower", "upper")

    def __init__(
        self,
        rng: random.Random,
        lower: int,
        upper: int,
        hot_data_fraction: float = HOT_DATA_FRACTION,
        hot_op_fraction: float = HOT_OP_FRACTION,
    ) -> None:
        if upper < lower:
            raise ValueError(f"hotspot range is empty: [{lower}, {upper}]")
        if not 0.0 <= hot_data_fraction <= 1.0 or not 0.0 <= hot_op_fraction <= 1.0:
            raise ValueError("hotspot fractions must be between 0 and 1")
        count = upper - lower + 1
        hot = int(count * hot_data_fraction)
        if hot == 0 and hot_data_fraction > 0.0:
            hot = 1
        self.lower = lower
        self.upper = upper
        self.hot_count = hot
        self.cold_count = count - hot
        # With an empty hot or cold set every draw must come from the other one.
        if hot == 0:
            hot_op_fraction = 0.0
        elif self.cold_count == 0:
            hot_op_fraction = 1.0
        self.hot_op_fraction = hot_op_fraction
        self._random = rng.random

    def next(self) -> int:
        """The next integer: in the hot set with probability ``hot_op_fraction``."""
        r = self._random
        if r() < self.hot_op_fraction:
            return self.lower + int(r() * self.hot_count)
        return self.lower + self.hot_count + int(r() * self.cold_count)
