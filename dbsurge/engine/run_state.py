"""The state of one run in one process: reached one way, as ``environment.dbsurge``.

`DbSurgeRun` holds what every role needs (options, target, workloads, the recorder, the pacer on
a worker or local run, the aggregator and run directory on a master or local run) and the few
helpers that keep measurement going when something fails (`note_problem`, `safe_event`,
`merge_payload`); each role is its subclass in `dbsurge.engine.roles`. What belongs to one test (its
`Ending`, run directory, aggregator, schedule, rate changes...) is a `LoadTest`, ``run.test``, new at each
test's start. What the master tells each worker is `dbsurge.engine.wire.Setup`.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import ClassVar

import gevent
import gevent.event
import gevent.lock

from dbsurge.base.errors import WorkloadError
from dbsurge.base.redact import redact_text
from dbsurge.config import credentials
from dbsurge.engine import stopping
from dbsurge.engine.clocks import ClockBook, wall_ns
from dbsurge.engine.hosts import WorkerHosts
from dbsurge.engine.membership import Membership
from dbsurge.engine.wire import Setup
from dbsurge.load.locust_stats import LocustStatsFeed
from dbsurge.load.pacer import BACKLOG_S, Breather, Pacer
from dbsurge.load.user import DbUser
from dbsurge.measure.aggregator import Aggregator
from dbsurge.measure.recorder import Recorder
from dbsurge.plan.arrivals import ArrivalSequence, OperationMix, operation_mix_weights
from dbsurge.plan.stage_plan import Schedule, StagePlan, parse_duration
from dbsurge.rundir import RunDirectory
from dbsurge.targets import open_target
from dbsurge.workloads import get_workload

log = logging.getLogger("dbsurge")

#: Errors writing the run directory that stop the run: the results can no longer be recorded (a full disk or
#: quota, a read-only or failing file system, write permission taken away, a file grown past its limit, a
#: stale network mount). Measuring on without recording would be load nobody can account for.
RESULTS_WRITE_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EPERM, errno.EACCES,
                                  errno.EFBIG, errno.ESTALE})


class Ending:
    """How one test ends: its ledger's close, the signals, the final files (`dbsurge.engine.stopping`, `dbsurge.engine.finish`).

    Part of the `LoadTest`: the web UI's second Start begins with nothing of the first's end.
    """

    def __init__(self) -> None:
        self.finished = False  # the tables are being written, or are
        # the end, as the web panel tells it: None while running, then "writing", "report", "done"
        self.finish_state: str | None = None
        self.report_path = None  # report.html once built (`dbsurge.engine.finish`)
        self.closing: str | None = None  # why the plan was closed, once it was
        self.awaiting_final: set[str] = set()
        self.lost_workers: list[str] = []
        self.silent_at_close: set[str] = set()  # workers whose final account missed the close's deadline
        self.lease_end: dict[str, int] = {}  # a lost worker -> the first arrival its last lease did not cover
        self.interrupted: tuple[str, float] | None = None  # (signal name, elapsed s)
        self.signals = 0
        self.raw_signals = 0  # as the signal handler counts them (`stopping._handler`), before any greenlet runs
        self.exit_code_override: int | None = None
        self.stop_reason: str | None = None
        self.until_position: float | None = None
        # a second signal cut the run short: what the master's workers had not reported is booked so
        self.unreported_reason: str | None = None
        self.disk_full = False  # the results disk filled up: stop writing until the final files
        self.start_failed: str | None = None  # the test's start raised: what (the verdict cannot be OK)
        self.process_exits = False  # the process ends with this test (`dbsurge run --web` at the plan's end)


class SideTasks:
    """The greenlets a test runs beside the load on the master or a local run (`dbsurge.engine.lifecycle`, `dbsurge.side`)."""

    def __init__(self) -> None:
        self.greenlets: list = []
        self.progress = None  # dbsurge.engine.console.Progress: the headless console's progress lines
        self.cloudwatch = None  # the CloudWatch side collector, when one runs


class LoadTest:
    """One test of the run: everything that belongs to it, in one object made new at each test's start.

    A process lives through several tests when the web UI starts them one after another; its role object
    (`dbsurge.engine.roles`) keeps what outlives a test (the members, their clocks, the target, the listeners
    bound to it), and ``run.test`` is this: a Start makes a new one (`DbSurgeRun.new_test`), so nothing of the
    last test's end, directory, measurements or rate changes can carry over, and nothing is reset by hand.
    The run reads and sets these fields under their own names (``run.ending``, ``run.aggregator``:
    `OfTheTest`).
    """

    def __init__(self, problems: dict[str, int] | None = None) -> None:
        self.ending = Ending()
        self.side = SideTasks()
        # what went wrong while merging, writing or collecting (`DbSurgeRun.note_problem`): problem -> times
        self.problems: dict[str, int] = {} if problems is None else problems
        # stages in which the pool wanted more users than --max-users (`dbsurge.engine.arrival_shape`)
        self.capped_stages: set[int] = set()
        self.exit_code: int | None = None  # the verdict's, once the tables are written
        self.changes: list = []  # the live rate changes, [at_s, rate_tps, scale]
        self.sequence: ArrivalSequence | None = None  # the numbered arrivals (`DbSurgeRun.arrivals`)
        self.rundir: RunDirectory | None = None
        self.aggregator: Aggregator | None = None
        self.schedule: Schedule | None = None  # the plan's rates in time, with the live changes
        self.start_epoch_ns: int | None = None  # the plan's time zero


class OfTheTest:
    """A field of the run that belongs to its current test: ``run.aggregator`` is ``run.test.aggregator``."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, run, owner=None):
        return self if run is None else getattr(run.test, self.name)

    def __set__(self, run, value) -> None:
        setattr(run.test, self.name, value)


