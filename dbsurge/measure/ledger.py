"""The run's ledger: what the plan called for, set against what was accounted for.

For every stage and operation, and for the run::

    planned = ok + failed (by kind) + dropped + unknown + not sent (by reason)

The workers account for every arrival of their share (the `Pacer` and the `Recorder`); the
master counts what the plan called for from the same numbered arrivals (`planned_counts`) and
`balance` books whatever no live worker reported: ``unknown`` for what a lost worker had said it
issued to the database but never reported the outcome of (the database may have done them),
``not sent: worker_lost`` for the rest of a lost worker's share (nobody issued them), otherwise
``unaccounted``, which is a bug of dbsurge's and fails the run. Operations sent beyond the plan
go to ``over_plan``. After `balance` the ledger balances exactly, in every run.

    >>> from dbsurge.plan.stage_plan import StagePlan, Schedule
    >>> from dbsurge.plan.arrivals import ArrivalSequence, OperationMix
    >>> sched = Schedule.from_plan(StagePlan.parse("2s@10tps,1s@4tps"))
    >>> planned_counts(sched, ArrivalSequence("uniform", 1), OperationMix([("read", 1.0)], 1))
    {(0, 0): 20, (1, 0): 4}
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from dbsurge.plan.arrivals import ArrivalSequence, OperationMix
from dbsurge.plan.stage_plan import Schedule

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


def share_counts(schedule: Schedule, sequence: ArrivalSequence, mix: OperationMix,
                 segments: list[tuple[int, int, int]], until_number: int) -> dict[tuple[int, int], int]:
    """Arrivals per (stage index, operation index) that one worker's shares held, below ``until_number``.

    ``segments`` are the shares the worker was given, in order: (from_number, index, count); each
    holds arrivals ``k = index (mod count)`` from its ``from_number`` up to the next one's.

        >>> from dbsurge.plan.stage_plan import StagePlan
        >>> sched = Schedule.from_plan(StagePlan.parse("1s@10tps,1s@10tps"))
        >>> share_counts(sched, ArrivalSequence("uniform", 1), OperationMix([("read", 1.0)], 1),
        ...              [(0, 1, 2), (10, 0, 1)], 14)       # 1, 3, ..., 9, then 10, 11, 12, 13
        {(0, 0): 5, (1, 0): 4}
    """
    starts = np.array(schedule.stage_starts())
    out: dict[tuple[int, int], int] = defaultdict(int)
    for i, (k_from, index, count) in enumerate(segments):
        if count < 1:
            continue  # no share from here on (the worker was lost or left)
        k_to = min(segments[i + 1][0] if i + 1 < len(segments) else until_number, until_number)
        first = k_from + ((index - k_from) % count)
        for a in range(first, k_to, count * _CHUNK):
            ks = np.arange(a, min(k_to, a + count * _CHUNK), count, dtype=np.int64)
            if ks.size == 0:
                continue
            pos = sequence.positions(int(ks[0]), int(ks[-1]) + 1)[ks - ks[0]]
            stages = np.clip(np.searchsorted(starts, pos, side="right") - 1, 0, len(starts) - 2)
            keys, counts = np.unique(stages * 1024 + mix.of_many(ks), return_counts=True)
            for key, n in zip(keys.tolist(), counts.tolist()):
                out[(key // 1024, key % 1024)] += n
    return dict(out)


def balance(stage_cells: dict, planned: dict[tuple[str, int], int], lost_workers: list[str],
            had_workers: bool = True, *, gap_reason: str | None = None,
            unreported: dict[tuple[str, int], int] | None = None) -> dict[str, int]:
    """Book the difference between planned and accounted in each (operation, stage) cell.

    ``stage_cells`` maps (operation name, stage index) to `Cell`; ``planned`` the same keys to
    planned counts; ``unreported`` the same keys to what lost workers issued to the database but
    never reported (`Aggregator.unreported`). A gap is first ``unknown`` (issued, outcome not
    reported: the database may or may not have done them), up to what was unreported; the rest
    was sent by nobody: ``worker_lost`` when a worker was lost, ``no_connect`` when no worker ever
    took a share (none connected or none proved the join token), ``gap_reason`` when the run was
    cut short without waiting for the workers (a second signal: ``interrupted``), else
    ``unaccounted``. Returns what was booked, by reason (and ``unknown``, ``over_plan``).
    """
    from dbsurge.measure.cells import Cell

    booked: dict[str, int] = defaultdict(int)
    for key in set(planned) | set(stage_cells):
        cell = stage_cells.get(key)
        if cell is None:
            cell = stage_cells[key] = Cell()
        gap = planned.get(key, 0) - cell.accounted
        unknown = min(max(gap, 0), (unreported or {}).get(key, 0))
        if unknown:
            cell.unknown += unknown
            booked["unknown"] += unknown
            gap -= unknown
        if gap > 0:
            reason = ("worker_lost" if lost_workers else "no_connect" if not had_workers
                      else gap_reason or "unaccounted")
            cell.not_sent[reason] += gap
            booked[reason] += gap
        elif gap < 0:
            cell.over_plan += -gap
            booked["over_plan"] += -gap
    return dict(booked)
