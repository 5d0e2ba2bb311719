"""A confidence interval for the difference between two sets of repetitions, from their per-second values.

``dbsurge compare`` of two ``--repeat`` sets asks, per stage and figure, whether B differs from A by
more than run-to-run variation. Three repetitions' min-max ranges are a blunt test; this is a
two-level (hierarchical) bootstrap instead: each resample draws the runs of each side with
replacement, then the seconds within each drawn run with replacement (so both the spread between
runs and the noise within a run count), and takes the mean of the drawn seconds; the interval is
the 2.5th and 97.5th percentile of B's mean minus A's over the resamples. Seeded: the same files
give the same interval.

    >>> a = [[10.0, 10.0, 10.0], [10.0, 10.0, 10.0]]
    >>> b = [[12.0, 12.0, 12.0], [12.0, 12.0, 12.0]]
    >>> difference_interval(a, b)
    (2.0, 2.0, 2.0)
    >>> difference_interval(a, [[]]) is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dbsurge.rundir.reader import iter_rows
from dbsurge.rundir.schema import TIMELINE

RESAMPLES = 2000
SEED = 20260
LEVEL = 0.95


def difference_interval(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], resamples: int = RESAMPLES,
                        seed: int = SEED) -> tuple[float, float, float] | None:
    """(B's mean minus A's, low, high) of the 95% interval; None when a side has no run with a value."""
    runs_a = [np.asarray(r, dtype=float) for r in a if len(r)]
    runs_b = [np.asarray(r, dtype=float) for r in b if len(r)]
    if not runs_a or not runs_b:
        return None
    rng = np.random.default_rng(seed)
    diffs = _resampled_means(runs_b, resamples, rng) - _resampled_means(runs_a, resamples, rng)
    point = float(np.concatenate(runs_b).mean() - np.concatenate(runs_a).mean())
    tail = (1.0 - LEVEL) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return round(point, 6), round(float(low), 6), round(float(high), 6)


def _resampled_means(runs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The mean of the seconds of each resample: runs drawn with replacement, then each run's seconds."""
    means = np.empty(resamples)
    picks = rng.integers(0, len(runs), size=(resamples, len(runs)))
    for k in range(resamples):
        drawn = [runs[i][rng.integers(0, len(runs[i]), size=len(runs[i]))] for i in picks[k]]
        means[k] = np.concatenate(drawn).mean()
    return means


def per_second(run_dir: Path, stage: str, operation: str, column: str) -> list[float]:
    """timeline.csv's values of one column, for one stage and operation, in the seconds that had operations."""
    out = []
    for row in iter_rows(run_dir, TIMELINE):
        if row.get("stage") != stage or row.get("operation") != operation:
            continue
        if column.endswith("_ms") and str(row.get("count") or "0") in ("0", ""):
            continue  # a second without operations has no latency
        value = row.get(column)
        if value not in (None, ""):
            try:
                out.append(float(value))
            except ValueError:
                continue
    return out
