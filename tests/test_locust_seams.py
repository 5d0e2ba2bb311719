"""Every place dbsurge reaches into Locust beyond its events, named, and checked against the Locust installed.

dbsurge extends Locust through its events and messages where it can (STYLE.md), but a few things have no event:
dbsurge replaces or wraps them. pyproject.toml pins Locust to the range the suite has run on; this test is what
to run first on a new Locust: a seam that moved fails here by name, not as a hang in a distributed run.

Each row: the seam, where dbsurge uses it, and the check that it is still there in the shape dbsurge expects.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import pytest

# Only looked at, no run: imported without gevent's patching of this process, and the variable taken back at
# once (left set, every Locust this process starts later would run unpatched; tests/runs.py says more).
_SET_HERE = "LOCUST_SKIP_MONKEY_PATCH" not in os.environ
os.environ.setdefault("LOCUST_SKIP_MONKEY_PATCH", "1")
try:
    import gevent
    import locust
    import locust.runners
    import locust.stats
    from locust.event import EventHook
    from locust.runners import LocalRunner, MasterRunner, WorkerNode, WorkerRunner
    from locust.stats import StatsEntry
    from locust.user import users
    from locust.web import WebUI
finally:
    if _SET_HERE:
        os.environ.pop("LOCUST_SKIP_MONKEY_PATCH", None)

REPO = Path(__file__).resolve().parent.parent

#: (seam, the dbsurge module that uses it, the text there that uses it)
SEAMS = [
    ("MasterRunner.start", "dbsurge/engine/protocol.py", "runner.start = start"),
    ("MasterRunner.clients (WorkerNodes)", "dbsurge/engine/admission.py", "runner.clients = AdmittedWorkerNodes"),
    ("gevent.signal_handler", "dbsurge/engine/stopping.py", "gevent.signal_handler"),
    ("WebUI.update_template_args / template_args", "dbsurge/ui/web.py", "web_ui.update_template_args"),
    ("the swarm view, locust.swarm", "dbsurge/ui/web.py", 'view_functions["locust.swarm"]'),
    ("runners.WORKER_REPORT_INTERVAL, HEARTBEAT_INTERVAL, HEARTBEAT_LIVENESS", "dbsurge/locust_plugin.py",
     "locust.runners.HEARTBEAT_LIVENESS"),
    ("stats.bucket_response_time", "dbsurge/locust_plugin.py", "locust.stats.bucket_response_time"),
    ("EventHook._handlers", "dbsurge/locust_plugin.py", "hook._handlers"),
    ("StatsEntry._cache_response_times", "dbsurge/load/locust_stats.py", "_cache_response_times"),
    ("User._state and LOCUST_STATE_*", "dbsurge/load/user.py", "_state"),
]


@pytest.mark.parametrize("seam, module, text", SEAMS, ids=[s[0] for s in SEAMS])
def test_each_seam_is_still_used_where_this_list_says(seam: str, module: str, text: str) -> None:
    """The list is the code's: a seam dbsurge stopped using (or moved) is taken off it, not left to rot."""
    assert text in (REPO / module).read_text(encoding="utf-8"), (seam, module)


def test_the_runners_start_and_clients_are_there_to_wrap() -> None:
    assert callable(MasterRunner.start) and list(inspect.signature(MasterRunner.start).parameters)[:3] == \
        ["self", "user_count", "spawn_rate"]
    source = inspect.getsource(MasterRunner.__init__)
    assert "self.clients" in source and "WorkerNodes" in source
    assert hasattr(locust.runners, "WorkerNodes") and "self.id" in inspect.getsource(WorkerNode.__init__)


def test_the_module_constants_dbsurge_sets_still_exist() -> None:
    for name in ("WORKER_REPORT_INTERVAL", "HEARTBEAT_INTERVAL", "HEARTBEAT_LIVENESS"):
        assert hasattr(locust.runners, name), name
        # read at use (module global), not bound at import into a default argument: set at import, it counts
        assert re.search(rf"\b{name}\b", inspect.getsource(locust.runners)), name
    assert callable(locust.stats.bucket_response_time)
    assert "bucket_response_time(" in inspect.getsource(StatsEntry), "Locust no longer buckets through the function"


def test_gevent_signal_handler_is_a_function_to_wrap() -> None:
    assert callable(gevent.signal_handler)
    assert "signal_handler" in inspect.getsource(locust.runners) or \
        "signal_handler" in inspect.getsource(__import__("locust.main", fromlist=["main"]))


def test_event_hooks_keep_their_handlers_in_a_list() -> None:
    hook = EventHook()

    def a():
        return None

    hook.add_listener(a)
    assert list(hook._handlers) == [a]
    hook.remove_listener(a)
    assert list(hook._handlers) == []


def test_stats_entries_cache_response_times_by_second() -> None:
    params = list(inspect.signature(StatsEntry._cache_response_times).parameters)
    assert params == ["self", "t"], params
    assert "use_response_times_cache" in inspect.getsource(StatsEntry.__init__)


def test_the_users_state_and_its_names() -> None:
    assert (users.LOCUST_STATE_RUNNING, users.LOCUST_STATE_STOPPING) == ("running", "stopping")
    assert "_state" in inspect.getsource(users.User.__init__) and "_state" in inspect.getsource(users.User.run)


def test_the_web_uis_template_args_and_swarm_view() -> None:
    assert callable(WebUI.update_template_args)
    source = inspect.getsource(WebUI)
    assert "self.template_args" in source
    assert re.search(r"def swarm\(", source) and '"/swarm"' in source


def test_local_and_worker_runners_count_the_users_alive_at_a_start() -> None:
    """`end_the_last_tests_users` exists because a start sizes its spawn by the users still alive."""
    assert "user_greenlets" in inspect.getsource(locust.runners.Runner)
    assert "self.user_count" in inspect.getsource(LocalRunner._start) + inspect.getsource(WorkerRunner)


def test_the_pin_is_the_locust_installed() -> None:
    """pyproject.toml pins Locust to a range this suite has run on, and the one installed is in it."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    low, high = re.search(r'"locust>=([\d.]+),<([\d.]+)"', pyproject).groups()

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])

    assert key(low) <= key(locust.__version__) < key(high), (low, locust.__version__, high)
