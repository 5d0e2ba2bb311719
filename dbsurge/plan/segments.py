"""Rate overrides, and the rows of a run they make: each stage, and each override, its own row.

A live rate change (the web panel, ``POST /dbsurge/rate``) is an *override*, numbered from 1 in
the order it was made. From its moment on, until the plan's end or the next override, it puts in
force either one absolute rate (``rate_tps``) or the plan's own rates times a factor (``scale``;
``scale=1`` is the plan again). Either replaces any override before it.

The web panel's table, ``segments.csv`` and the end-of-run table "Rate overrides" have one row per
stage and per override in force: the live figures' `LiveRow` (the timeline's seconds, merged; a
second goes to the row in force at its start). A spike plan with one override in its second stage::

    stage 20%
    stage 200%
    override 1: 800 TPS from 12:02:30Z (stage 200%)
    stage 100% under override 1
    stage 5% under override 1

    >>> override_label(2, 20.0, 80.0, None, start_epoch_s=1_800_000_000.0)
    'override 2: 80 TPS from 08:00:20Z'
    >>> override_text(None, 2.0)
    'plan x2'
"""

from __future__ import annotations

from dbsurge.base.utc import utc_iso


def _number(x: float) -> str:
    return f"{int(x)}" if float(x) == int(x) else f"{x:g}"


def clock(epoch_s: float) -> str:
    """``HH:MM:SSZ``: when, in a label a person reads (the files keep the full ISO time)."""
    return utc_iso(epoch_s)[11:19] + "Z"


def override_text(rate_tps: float | None, scale: float | None) -> str:
    """What an override puts in force: ``80 TPS`` or ``plan x2``."""
    return f"{_number(rate_tps)} TPS" if rate_tps is not None else f"plan x{_number(scale)}"


def override_label(n: int, at_s: float, rate_tps: float | None, scale: float | None, start_epoch_s: float) -> str:
    """``override 2: 80 TPS from 12:00:20Z``: the override's number, what it sets, and from when."""
    return f"override {n}: {override_text(rate_tps, scale)} from {clock(start_epoch_s + at_s)}"


def overrides(changes: list, start_epoch_s: float | None) -> list[dict]:
    """The run's overrides (its ``changes``: ``[at_s, rate_tps, scale]`` each), described."""
    start = start_epoch_s or 0.0
    return [{"override": n, "at_s": round(at_s, 3), "from_utc": utc_iso(start + at_s), "rate_tps": rate,
             "scale": scale, "text": override_text(rate, scale), "label": override_label(n, at_s, rate, scale, start)}
            for n, (at_s, rate, scale) in enumerate(changes, start=1)]


def segment_rows(live_rows: list, changes: list, stage_names: list[str], start_epoch_s: float | None,
                 schedule=None) -> list[dict]:
    """One labelled row per `LiveRow` (a stage, or a stage under override k), in time order.

    An override that holds no complete second (the next one came within the second) still gets
    its row, empty, so that every override the run made is in the table. With the run's `Schedule`,
    a row's ``duration_s`` and ``target_tps`` are the plan's over the row's window (the stage's, cut by
    the overrides around it and by the last second written), not its timeline seconds': a 15 s stage at
    20 TPS whose time zero falls inside a second spans 16 of them, and read "16 s · target 29.6".
    """
    described = overrides(changes, start_epoch_s)
    rows, seen = [], set()
    for r in live_rows:
        stage, k = r.key
        first = k not in seen and k > 0
        seen.add(k)
        row = {**_labels(stage, k, first, stage_names, described), **r.stats()}
        if schedule is not None and start_epoch_s is not None:
            row.update(plan_window(schedule, changes, stage, k, r.last_s + 1 - start_epoch_s))
        rows.append(row)
    for o in described:  # overrides without a second of their own
        k = o["override"]
        if k not in seen:
            at = next((i for i, row in enumerate(rows) if (row["override"] or 0) > k), len(rows))
            rows.insert(at, {**_labels(None, k, True, stage_names, described), "seconds": 0})
    return rows


def plan_window(schedule, changes: list, stage: int, k: int, written_s: float) -> dict:
    """The plan's ``duration_s`` and ``target_tps`` of stage ``stage`` under override ``k`` (0: none), from its
    start to its end or ``written_s`` (plan seconds: the end of the last second written), whichever is first."""
    plan = schedule.plan
    lo = plan.starts[stage]
    hi = min(lo + plan.stages[stage].duration_s, written_s)
    if k > 0:
        lo = max(lo, changes[k - 1][0])
    if k < len(changes):
        hi = min(hi, changes[k][0])
    if not hi > lo:
        return {}
    return {"duration_s": round(hi - lo, 3),
            "target_tps": round((schedule.cumulative(hi) - schedule.cumulative(lo)) / (hi - lo), 3)}


def _labels(stage: int | None, k: int, first: bool, stage_names: list[str], described: list[dict]) -> dict:
    name = stage_names[stage] if stage is not None and stage < len(stage_names) else ""
    if k == 0:
        label = f"stage {name}"
    elif first:
        label = described[k - 1]["label"] + (f" (stage {name})" if len(stage_names) > 1 and name else "")
    else:
        label = f"stage {name} under override {k}"
    return {"segment": label, "stage": name, "override": k or "", "rate": described[k - 1]["text"] if k else "plan"}
