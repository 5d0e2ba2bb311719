"""The master-worker protocol: who gets a share of the plan, and the messages that carry it.

Every message is a typed Locust custom message (`dbsurge.engine.wire`: each one's name, payload, encoder,
decoder and both ends); a local run registers the ``close`` and ``final`` ends on its `LocalRunner`,
whose ``send_message`` calls the listener directly, so one path serves both.

Membership: a share goes only to a worker heard from within `LOST_AFTER_S` that proved the join
token (`dbsurge.engine.membership`); a lost worker's share moves to the others from an arrival number
`HANDOVER_AHEAD_S` ahead (`number_at`), and the master remembers where (`lost_from`) so the worker,
if it comes back, books exactly what it could not send (its share message says ``lost``). A worker
sends only while its lease holds (`dbsurge.engine.lease`), which ends before the master may give up on it.
Clocks: `dbsurge.engine.clocks`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time

import gevent
from locust.rpc import Message

from dbsurge import __version__
from dbsurge.base.errors import UserError
from dbsurge.base.versions import build
from dbsurge.config import credentials
from dbsurge.engine import stopping, wire
from dbsurge.engine.clocks import ROUND, wall_ns
from dbsurge.engine.hosts import hello_fields
from dbsurge.engine.lease import LEASE_S, LOST_AFTER_S, lease_end_number, on_lease, on_renew, renew_now
from dbsurge.engine.membership import proof
from dbsurge.engine.run_state import DbSurgeRun
from dbsurge.engine.wire import TOKEN_HINT, Setup
from dbsurge.plan.segments import override_label
from dbsurge.plan.stage_plan import parse_duration

log = logging.getLogger("dbsurge")


#: A worker whose last sign of life is older than `LOST_AFTER_S` is lost: its share moves to the others,
#: from the arrival due this long after the moment it was given up. Its lease (`dbsurge.engine.lease`) ended
#: before that moment, so both never send the same arrival.
HANDOVER_AHEAD_S = 0.5
#: A joining worker's offer is made again when unanswered for this long ...
JOIN_ACK_TIMEOUT_S = 2.0
#: ... each time twice as far ahead, up to this far.
MAX_JOIN_LEAD_S = 8.0
#: The others must have this long to get their narrower share before the hand-over arrival is due.
COMMIT_MARGIN_S = 0.2


def _worker_ids(runner, run: DbSurgeRun | None = None) -> list[str]:
    """Workers that may take a share: connected, heard from within `LOST_AFTER_S`, proven when a token is required."""
    ids = sorted(c.id for c in runner.clients.values() if c.state != "missing")
    if run is not None:
        now = time.monotonic()
        book = run.workers
        ids = [c for c in ids if now - book.last_seen.get(c, now) <= LOST_AFTER_S and c not in book.departed]
        if run.membership is not None:
            ids = run.membership.members(ids)
    return ids


def setup_for(run: DbSurgeRun, index: int, count: int, max_lag_s: float | None, worker: str | None = None) -> Setup:
    """What worker ``worker`` (share ``index`` of ``count``) is told: the plan, its share, its clock, no password."""
    return Setup(
        target_uri=credentials.strip_password(run.config.target_uri), target_options=run.config.target_options,
        workload_options=run.config.workload_options, operations=run.config.operation_weights,
        plan=run.plan.to_dict() if run.plan else None, start_epoch_ns=run.start_epoch_ns, index=index, count=count,
        arrivals=run.options.arrivals, seed=run.options.seed, max_lag_s=max_lag_s, changes=list(run.changes),
        op_timeout_s=run.config.op_timeout_s, clock_offset_ns=run.clocks.offset_ns(worker) if worker else 0,
        credentials=run.config.credentials,
    )


def share_plan(run: DbSurgeRun, max_lag_s: float | None) -> None:
    """Master at test start: admit the proven workers, measure their clocks, send each its setup.

    `await_admissions` ran before time zero was set (`dbsurge.engine.lifecycle.begin_run`)."""
    runner = run.environment.runner
    if run.membership is not None:
        for cid in list(run.membership.refused):
            if cid in runner.clients:
                _evict(run, cid)  # refused before the start: no users for it either
    workers = _worker_ids(runner, run)
    _measure_clocks(run, workers)
    run.shares = {cid: i for i, cid in enumerate(workers)}
    run.workers.share_history = {cid: [(0, i, len(workers))] for cid, i in run.shares.items()}
    _note_shares(run, 0.0)
    for cid, i in run.shares.items():
        wire.send(runner, setup_for(run, i, len(workers), max_lag_s, cid), client_id=cid)
        run.rundir.event("worker_join", worker=cid, index=i, count=len(workers), **run.hosts.fields(cid))


def register_worker(runner) -> None:
    """Worker: its end of every message, then its hello (see `dbsurge.engine.stopping` too)."""
    for message, handler in ((wire.Setup, _on_setup_message), (wire.Rate, _on_rate_message),
                             (wire.Share, _on_share_message), (wire.Challenge, _on_challenge_message),
                             (wire.Clock, _on_clock_ping), (wire.LeaveOk, _on_leave_ok),
                             (wire.Refused, _on_refused_message), (wire.Lease, on_lease)):
        wire.listen(runner, message, handler)
    wire.listen(runner, wire.Close, stopping.on_close_message, concurrent=True)
    # ask for a challenge once our handlers are in place (a challenge sent at Locust's own
    # "client_ready" could arrive before them and be dropped as an unknown message); say where we run
    wire.send(runner, wire.Hello(**hello_fields(runner.master_host, runner.master_port)))


def register_master(runner) -> None:
    """Master: its end of every message (see `dbsurge.engine.stopping` too)."""
    wire.listen(runner, wire.Final, stopping.on_final_message)
    for message, handler in ((wire.Proof, _on_proof_message), (wire.Hello, _on_hello_message),
                             (wire.Clock, _on_clock_answer), (wire.Leave, _on_leave_message),
                             (wire.Renew, on_renew), (wire.ShareOk, _on_share_ok)):
        wire.listen(runner, message, handler)


def register_local(runner) -> None:
    """A local run: both ends of the close and the final account, as a master and its worker would."""
    wire.listen(runner, wire.Final, stopping.on_final_message)
    wire.listen(runner, wire.Close, stopping.on_close_message)


#: A stall of the master's event loop beyond this is logged: its answers to lease renewals come that late.
MASTER_STALL_WARN_S = 0.5


def membership_loop(run: DbSurgeRun) -> None:
    """Master: every 0.25 s, move shares when a worker is lost or joins (detection within `LOST_AFTER_S`);
    every 10 s, measure the workers' clocks again. How late each 0.25 s wake-up comes is the master's own
    loop stall (merging, writing, a slow disk): its worst is in run.json (``master_loop_stall_max_ms``)."""
    next_clock = time.monotonic() + 10.0
    while not run.ending.finished:
        asleep = time.monotonic()
        gevent.sleep(0.25)
        _note_master_stall(run, time.monotonic() - asleep - 0.25)
        if time.monotonic() >= next_clock:
            next_clock = time.monotonic() + 10.0
            for _ in range(ROUND):  # a round, of which the minimum-delay sample counts (`ClockBook`)
                for cid in list(run.shares):
                    wire.send(run.environment.runner, wire.Clock(t1=wall_ns()), client_id=cid)
                gevent.sleep(0.02)
        try:
            refuse_silent_workers(run)
        except Exception as e:  # noqa: BLE001 - membership must not stop the run
            run.note_problem("refusing a silent worker", e)
        if run.ending.closing is not None or run.plan is None:
            continue
        try:
            _reshare_if_needed(run)
        except Exception as e:
            run.note_problem("re-sharing the plan", e)


def _note_master_stall(run: DbSurgeRun, stall_s: float) -> None:
    if stall_s <= run.master_stall_max_s:
        return
    run.master_stall_max_s = stall_s
    if stall_s > MASTER_STALL_WARN_S:
        log.warning("the master's event loop stalled %.2f s (its workers' lease renewals wait as long; "
                    "a lease lapses after %.2f s)", stall_s, LEASE_S)


def number_at(run: DbSurgeRun, elapsed_s: float) -> int:
    """The first arrival number due at or after plan time ``elapsed_s``."""
    return run.arrivals().first_at_or_after(run.schedule.cumulative(max(0.0, elapsed_s)))


def await_admissions(run: DbSurgeRun, timeout_s: float = 10.0) -> None:
    """Give connected workers a moment to say hello (and answer their challenge, with a token), then refuse the
    silent ones (10 s: a worker on a loaded host answers late, and refusing it would leave --expect-workers
    waiting for it). Called before time zero is set, so the wait costs the plan nothing."""
    if run.membership is None:
        return
    m = run.membership

    def undecided() -> list[str]:
        ids = [c.id for c in run.environment.runner.clients.values() if c.state != "missing"]
        return [w for w in ids if w not in m.proven and w not in m.refused]

    deadline = time.monotonic() + timeout_s
    while undecided() and time.monotonic() < deadline:
        gevent.sleep(0.05)
    for cid in undecided():
        _refuse(run, cid, _silent_reason(m))


#: What a worker of a build the master does not share is told to do (its one line); else `wire.TOKEN_HINT`.
BUILD_HINT = "install the master's dbsurge on this host: the same wheel on every host"


def another_build(hello: wire.Hello) -> str | None:
    """Why a worker's dbsurge is not the master's build (None when it is the same).

    Every host must number, time and report the plan's arrivals the same way for exactly once to
    hold, and the version number stays the same between builds: the build is compared
    (`dbsurge.base.versions.build`)."""
    theirs = hello.build
    if theirs == build():
        return None
    if not theirs:
        return f"an older dbsurge that names no build; the master runs {__version__} build {build()}"
    return (f"another dbsurge build: the worker runs {hello.version} build {theirs}, the master "
            f"{__version__} build {build()}")


def _refuse(run: DbSurgeRun, cid: str, why: str, hint: str = TOKEN_HINT) -> None:
    run.membership.refused[cid] = why
    run.membership.nonces.pop(cid, None)
    log.warning("worker %s refused (%s): it gets no share of the plan and sends no load; told to quit",
                run.hosts.name(cid), why)
    run.safe_event("worker_refused", worker=cid, reason=why, **run.hosts.fields(cid))
    with contextlib.suppress(Exception):  # tell the worker why, so it ends with a line instead of idling
        wire.send(run.environment.runner, wire.Refused(reason=why, hint=hint), client_id=cid)
    if run.environment.runner.state in ("spawning", "running"):
        _evict(run, cid)  # before the start it counts for nothing (`Membership.admitted`); `share_plan` evicts it


def _on_refused_message(environment, msg, **_kw):
    """The master refused this worker (its join token, its build): say so in one line and end, with no load sent."""
    runner = environment.runner
    refused = wire.Refused.decode(msg.data)
    sys.stderr.write(f"dbsurge: the master at {runner.master_host}:{runner.master_port} refused this worker "
                     f"({refused.reason}): {refused.hint}\n")
    sys.stderr.flush()
    os._exit(2)  # nothing was sent: no account to close, and Locust would only wait for a plan


def _evict(run: DbSurgeRun, cid: str) -> None:
    """Tell a refused worker to quit and forget it, so Locust dispatches it no users: a worker with another
    locustfile would crash on a user class it lacks (``KeyError: 'OrdersUser'``), and one of ours idles."""
    runner = run.environment.runner
    node = runner.clients.get(cid)
    try:
        runner.server.send_to_client(Message("quit", None, cid))
    except Exception as e:  # noqa: BLE001 - it may be gone already; it is refused either way
        log.debug("could not tell worker %s to quit: %s", cid, e)
    if node is not None:
        del runner.clients[cid]
        _undispatch(runner, [node])


def _undispatch(runner, nodes: list) -> None:
    """Take `nodes` out of Locust's (private) dispatcher, never its last worker: Locust's dispatch over no
    worker at all does not end (its own ``remove_worker`` leaves that case untested), and a run with no
    member sends nothing anyway."""
    dispatcher = getattr(runner, "_users_dispatcher", None)
    if dispatcher is None:
        return
    ids = {n.id for n in nodes}
    remaining = [w for w in getattr(dispatcher, "_worker_nodes", []) if w.id not in ids]
    if not remaining:
        return
    for node in nodes:
        dispatcher.remove_worker(node)


def guard_dispatch(run: DbSurgeRun) -> None:
    """Master: Locust dispatches users only to admitted workers (hello read, the token proved if one is asked).

    Locust hands users to a worker the moment it connects to a running test (``client_ready``), before
    its hello is read or it could answer the challenge; a worker of another locustfile crashes on them.
    Every dispatch (`MasterRunner.start`) first takes undecided and refused workers out of Locust's
    dispatcher; a worker admitted later is put back (`_admit`).
    """
    runner = run.environment.runner
    original = runner.start

    def start(*args, **kwargs):
        _undispatch(runner, [n for n in runner.clients.values() if n.id not in run.membership.proven])
        return original(*args, **kwargs)

    runner.start = start


def _admit(run: DbSurgeRun, cid: str) -> None:
    """A worker was admitted during a running test: give it users as Locust would have at connect."""
    runner = run.environment.runner
    dispatcher = getattr(runner, "_users_dispatcher", None)
    node = runner.clients.get(cid)
    if dispatcher is None or node is None or runner.state not in ("running", "spawning"):
        return
    dispatcher.add_worker(worker_node=node)
    if not dispatcher.dispatch_in_progress:
        runner.start(runner.target_user_count, runner.spawn_rate)


#: A connected worker that has not said hello (and proved the join token, when one is asked) after this
#: long is refused (a plain Locust worker, or one of another locustfile, never answers: it has no dbsurge
#: plugin to).
PROOF_WAIT_S = 5.0


def refuse_silent_workers(run: DbSurgeRun, now: float | None = None) -> None:
    """Master, during the run: refuse every connected worker that is undecided after `PROOF_WAIT_S`."""
    m = run.membership
    if m is None:
        return
    now = time.monotonic() if now is None else now
    for cid in [c.id for c in run.environment.runner.clients.values() if c.state != "missing"]:
        if cid in m.proven or cid in m.refused:
            continue
        first = m.first_seen.setdefault(cid, now)
        if now - first >= PROOF_WAIT_S:
            _refuse(run, cid, _silent_reason(m))


def _silent_reason(m) -> str:
    """Why a worker that stayed undecided is refused."""
    if m.token is None:
        return "never said hello (no dbsurge plugin, or another locustfile)"
    return "did not answer the join challenge (no dbsurge plugin, or another locustfile)"


def _has_users(runner, cid: str) -> bool:
    node = runner.clients.get(cid)
    return bool(node is not None and sum((node.user_classes_count or {}).values()))


def _reshare_if_needed(run: DbSurgeRun) -> None:
    """Move shares when a worker was lost (at once) or a new one can take a share (`_propose_join`).

    A worker that joins mid-run gets a share only once Locust has given it users (without
    ``--enable-rebalancing`` it never does): a share without users would be slots nobody takes.
    """
    env = run.environment
    alive = set(_worker_ids(env.runner, run))
    survivors = sorted(alive & set(run.shares))
    if set(run.shares) - alive and survivors:
        elapsed = run.elapsed_s() or 0.0
        from_number = number_at(run, elapsed + HANDOVER_AHEAD_S)
        for cid in sorted(set(run.shares) - alive):
            _book_lost(run, cid, from_number)
        run.offers.pending = None  # a proposal made for the old membership is stale
        _commit_shares(run, survivors, from_number, elapsed + HANDOVER_AHEAD_S)
        return
    joiners = sorted(w for w in alive - set(run.shares) if _has_users(env.runner, w))
    if joiners and run.shares:
        _propose_join(run, joiners[0])


def _propose_join(run: DbSurgeRun, cid: str) -> None:
    """Offer a joining (or rejoining) worker its share from an arrival ahead; the others keep theirs until it
    acknowledges (`_on_share_ok`), so no arrival falls between them (a hole) or comes due before it knows (a burst).

    One proposal at a time. Unanswered for `JOIN_ACK_TIMEOUT_S`, or answered too late, it is made again
    twice as far ahead (a rejoining worker's messages may still be stuck in TCP's retransmission backoff).
    """
    p = run.offers.pending
    now = time.monotonic()
    if p is not None and now - p["sent_at"] < JOIN_ACK_TIMEOUT_S:
        return  # waiting for an answer
    again = p is not None and p["worker"] == cid
    lead_s = min(p["lead_s"] * 2, MAX_JOIN_LEAD_S) if again else HANDOVER_AHEAD_S
    workers = sorted(set(run.shares) | {cid})
    elapsed = run.elapsed_s() or 0.0
    from_number = number_at(run, elapsed + lead_s)
    i = workers.index(cid)
    # "lost": it holds arrivals that are not its own (its old share, or an earlier offer never taken up);
    # it books as not sent only its own old share's, below where that share was given away
    lost = cid in run.workers.lost_from or cid in run.offers.offered_to
    write_off_until = run.workers.lost_from.get(cid, run.offers.offered_to.setdefault(cid, from_number))
    run.join_proposals += 1
    run.offers.pending = {"worker": cid, "workers": workers, "from_number": from_number,
                          "from_elapsed": elapsed + lead_s, "lead_s": lead_s, "sent_at": now,
                          "first_at": p["first_at"] if again else now, "attempts": p["attempts"] + 1 if again else 1,
                          "proposal": run.join_proposals}
    _send_share(run, cid, i, len(workers), from_number, lost=lost, write_off_until=write_off_until,
                proposal=run.join_proposals)


def _send_share(run: DbSurgeRun, cid: str, index: int, count: int, from_number: int, **offer) -> None:
    """Worker ``cid``'s share from ``from_number`` on, with the setup it starts from if it has no plan yet;
    ``offer``: a join offer's `wire.Share` fields (``lost``, ``write_off_until``, ``proposal``)."""
    max_lag_s = parse_duration(run.options.max_lag) if run.options.max_lag else None
    setup = setup_for(run, index, count, max_lag_s, cid)
    wire.send(run.environment.runner, wire.Share(index=index, count=count, from_number=from_number, setup=setup,
                                                 **offer), client_id=cid)


