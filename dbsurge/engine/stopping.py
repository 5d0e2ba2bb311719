"""How a run stops, and keeps its account while it does.

A run stops in one of these ways, and each closes the ledger the same way (`close_run`): every
pacer stops issuing slots and writes off the untaken rest of its share with a reason, in-flight
operations get up to a drain period to finish, what is still in flight is written off too, and
every worker sends a final account (`wire.Final`) before the master writes the tables.

- the plan ends: ``--drain`` seconds after its last slot, untaken slots are ``users_exhausted``
  (every user was busy until the end) and stuck operations ``in_flight``;
- SIGINT or SIGTERM (`own_signals`, `_on_signal`): the first stops issuing slots, lets in-flight
  operations finish within ``--drain``, writes every file and exits 130 or 143; a second one
  writes what it has at once and exits; before any load, one line and the same codes; after the
  plan's end, nothing is interrupted: the results are written as they would have been;
- the results disk fills up, or the cost cap is passed: like an interrupt, with exit 3;
- the web UI's Stop button: an interruption too (exit 4; Locust stops the users first, so
  in-flight operations are written off), and the UI stays up for the next test;
- the Locust process dies, or ``dbsurge run`` does: `dbsurge.engine.locust_child`.

Local runs use the same messages: Locust's ``LocalRunner.send_message`` calls the listener
directly, so one path serves a single process and a master with workers.

On a worker, the lease (`dbsurge.engine.lease`) stops the load within `lease.LEASE_S` of the last renewal
it asked for, and `master_watchdog` ends the process after `MASTER_GONE_S`: a worker whose master
is gone must not keep loading the database unobserved.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time

import gevent
from gevent import monkey

from dbsurge.base.errors import EXIT_INCOMPLETE, EXIT_SIGNAL
from dbsurge.engine.finish import finish_run
from dbsurge.engine.lease import lease_end_number
from dbsurge.engine.locust_child import parent_gone
from dbsurge.engine.wire import Close, Final, Leave, send
from dbsurge.load.pacer import TARGET_SILENT_S
from dbsurge.rundir.schema import REPORT_HTML
from dbsurge.rundir.writer import remove_temp_files

log = logging.getLogger("dbsurge")


#: A worker that has not heard from its master for this long gives up and exits 3. (It stopped
#: sending long before: its lease, `dbsurge.engine.lease`, lapses within `lease.LEASE_S`.)
MASTER_GONE_S = 15.0
#: Extra time the master waits for final accounts after the drain.
FINAL_WAIT_S = 3.0


# -- the master's side (and a local run's) ------------------------------------------------------------


#: How far ahead of the master's stop an open-ended plan is cut: longer than the close message takes.
CLOSE_LEAD_S = 0.25


def close_run(run, reason: str, *, drain_s: float = 0.0, in_flight_reason: str = "in_flight") -> None:
    """Stop the plan everywhere and collect every worker's final account; blocks at most drain + 3 s.

    Idempotent: the first call decides the reason.
    """
    if run.ending.closing is not None or run.aggregator is None:
        return
    run.ending.closing = reason
    now = time.time()
    agg = run.aggregator
    until = None
    if run.schedule is not None and run.start_epoch_ns is not None:
        elapsed = now - run.start_epoch_ns / 1e9
        if reason != "users_exhausted":
            agg.stop_epoch_s = max(now, run.start_epoch_ns / 1e9)
        if not math.isfinite(run.schedule.end_s):
            # an open-ended plan ends where it stopped; workers get the message a little later, so
            # the cut is that much ahead: no slot they start meanwhile falls beyond the plan
            lead = CLOSE_LEAD_S if run.has_workers else 0.0
            until = run.schedule.cumulative(max(elapsed + lead, 0.0))
        run.ending.until_position = until
    stop_s = None if agg.stop_epoch_s is None or run.start_epoch_ns is None else \
        agg.stop_epoch_s - run.start_epoch_ns / 1e9
    msg = Close(reason=reason, drain_s=float(drain_s), in_flight_reason=in_flight_reason, until_position=until,
                stop_s=stop_s)
    runner = run.environment.runner
    if run.has_workers:
        run.ending.awaiting_final = set(run.shares)
        for cid in list(run.shares):
            send(runner, msg, client_id=cid)
    else:
        run.ending.awaiting_final = {"local"}
        send(runner, msg)
    deadline = time.monotonic() + drain_s + FINAL_WAIT_S
    while run.ending.awaiting_final and time.monotonic() < deadline:
        gevent.sleep(0.05)
    for cid in sorted(run.ending.awaiting_final):
        if run.schedule is not None and run.has_workers:
            run.ending.lease_end.setdefault(cid, lease_end_number(run, cid))  # what it may have issued: `unknown`
        run.safe_event("worker_silent", worker=cid, note="no final account before the deadline")
        log.warning("worker %s sent no final account: its unreported arrivals are booked as worker_lost (unless "
                    "the account comes before the tables are written)", cid)
        run.ending.lost_workers.append(cid)
        run.ending.silent_at_close.add(cid)
    run.ending.awaiting_final = set()


def on_final_message(environment, msg, **_kw) -> None:
    """Master (or local): a worker's final account.

    Locust's master reads its workers' messages one after another without yielding while more are
    waiting, and at the end every worker sends its account at once: 200 merges back to back were a
    stall of the master's loop of 35-60 ms. Each account lets the loop run once, after its merge and
    its bookkeeping (a yield before them could let the close's deadline pass for a worker that answered).
    """
    run = environment.dbsurge
    final = Final.decode(msg.data)
    run.merge_payloads(final.payload, source=msg.node_id)
    if final.in_flight:
        run.safe_event("in_flight_at_end", worker=msg.node_id, count=final.in_flight,
                       oldest_s=round(final.oldest_s, 3), reason=final.reason)
    run.ending.awaiting_final.discard(msg.node_id)
    if msg.node_id in run.ending.silent_at_close and not run.ending.finished:
        # late, but before the tables: a worker that answered is not lost
        run.ending.silent_at_close.discard(msg.node_id)
        run.ending.lost_workers.remove(msg.node_id)  # the entry the deadline added (one lost mid-run stays)
        if msg.node_id not in run.ending.lost_workers:
            run.ending.lease_end.pop(msg.node_id, None)
        run.safe_event("worker_final_late", worker=msg.node_id)
        log.warning("worker %s sent its final account late, before the tables: it is counted, not lost", msg.node_id)
    gevent.sleep(0)


# -- the worker's side (and a local run's) --------------------------------------------------------------


def on_close_message(environment, msg, **_kw) -> None:
    """Worker (or local): stop issuing slots, drain, write off the rest, send the final account."""
    close = Close.decode(msg.data)
    run = environment.dbsurge
    if close.stop_s is not None and run.start_epoch_ns is not None:
        # the stages' windows end at the stop: what completes in the drain after it is in no stage's rate
        run.recorder.cut_stage_windows(run.start_epoch_ns + round(close.stop_s * 1e9))
    final_account(run, close.reason, drain_s=close.drain_s, in_flight_reason=close.in_flight_reason,
                  until_position=close.until_position)


def final_account(run, reason: str, *, drain_s: float, in_flight_reason: str,
                  until_position: float | None = None) -> None:
    """Worker (or local): close the pacer with ``reason``, drain, write off the rest, send the final account."""
    pacer = run.pacer
    in_flight, oldest = 0, 0.0
    if pacer is not None:
        if reason == "users_exhausted" and pacer.target_silent(TARGET_SILENT_S):
            reason = "target_silent"  # every user was waiting on a database that did not answer
        pacer.close(reason, until_position)
        deadline = time.monotonic() + max(0.0, drain_s)
        while pacer.in_flight and time.monotonic() < deadline:
            gevent.sleep(0.02)
        in_flight, oldest = pacer.write_off_in_flight(in_flight_reason)
    payload = run.take_drained()
    send(run.environment.runner, Final(payload=payload, in_flight=in_flight, oldest_s=oldest, reason=in_flight_reason))


def master_watchdog(run) -> None:
    """Worker: exit 3 after `MASTER_GONE_S` without a heartbeat from the master.

    Stopping the load sooner is the lease's work (`dbsurge.engine.lease`): no renewal, no slot.
    """
    runner = run.environment.runner
    while True:
        gevent.sleep(0.1)
        last = getattr(runner, "last_heartbeat_timestamp", None)
        pacer = run.pacer
        if pacer is None or last is None or pacer.closed is not None:
            continue
        silent = time.time() - last
        if silent > MASTER_GONE_S:
            pacer.close("worker_lost")
            log.error("no heartbeat from the master for %.1f s: this worker stops and exits", silent)
            gevent.sleep(0.3)
            run.environment.process_exit_code = EXIT_INCOMPLETE
            runner.quit()
            return


def loop_lag_monitor(run, period_s: float = 0.05) -> None:
    """Measure how late the event loop wakes up, per stage: the generator's own lag, apart from the target's."""
    clock = time.perf_counter_ns
    while True:
        t0 = clock()
        gevent.sleep(period_s)
        stall_us = (clock() - t0) // 1000 - int(period_s * 1e6)
        pacer = run.pacer
        if pacer is not None and stall_us > 1000 and pacer.closed is None:
            t = (clock() - pacer.start_ns) / 1e9
            if 0 <= t < pacer.schedule.end_s:
                run.recorder.loop_lag(pacer.schedule.stage_at(t), int(stall_us))


# -- signals -----------------------------------------------------------------------------------------------

#: The run of this process once the plugin's ``init`` made it; signals are dbsurge's before that too.
_RUN = None
#: The process that took the signals (`own_signals`); a ``--processes`` worker forked from it inherits
#: the handlers and leaves the one line to it.
_OWNER_PID: int | None = None
#: How long a second signal waits for files already being written before it exits (within `SECOND_SIGNAL_S`).
HURRY_WRITE_S = 0.8


def attach(run) -> None:
    """The plugin's ``init``: signals from now on concern this run."""
    global _RUN
    _RUN = run


def own_signals() -> None:
    """At the plugin's import: SIGINT and SIGTERM are dbsurge's in every phase of the process.

    Python-level handlers replace Locust's (its SIGTERM handler shuts down without a drain, SIGINT
    raises KeyboardInterrupt wherever the main greenlet is), and Locust's later
    ``gevent.signal_handler(SIGTERM, ...)`` is kept from taking SIGTERM back (`_keep_from_locust`).
    gevent runs the handlers within 0.3 s. What a signal does depends on where the process is
    (`_on_signal`); before any load it ends the process at once, in one line.
    """
    global _OWNER_PID
    _OWNER_PID = os.getpid()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)
    _keep_from_locust()


