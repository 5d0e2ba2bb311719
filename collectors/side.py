"""Side collectors attached to a run: database samplers, CloudWatch polling, the cost guard.

They run on the master (or the local runner) as greenlets beside the load, on their own
connections, and write under ``metrics/`` in the run directory. A failing collector is logged
and recorded in events.jsonl; the run goes on. What can be checked before the load (presets,
credentials, region, the cap) is checked in `preflight_side`, with one clear line on failure.
"""

from __future__ import annotations

import logging

import gevent

from dbsurge.base.errors import UserError

log = logging.getLogger("dbsurge")

#: The database sampler of each target kind: a class name in `dbsurge.collectors.samplers`, imported only when a
#: run starts one. A kind without one (DynamoDB-API: its counters are CloudWatch's; CQL) runs without a sampler.
SAMPLERS: dict[str, str] = {}


def register_sampler(kind: str, class_name: str) -> None:
    """Name the sampler class for targets of ``kind``; a kind registered twice is a programming error."""
    existing = SAMPLERS.get(kind)
    if existing is not None:
        raise ValueError(f"a database sampler for {kind!r} targets is already registered: {existing}")
    SAMPLERS[kind] = class_name


register_sampler("postgres", "PostgresSampler")
register_sampler("mongo", "MongoSampler")


def preflight_side(run) -> None:
    """Check --cloudwatch and --cost-cap before any load; keeps the CloudWatch collector on the run."""
    opts = run.options
    run.side.cloudwatch = None
    if opts.cloudwatch:
        from dbsurge.collectors.cloudwatch import cloudwatch_collector

        run.side.cloudwatch = cloudwatch_collector(opts.cloudwatch, opts.cloudwatch_region,
                                                   opts.cloudwatch_endpoint_url)
    if opts.cost_cap is not None and not opts.cost_cap > 0:
        raise UserError(f"--cost-cap must be a positive number of dollars, not {opts.cost_cap}")


def _events_to(rundir):
    def write(event: dict) -> None:
        event = dict(event)
        kind = event.pop("kind", "error")
        event.pop("time_utc", None)
        rundir.event(kind, **event)

    return write


def start_side_collectors(run) -> list:
    """Start what the options ask for; returns the started collectors (each has ``stop()``)."""
    started = []
    opts = run.options
    events = _events_to(run.rundir)
    sampler_name = SAMPLERS.get(run.target.kind)  # None: no sampler for this kind of database
    if not getattr(opts, "no_db_sampler", False) and sampler_name is not None:
        try:
            from dbsurge.collectors import samplers

            cls = getattr(samplers, sampler_name)
            sampler = cls(run.target, run.rundir.path, events=events)  # the run's target, options and all
            sampler.start()
            started.append(sampler)
        except Exception as e:
            log.warning("database sampler not started: %s", e)
            events({"kind": "error", "source": "db_sampler", "message": str(e)})
    if run.side.cloudwatch is not None:
        from dbsurge.collectors.cloudwatch import CloudWatchPoller

        poller = CloudWatchPoller(run.side.cloudwatch, run.rundir.path, interval_s=opts.cloudwatch_interval,
                                  events=events, started=run.start_epoch_ns / 1e9)
        poller.start()
        started.append(poller)
    if opts.cost_cap is not None:
        started.append(gevent.spawn(_cost_guard_loop, run))
    return started


def _cost_guard_loop(run) -> None:
    """Every 10 s, estimate the cost so far; past the cap, record it and stop the test."""
    from dbsurge.collectors.cost import CostGuard

    guard = CostGuard(run.options.cost_cap, run_dir=run.rundir.path, runners=run.options.runner or [],
                      presets=run.options.cloudwatch or [])
    while not run.ending.finished:
        gevent.sleep(10.0)
        try:
            exceeded = guard.check()
        except Exception as e:  # an estimate that fails must not stop the load; say so
            log.warning("cost guard: %s", e)
            continue
        if exceeded:
            event = dict(guard.event())
            event.pop("time_utc", None)
            run.rundir.event(event.pop("kind", "cost_cap"), **event)
            log.error("cost cap of $%.2f passed: stopping the test", run.options.cost_cap)
            runner = run.environment.runner
            gevent.spawn(runner.quit if run.options.headless else runner.stop)
            return


def stop_side_collectors(run) -> None:
    for task in run.side.greenlets:
        try:
            if hasattr(task, "stop"):
                task.stop()
            else:
                task.kill(block=False)
        except Exception as e:
            log.warning("side collector did not stop cleanly: %s", e)