class Drain:
    """A worker's payloads made ahead of its report (`pre_drain_loop`), and the lock that keeps a report or the
    final account from taking them while a pass is half way."""

    def __init__(self) -> None:
        self.parts: list[dict] = []
        self.lock = gevent.lock.Semaphore()
        self.greenlet = None  # the worker's `pre_drain_loop`, once its setup came


class LoadConfig:
    """What this process loads, as configured (`DbSurgeRun.configure_target`; on a worker from its `wire.Setup`):
    the target, the workload's options and operations, the per-operation timeout, and the ways to the password."""

    def __init__(self, own_options) -> None:
        self.target_uri: str | None = None
        # this process's own ways to the password, as started: Locust overwrites the options with the master's
        self.own_credentials = credentials.Sources.from_options(own_options)
        self.credentials: dict = {}  # what workers are told (credentials.setup_fields)
        self.target_options: dict = {}
        self.workload_options: dict = {}
        self.workloads: dict = {}  # workload name -> the workload, made on first use (`DbSurgeRun.workload`)
        self.operation_weights: list = []
        self.op_timeout_s = 30.0


class DbSurgeRun:
    """What every role of a dbsurge process holds: the target, workloads, recorder, pacer, and the few helpers
    that keep measurement going when something fails.

    Abstract: a process has one `dbsurge.engine.roles.LocalRun`, `dbsurge.engine.roles.MasterRun` or `dbsurge.engine.roles.WorkerRun`,
    chosen once by `dbsurge.engine.roles.new_run`. What differs between them is said by these class attributes and
    by the methods the roles override, never by asking a role's name.
    """

    #: The role's name, as run.json and the Prometheus info label give it.
    role: ClassVar[str] = ""
    #: This process keeps the run directory, the aggregator and the verdict, and owns the signals (master, local).
    writes_results: ClassVar[bool] = True
    #: This process shares the plan with workers (the master).
    has_workers: ClassVar[bool] = False
    #: This process runs the load and merges its own recorder into its aggregator (a local run).
    measures_here: ClassVar[bool] = False
    #: Which workers may take a share (`dbsurge.engine.membership`): the master's, when it asks for a token.
    membership: Membership | None = None
    #: Each worker's share index: the master's.
    shares: Mapping[str, int] = MappingProxyType({})
    #: The master's worst event-loop stall (`protocol.membership_loop`); None where there is no master loop.
    master_stall_max_s: float | None = None
    #: Locust's tables fed from the recorder's drains (`dbsurge.load.locust_stats`), where users run.
    locust_stats: LocustStatsFeed | None = None
    #: The kind of `LoadTest` this role makes at each test's start.
    test_class: ClassVar[type[LoadTest]] = LoadTest
    #: What belongs to the current test (`LoadTest`), under the names the code has always used.
    ending = OfTheTest()
    side = OfTheTest()
    problems = OfTheTest()
    capped_stages = OfTheTest()
    exit_code = OfTheTest()
    changes = OfTheTest()
    sequence = OfTheTest()
    rundir = OfTheTest()
    aggregator = OfTheTest()
    schedule = OfTheTest()
    start_epoch_ns = OfTheTest()

    def __init__(self, environment, own_options=None):
        """``own_options``: this process's options as it was started (a worker's are overwritten by the master's)."""
        self.environment = environment
        self.options = environment.parsed_options
        self.test = self.test_class()  # the first test's, from the start: what goes wrong at init belongs to it
        self.recorder = Recorder(raw_sink=_raw_samples_sink(), wall_ns=wall_ns)
        self.pacer: Pacer | None = None
        self.plan: StagePlan | None = None
        self.slot_lock = gevent.lock.Semaphore()
        # held by the once-a-second loop while a second's drain, merge, rows and files are under way (it
        # yields to the pacer between them): the end waits for it before stopping that loop
        self.timeline_lock = gevent.lock.Semaphore()
        self.ready = gevent.event.Event()
        self.drain = Drain()
        self.target = None
        self.config = LoadConfig(own_options or self.options)
        self.embedded_handle = None
        self.probe_service_s: float | None = None  # measured before time zero (preflight.probe_service_time)
        self.prometheus = None  # dbsurge.ui.prometheus.PrometheusExporter with --prometheus-port
        self.clocks = ClockBook()  # each worker's clock offset (a master's; a local run's stays empty)
        self.hosts = WorkerHosts()  # each worker's host name and address (dbsurge.engine.hosts; a master's)

    def _feed_locust_tables(self) -> None:
        """Where users run: Locust's tables get this process's successful operations from the recorder's drains."""
        if getattr(self.environment, "stats", None) is not None:
            self.locust_stats = LocustStatsFeed(self.environment.stats, self.recorder.operations)
            self.recorder.stats_sink = self.locust_stats

    def share_history_of(self, worker: str) -> list[tuple[int, int, int]] | None:
        """A worker's shares in order, (from_number, index, count); None where no plan is shared."""
        return None

    # -- what each role does its own way (`dbsurge.engine.roles`) ------------------------------------------------

    def start(self, runner, *, forked: bool = False) -> None:
        """At Locust's ``init``: register this role's end of the messages and start its greenlets.

        ``forked``: this process is a ``--processes`` worker, forked from its master (it dies with it)."""
        raise NotImplementedError

    def begin_test(self) -> None:
        """At Locust's ``test_start``."""
        raise NotImplementedError

    def new_test(self) -> None:
        """A test begins (`dbsurge.engine.lifecycle.begin_run`): a new `LoadTest`, so the web UI's second Start
        carries nothing of the first's (its ending, side tasks, run directory, aggregator, schedule, exit code,
        problems, capped stages, rate changes and arrivals: the arrival process may have changed in the start form).
        What went wrong before the first test (at init) is the first test's."""
        self.test = self.test_class(problems=self.test.problems if self.test.rundir is None else None)

    def admit_workers(self) -> None:
        """Before time zero: decide who takes part (the master's workers)."""

    def workers_at_start(self) -> int:
        """run.json's ``workers``."""
        return 1

    def hand_out_plan(self, max_lag_s: float | None) -> None:
        """After time zero is set: give the plan to whoever sends the load."""
        raise NotImplementedError

    def test_greenlets(self) -> list:
        """This role's own loops for a test, beside the once-a-second loop (`dbsurge.engine.lifecycle`)."""
        return []

    def settle(self) -> None:
        """The test has begun and everything for it is made."""

    # -- keeping going when something goes wrong ----------------------------------------------------

    def note_problem(self, where: str, exc: BaseException) -> None:
        """Something failed while merging, writing or collecting: an event and a one-line warning, never a stop.

        A results disk that is full (or gone read-only) stops the run instead: measuring on
        without recording would be load nobody can account for.
        """
        if isinstance(exc, OSError) and exc.errno in RESULTS_WRITE_FAULTS:
            self.ending.disk_full = True
            if self.ending.closing is None and self.writes_results:
                gevent.spawn(stopping.stop_for, self, "interrupted",
                             f"cannot write results to {self.rundir.path if self.rundir else '?'} "
                             f"({exc.strerror or exc})", stopping.EXIT_INCOMPLETE)
            return
        key = f"{where}: {type(exc).__name__}"
        first = key not in self.problems
        self.problems[key] = self.problems.get(key, 0) + 1
        if first:
            log.warning("%s failed (%s: %s); measurement goes on", where, type(exc).__name__,
                        redact_text(str(exc).splitlines()[0] if str(exc) else ""))
            self.safe_event("error", where=where, error=f"{type(exc).__name__}: {redact_text(str(exc))[:300]}")

    def safe_event(self, kind: str, **fields) -> None:
        if self.rundir is None:
            return
        try:
            self.rundir.event(kind, **fields)
        except Exception as e:
            if kind != "error":
                self.note_problem(f"writing event {kind}", e)

    def take_drained(self) -> list[dict]:
        """Worker or local: every payload not yet shipped, the pre-drain's and the recorder's rest (for a report or
        the end).

        Waits for a pre-drain pass under way: its parts come from the buffer it took, and are shipped with
        this call's, never after the final account."""
        with self.drain.lock:
            parts, self.drain.parts = self.drain.parts, []
            parts.append(self.recorder.drain())
            self.feed_locust_stats()
        return parts

    def feed_locust_stats(self, pause=None) -> None:
        """Add the operations drained since the last call to Locust's own tables (`dbsurge.load.locust_stats`)."""
        if self.locust_stats is not None:
            self.locust_stats.apply(pause)

    def merge_payloads(self, payloads: list[dict] | dict, source: str) -> None:
        """A worker's report or final account: a list of payloads (`take_drained`), or the one payload a
        worker of an earlier dbsurge sends (nothing checks that master and workers run the same version)."""
        for payload in payloads if isinstance(payloads, list) else [payloads]:
            self.merge_payload(payload, source)

    def merge_payload(self, payload: dict, source: str) -> None:
        if self.aggregator is None:
            return
        try:
            self.aggregator.merge(payload, source=source)
            if self.prometheus is not None:
                self.prometheus.observe(payload, source)
        except Exception as e:
            self.note_problem(f"merging measurements from {source}", e)

    def arrivals(self) -> ArrivalSequence:
        """The run's numbered arrivals (built on first use in each test)."""
        if self.sequence is None:
            self.sequence = ArrivalSequence(self.options.arrivals, self.options.seed)
        return self.sequence

    def operation_mix(self) -> OperationMix:
        """The run's operation mix: arrival k runs ``mix.of(k)`` on every worker."""
        name = sorted({u.workload for u in dbsurge_user_classes(self.environment)})[0]
        weights = operation_mix_weights(self.config.operation_weights, self.workload(name).operations)
        return OperationMix(weights, self.options.seed)

    # -- helpers used by the shapes and the users -----------------------------------------------------

    def elapsed_s(self) -> float | None:
        if self.start_epoch_ns is None:
            return None
        return (time.time_ns() - self.start_epoch_ns) / 1e9

    def workload(self, name: str):
        wl = self.config.workloads.get(name)
        if wl is None:
            wl = self.config.workloads[name] = get_workload(name, self.target, self.config.workload_options)
        return wl

    # -- setup on every process ---------------------------------------------------------------------

    def configure_target(self, uri: str, target_options: dict, workload_options: dict, operations: list,
                         op_timeout_s: float | None = None) -> None:
        self.config.target_uri = uri
        self.config.target_options = target_options
        self.config.workload_options = workload_options
        self.config.operation_weights = operations
        if op_timeout_s is None:
            op_timeout_s = parse_duration(self.options.op_timeout)
        self.config.op_timeout_s = op_timeout_s
        self.target = open_target(uri, target_options, op_timeout_s=op_timeout_s)
        self.config.workloads = {}

    def make_pacer(self, s: Setup) -> None:
        # Everything alive now (Locust, gevent, drivers, workload tables) lives for the whole run:
        # move it out of the collector's sight. Otherwise the first full collection during the
        # load walks all of it, a ~60 ms stall of every user (seen as a lag spike ~7 s into a
        # 4,000 TPS run); Locust does the same before forking --processes workers.
        freeze_what_lives_for_the_run()
        self.plan = StagePlan.from_dict(s.plan) if s.plan else None
        self.start_epoch_ns = s.start_epoch_ns
        if self.plan is None:
            self.schedule, self.pacer = None, None
            # completions in the master's clock (as below, without a pacer), the whole run one window from time zero
            self.recorder.wall_offset_ns = wall_ns() - time.perf_counter_ns() - s.clock_offset_ns
            self.recorder.set_stage_windows(s.start_epoch_ns, [0.0], float("inf"))
            return
        sched = Schedule.from_plan(self.plan)
        for at_s, rate, scale in s.changes:
            sched = sched.changed(at_s, rate_tps=rate, scale=scale)
        self.schedule = sched
        mix = self.operation_mix()
        # the master's time zero in this worker's clock (the pacer measures wall minus monotonic once)
        self.pacer = Pacer(sched, start_epoch_ns=s.start_epoch_ns + s.clock_offset_ns, wall_ns=wall_ns,
                           mix=mix, sink=self.recorder,
                           op_ids=[self.recorder.op_id(n) for n in mix.names], worker_index=s.index,
                           worker_count=s.count, arrivals=s.arrivals, seed=s.seed, max_lag_s=s.max_lag_s)
        # ... and completions stamped back in the master's clock, from that same measurement
        self.recorder.wall_offset_ns = self.pacer.wall_offset_ns - s.clock_offset_ns
        # each success is counted in the stage whose window holds its completion (the stage's delivered rate),
        # against the master's time zero in that same clock
        self.recorder.set_stage_windows(s.start_epoch_ns, self.plan.starts, self.plan.duration)
        # Again just before time zero; not when that is already near or past (a worker joining mid-run):
        # the freeze above has just taken what there is, and a collection now would pause the load.
        freeze_in_s = (s.start_epoch_ns + s.clock_offset_ns) / 1e9 - time.time() - FREEZE_LEAD_S
        if freeze_in_s > 0:
            gevent.spawn_later(freeze_in_s, freeze_what_lives_for_the_run)

    def apply_rate_change(self, at_s: float, rate_tps: float | None, scale: float | None) -> None:
        if self.schedule is None:
            return
        self.schedule = self.schedule.changed(at_s, rate_tps=rate_tps, scale=scale)
        self.changes.append([at_s, rate_tps, scale])
        if self.pacer is not None:
            skipped = self.pacer.set_schedule(self.schedule, at_s)
            if skipped:
                log.warning("rate change: %d late slots of the old rate were dropped (this worker was more than "
                            "%.0f s behind)", skipped, BACKLOG_S)


