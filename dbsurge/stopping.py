"""How a run stops, and keeps its account while it does.

A run stops in one of these ways, and each closes the ledger the same way (`close_run`): every
pacer stops issuing slots and writes off the untaken rest of its share with a reason, in-flight
operations get up to a drain period to finish, what is still in flight is written off too, and
every worker sends a final account (``dbsurge:final``) before the master writes the tables.

- the plan ends: ``--drain`` seconds after its last slot, untaken slots are ``users_exhausted``
  (every user was busy until the end) and stuck operations ``in_flight``;
- SIGINT or SIGTERM (`install_signal_handlers`): the first stops issuing slots, lets in-flight
  operations finish within ``--drain``, writes every file and exits 130 or 143; a second one
  writes what it has at once and exits;
- the results disk fills up, or the cost cap is passed: like an interrupt, with exit 3;
- the web UI's Stop button: Locust stops the users first, so in-flight operations are written off.

Local runs use the same messages: Locust's ``LocalRunner.send_message`` calls the listener
directly, so one path serves a single process and a master with workers.

On a worker, the lease (`dbsurge.lease`) stops the load within `lease.LEASE_S` of the last renewal
it asked for, and `master_watchdog` ends the process after `MASTER_GONE_S`: a worker whose master
is gone must not keep loading the database unobserved.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import time

import gevent

from .errors import EXIT_INCOMPLETE, EXIT_SIGNAL
from .finish import finish_run
from .lease import lease_end_number

log = logging.getLogger("dbsurge")


#: A worker that has not heard from its master for this long gives up and exits 3. (It stopped
#: sending long before: its lease, `dbsurge.lease`, lapses within `lease.LEASE_S`.)
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
    if run.closing is not None or run.aggregator is None:
        return
    run.closing = reason
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
            lead = CLOSE_LEAD_S if run.role == "master" else 0.0
            until = run.schedule.cumulative(max(elapsed + lead, 0.0))
        run.until_position = until
    msg = {"reason": reason, "drain_s": float(drain_s), "in_flight_reason": in_flight_reason, "until_position": until}
    runner = run.environment.runner
    if run.role == "master":
        run.awaiting_final = set(run.shares)
        for cid in list(run.shares):
            runner.send_message("dbsurge:close", msg, client_id=cid)
    else:
        run.awaiting_final = {"local"}
        runner.send_message("dbsurge:close", msg)
    deadline = time.monotonic() + drain_s + FINAL_WAIT_S
    while run.awaiting_final and time.monotonic() < deadline:
        gevent.sleep(0.05)
    for cid in sorted(run.awaiting_final):
        if run.schedule is not None and run.role == "master":
            run.lease_end.setdefault(cid, lease_end_number(run, cid))  # what it may have issued: `unknown`
        run.safe_event("worker_silent", worker=cid, note="no final account before the deadline")
        log.warning("worker %s sent no final account: its unreported arrivals are booked as worker_lost", cid)
        run.lost_workers.append(cid)
        run.silent_at_close.add(cid)
    run.awaiting_final = set()


def on_final_message(environment, msg, **_kw) -> None:
    """Master (or local): a worker's final account."""
    run = environment.dbsurge
    run.merge_payload(msg.data["payload"], source=msg.node_id)
    if msg.data.get("in_flight"):
        run.safe_event("in_flight_at_end", worker=msg.node_id, count=msg.data["in_flight"],
                       oldest_s=round(msg.data.get("oldest_s", 0.0), 3), reason=msg.data.get("reason"))
    run.awaiting_final.discard(msg.node_id)
    if msg.node_id in run.silent_at_close and not run.finished:
        # late, but before the tables: a worker that answered is not lost
        run.silent_at_close.discard(msg.node_id)
        run.lost_workers.remove(msg.node_id)  # the entry the deadline added (one lost mid-run stays)
        if msg.node_id not in run.lost_workers:
            run.lease_end.pop(msg.node_id, None)
        run.safe_event("worker_final_late", worker=msg.node_id)


# -- the worker's side (and a local run's) --------------------------------------------------------------


def on_close_message(environment, msg, **_kw) -> None:
    """Worker (or local): stop issuing slots, drain, write off the rest, send the final account."""
    run = environment.dbsurge
    d = msg.data
    final_account(run, d["reason"], drain_s=d["drain_s"], in_flight_reason=d["in_flight_reason"],
                  until_position=d.get("until_position"))


def final_account(run, reason: str, *, drain_s: float, in_flight_reason: str,
                  until_position: float | None = None) -> None:
    pacer = run.pacer
    in_flight, oldest = 0, 0.0
    if pacer is not None:
        pacer.close(reason, until_position)
        deadline = time.monotonic() + max(0.0, drain_s)
        while pacer.in_flight and time.monotonic() < deadline:
            gevent.sleep(0.02)
        in_flight, oldest = pacer.write_off_in_flight(in_flight_reason)
    payload = run.recorder.drain()
    run.environment.runner.send_message(
        "dbsurge:final", {"payload": payload, "in_flight": in_flight, "oldest_s": oldest, "reason": in_flight_reason})


