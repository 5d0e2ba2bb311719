"""A comparison's figures and rows (`collectors.compare`, `collectors.sizes`): one value per side, and its spread."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass
class Figure:
    """One figure of one side: the value (a median over repetitions) and its spread."""

    values: list[float]

    @property
    def value(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def low(self) -> float | None:
        return min(self.values) if self.values else None

    @property
    def high(self) -> float | None:
        return max(self.values) if self.values else None


@dataclass
class Row:
    """A row of the comparison: a stage (or a metric) and a figure, one value per side."""

    stage: str
    figure: str
    unit: str  # tps | ms | rate | capacity | usd | ops | pct | count | s
    cells: list[Figure]
    ratio: bool = True
    operations: list[int] | None = None  # the fewest operations behind the figure on each side (percentiles)
    series: tuple[str, str] | None = None  # (operation, timeline.csv column): its per-second values, for the CI

    def too_few(self) -> bool:
        """A percentile of fewer than `MIN_OPERATIONS` operations on some side: no difference is judged from it."""
        return self.unit == "ms" and self.operations is not None and min(self.operations) < MIN_OPERATIONS


#: Below this many operations in a stage (on either side) a percentile's difference is not judged: the p99
#: of fewer than 100 operations is their maximum or next to it, one slow operation.
MIN_OPERATIONS = 100