#: How often a worker turns its recorder's operations into payloads ahead of its once-a-second report.
PRE_DRAIN_S = 0.25
#: Operations per part of a drain made between the users' turns (`Recorder.drain_in_parts`): 0.2-0.6 ms of work.
DRAIN_PART = 400


def pre_drain_loop(run: DbSurgeRun) -> None:
    """Worker: every `PRE_DRAIN_S`, the recorder's operations so far become payloads, part by part.

    A worker's report (Locust's ``report_to_master``) drained a whole second at once: 1-2 ms of numpy
    at 5,000 operations a second, a pause of every user of the process, and every slot due in it
    late. Here the same work is done four times a second in parts of `DRAIN_PART` operations, with
    the users let run between them for three times each part (`Breather`); the report ships the parts made so far
    and drains only the rest (`DbSurgeRun.take_drained`). Merged on the master, the parts are the
    payload one drain would have made: nothing is sampled or dropped.
    """
    def keep(payload: dict) -> None:
        if _holds_something(payload):
            run.drain.parts.append(payload)

    while True:
        gevent.sleep(PRE_DRAIN_S)
        with run.drain.lock:
            drain_recorder(run, keep, Breather())


def drain_recorder(run: DbSurgeRun, take: Callable[[dict], None], breathe: Callable[[], None]) -> None:
    """The recorder's operations so far, part by part (`DRAIN_PART`), each handed to ``take``, the users let
    run after each (``breathe``); then Locust's tables get them. A worker's `pre_drain_loop` and a local
    run's once-a-second loop (`dbsurge.engine.lifecycle`) both drain this way.

    A failure is noted (`DbSurgeRun.note_problem`), never raised: measurement goes on. Killed or failed
    between two parts, the parts not taken yet are handed over at once.
    """
    # a generator: it takes the buffer and the ledger's counts at its first part, the loop's first step
    parts = run.recorder.drain_in_parts(DRAIN_PART)
    try:
        for payload in parts:
            take(payload)
            breathe()
        run.feed_locust_stats(breathe)
    except Exception as e:  # a bug here must not stop the measurements
        run.note_problem("draining the recorder", e)
    finally:
        for payload in parts:
            take(payload)


