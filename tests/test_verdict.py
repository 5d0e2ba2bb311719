"""The verdict follows the ledger: its first words and the exit code, over ledgers of every shape (hypothesis).

`dbsurge.engine.verdict.decide` is the one function that turns a run's account into the exit code and the
sentence a person reads. These properties are the README's exit-code table said as rules that hold for any
ledger: planned unknown, 0 or N; ok, failed, dropped, unknown and not sent by every reason; closed and open
model; checks passing and failing; lost workers, a failed start, unwritten results, signals and stops. The
runs that once read OK while they must not are here as examples (a Start that raised, 0 sent, planned null;
a closed run that lost a worker's final account), so hypothesis tries them every time.

And one real run: a closed-model run whose worker is stopped (SIGSTOP) before the end sends no final account;
it must not exit 0, and its verdict says INCOMPLETE and why, not "the plan was delivered".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from runs import REPO, only_run_dir

from dbsurge.engine.verdict import Account, decide, target_stuck
from dbsurge.measure.cells import NOT_SENT_REASONS

HEADS = ("OK:", "DELIVERED WITH FAILURES:", "FAILED:", "INCOMPLETE:", "STOPPED:", "INTERRUPTED (")
TOOL = ("worker_lost", "no_connect", "users_exhausted", "in_flight", "unaccounted")

# how a run ended: (interrupted, exit code override, stop reason)
ENDINGS = [(None, None, None), (("SIGINT", 3.5), 130, None), (("SIGTERM", 1.0), 143, None),
           (("web UI Stop", 2.0), 4, None), (None, 3, "cannot write results to /r (No space left on device)")]


@st.composite
def accounts(draw) -> Account:
    """An `Account` of any shape: a balanced open-model ledger (or one whose planned is None, 0 or off by some),
    a closed-model one, each count 0 or not, every not-sent reason, checks, lag, lost workers and endings."""
    small = st.integers(0, 3) | st.integers(0, 10_000)
    open_model = draw(st.booleans())
    ok, failed, dropped, unknown, over_plan = (draw(small) for _ in range(5))
    failed_timeout = draw(st.integers(0, failed))
    unknown_in_flight = draw(st.integers(0, unknown))
    not_sent = {r: draw(st.sampled_from([0, 0, 1, 7])) for r in NOT_SENT_REASONS}
    balanced = ok + failed + dropped + unknown + sum(not_sent.values()) - over_plan
    planned = draw(st.sampled_from(["balanced", "balanced", None, 0, "off"])) if open_model else None
    if planned == "balanced":
        planned = balanced
    elif planned == "off":
        planned = balanced + draw(st.sampled_from([-1, 1, 5]))
    interrupted, override, stop_reason = draw(st.sampled_from(ENDINGS))
    return Account(
        open_model=open_model, planned=planned, ok=ok, failed=failed, failed_timeout=failed_timeout,
        dropped=dropped, unknown=unknown, unknown_in_flight=unknown_in_flight, not_sent=not_sent,
        over_plan=over_plan, lost_workers=draw(st.sampled_from([0, 0, 1, 2])),
        lag_causes=tuple(draw(st.lists(st.sampled_from(["generator", "cap", "target"]), max_size=3))),
        checks=tuple(draw(st.lists(st.booleans(), max_size=3))), fail_on_lag=draw(st.booleans()),
        exit_code_on_error=draw(st.sampled_from([1, 1, 0, 2, 5])), write_failed=draw(st.booleans()),
        start_failed=draw(st.sampled_from([None, None, None, "ValueError: arrivals 'bogus'"])),
        stop_reason=stop_reason, interrupted=interrupted, exit_code_override=override)


def clean(open_model: bool = True, **kw) -> Account:
    """A healthy run's account, changed by ``kw``."""
    fields = {"open_model": open_model, "planned": 150 if open_model else None, "ok": 150,
              "not_sent": dict.fromkeys(NOT_SENT_REASONS, 0)}
    fields.update(kw)
    return Account(**fields)