def _on_share_ok(environment, msg, **_kw):
    """Master: a joining worker took its offered share; the others now narrow theirs from the same arrival."""
    run: DbSurgeRun = environment.dbsurge
    p, ok, cid = run.offers.pending, wire.ShareOk.decode(msg.data), msg.node_id
    if p is None or cid != p["worker"] or ok.proposal != p["proposal"] or run.ending.closing is not None:
        return
    elapsed = run.elapsed_s() or 0.0
    if (ok.late or number_at(run, elapsed + COMMIT_MARGIN_S) >= p["from_number"]
            or set(run.shares) != set(p["workers"]) - {cid}):
        p["sent_at"] = -math.inf  # too late for the others to switch in time, or the members changed: again
        return
    run.offers.pending = None
    run.workers.lost_from.pop(cid, None)
    run.offers.offered_to.pop(cid, None)
    _commit_shares(run, p["workers"], p["from_number"], p["from_elapsed"], offered=cid)
    waited = time.monotonic() - p["first_at"]
    run.safe_event("worker_join", worker=cid, index=run.shares[cid], count=len(run.shares),
                   from_arrival=p["from_number"], lead_s=round(p["lead_s"], 3), waited_s=round(waited, 3),
                   attempts=p["attempts"], **run.hosts.fields(cid))
    if cid in run.clocks.best:  # measured since its hello (`_on_hello_message`)
        run.safe_event("clock", worker=cid, **run.clocks.describe()[cid])
    log.info("worker %s joined: it takes share %d of %d from arrival %d (acknowledged after %.2f s, %d offer(s))",
             run.hosts.name(cid), run.shares[cid], len(run.shares), p["from_number"], waited, p["attempts"])


