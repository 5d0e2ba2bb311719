"""What the web panel shows, as JSON (docs/web-ui.md): built from the run's own state, computed nowhere else.

- `plan_state` (``GET /dbsurge/plan``): the plan, the rate overrides, where the run is, and
  after the end where its results are (`results_state`).
- `live_state` (``GET /dbsurge/live``): that, plus the live figures: the last few seconds, one
  row per stage and per rate override (`dbsurge.plan.segments`), a sparkline of the last minutes, and
  ``series``: every second of the last fifteen minutes for the panel's chart (`LiveFigures.series`),
  or those after ``?since=``, with ``start_epoch_s`` to place them against the plan's stages and
  overrides (plan time, s).
  Every figure is the timeline's (`dbsurge.measure.live`): the seconds the run wrote to
  timeline.csv, so the panel runs 2-3 s behind the clock, like that file.
"""

from __future__ import annotations

import math

from dbsurge.plan.segments import overrides, segment_rows
from dbsurge.plan.stage_plan import MAX_TPS


def plan_state(run) -> dict:
    """The plan and where the run is in it, for the panel and for scripts."""
    plan = run.plan
    elapsed = run.elapsed_s()
    running = bool(elapsed is not None and not run.ending.finished and run.aggregator is not None)
    start_s = run.start_epoch_ns / 1e9 if run.start_epoch_ns is not None else None
    state = {
        "plan": str(plan) if plan else None,
        "stages": [],
        "running": running,
        "closing": run.ending.closing if running else None,  # why the run is stopping, while it does
        "elapsed_s": round(elapsed, 3) if elapsed is not None else 0.0,
        "stage_index": None,
        "stage": None,
        "target_tps": None,  # the plan's rate now, overrides included
        "achieved_tps": round(run.aggregator.recent_achieved_tps(), 3) if run.aggregator else 0.0,
        "dropped": sum(run.aggregator.dropped.values()) if run.aggregator else 0,
        "rate_changes": run.changes,
        "overrides": overrides(run.changes, start_s),
        "override": 0,  # the override in force now (0: the plan's own rate)
        "max_users": getattr(run.options, "max_users", None),
        "max_rate": max_rate(run) if plan else None,
        "run_dir": str(run.rundir.path) if run.rundir else None,
        "results": results_state(run),
    }
    if plan:
        for st, s in zip(plan.starts, plan.stages):
            state["stages"].append({"name": s.name, "start_s": st,
                                    "duration_s": s.duration_s if math.isfinite(s.duration_s) else None,
                                    "target_tps": s.mean_tps, "start_tps": s.start_tps, "end_tps": s.end_tps})
    if plan and run.schedule is not None and elapsed is not None:
        t = max(0.0, elapsed)
        state["stage_index"] = plan.stage_index_at(t)
        state["stage"] = plan.stages[state["stage_index"]].name
        state["target_tps"] = round(run.schedule.rate_at(t), 3)
        state["override"] = sum(1 for at_s, _rate, _scale in run.changes if at_s <= t)
    return state


def results_state(run) -> dict | None:
    """Where the finished run's results are: its directory, its verdict, its report (None before the end).

    ``state`` is ``writing`` (the ledger and tables), ``report`` (report.html being built) or ``done``;
    ``report_url`` is set once report.html exists (served by ``GET /dbsurge/report``), ``report_path`` is where it
    is on disk; ``process_exits``: the process ends once the page has been sent this (`dbsurge run --web` at the
    plan's end), so the page can say so when its next poll finds nobody.
    """
    if run.rundir is None or not run.ending.finished:
        return None
    results = run.rundir.meta.get("results") or {}
    return {
        "state": run.ending.finish_state or "writing",
        "run_dir": str(run.rundir.path),
        "verdict": results.get("verdict") if run.ending.finish_state in ("report", "done") else None,
        "exit_code": run.exit_code,
        "report_url": "./dbsurge/report" if run.ending.report_path is not None else None,
        "report_path": str(run.ending.report_path) if run.ending.report_path is not None else None,
        "process_exits": run.ending.process_exits,
    }


def live_state(run, since: str | None = None) -> dict:
    """`plan_state` and the live figures (see the module docstring); figures are None before the first second.

    ``since`` (``GET /dbsurge/live?since=EPOCH_S``, the last second the page has): the series holds only
    the seconds after it (the endpoint refuses anything but a whole number, given once; here, to be safe, it
    is ignored and the whole series sent).
    """
    agg = run.aggregator
    state = {"plan": plan_state(run), "now": None, "rows": [], "sparkline": None, "series": None}
    if agg is None:
        return state
    state["now"] = agg.live.recent_stats()
    state["rows"] = segment_rows(agg.live.rows, run.changes, agg.stage_names, agg.start_epoch_s, agg.schedule)
    state["sparkline"] = agg.live.sparkline()
    after = int(since) if since is not None and since.isascii() and since.isdigit() and len(since) < 16 else None
    state["series"] = {**agg.live.series(after), "start_epoch_s": agg.start_epoch_s}
    return state


# -- how high a live rate may go (`dbsurge.ui.web.parse_rate_request` checks it) -------------------------------


def plan_peak(plan) -> float:
    """The highest rate of a plan, in TPS (0 without a plan)."""
    return max((max(s.start_tps, s.end_tps) for s in plan.stages), default=0.0) if plan else 0.0


def remaining_peak(plan, t: float) -> float:
    """The highest rate of the plan's stages that have not ended at ``t`` (what a scale multiplies)."""
    if not plan:
        return 0.0
    return max((max(s.start_tps, s.end_tps) for st, s in zip(plan.starts, plan.stages)
                if st + s.duration_s > t), default=0.0)


def max_rate(run) -> float:
    """``--max-rate``, or 10 times the plan's peak when it was not given, at most what a plan may ask for
    (`stage_plan.MAX_TPS`: a live change is part of the plan the end of the run counts)."""
    given = getattr(run.options, "max_rate", None)
    return float(given) if given is not None else min(10.0 * plan_peak(run.plan), MAX_TPS)
