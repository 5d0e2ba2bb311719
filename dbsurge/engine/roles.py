"""The three roles a dbsurge process plays, a class each, chosen once where the run is made (`new_run`).

As Locust has a `LocalRunner`, a `MasterRunner` and a `WorkerRunner`, a dbsurge process holds one of:

- `LocalRun`: one process runs the load and keeps the results; it sends itself the close and the final
  account (`dbsurge.engine.wire.Close`, `dbsurge.engine.wire.Final`) through the same handlers a master and its worker use.
- `MasterRun`: shares the plan with its workers and keeps the results; it owns who is a member, their
  shares and leases (`dbsurge.engine.protocol`, `dbsurge.engine.lease`), and each test's join offers (`JoinOffers`).
- `WorkerRun`: sends its share of the load; its options of this host, its leaving, its pre-drain.

Each registers its end of the control messages and starts its own greenlets (`start`, at Locust's
``init``) and begins a test its own way (`begin_test`, at ``test_start``). What they share is
`dbsurge.engine.run_state.DbSurgeRun`; the code they share asks the class attributes there
(``writes_results``, ``has_workers``, ``measures_here``), never a role's name. Reached one way, as
``environment.dbsurge``.
"""

from __future__ import annotations

import logging
import time

import gevent
import locust.runners
from locust.runners import MasterRunner, WorkerRunner

from dbsurge.engine import locust_child, protocol, stopping
from dbsurge.engine.admission import admit_only_members
from dbsurge.engine.lease import renew_loop
from dbsurge.engine.lifecycle import begin_run
from dbsurge.engine.membership import Membership
from dbsurge.engine.run_state import (
    DbSurgeRun,
    LoadTest,
    OfTheTest,
    ShipToMaster,
    freeze_what_lives_for_the_run,
    pre_drain_loop,
)
from dbsurge.engine.spot_notices import start_spot_watcher


def new_run(environment, own_options=None) -> DbSurgeRun:
    """The run of this process, of the role its Locust runner plays (chosen here, once)."""
    runner = environment.runner
    role = WorkerRun if isinstance(runner, WorkerRunner) else MasterRun if isinstance(runner, MasterRunner) \
        else LocalRun
    return role(environment, own_options)


class LocalRun(DbSurgeRun):
    """One process: it runs the load and keeps the results."""

    role = "local"
    measures_here = True

    def __init__(self, environment, own_options=None):
        super().__init__(environment, own_options)
        self._feed_locust_tables()

    def start(self, runner, *, forked: bool = False) -> None:
        protocol.register_local(runner)
        gevent.spawn(stopping.loop_lag_monitor, self)

    def begin_test(self) -> None:
        begin_run(self)

    def hand_out_plan(self, max_lag_s: float | None) -> None:
        self.make_pacer(protocol.setup_for(self, 0, 1, max_lag_s))
        self.ready.set()


class JoinOffers:
    """The master's join offers in one test (`dbsurge.engine.protocol._propose_join`); a new one at each test's start."""

    def __init__(self) -> None:
        self.pending: dict | None = None  # the share offered to a joining worker, not yet acknowledged
        # workers offered a share they have not taken up yet -> the first offer's first arrival
        self.offered_to: dict[str, int] = {}


class MasterLoadTest(LoadTest):
    """A master's test: a `LoadTest` and its join offers."""

    def __init__(self, problems: dict[str, int] | None = None) -> None:
        super().__init__(problems)
        self.offers = JoinOffers()


class WorkerBook:
    """The master's record of each worker by id: its last sign of life, its lease renewals, its shares over
    time, where a lost worker's share was given away, and who left gracefully (`dbsurge.engine.protocol`, `dbsurge.engine.lease`)."""

    def __init__(self) -> None:
        self.last_seen: dict[str, float] = {}  # its last sign of life (monotonic)
        self.renewed_at: dict[str, float] = {}  # when its last lease renewal was answered
        # its shares in order, (from_number, index, count); index -1: none from there on
        self.share_history: dict[str, list[tuple[int, int, int]]] = {}
        self.lost_from: dict[str, int] = {}  # the arrival from which its share was given away
        self.departed: set[str] = set()  # workers that left gracefully


