"""A worker's share of the plan is a lease: it sends an arrival only while the master's renewal holds.

The master gives a worker up after `LOST_AFTER_S` without a sign of life and hands its share to
the others; a worker that was only stalled (SIGSTOP, a CPU-starved host, a partition) must have
stopped sending before that, or the database gets the same arrivals twice. So every
`RENEW_S` the worker asks for a renewal (`wire.Renew`) carrying the time it sent the
request on its own monotonic clock; the master answers (`wire.Lease`) only while the worker
holds a share, echoing that time; the worker's lease then runs until ``sent + LEASE_S``.

Why this is safe: the master dates the worker's last sign of life when it *receives* a message
(the renewal or Locust's heartbeat), which is after the worker sent it; the master gives the share
away at the earliest ``LOST_AFTER_S`` later, and only from an arrival due
`protocol.HANDOVER_AHEAD_S` after that. The lease, anchored at the send time, ends
``LOST_AFTER_S - LEASE_S`` = `MARGIN_S` before the master may give up, whatever the network
delayed; an answer that arrives late (queued behind a stall) carries its old send time and renews
nothing. Both ends time it on monotonic clocks, so a wall-clock step moves neither. The margin
covers the clock-offset bound (`CLOCK_BOUND_S`: a worker's stage times may be that far off the
master's, `dbsurge.engine.clocks` warns beyond it) and one heartbeat period (`HEARTBEAT_S`, Locust's:
the master's sign of life is at most that stale when it is judged):

    worker lease (LEASE_S 1.25 s) + CLOCK_BOUND_S 0.25 s + HEARTBEAT_S 0.5 s = master give-up (LOST_AFTER_S 2.0 s)

A worker whose lease lapsed stops at once: its users give their slots back, in-flight operations
finish and are reported as usual. It never grants itself grace. When a renewal holds again (the
master kept its share) it goes on; when the master gave the share away, it gets a new share with
``lost`` set (`dbsurge.engine.protocol`) and books what it could not send.

Only workers lease; a local run (one process, no master to lose) has no lease.
"""

from __future__ import annotations

import logging
import time

import gevent

from dbsurge.engine.wire import Lease, Renew, send
from dbsurge.load.pacer import LAPSE_CATCH_UP_S

log = logging.getLogger("dbsurge")

#: How often a worker asks for a renewal.
RENEW_S = 0.25
#: How long a renewal holds, from the moment the worker sent its request.
LEASE_S = 1.25
#: The clock-offset bound the margin allows for.
CLOCK_BOUND_S = 0.25
#: Locust's heartbeat period (dbsurge sets it: `locust_plugin`).
HEARTBEAT_S = 0.5
#: The margin between the end of a worker's lease and the master's give-up.
MARGIN_S = CLOCK_BOUND_S + HEARTBEAT_S
#: The master gives a worker up after this long without a sign of life.
LOST_AFTER_S = LEASE_S + MARGIN_S

LEASE_NS = int(LEASE_S * 1e9)


def renew_now(run) -> None:
    """Worker: ask the master for a renewal now (stamped with this worker's monotonic clock)."""
    send(run.environment.runner, Renew(sent_ns=time.perf_counter_ns()))


def renew_loop(run) -> None:
    """Worker: ask for a renewal every `RENEW_S` while a pacer runs; say when the lease lapses.

    The end of a lapse is said by `on_lease`, the renewal that ends it.
    """
    lapsed = False
    while True:
        gevent.sleep(RENEW_S)
        pacer = run.pacer
        if pacer is None or pacer.closed is not None or pacer.lease_until_ns is None:
            continue
        renew_now(run)
        if not pacer.leased() and not lapsed and pacer.lease_until_ns:
            lapsed = True
            over_s = (pacer.clock_ns() - pacer.lease_until_ns) / 1e9
            log.error("this worker's lease lapsed %.1f s ago (no renewal from the master): it stopped "
                      "sending load at once and asks for its share again", over_s)
        elif pacer.leased():
            lapsed = False


def on_renew(environment, msg, **_kw) -> None:
    """Master: renew the lease of a worker that holds a share (or is handing it over); others get no answer."""
    run = environment.dbsurge
    cid = msg.node_id
    if cid not in run.shares and cid not in run.workers.departed:
        return  # given up, refused, or never given a share: no lease
    run.workers.last_seen[cid] = run.workers.renewed_at[cid] = time.monotonic()
    send(environment.runner, Lease(sent_ns=Renew.decode(msg.data).sent_ns), client_id=cid)


def lease_end_number(run, cid: str) -> int:
    """Master: the first arrival a worker could not have issued under its last lease.

    Its last renewal was answered at ``renewed_at`` (after the worker asked), so its lease ended
    before ``renewed_at + LEASE_S``, and it issues an arrival no earlier than its due time on the
    worker's clock, which may run up to `CLOCK_BOUND_S` ahead of the master's.
    """
    now = time.monotonic()
    answered = run.workers.renewed_at.get(cid, run.workers.last_seen.get(cid, now))
    elapsed = (run.elapsed_s() or 0.0) - (now - answered) + LEASE_S + CLOCK_BOUND_S
    return run.arrivals().first_at_or_after(run.schedule.cumulative(max(0.0, elapsed)))


def on_lease(environment, msg, **_kw) -> None:
    """Worker: the master renewed this worker's lease; it holds until the request's send time + `LEASE_S`."""
    run = environment.dbsurge
    sent = Lease.decode(msg.data).sent_ns
    if run.pacer is None or not isinstance(sent, int):
        return
    lapse_s = run.pacer.renew_lease(sent + LEASE_NS)
    if lapse_s is None:
        return
    # Said here, not only by `renew_loop`: a starved process may run this renewal before the loop
    # ever saw the lapse, and the arrivals written off must not go unexplained in the run's events.
    if lapse_s > LAPSE_CATCH_UP_S:
        log.error("this worker's lease lapsed for %.1f s, then the master renewed this worker's lease: "
                  "sending again; the arrivals due in the lapse but its last %.1f s are booked not sent "
                  "(worker_lost), not sent late", lapse_s, LAPSE_CATCH_UP_S)
    else:
        log.warning("this worker's lease lapsed for %.1f s, then the master renewed this worker's lease: "
                    "sending again, late (the lag says by how much)", lapse_s)