def master_watchdog(run) -> None:
    """Worker: exit 3 after `MASTER_GONE_S` without a heartbeat from the master.

    Stopping the load sooner is the lease's work (`dbsurge.lease`): no renewal, no slot.
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
            log.error("dbsurge: no heartbeat from the master for %.1f s: this worker stops and exits", silent)
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


def install_signal_handlers(run) -> None:
    """Master or local: SIGINT and SIGTERM stop the run gracefully, a second one at once.

    Python-level handlers replace Locust's (its SIGTERM handler shuts down without a drain, and
    SIGINT raises KeyboardInterrupt wherever the main greenlet is); gevent runs them within 0.3 s.
    """
    def handler(signum, _frame):
        gevent.spawn(_on_signal, run, signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def install_worker_signal_handlers(run) -> None:
    """Worker: a terminal's Ctrl-C reaches every process of its group, workers too; the master stops
    the run for all of them (and sends the final ``dbsurge:close``), so a worker ignores the first
    SIGINT and only a second one ends it at once. SIGTERM (what a Spot interruption or
    ``docker stop`` sends) makes the worker leave gracefully (`leave`)."""
    def on_int(signum, _frame):
        run.signals += 1
        if run.signals > 1:
            import os

            os._exit(EXIT_SIGNAL.get(signum, 128 + signum))

    def on_term(signum, _frame):
        gevent.spawn(leave, run, "SIGTERM")

    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGTERM, on_term)


def leave(run, why: str) -> None:
    """Worker: leave the run gracefully (SIGTERM, a Spot interruption notice).

    Stop taking slots, ask the master to move this worker's share at once (``dbsurge:leave``); the
    master answers with the arrival from which the others take over (``dbsurge:leave_ok``); the
    untaken rest before it is booked as ``worker_lost``, in-flight operations get ``--drain`` to
    finish, and the final account goes to the master before the process exits.
    """
    pacer = run.pacer
    if run.leaving or pacer is None or pacer.closed is not None:
        if pacer is None:
            run.environment.runner.quit()
        return
    run.leaving = why
    log.warning("dbsurge: %s: leaving the run (in-flight operations get %g s)", why, float(run.options.drain))
    run.leave_until = None
    run.environment.runner.send_message("dbsurge:leave", {"why": why})
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
    name = signal.Signals(signum).name
    run.signals += 1
    if run.signals == 1 and run.interrupted is None:
        run.interrupted = (name, run.elapsed_s() or 0.0)
        sys.stderr.write(f"dbsurge: {name}: stopping the run (in-flight operations get up to "
                         f"{float(run.options.drain):g} s; {name} again stops at once)\n")
        sys.stderr.flush()
        run.exit_code_override = EXIT_SIGNAL.get(signum, 128 + signum)
        close_run(run, "interrupted", drain_s=float(run.options.drain), in_flight_reason="interrupted")
        finish_run(run)
        # a signal ends the process, web UI or not (the UI's Stop button is the way to stop and stay):
        # with the UI, stopping its server ends Locust's main loop, which quits the runner and exits
        web_ui = run.environment.web_ui
        gevent.spawn(web_ui.stop if web_ui is not None else run.environment.runner.quit)
        return
    # the second signal: write what we have and go
    sys.stderr.write(f"dbsurge: {name} again: stopping now\n")
    sys.stderr.flush()
    if run.interrupted is None:
        run.interrupted = (name, run.elapsed_s() or 0.0)
    run.exit_code_override = EXIT_SIGNAL.get(signum, 128 + signum)
    if run.pacer is not None and run.pacer.closed is None:
        run.pacer.close("interrupted", run.until_position)
        run.pacer.write_off_in_flight("interrupted")
        run.merge_payload(run.recorder.drain(), source="local")
    run.awaiting_final = set()
    finish_run(run, hurry=True)
    code = run.exit_code if run.exit_code is not None else run.exit_code_override
    sys.stdout.flush()
    sys.stderr.flush()
    import os

    os._exit(code)


def stop_for(run, reason: str, message: str, code: int) -> None:
    """Stop the run because of a problem of dbsurge's own (disk full, cost cap): tables, then exit ``code``."""
    if run.closing is not None:
        return
    sys.stderr.write(f"dbsurge: {message}: stopping the load\n")
    sys.stderr.flush()
    run.stop_reason = message
    run.exit_code_override = code
    close_run(run, reason, drain_s=min(float(run.options.drain), 2.0), in_flight_reason="interrupted")
    finish_run(run)
    _quit(run)


def _quit(run) -> None:
    runner = run.environment.runner
    if run.options.headless or run.role == "local":
        gevent.spawn(runner.quit)
    else:
        gevent.spawn(runner.stop)