class _NotInstalled:
    """What Locust gets back for a SIGINT or SIGTERM handler it asked gevent for: dbsurge has them."""

    def cancel(self) -> None:
        pass


def _keep_from_locust() -> None:
    original = gevent.signal_handler
    if getattr(original, "_dbsurge", False):
        return

    def signal_handler(signum, handler, *args, **kwargs):
        if signum in (signal.SIGINT, signal.SIGTERM):
            return _NotInstalled()
        return original(signum, handler, *args, **kwargs)

    signal_handler._dbsurge = True
    gevent.signal_handler = signal_handler


def install_signal_handlers(run) -> None:
    """Master or local, at each test's start: signals concern this run (`own_signals` did the rest)."""
    attach(run)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)


def _handler(signum, _frame):
    run = _RUN
    if run is None or not run.writes_results or run.aggregator is None:
        _before_any_load(run, signum)
        return
    run.ending.raw_signals = run.ending.raw_signals + 1
    if run.ending.raw_signals > 1:
        # The second signal is honoured here, in the handler, not only in a greenlet: work that holds the
        # event loop (a report's plots, the tables of a plan of thousands of stages) would keep a greenlet
        # from running for as long as it lasts. What is written stays; the report can be built later.
        _exit_within(run, signum, SECOND_SIGNAL_S)
        if run.ending.finish_state in ("report", "done"):
            _exit_now(run, signum)
    gevent.spawn(_on_signal, run, signum)


