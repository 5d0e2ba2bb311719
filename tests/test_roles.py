"""The roles (`dbsurge.engine.roles`): chosen once by the runner, each with its own fields; each test a new object."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# In a child: dbsurge.engine.roles imports Locust, whose gevent monkey patching must not reach this process.
_CHILD = r"""
import argparse
from locust import User
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner
from dbsurge.engine import roles

class U(User):
    abstract = False

options = argparse.Namespace(target=None, target_secret=None, target_secret_endpoint_url=None, join_token=None,
                             spot_watch=False, imds_endpoint=None)

def made(runner_class):
    env = Environment(user_classes=[U], parsed_options=options)
    env.runner = runner_class.__new__(runner_class)  # the role is chosen by the runner's class alone
    return roles.new_run(env, options)

local, master, worker = made(LocalRunner), made(MasterRunner), made(WorkerRunner)
print(type(local).__name__, type(master).__name__, type(worker).__name__)
print(local.writes_results, master.writes_results, worker.writes_results)
print(local.has_workers, master.has_workers, worker.has_workers, local.measures_here, master.measures_here)
print(hasattr(local, "last_seen"), hasattr(worker, "last_seen"), hasattr(master, "leave_until"),
      hasattr(worker, "leave_until"), dict(local.shares), master.membership)
first_test, first_ending, first_offers = master.test, master.ending, master.offers
first_ending.closing, first_ending.lost_workers = "interrupted", ["w1"]
master.capped_stages.add(2)
master.problems["writing event x: OSError"] = 3
master.exit_code = 3
master.side.greenlets.append("a greenlet of the first test")
master.rundir = "the first test's run directory"
master.new_test()
print(master.ending is not first_ending, master.offers is not first_offers, master.ending.closing,
      master.ending.lost_workers, first_ending.closing)
print(master.capped_stages, master.problems, master.exit_code, master.side.greenlets)
print(master.test is not first_test, type(master.test).__name__, first_test.rundir, master.rundir, master.aggregator,
      master.start_epoch_ns, type(local.test).__name__)
"""


def test_the_role_is_chosen_once_by_the_runner_and_a_new_test_gets_a_new_ending():
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "LocalRun MasterRun WorkerRun",
        "True True False",
        "False True False True False",
        "False False False True {} None",
        "True True None [] interrupted",
        "set() {} None []",
        "True MasterLoadTest the first test's run directory None None None LoadTest",
    ]


def test_no_more_than_two_role_checks_by_name():
    """What differs between the roles is said by the role classes, not by comparing a role's name."""
    checks = []
    for folder in ("dbsurge", "collectors", "locustfiles", "shapes"):
        for path in (ROOT / folder).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"role (==|!=|in)|\.role\b", line):
                    checks.append(f"{path.relative_to(ROOT)}:{n}")
    assert len(checks) <= 2, checks
