"""A test's start ends the users the last test asked to stop (`dbsurge.load.user.end_the_last_tests_users`).

Locust sizes a spawn by the users alive when it starts. A user still finishing its last slot after a Stop
counted as one of the next test's pool, then ended: the web UI's second Start ran with fewer users than it
asked for, or none. Here Locust's own LocalRunner runs users that, like `DbUser`, linger after a Stop.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# In a child: Locust's gevent monkey patching must not reach this process.
_CHILD = r"""
import sys
import gevent
from locust import User, constant, task
from locust.env import Environment
from locust.user.users import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING
from dbsurge.load.user import end_the_last_tests_users

class Lingering(User):
    wait_time = constant(0)

    def stop(self, force=False):  # like DbUser: finish the slot under way rather than die in it
        if self._state == LOCUST_STATE_RUNNING:
            self._state = LOCUST_STATE_STOPPING
            return False
        return super().stop(force)

    @task
    def work(self):
        while self._state != LOCUST_STATE_STOPPING:
            gevent.sleep(0.01)
        gevent.sleep(1.0)  # the last slot, still under way after the Stop

env = Environment(user_classes=[Lingering])
runner = env.create_local_runner()
if sys.argv[1] == "fixed":
    env.events.test_start.add_listener(lambda **_kw: print("ended", end_the_last_tests_users(runner)))
runner.start(3, 100, wait=True)
gevent.sleep(0.2)
runner.stop()
print("after the stop", runner.user_count)
runner.start(3, 100, wait=True)
gevent.sleep(1.5)  # the first test's users are gone by now, whatever happened
print("second test", runner.user_count)
runner.quit()
"""


@pytest.mark.parametrize("mode, expected", [
    ("fixed", ["ended 0", "after the stop 3", "ended 3", "second test 3"]),
    ("as Locust alone", ["after the stop 3", "second test 0"]),  # what the fix is for: the leftovers took the places
])
def test_a_new_test_gets_the_users_it_asked_for(mode, expected):
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == expected, out.stdout


# Leftovers that end while another is being killed: a killed user's clean-up yields (DbUser closes its session),
# and the others' last slots end in that moment. gevent empties an ended greenlet's args.
_ENDING_MEANWHILE = r"""
import gevent, gevent.event
from locust import User, constant, task
from locust.env import Environment
from locust.user.users import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING
from dbsurge.load.user import end_the_last_tests_users

killing = gevent.event.Event()

class Lingering(User):
    wait_time = constant(0)

    def stop(self, force=False):
        if self._state == LOCUST_STATE_RUNNING:
            self._state = LOCUST_STATE_STOPPING
            return False
        return super().stop(force)

    @task
    def work(self):
        while self._state != LOCUST_STATE_STOPPING:
            gevent.sleep(0.01)
        try:
            killing.wait(10)  # the last slot: it ends as soon as some other leftover is being killed
        except gevent.GreenletExit:
            killing.set()
            gevent.sleep(0.3)  # the session's close
            raise

env = Environment(user_classes=[Lingering])
runner = env.create_local_runner()
errors = []
def on_start(**_kw):
    try:
        print("ended", end_the_last_tests_users(runner))
    except Exception as e:  # Locust would log it and skip the rest of the listener: the test never began
        errors.append(e)
        print("failed", type(e).__name__)
env.events.test_start.add_listener(on_start)
runner.start(3, 100, wait=True)
gevent.sleep(0.2)
runner.stop()
gevent.sleep(0.2)  # each leftover is on its last slot now
runner.start(3, 100, wait=True)
gevent.sleep(0.5)
print("second test", runner.user_count)
runner.quit()
"""


def test_leftovers_that_end_while_another_is_killed_do_not_stop_the_new_test():
    """The third Start right after the second's Stop: one leftover's kill is waited for while the others end. Each
    is chosen before anything yields and they are killed together; no ended greenlet is read (before the fix, its
    emptied args raised IndexError and the new test never began)."""
    out = subprocess.run([sys.executable, "-c", _ENDING_MEANWHILE], capture_output=True, text=True, cwd=ROOT,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ended 0", "ended 3", "second test 3"], out.stdout + out.stderr