class MasterRun(DbSurgeRun):
    """The master: admits workers, shares the plan with them, keeps their leases, and keeps the results."""

    role = "master"
    has_workers = True
    test_class = MasterLoadTest
    offers = OfTheTest()

    def __init__(self, environment, own_options=None):
        super().__init__(environment, own_options)
        self.membership: Membership | None = None
        self.shares: dict[str, int] = {}
        self.workers = WorkerBook()
        self.join_proposals = 0
        self.master_stall_max_s = 0.0  # the worst event-loop stall (`protocol.membership_loop`)

    def start(self, runner, *, forked: bool = False) -> None:
        self.membership = Membership(self.options.join_token)
        admit_only_members(runner, self.membership)
        # Locust sends the master's parsed options to every connected worker, proven or not: not the token
        self.options.join_token = None
        self.environment.parsed_options.join_token = None
        protocol.guard_dispatch(self)
        protocol.register_master(runner)
        self.environment.events.heartbeat_sent.add_listener(self._on_heartbeat_sent)

    def _on_heartbeat_sent(self, client_id, timestamp, **_kw) -> None:
        """Locust answers each worker heartbeat; that answer dates the worker's last sign of life."""
        self.workers.last_seen[client_id] = time.monotonic()  # monotonic: a wall-clock step must not hasten a give-up

    def begin_test(self) -> None:
        begin_run(self)

    def admit_workers(self) -> None:
        protocol.await_admissions(self)

    def workers_at_start(self) -> int:
        return self.environment.runner.worker_count

    def hand_out_plan(self, max_lag_s: float | None) -> None:
        protocol.share_plan(self, max_lag_s)

    def test_greenlets(self) -> list:
        return [gevent.spawn(protocol.membership_loop, self)]

    def settle(self) -> None:
        # What the master holds now (Locust, gevent, pandas, a node and a clock book per worker) lives for
        # the run: out of the cycle collector's sight, as a worker's is (`DbSurgeRun.make_pacer`). Left in
        # it, every full collection walked it all: 27-48 ms with 200 workers during the load, 72-82 ms at
        # the end, the worst of the master's loop stalls (bench/findings.md, stop 38).
        freeze_what_lives_for_the_run()

    def share_history_of(self, worker: str) -> list[tuple[int, int, int]] | None:
        return self.workers.share_history.get(worker)


class WorkerRun(DbSurgeRun):
    """A worker: sends its share of the plan while its lease holds, and reports to its master."""

    role = "worker"
    writes_results = False

    def __init__(self, environment, own_options=None):
        super().__init__(environment, own_options)
        self._feed_locust_tables()
        # this host's own settings: Locust overwrites parsed_options with the master's at every spawn
        own = own_options or self.options
        self.local_options = {k: getattr(own, k, None) for k in ("join_token", "spot_watch", "imds_endpoint")}
        self.leaving: str | None = None  # why it is leaving
        self.leave_until: int | None = None  # the master's hand-over point (`dbsurge.engine.stopping.leave`)
        self.spot_watcher = None  # the EC2 interruption-notice watcher (--spot-watch)

    def start(self, runner, *, forked: bool = False) -> None:
        protocol.register_worker(runner)
        if forked:
            locust_child.die_with_parent()
        stopping.install_worker_signal_handlers(self)
        logging.getLogger().addHandler(ShipToMaster(self.recorder))
        gevent.spawn(stopping.master_watchdog, self)
        gevent.spawn(renew_loop, self)
        gevent.spawn(stopping.loop_lag_monitor, self)
        if runner.worker_state in (locust.runners.STATE_SPAWNING, locust.runners.STATE_RUNNING):
            self.begin_test()  # joined a running test: Locust fired test_start before init, without us

    def begin_test(self) -> None:
        """SIGTERM leaves gracefully, and the Spot watcher runs if asked for.

        Not at init: Locust installs its own SIGTERM handler after init, and the last one wins.
        """
        stopping.install_worker_signal_handlers(self)
        if self.local_options.get("spot_watch") and self.spot_watcher is None:
            self.spot_watcher = start_spot_watcher(
                self.local_options.get("imds_endpoint"),
                lambda notice: gevent.spawn(stopping.leave, self, notice.reason))

    def start_pre_drain(self) -> None:
        """Turn what the recorder holds into payloads every `PRE_DRAIN_S`, in parts (`pre_drain_loop`)."""
        if self.drain.greenlet is None or self.drain.greenlet.dead:
            self.drain.greenlet = gevent.spawn(pre_drain_loop, self)