#: A second SIGINT or SIGTERM ends the process within this many seconds, whatever holds the event loop.
SECOND_SIGNAL_S = 1.0


def _exit_code_after(run, signum: int) -> int:
    code = run.exit_code if run.exit_code is not None else run.ending.exit_code_override
    return EXIT_SIGNAL.get(signum, 128 + signum) if code is None else code


def _exit_now(run, signum: int) -> None:
    """The tables and run.json are written (the report was being built, or all is done): end the process at once."""
    if run.rundir is not None:
        unbuilt = (f"; {REPORT_HTML} not built (`dbsurge report {run.rundir.path}` builds it)"
                   if run.ending.finish_state == "report" else "")
        _say(f"dbsurge: {signal.Signals(signum).name} again: stopping now{unbuilt}")
        remove_temp_files(run.rundir.path)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(_exit_code_after(run, signum))


def _exit_within(run, signum: int, seconds: float) -> None:
    """A native thread (not a greenlet: the loop may be held) that ends the process after ``seconds``."""
    start_thread = monkey.get_original("_thread", "start_new_thread")
    sleep = monkey.get_original("time", "sleep")

    def deadline() -> None:
        sleep(seconds)
        _say(f"dbsurge: {signal.Signals(signum).name} again: the results were not all written within "
             f"{seconds:g} s; exiting with what is on disk")
        if run.rundir is not None:
            remove_temp_files(run.rundir.path)
        os._exit(_exit_code_after(run, signum))

    start_thread(deadline, ())