def _commit_shares(run: DbSurgeRun, workers: list[str], from_number: int, from_elapsed_s: float,
                   offered: str | None = None) -> None:
    """The new shares from ``from_number`` on, sent to every member (but ``offered``, which has its share)."""
    run.shares = {w: i for i, w in enumerate(workers)}
    for w, i in run.shares.items():
        run.workers.share_history.setdefault(w, []).append((from_number, i, len(workers)))
    _note_shares(run, from_elapsed_s)
    for w, i in run.shares.items():
        if w != offered:
            _send_share(run, w, i, len(workers), from_number)
    run.safe_event("reshare", workers=len(workers), from_arrival=from_number)


def _note_shares(run: DbSurgeRun, from_elapsed_s: float) -> None:
    """workers.csv's ``assigned``: the plan's rate over the workers sharing it from that moment on."""
    run.aggregator.note_shares(run.start_epoch_ns / 1e9 + from_elapsed_s, len(run.shares))


def _book_lost(run: DbSurgeRun, cid: str, from_number: int) -> None:
    """A worker gone silent: its share is given away from ``from_number``; the ledger books the rest."""
    run.ending.lost_workers.append(cid)
    run.workers.lost_from[cid] = from_number
    run.ending.lease_end[cid] = min(lease_end_number(run, cid), from_number)
    run.workers.share_history.setdefault(cid, []).append((from_number, -1, 0))
    silent = time.monotonic() - run.workers.last_seen.get(cid, time.monotonic())
    run.safe_event("worker_lost", worker=cid, from_arrival=from_number, silent_s=round(silent, 3),
                   **run.hosts.fields(cid))
    log.warning("worker %s lost: its share of the rate moves to the others; its unreported arrivals "
                "are booked as not sent (worker_lost)", run.hosts.name(cid))