def whole(a: Account) -> bool:
    """The README's "delivered and accounted for", said from the ledger alone: planned known (open model) and
    equal to what was sent, dropped, unknown and not sent; something sent; nothing not sent, dropped, unknown
    or beyond the plan; every worker's account in; started, written, not stopped."""
    balanced = not a.open_model or (a.planned is not None and a.planned == a.ok + a.failed + a.dropped + a.unknown
                                    + a.not_sent_total - a.over_plan)
    return (balanced and a.ok + a.failed > 0 and a.not_sent_total == 0 and a.dropped == 0 and a.unknown == 0
            and a.over_plan == 0 and a.lost_workers == 0 and a.start_failed is None and not a.write_failed
            and a.stop_reason is None and a.interrupted is None and a.exit_code_override is None)


def lost_to_the_tool(a: Account) -> bool:
    """What no verdict may call fine, whoever is to blame: the measurement itself is not whole."""
    stuck = target_stuck(a)
    tool_not_sent = sum(n for r, n in a.not_sent.items()
                        if r in TOOL and not (stuck and r in ("users_exhausted", "in_flight")))
    unknown = a.unknown - (a.unknown_in_flight if stuck else 0)
    return bool((a.open_model and a.planned is None) or a.lost_workers or a.start_failed or a.write_failed
                or a.ok + a.failed + a.unknown == 0 or tool_not_sent or a.over_plan or unknown > 0)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(accounts())
# the Start whose arrival process raised in test_start: 0 sent, planned null (the web UI, twice)
@example(clean(planned=None, ok=0, start_failed="ValueError: unknown arrival process 'bogus'"))
@example(clean(planned=None, ok=5040))
# a closed run that lost a worker's final account, and the documents run of `make demo` (closed, healthy)
@example(clean(open_model=False, ok=11275, lost_workers=1))
@example(clean(open_model=False, ok=11275))
@example(clean(planned=0, ok=0))
# a closed run whose two workers went missing in Locust's eyes before they sent anything (a starved host)
@example(clean(open_model=False, ok=0))
@example(clean(failed=3, planned=153, checks=(True,)))
@example(clean(failed=3, planned=153, exit_code_on_error=0))
def test_the_verdicts_first_words_and_exit_code_follow_the_ledger(a: Account) -> None:
    d = decide(a)
    assert d.head.startswith(HEADS), d.head
    head = next(h for h in HEADS if d.head.startswith(h))
    _fine_only_when_whole(a, d, head)
    if lost_to_the_tool(a) or a.stop_reason:
        assert d.code != 0 and d.incomplete and not any(d.checks), (a, d)
        if a.exit_code_override is None:
            assert d.code == 3 and head == "INCOMPLETE:", (a, d)
    if head in ("INCOMPLETE:", "STOPPED:"):
        assert d.code == 3, (a, d)
    if head == "INTERRUPTED (":
        assert d.code == a.exit_code_override and a.interrupted is not None, (a, d)
    if head == "FAILED:":
        assert d.code in (1, a.exit_code_on_error) and d.code != 0, (a, d)
    if not all(a.checks) or (a.failed and not a.checks and a.exit_code_on_error != 0):
        assert d.code != 0, (a, d)
    if a.exit_code_override is not None:
        assert d.code == a.exit_code_override, (a, d)


def _fine_only_when_whole(a: Account, d, head: str) -> None:
    """Exit 0 reads OK or DELIVERED WITH FAILURES, each only of a whole ledger; and a healthy run reads OK."""
    if head == "OK:":  # OK only when everything balanced, planned known, nothing failed: and then exit 0
        assert d.code == 0 and whole(a) and a.failed == 0 and all(a.checks), (a, d)
        assert not (a.fail_on_lag and a.lag_causes), (a, d)
        assert ("the plan was delivered" in d.head) == a.open_model, d.head
        assert a.open_model or "closed model" in d.head, d.head
    if head == "DELIVERED WITH FAILURES:":  # failures, every one allowed by the checks or --exit-code-on-error 0
        assert d.code == 0 and whole(a) and a.failed > 0, (a, d)
        assert (a.checks and all(a.checks)) or (not a.checks and a.exit_code_on_error == 0), (a, d)
    if d.code == 0:
        assert head in ("OK:", "DELIVERED WITH FAILURES:"), (a, d)
    if whole(a) and a.failed == 0 and all(a.checks) and not (a.fail_on_lag and a.lag_causes) \
            and not (a.dropped and not a.lag_causes):
        assert head == "OK:" and d.code == 0, (a, d)


