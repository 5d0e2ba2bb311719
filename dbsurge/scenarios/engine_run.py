"""Scenarios that are load-shaped run the engine: ``dbsurge run`` in a child process.

The child is exactly what a user gets from ``dbsurge run --workload ... --shape ...`` (itself
``locust -f locustfiles/<workload>.py,shapes/<shape>.py``), so the scenario's numbers are the
engine's: arrival-rate pacing, microsecond histograms, workers merged. The scenario picks the run
id and results directory, then reads the run directory the engine wrote (stages.csv,
summary.csv) to print the study's table. A child process keeps Locust's gevent monkey-patching
out of the ``dbsurge`` process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dbsurge.engine.locust_child import run_child
from dbsurge.engine.run_command import move_target_to_env
from dbsurge.rundir import RunDirectory
from dbsurge.rundir.reader import has_meta, read_meta
from dbsurge.rundir.schema import REPETITIONS, STAGES


def run_engine(run_args: list[str]) -> int:
    """``dbsurge run RUN_ARGS`` as a child; Ctrl-C goes to it (it stops the test and writes its results).

    The child runs as ``dbsurge run`` runs Locust (`dbsurge.commands.cli.run_child`: its own process group,
    SIGINT and SIGTERM forwarded once each), and the target goes in the environment, never on a
    command line.
    """
    args, target = move_target_to_env(list(run_args))
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", *args]
    env = {**os.environ, "DBSURGE_FINAL_TABLES": "0"}  # the scenario prints its table; the engine its verdict
    if target is not None:
        env["DBSURGE_TARGET"] = target
    sys.stdout.flush()
    return run_child(cmd, env)


def repetitions(run_dir: Path) -> list[Path] | None:
    """The run directories 1..N of an engine run given ``--repeat N``, or None for a single run."""
    if not (run_dir / REPETITIONS).is_file():
        return None
    return sorted((d for d in run_dir.iterdir() if d.name.isdigit() and (d / STAGES).is_file()),
                  key=lambda d: int(d.name))


def pairs(flag: str, values: list[str] | None) -> list[str]:
    """``["--flag", v1, "--flag", v2, ...]``."""
    out: list[str] = []
    for v in values or []:
        out += [flag, v]
    return out


def annotate_run(run_dir: Path, **fields: Any) -> None:
    """Add fields to the run.json the engine wrote (through `RunDirectory.write_meta`, which redacts)."""
    rd = RunDirectory(run_dir.parent, run_dir.name)
    try:
        rd.meta = read_meta(run_dir) if has_meta(run_dir) else {}
        rd.write_meta(**fields)
    finally:
        rd.close()
