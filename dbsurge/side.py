"""Side collectors attached to a run: database samplers, CloudWatch polling, the cost guard.

They run on the master (or the local runner) as greenlets beside the load, on their own
connections, and write under ``metrics/`` in the run directory. A failing collector is logged
and recorded in events.jsonl; the run goes on.
"""

from __future__ import annotations

import logging

log = logging.getLogger("dbsurge")


def start_side_collectors(run) -> list:
    """Start what the options ask for; returns the started collectors (each has ``stop()``)."""
    started = []
    opts = run.options
    if not getattr(opts, "no_db_sampler", False):
        try:
            from .collectors.samplers import MongoSampler, PostgresSampler

            cls = PostgresSampler if run.target.kind == "postgres" else MongoSampler
            sampler = cls(run.target_uri, run.rundir.path)
            sampler.start()
            started.append(sampler)
        except Exception as e:
            log.warning("database sampler not started: %s", e)
            run.rundir.event("error", source="db_sampler", message=str(e))
    return started


def stop_side_collectors(run) -> None:
    for task in getattr(run, "side_tasks", []):
        try:
            if hasattr(task, "stop"):
                task.stop()
            else:
                task.kill(block=False)
        except Exception as e:
            log.warning("side collector did not stop cleanly: %s", e)