def _on_leave_message(environment, msg, **_kw):
    """Master: a worker leaves gracefully: the others take its share from just ahead, at once."""
    run: DbSurgeRun = environment.dbsurge
    cid = msg.node_id
    if run.plan is None or cid not in run.shares or run.ending.closing is not None:
        wire.send(environment.runner, wire.LeaveOk(until_number=None), client_id=cid)
        return
    why = wire.Leave.decode(msg.data).why
    run.workers.departed.add(cid)
    from_number = number_at(run, (run.elapsed_s() or 0.0) + 0.3)
    run.safe_event("worker_leaving", worker=cid, why=why, from_arrival=from_number, **run.hosts.fields(cid))
    log.warning("worker %s is leaving (%s): its share moves to the others from arrival %d", run.hosts.name(cid),
                why, from_number)
    wire.send(environment.runner, wire.LeaveOk(until_number=from_number), client_id=cid)
    run.workers.share_history.setdefault(cid, []).append((from_number, -1, 0))
    run.offers.pending = None  # an offer made for the old membership is stale (it is made again)
    workers = [w for w in _worker_ids(environment.runner, run) if w in run.shares]
    if workers:
        _commit_shares(run, workers, from_number, (run.elapsed_s() or 0.0) + 0.3)


def _on_leave_ok(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    until = wire.LeaveOk.decode(msg.data).until_number
    run.leave_until = int(until) if until is not None else (run.pacer.next_number if run.pacer else 0)


# -- clocks (see dbsurge.engine.clocks) ---------------------------------------------------------------------------


def _measure_clocks(run: DbSurgeRun, workers: list[str], exchanges: int = 5, timeout_s: float = 1.0) -> None:
    """Master, before the plan is shared: a few NTP-style exchanges with each worker."""
    runner = run.environment.runner
    for _ in range(exchanges):
        for cid in workers:
            wire.send(runner, wire.Clock(t1=wall_ns()), client_id=cid)
        gevent.sleep(0.02)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(c not in run.clocks.best for c in workers):
        gevent.sleep(0.02)
    for cid, d in run.clocks.describe().items():
        if cid in workers:
            run.safe_event("clock", worker=cid, **d)


def _on_clock_ping(environment, msg, **_kw):
    """Worker: answer the master's clock exchange with its own receive and send times."""
    t2 = wall_ns()
    t1 = wire.Clock.decode(msg.data).t1
    wire.send(environment.runner, wire.Clock(t1=t1, t2=t2, t3=wall_ns()))


def _on_clock_answer(environment, msg, **_kw):
    """Master: a worker's answer to its clock exchange (`wire.Clock`), with its own receive time."""
    t4 = wall_ns()
    c = wire.Clock.decode(msg.data)
    environment.dbsurge.clocks.add(msg.node_id, c.t1, c.t2, c.t3, t4)


# -- membership: the join challenge (see dbsurge.engine.membership) ----------------------------------------------


def _on_hello_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    hello = wire.Hello.decode(msg.data)
    run.workers.last_seen[msg.node_id] = time.monotonic()
    run.hosts.note(msg.node_id, hello)
    other = another_build(hello)
    if other is not None:
        _refuse(run, msg.node_id, other, hint=BUILD_HINT)
        return
    if msg.node_id not in run.clocks.best and run.start_epoch_ns is not None:
        # a worker joining a running test: its clock is known before it gets a share (`setup_for`)
        for _ in range(3):
            wire.send(environment.runner, wire.Clock(t1=wall_ns()), client_id=msg.node_id)
    if run.membership.greet(msg.node_id):  # no token: the hello, with the master's build, admits it
        _admit(run, msg.node_id)
        return
    nonce = run.membership.challenge(msg.node_id)
    if nonce is not None:
        wire.send(environment.runner, wire.Challenge(nonce=nonce), client_id=msg.node_id)


def _on_proof_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    if run.membership.answer(msg.node_id, wire.Proof.decode(msg.data).proof):
        # a --processes master's workers are its own children (it listens on loopback): no news to the user
        own_children = getattr(environment.parsed_options, "processes", None)
        (log.debug if own_children else log.info)("worker %s proved the join token", msg.node_id)
        _admit(run, msg.node_id)
    else:
        _refuse(run, msg.node_id, run.membership.refused.get(msg.node_id, "refused"))


def _on_challenge_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    token = run.local_options.get("join_token")
    nonce = wire.Challenge.decode(msg.data).nonce
    answer = proof(token, nonce, environment.runner.client_id) if token else None
    wire.send(environment.runner, wire.Proof(proof=answer))


# -- worker side messages --------------------------------------------------------------------------------


def _on_setup_message(environment, msg, **_kw):
    _take_setup(environment.dbsurge, Setup.decode(msg.data))


def _take_setup(run: DbSurgeRun, s: Setup, join: tuple[int, int, int] | None = None) -> None:
    """A worker's pacer from the master's setup; ``join`` (index, count, from_number): mid-run, at the hand-over."""
    try:
        credentials.configure_worker(run, s)  # the password from this worker's own sources
    except UserError as e:
        log.error("%s", e)
        return
    run.changes = list(s.changes)
    run.make_pacer(s)
    run.start_pre_drain()
    if join is not None and run.pacer is not None:
        run.pacer.join_at(*join)
    if run.pacer is not None:
        run.pacer.require_lease()  # no slot before the master's first renewal (`dbsurge.engine.lease`)
        renew_now(run)
    run.ready.set()


def _on_rate_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    rate = wire.Rate.decode(msg.data)
    run.apply_rate_change(rate.at_s, rate.rate_tps, rate.scale)


def _on_share_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    share = wire.Share.decode(msg.data)
    if run.pacer is None:  # a worker that joined mid-run: its share starts at the hand-over, not at arrival 0
        _take_setup(run, share.setup, join=(share.index, share.count, share.from_number))
    elif run.pacer.paused or share.lost:  # given up, or it gave up: write off what it could not send
        n = run.pacer.rejoin(share.index, share.count, share.from_number, share.write_off_until)
        if n:
            log.warning("back in touch with the master: %d slots due meanwhile are booked as not sent "
                        "(worker_lost)", n)
    else:
        run.pacer.reshare(share.index, share.count, share.from_number)
    if share.proposal is not None:  # an offer: say whether it came in time; the lease follows at once
        pacer = run.pacer
        late = pacer is None or (pacer.clock_ns() - pacer.start_ns) / 1e9 > \
            pacer.schedule.time_of(pacer.sequence.position(int(share.from_number))) - 0.05
        wire.send(environment.runner, wire.ShareOk(proposal=share.proposal, late=late))
        renew_now(run)


# -- live rate changes (web UI, HTTP endpoint) ----------------------------------------------------------


def change_rate(run: DbSurgeRun, *, rate_tps: float | None = None, scale: float | None = None) -> dict:
    """Override the arrival rate from now on, on every worker (`dbsurge.plan.segments`); returns the override.

    The override is numbered (1, 2, ...) and said three ways: an event, run.json, and a line on
    the master's console.
    """
    if run.schedule is None or run.start_epoch_ns is None:
        raise UserError("no arrival-rate plan is running: start a test with an arrival-rate shape first")
    if run.ending.closing is not None:
        raise UserError("the run is stopping: its rate can no longer change")
    at_s = max(0.0, (run.elapsed_s() or 0.0) + 0.2)  # a little ahead, so every worker applies it on time
    run.apply_rate_change(at_s, rate_tps, scale)
    if run.has_workers:
        for cid in run.shares:
            wire.send(run.environment.runner, wire.Rate(at_s=at_s, rate_tps=rate_tps, scale=scale), client_id=cid)
    n = len(run.changes)
    label = override_label(n, at_s, rate_tps, scale, run.start_epoch_ns / 1e9)
    rate_now = round(run.schedule.rate_at(at_s), 3)
    run.rundir.event("rate_change", at_s=at_s, rate_tps=rate_tps, scale=scale, override=n, label=label,
                     rate_now_tps=rate_now)
    run.rundir.write_meta(rate_changes=run.changes)
    log.info("rate %s (t = %.1f s; now %g TPS)", label, at_s, rate_now)
    return {"at_s": at_s, "rate_tps": rate_tps, "scale": scale, "override": n, "label": label,
            "rate_now_tps": rate_now}