def _holds_something(payload: dict) -> bool:
    """False for a drain of an idle second (the payload names the operations and nothing else)."""
    return any(v for k, v in payload.items() if k != "ops")


#: How long before the plan's time zero a process moves what it made while setting up out of the cycle
#: collector's sight again (`freeze_what_lives_for_the_run`): a full collection of it takes 5-15 ms here.
FREEZE_LEAD_S = 0.3


def freeze_what_lives_for_the_run() -> None:
    """Collect, then freeze: what is alive now leaves the cycle collector's sight (`DbSurgeRun.make_pacer`).

    Called when the process gets its plan, and again `FREEZE_LEAD_S` before time zero. Between the
    two a process imports the side collectors (pandas), opens its users' connections and builds its
    workload tables: tens of thousands of objects that live for the run. Left in the collector's
    sight, they were the next full collection's work, and it came in the first seconds of the load
    (the count of objects surviving young collections passes a quarter of the last full
    collection's): a 7-14 ms pause of every user of the process, the worst second of an 8,000 TPS
    run. Frozen objects are still freed when nothing refers to them; only a cycle that becomes
    garbage later stays, which these long-lived objects do not make.
    """
    gc.collect()
    gc.freeze()


class ShipToMaster(logging.Handler):
    """Worker: its warnings and errors go to the master with the next report (events.jsonl, ``worker_log``),
    so a worker on another host that underdelivers says why where the run is read."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(level=logging.WARNING)
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.recorder.log(record.levelname, redact_text(record.getMessage()), record.created)
        except Exception:  # a log record must never break the worker
            pass


def _raw_samples_sink():
    """Tests: with DBSURGE_RAW_SAMPLES_DIR, every successful response time (us) goes to a file, to check the merge."""
    raw_dir = os.environ.get("DBSURGE_RAW_SAMPLES_DIR")
    if not raw_dir:
        return None
    path = os.path.join(raw_dir, f"samples-{os.getpid()}.bin")

    def write(values) -> None:
        with open(path, "ab") as f:
            f.write(values.tobytes())

    return write


# -- the workload's operations -------------------------------------------------------------------


def resolve_operations(workload, requested: dict) -> list[tuple[str, float]]:
    """The (operation, weight) list for a workload: its defaults, or what --operation asked for."""
    known = workload.operations
    if not requested:
        return [(k, w) for k, w in known.items() if w > 0]
    unknown = [k for k in requested if k not in known]
    if unknown:
        raise WorkloadError(
            f"unknown operation '{unknown[0]}' for workload {workload.name} (known: {', '.join(known)})")
    ops = [(k, w) for k, w in requested.items() if w > 0]
    if not ops:
        raise WorkloadError("every --operation has weight 0: nothing to run")
    return ops


def dbsurge_user_classes(environment) -> list:
    return [u for u in environment.user_classes if issubclass(u, DbUser)]