def _before_any_load(run, signum: int) -> None:
    """No test has started in this process: nothing was sent; end it now, in one line."""
    code = EXIT_SIGNAL.get(signum, 128 + signum)
    if os.getpid() == _OWNER_PID and (run is None or run.writes_results):  # a forked worker: its master says it
        when = "before the load started" if run is None or run.options.headless else "while no test was running"
        _say(f"dbsurge: {signal.Signals(signum).name} {when}: nothing was sent (exit {code})")
    handle = getattr(run, "embedded_handle", None)
    if handle is not None:
        try:
            handle.stop()
        except Exception:  # noqa: BLE001, S110 - the process ends now whatever the server says
            pass
    os._exit(code)


def _say(line: str) -> None:
    """A line on stderr that never fails (the terminal or the parent may be gone)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def install_worker_signal_handlers(run) -> None:
    """Worker: a terminal's Ctrl-C reaches every process of its group, workers too; the master stops
    the run for all of them (and sends the final `wire.Close`), so a worker ignores the first
    SIGINT and only a second one ends it at once. SIGTERM (what a Spot interruption or
    ``docker stop`` sends) makes the worker leave gracefully (`leave`)."""
    def on_int(signum, _frame):
        run.ending.signals += 1
        if run.ending.signals > 1:
            os._exit(EXIT_SIGNAL.get(signum, 128 + signum))

    def on_term(signum, _frame):
        gevent.spawn(leave, run, "SIGTERM")

    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGTERM, on_term)


def leave(run, why: str) -> None:
    """Worker: leave the run gracefully (SIGTERM, a Spot interruption notice).

    Stop taking slots, ask the master to move this worker's share at once (`wire.Leave`); the
    master answers with the arrival from which the others take over (`wire.LeaveOk`); the
    untaken rest before it is booked as ``worker_lost``, in-flight operations get ``--drain`` to
    finish, and the final account goes to the master before the process exits.
    """
    pacer = run.pacer
    if run.leaving or pacer is None or pacer.closed is not None:
        if pacer is None:
            run.environment.runner.quit()
        return
    run.leaving = why
    log.warning("%s: leaving the run (in-flight operations get %g s)", why, float(run.options.drain))
    run.leave_until = None
    send(run.environment.runner, Leave(why=why))
    deadline = time.monotonic() + 3.0
    while run.leave_until is None and time.monotonic() < deadline:
        gevent.sleep(0.02)
    if run.leave_until is None:  # no answer: the others may take over any time; stop now
        pacer.pause()
        until = pacer.next_number
    else:  # send our own arrivals up to the hand-over point, then stop: nothing falls between
        until = run.leave_until
        pacer.stop_at(until)
        t_until = pacer.schedule.time_of(pacer.sequence.position(until))
        deadline = time.monotonic() + max(0.0, min(t_until - (pacer.clock_ns() - pacer.start_ns) / 1e9, 5.0)) + 1.0
        def sent_up_to_until() -> bool:  # every slot before the hand-over is due (taken and started)
            due = (pacer.clock_ns() - pacer.start_ns) / 1e9 >= t_until
            return pacer.next_number >= until and due and not pacer.returned

        while not sent_up_to_until() and time.monotonic() < deadline:
            gevent.sleep(0.02)
    pacer.close("worker_lost", until_position=-1.0)  # only slots it still held back: the rest is the others'
    final_account(run, "worker_lost", drain_s=float(run.options.drain), in_flight_reason="in_flight",
                  until_position=-1.0)
    gevent.sleep(0.3)
    run.environment.runner.quit()


def _on_signal(run, signum: int) -> None:
    """Master or local, a test begun: what a signal means depends on where the run is.

    - running: the first stops it as an interruption (drain, every file, exit 130/143); a SIGTERM
      from the kernel because ``dbsurge run`` died (`dbsurge.engine.locust_child`) says so;
    - the plan has already ended (or the run is stopping for another reason): nothing is
      interrupted; the results are written as they would have been, and the process ends;
    - no test running any more (the web UI after a test): the process ends with that test's code;
    - a second signal, whenever: write what there is and exit at once (`_hurry`).
    """
    name = signal.Signals(signum).name
    run.ending.signals += 1
    if run.ending.signals > 1:
        _hurry(run, name, signum)
        return
    if run.ending.finished and run.ending.finish_state == "done":
        code = run.exit_code if run.exit_code is not None else EXIT_SIGNAL.get(signum, 128 + signum)
        _say(f"dbsurge: {name}: no test running; exiting with the last run's code (exit {code})")
        run.environment.process_exit_code = code
        end_process(run)
        return
    if run.ending.closing is not None:
        why = "the plan has ended" if run.ending.closing == "users_exhausted" and run.ending.interrupted is None \
            else "the run is already stopping"
        _say(f"dbsurge: {name}: {why}; writing its results ({name} again stops at once)")
        finish_run(run)
        _wait_for_files(run, timeout_s=120.0)
        end_process(run)
        return
    by = f"{name}: dbsurge run was gone" if parent_gone() else name
    run.ending.interrupted = (by, run.elapsed_s() or 0.0)
    _say(f"dbsurge: {by}: stopping the run (in-flight operations get up to {float(run.options.drain):g} s; "
         f"{name} again stops at once)")
    run.ending.exit_code_override = EXIT_SIGNAL.get(signum, 128 + signum)
    close_run(run, "interrupted", drain_s=float(run.options.drain), in_flight_reason="interrupted")
    finish_run(run)
    # a signal ends the process, web UI or not (the UI's Stop button is the way to stop and stay)
    end_process(run)


def end_process(run) -> None:
    """End Locust's main loop: with the UI, stopping its server does it; headless, quitting the runner."""
    web_ui = run.environment.web_ui
    gevent.spawn(web_ui.stop if web_ui is not None else run.environment.runner.quit)


