"""The start of a run and its once-a-second loop (the end is `dbsurge.engine.stopping` and `dbsurge.engine.finish`).

`begin_run` (master or local, at Locust's ``test_start``): the plan's time zero, the run
directory and its run.json, the aggregator, the plan handed out (`dbsurge.engine.roles.MasterRun.hand_out_plan`
shares it with every worker, `dbsurge.engine.roles.LocalRun.hand_out_plan` makes the local pacer), and the
loops: `_master_loop` (drain a local recorder, flush the timeline through the run directory's writer)
and the role's own (the master's membership loop).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable

import gevent
import psutil  # Locust's own dependency

from dbsurge.base.versions import versions
from dbsurge.config.option_names import config_files_in_use
from dbsurge.embedded.servers import embedded_name_of
from dbsurge.engine import console, stopping
from dbsurge.engine.collector_hooks import collectors
from dbsurge.engine.locust_child import note_run_dir
from dbsurge.engine.run_state import DbSurgeRun, dbsurge_user_classes, drain_recorder
from dbsurge.load.pacer import Breather
from dbsurge.measure.aggregator import Aggregator
from dbsurge.plan.stage_plan import Schedule, StagePlan, parse_duration
from dbsurge.rundir import RunDirectory, new_run_id, utc_iso
from dbsurge.rundir.schema import METRICS
from dbsurge.rundir.writer import jsonable

log = logging.getLogger("dbsurge")


def begin_run(run: DbSurgeRun) -> None:
    """Master or local: time zero, run directory, aggregator, and the plan sent to every worker."""
    opts = run.options
    env = run.environment
    again = run.rundir is not None  # the web UI's second Start (or later): a directory of its own, even with --run-id
    run.new_test()  # a new `LoadTest`: nothing of the last one carries over
    stopping.install_signal_handlers(run)
    run.admit_workers()  # before time zero: a worker still saying hello (or proving the token) costs no plan time
    start_s = _time_zero(run)
    names = sorted({u.workload for u in dbsurge_user_classes(env)})
    run_id = new_run_id("-".join(names)) if again or not opts.run_id else opts.run_id
    run.rundir = RunDirectory(opts.results_dir, run_id)
    note_run_dir(run.rundir.path)  # `dbsurge run` finalises it should this process die
    run.rundir.keep_reserve()
    stage_names = [s.name for s in run.plan.stages] if run.plan else ["run"]
    run.schedule = Schedule.from_plan(run.plan) if run.plan else None
    run.aggregator = Aggregator(stage_names=stage_names)
    run.aggregator.set_schedule(lambda: run.schedule, start_s)  # the run's one schedule, read when needed
    run.aggregator.override_times = lambda: [at_s for at_s, _rate, _scale in run.changes]
    run.aggregator.worker_label = run.hosts.label
    negotiated = run.target.negotiated() if hasattr(run.target, "negotiated") else {}
    for warning in negotiated.get("warnings") or []:  # verification off: said before any load, and in the report
        log.warning(warning)
    if negotiated.get("line"):
        log.info("connected: %s", negotiated["line"])
    run.rundir.write_meta(
        run_id=run_id, started_utc=utc_iso(start_s), ended_utc=None, command=sys.argv,
        workload=names, target=run.target.describe() if hasattr(run.target, "describe") else run.target.display,
        target_display=run.target.display, target_name=embedded_name_of(opts.target) or run.target.display,
        negotiated=negotiated or None,
        workload_options=run.config.workload_options,
        operations=run.config.operation_weights, plan=_plan_meta(run.plan, start_s), arrivals=opts.arrivals,
        seed=opts.seed, max_lag=opts.max_lag, role=run.role, workers=run.workers_at_start(),
        cloudwatch=opts.cloudwatch or [], runners=opts.runner or [], region=opts.cloudwatch_region,
        versions=versions(), config_files=config_files_in_use(getattr(opts, "config", None)),
        options=jsonable({k: v for k, v in vars(opts).items() if k != "target"}),
    )
    run.rundir.event("run_start", at=start_s, run_id=run_id)
    for cid, why in (run.membership.refused.items() if run.membership else []):
        run.rundir.event("worker_refused", worker=cid, reason=why, **run.hosts.fields(cid))
    if run.plan:
        for st, stage in zip(run.plan.starts, run.plan.stages):
            if math.isfinite(st):
                run.rundir.event("stage", at=start_s + st, stage=stage.name, target_tps=stage.mean_tps)
    run.hand_out_plan(parse_duration(opts.max_lag) if opts.max_lag else None)
    run.side.greenlets = [gevent.spawn(_master_loop, run)] + _announce_stages(run) + run.test_greenlets()
    run.side.progress = (console.Progress(start_s, stage_names,
                                          stage_starts=list(run.plan.starts) if run.plan else None,
                                          changes=lambda: run.changes,
                                          plan_end_s=run.plan.duration if run.plan else None)
                         if opts.headless and console.mode() != "quiet" else None)
    run.side.greenlets += collectors().start(run)
    run.settle()


#: The longest a new test waits for the last one's close and files (`after_the_last_test`).
LAST_TEST_WAIT_S = 120.0


def after_the_last_test(run: DbSurgeRun) -> None:
    """At a test's start: wait until the last test's close and files are done, at most `LAST_TEST_WAIT_S`.

    The web UI's Stop closes the ledger and writes the tables in a greenlet of its own (`locust_plugin`), which
    reads the run's current test (``run.ending``, ``run.aggregator``, ``run.rundir``); a Start clicked meanwhile
    would swap in the new test under it. A worker or a first test has nothing to wait for.
    """
    if not run.writes_results or run.rundir is None or run.ending.finish_state == "done":
        return
    log.info("the last test is still writing its results: this one starts once they are written")
    deadline = time.monotonic() + LAST_TEST_WAIT_S
    while run.ending.finish_state != "done" and time.monotonic() < deadline:
        gevent.sleep(0.05)
    if run.ending.finish_state != "done":
        log.warning("the last test's results were not written within %.0f s: this test starts anyway",
                    LAST_TEST_WAIT_S)


def _time_zero(run: DbSurgeRun) -> float:
    """Set the plan's time zero (`run.start_epoch_ns`) and say when it is if that is a while off; epoch seconds.

    Under a plan, time zero is a little ahead (--start-delay) so every worker has the plan before its
    first slot, on a multiple of --align-start when given; a closed-model run starts now.
    """
    opts = run.options
    delay_s = max(0.0, float(opts.start_delay)) if run.plan else 0.0
    run.start_epoch_ns = time.time_ns() + int(delay_s * 1e9)
    if run.plan and opts.align_start:
        step = int(float(opts.align_start) * 1e9)
        run.start_epoch_ns = -(-run.start_epoch_ns // step) * step  # the next multiple of the step
    start_s = run.start_epoch_ns / 1e9
    waiting = console.start_line(start_s, time.time(), align_s=float(opts.align_start or 0) if run.plan else None,
                                 delay_s=delay_s)
    if waiting:  # before the wait: a long --align-start or --start-delay no longer looks like a hang
        log.info(waiting)
    return start_s


def _announce_stages(run: DbSurgeRun) -> list:
    """A console line as each stage of the plan begins (`dbsurge.engine.console.stage_line`).

    The line is made when the stage begins, so a rate override made before then shows its own rate.
    """
    if not run.plan:
        return []
    start_s = run.start_epoch_ns / 1e9
    tasks = []
    for i, st in enumerate(run.plan.starts):
        if math.isfinite(st):
            tasks.append(gevent.spawn_later(max(0.0, start_s + st - time.time()), _say_stage, run, i, start_s))
    return tasks


def _say_stage(run: DbSurgeRun, index: int, start_s: float) -> None:
    log.info(console.stage_line(run.plan, index, start_s, schedule=run.schedule, changes=run.changes))


def _plan_meta(plan: StagePlan | None, start_s: float) -> dict | None:
    if plan is None:
        return None
    d = plan.to_dict()
    for st in d["stages"]:
        st["start_utc"] = utc_iso(start_s + st["start_s"])
        st["end_utc"] = utc_iso(start_s + st["start_s"] + st["duration_s"]) if st["duration_s"] else None
    return d


#: Seconds between two ``resources`` events (`_sample_resources`): a 12-hour run gets 720 lines.
RESOURCE_EVERY_S = 60


def _sample_resources(run: DbSurgeRun, pause: Callable[[], None]) -> None:
    """A ``resources`` event: the generator's memory on this host and the run directory's size.

    A long run is only as good as its generator: one that grows by a few MB an hour or a results disk
    that fills is found here, not at hour eleven. ``rss_mb`` is this process's resident memory plus its
    children's (the ``--processes`` workers; remote workers are not seen), ``run_dir_mb`` the files of the
    run directory and its metrics/. A failure is noted, never fatal. Listing the children reads every
    process of the host (1.1 ms among 109 processes, 2.8 ms for the whole sample on a loaded 2-core
    machine), so ``pause()`` (a `Breather`) lets a local run's users run between the pieces.
    """
    try:
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        pause()
        rss = 0
        for proc in procs:
            try:
                rss += proc.memory_info().rss
            except psutil.Error:  # a worker that just ended
                continue
        pause()
        size = 0
        for folder in (run.rundir.path, run.rundir.path / METRICS):
            with os.scandir(folder) as entries:
                size += sum(e.stat().st_size for e in entries if e.is_file(follow_symlinks=False))
        run.rundir.event("resources", rss_mb=round(rss / 2**20, 1), processes=len(procs),
                         run_dir_mb=round(size / 2**20, 3))
    except Exception as e:  # noqa: BLE001 - a sample is worth less than the run
        run.note_problem("sampling the generator's memory", e)


def _master_loop(run: DbSurgeRun) -> None:
    """Once a second: drain a local run's recorder, flush the timeline through the run directory.

    In a local run this loop shares its process with the pacer and the users, so it lets them run
    between its steps, for three times each step (`Breather`): a second's drain, merge, rows and
    files took 5-20 ms in one stretch, and every slot due in that stretch started late by what was
    left of it (at 500 TPS the lag p99 was 2 ms, all of it in that one pause a second).

    Nothing that fails here stops the loop (`DbSurgeRun.note_problem`); measurement goes on.
    """
    turns = 0
    while not run.ending.finished:
        gevent.sleep(1.0)
        if run.ending.finished:
            return
        if run.ending.disk_full:  # nothing more until the final files, which use the space kept back for them
            continue
        turns += 1
        if turns % RESOURCE_EVERY_S == 1:
            _sample_resources(run, Breather())
        with run.timeline_lock:  # a drained payload or a flushed second is never dropped half way by the end
            if run.ending.finished:
                return
            breathe = Breather()
            if run.measures_here and run.ending.closing is None:
                def merge(payload: dict) -> None:
                    breathe()  # between the part's drain and its merge too
                    run.merge_payload(payload, source="local")

                drain_recorder(run, merge, breathe)
            try:
                flush = run.aggregator.flush(between_seconds=breathe)
                breathe()
                run.rundir.write_flush(flush, pause=breathe)
            except Exception as e:
                run.note_problem("writing the timeline", e)
                continue
        for line in run.side.progress.add(flush.rows) if run.side.progress is not None else []:
            log.info(line)
        console.say_failures(run, flush.failures)
