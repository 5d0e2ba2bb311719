"""The run's ledger: what the plan called for, set against what was accounted for.

For every stage and operation, and for the run::

    planned = ok + failed (by kind) + dropped + not sent (by reason)

The workers account for every arrival of their share (the `Pacer` and the `Recorder`); the
master counts what the plan called for from the same numbered arrivals (`planned_counts`) and
`balance` books whatever no live worker reported: under ``worker_lost`` when a worker was lost
(its share from its last report to the reshare), otherwise under ``unaccounted``, which is a
bug of dbsurge's and fails the run. Operations sent beyond the plan go to ``over_plan``. After
`balance` the ledger balances exactly, in every run.

    >>> from dbsurge.stage_plan import StagePlan, Schedule
    >>> from dbsurge.arrivals import ArrivalSequence, OperationMix
    >>> sched = Schedule.from_plan(StagePlan.parse("2s@10tps,1s@4tps"))
    >>> planned_counts(sched, ArrivalSequence("uniform", 1), OperationMix([("read", 1.0)], 1))
    {(0, 0): 20, (1, 0): 4}
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from ..arrivals import ArrivalSequence, OperationMix
from ..stage_plan import Schedule

_CHUNK = 1 << 20


def planned_counts(schedule: Schedule, sequence: ArrivalSequence, mix: OperationMix,
                   until_position: float | None = None) -> dict[tuple[int, int], int]:
    """Planned arrivals per (stage index, operation index) up to the plan's end (or ``until_position``)."""
    starts = schedule.stage_starts()
    end = starts[-1] if until_position is None else min(until_position, starts[-1])
    if not math.isfinite(end):
        raise ValueError("an open-ended plan needs until_position")
    out: dict[tuple[int, int], int] = defaultdict(int)
    for stage in range(len(starts) - 1):
        lo, hi = starts[stage], min(starts[stage + 1], end)
        if hi <= lo:
            continue
        k0, k1 = sequence.first_at_or_after(lo), sequence.first_at_or_after(hi)
        for a in range(k0, k1, _CHUNK):
            ops = mix.of_many(np.arange(a, min(k1, a + _CHUNK), dtype=np.int64))
            for op, n in enumerate(np.bincount(ops, minlength=len(mix.names)).tolist()):
                if n:
                    out[(stage, op)] += n
    return dict(out)


def balance(stage_cells: dict, planned: dict[tuple[str, int], int], lost_workers: list[str],
            had_workers: bool = True, gap_reason: str | None = None) -> dict[str, int]:
    """Book the difference between planned and accounted in each (operation, stage) cell.

    ``stage_cells`` maps (operation name, stage index) to `Cell`; ``planned`` the same keys to
    planned counts. A gap is ``worker_lost`` when a worker was lost, ``no_connect`` when no worker
    ever took a share (none connected or none proved the join token), ``gap_reason`` when the
    run was cut short without waiting for the workers (a second signal: ``interrupted``), else
    ``unaccounted``. Returns what was booked, by reason.
    """
    from .cells import Cell

    booked: dict[str, int] = defaultdict(int)
    for key in set(planned) | set(stage_cells):
        cell = stage_cells.get(key)
        if cell is None:
            cell = stage_cells[key] = Cell()
        gap = planned.get(key, 0) - cell.accounted
        if gap > 0:
            reason = ("worker_lost" if lost_workers else "no_connect" if not had_workers
                      else gap_reason or "unaccounted")
            cell.not_sent[reason] += gap
            booked[reason] += gap
        elif gap < 0:
            cell.over_plan += -gap
            booked["over_plan"] += -gap
    return dict(booked)