def _wait_for_files(run, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while run.ending.finish_state not in (None, "done") and time.monotonic() < deadline:
        gevent.sleep(0.05)


def _hurry(run, name: str, signum: int) -> None:
    """The second signal: book what is still out as interrupted, write what there is, exit at once."""
    _say(f"dbsurge: {name} again: stopping now")
    if run.ending.interrupted is None and run.ending.closing is None:
        run.ending.interrupted = (name, run.elapsed_s() or 0.0)
    if run.ending.interrupted is not None:
        run.ending.exit_code_override = EXIT_SIGNAL.get(signum, 128 + signum)
    pacer = run.pacer
    if pacer is not None:  # a local run: its own pacer holds the rest
        if pacer.closed is None:
            pacer.close("interrupted", run.ending.until_position)
        pacer.write_off_in_flight("interrupted")  # the first signal's drain may still be waiting on them
        run.merge_payload(run.recorder.drain(), source="local")
        run.feed_locust_stats()
    # a master's workers that have not sent their final account: what they held was interrupted, not lost
    run.ending.unreported_reason = "interrupted"
    run.ending.awaiting_final = set()
    if run.ending.finished:  # the tables are being written: give them a moment, not the report
        if run.ending.finish_state == "writing":
            _wait_for_files(run, timeout_s=HURRY_WRITE_S)
    else:
        finish_run(run, hurry=True)
    if run.rundir is not None:
        remove_temp_files(run.rundir.path)
    code = run.exit_code if run.exit_code is not None else run.ending.exit_code_override
    if code is None:
        code = EXIT_SIGNAL.get(signum, 128 + signum)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def stop_for(run, reason: str, message: str, code: int) -> None:
    """Stop the run because of a problem of dbsurge's own (disk full, cost cap): tables, then exit ``code``."""
    if run.ending.closing is not None:
        return
    sys.stderr.write(f"dbsurge: {message}: stopping the load\n")
    sys.stderr.flush()
    run.ending.stop_reason = message
    run.ending.exit_code_override = code
    close_run(run, reason, drain_s=min(float(run.options.drain), 2.0), in_flight_reason="interrupted")
    finish_run(run)
    _quit(run)


def _quit(run) -> None:
    runner = run.environment.runner
    if run.options.headless or not run.has_workers:
        gevent.spawn(runner.quit)
    else:
        gevent.spawn(runner.stop)