def test_the_reasons_are_named():
    """The INCOMPLETE verdict says why in words a person can act on, and never claims the plan was delivered."""
    start = decide(clean(planned=None, ok=0, start_failed="ValueError: unknown arrival process 'bogus'"))
    assert start.code == 3 and start.head.startswith("INCOMPLETE: the test's start failed (ValueError: unknown "
                                                     "arrival process 'bogus'); the plan's arrivals could not be "
                                                     "counted; nothing was sent"), start.head
    assert decide(clean(planned=None, ok=5040)).head == "INCOMPLETE: the plan's arrivals could not be counted"
    lost = decide(clean(open_model=False, ok=11275, lost_workers=1))
    assert lost.code == 3 and lost.head == "INCOMPLETE: 1 worker lost, its final account missing", lost.head
    closed = decide(clean(open_model=False, ok=11275))
    assert closed.code == 0 and closed.head == ("OK: 11275 operations, none failed, every worker accounted for "
                                                "(closed model: no plan to deliver)"), closed.head
    idle = decide(clean(open_model=False, ok=0))
    assert idle.code == 3 and idle.head == "INCOMPLETE: nothing was sent", idle.head


def _stop_a_worker_mid_run(master: subprocess.Popen, results, seconds_in: float) -> int:
    """SIGSTOP one of the master's two ``--processes`` workers ``seconds_in`` after the test began; its pid."""
    deadline = time.time() + 90
    while time.time() < deadline and not list(results.glob("*/run.json")):  # both workers in: the test began
        time.sleep(0.1)
    children = psutil.Process(master.pid).children()
    assert len(children) == 2 and list(results.glob("*/run.json")), "the test with two workers did not begin"
    time.sleep(seconds_in)
    os.kill(children[0].pid, signal.SIGSTOP)
    return children[0].pid


def _exit_code_written(results) -> int | None:
    """The exit code in the run's run.json once the verdict is written; None before."""
    for path in results.glob("*/run.json"):
        try:
            return json.loads(path.read_text()).get("exit_code")
        except ValueError:  # being rewritten
            return None
    return None


def test_a_closed_run_that_lost_a_workers_final_account_does_not_exit_0(tmp_path, mongo_uri):
    """``locust -f locustfiles/ycsb.py --headless -u 4 -t 8s --processes 2``, one worker stopped (SIGSTOP) 3 s
    in and never resumed until the master is done: its final account never comes. Exit 3, INCOMPLETE, and why
    (not the open model's "the tool lost arrivals": a closed run has no plan to lose arrivals of)."""
    cmd = [sys.executable, "-m", "locust", "-f", f"{REPO}/locustfiles/ycsb.py", "--headless", "-u", "4", "-t", "8s",
           "--processes", "2", "--target", mongo_uri, "--workload-option", "recordcount=2000", "--no-db-sampler",
           "--results-dir", str(tmp_path / "results")]
    master = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stopped = None
    try:
        stopped = _stop_a_worker_mid_run(master, tmp_path / "results", 3.0)
        # Locust's parent waits for every child it forked: the stopped one goes once the verdict is written
        deadline = time.time() + 120
        while time.time() < deadline and _exit_code_written(tmp_path / "results") is None:
            time.sleep(0.2)
        os.kill(stopped, signal.SIGKILL)
        stopped = None
        out, _ = master.communicate(timeout=60)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGKILL)
        if master.poll() is None:
            master.kill()
            master.communicate()
    assert master.returncode == 3, out[-3000:]
    meta = json.loads((only_run_dir(tmp_path / "results") / "run.json").read_text())
    verdict = meta["results"]["verdict"]
    assert meta["exit_code"] == 3 and meta["results"]["lost_workers"], meta["results"]
    assert verdict.startswith("INCOMPLETE: ") and "final account missing" in verdict, verdict
    assert "the plan was delivered" not in out and "OK:" not in out, out[-3000:]
