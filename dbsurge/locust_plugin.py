"""dbsurge inside Locust: options, the plan's distribution to workers, measurement, the run directory.

Importing this module (the locustfiles and shapes do) registers listeners on Locust's events:

- ``init_command_line_parser``: dbsurge's options (`dbsurge.options`).
- ``init``: on the master (or a local runner) validate everything a user can get wrong (target,
  workload, options, plan) and exit with one line before any load; load default data if needed.
- ``test_start``: on the master, fix the plan's time zero, create the run directory, and send each
  worker the plan, the start time and its share; each worker builds its `Pacer`.
- ``report_to_master`` / ``worker_report``: workers ship their recorder's histograms once a
  second; the master merges them (`Aggregator`) and writes the timeline as it goes.
- ``quitting``: final tables, checks and the exit code.

Custom messages between master and workers: ``dbsurge:setup`` (the plan and the share),
``dbsurge:rate`` (a live rate change), ``dbsurge:share`` (a worker joined or left),
``dbsurge:close`` and ``dbsurge:final`` (the end of the run and each worker's final account; see
`dbsurge.stopping`). A local run registers both ends of every message on its `LocalRunner`.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field

import gevent
import gevent.event
import gevent.lock
import locust.runners
import locust.stats
from locust import events
from locust.runners import MasterRunner, WorkerRunner

from . import credentials, finish, latency_buckets, stopping
from .arrivals import OperationMix
from .aggregator import Aggregator
from .errors import UserError
from .clocks import ClockBook, wall_ns
from .membership import Membership, is_loopback, proof
from .options import add_options, parse_key_values, parse_operation_weights
from .pacer import Pacer
from .recorder import Recorder
from .redact import redact_text
from .rundir import RunDirectory, new_run_id, utc_iso
from .stage_plan import Schedule, StagePlan, parse_duration

log = logging.getLogger("dbsurge")

# Workers report once a second instead of every three: the timeline is per second, and a crash
# loses at most one interval.
locust.runners.WORKER_REPORT_INTERVAL = 1.0
# Heartbeats twice a second (Locust: once), so that a lost worker is known within 2 s (LOST_AFTER_S)
# while a worker pauses after 1.5 s without the master (three missed answers), well before that.
locust.runners.HEARTBEAT_INTERVAL = 0.5
locust.runners.HEARTBEAT_LIVENESS = 5
# Sub-millisecond response times in Locust's own statistics and web UI.
locust.stats.bucket_response_time = latency_buckets.bucket_response_time


@dataclass
class Setup:
    """What the master tells each worker at test start."""

    target_uri: str
    target_options: dict
    workload_options: dict
    operations: list
    plan: dict | None
    start_epoch_ns: int
    index: int
    count: int
    arrivals: str
    seed: int
    max_lag_s: float | None
    changes: list  # live rate changes so far: [at_s, rate_tps, scale]
    op_timeout_s: float = 30.0
    clock_offset_ns: int = 0  # this worker's clock minus the master's (dbsurge.clocks)
    credentials: dict = field(default_factory=dict)  # no password: whether one is needed, where (dbsurge.credentials)


def fail(message: str) -> None:
    """End the process with one line on stderr, before any load is sent."""
    sys.stderr.write(f"dbsurge: {message}\n")
    sys.stderr.flush()
    sys.exit(2)


class DbSurgeRun:
    """Per-process state: the target, workloads, pacer, recorder and (on the master) the aggregator."""

    def __init__(self, environment):
        self.environment = environment
        self.options = environment.parsed_options
        self.role = ("worker" if isinstance(environment.runner, WorkerRunner)
                     else "master" if isinstance(environment.runner, MasterRunner) else "local")
        raw_dir = os.environ.get("DBSURGE_RAW_SAMPLES_DIR")  # tests: every sample, to check the merge
        raw_path = os.path.join(raw_dir, f"samples-{os.getpid()}.bin") if raw_dir else None
        self.recorder = Recorder(raw_samples_path=raw_path, wall_ns=wall_ns)
        self.pacer: Pacer | None = None
        self.schedule: Schedule | None = None
        self.plan: StagePlan | None = None
        self.start_epoch_ns: int | None = None
        self.slot_lock = gevent.lock.Semaphore()
        self.ready = gevent.event.Event()
        self.target = None
        self.target_uri: str | None = None
        # this process's own ways to the password, read now: Locust overwrites the options with the master's
        self.own_credentials = credentials.Sources.from_options(self.options)
        self.credentials: dict = {}  # what workers are told (credentials.setup_fields)
        self.target_options: dict = {}
        self.workload_options: dict = {}
        self.workloads: dict = {}
        self.operation_weights: list = []
        self.embedded_handle = None
        self.rundir: RunDirectory | None = None
        self.aggregator: Aggregator | None = None
        self.changes: list = []
        self.shares: dict[str, int] = {}
        self.finished = False
        self.side_tasks: list = []
        self.exit_code: int | None = None
        self.cloudwatch_collector = None
        # stopping and the ledger (see dbsurge.stopping)
        self.closing: str | None = None  # why the plan was closed, once it was
        self.awaiting_final: set[str] = set()
        self.lost_workers: list[str] = []
        self.interrupted: tuple[str, float] | None = None  # (signal name, elapsed s)
        self.signals = 0
        self.exit_code_override: int | None = None
        self.stop_reason: str | None = None
        self.until_position: float | None = None
        self.problems: dict[str, int] = {}
        self.op_timeout_s = 30.0
        self.capped_stages: set[int] = set()
        self.prometheus = None  # dbsurge.prometheus.PrometheusExporter with --prometheus-port
        self.membership: Membership | None = None
        self.last_seen: dict[str, float] = {}  # master: worker id -> its last heartbeat (wall clock)
        self.lost_from: dict[str, int] = {}  # master: worker id -> the arrival from which its share was given away
        self.sequence = None  # master: the numbered arrivals, for reshare points
        self.clocks = ClockBook()  # master: each worker's clock offset
        self.departed: set[str] = set()  # master: workers that left gracefully
        self.leaving: str | None = None  # worker: why it is leaving
        self.leave_until: int | None = None
        self.spot_watcher = None  # worker: the EC2 interruption-notice watcher (--spot-watch)
        self.local_options: dict = {}  # worker: options of this host, kept before the master's overwrite them

    # -- keeping going when something goes wrong ----------------------------------------------------

    def note_problem(self, where: str, exc: BaseException) -> None:
        """Something failed while merging, writing or collecting: an event and a one-line warning, never a stop.

        A results disk that is full (or gone read-only) stops the run instead: measuring on
        without recording would be load nobody can account for.
        """
        import errno

        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
            if self.closing is None and self.role != "worker":
                gevent.spawn(stopping.stop_for, self, "interrupted",
                             f"cannot write results to {self.rundir.path if self.rundir else '?'} "
                             f"({exc.strerror or exc})", stopping.EXIT_INCOMPLETE)
            return
        key = f"{where}: {type(exc).__name__}"
        first = key not in self.problems
        self.problems[key] = self.problems.get(key, 0) + 1
        if first:
            log.warning("dbsurge: %s failed (%s: %s); measurement goes on", where, type(exc).__name__,
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

    def merge_payload(self, payload: dict, source: str) -> None:
        if self.aggregator is None:
            return
        try:
            self.aggregator.merge(payload, source=source)
            if self.prometheus is not None:
                self.prometheus.observe(payload, source)
        except Exception as e:
            self.note_problem(f"merging measurements from {source}", e)

    def operation_mix(self) -> OperationMix:
        """The run's operation mix: arrival k runs ``mix.of(k)`` on every worker."""
        from .user import operation_mix_weights

        name = sorted({u.workload for u in dbsurge_user_classes(self.environment)})[0]
        weights = operation_mix_weights(self.operation_weights, self.workload(name).operations)
        return OperationMix(weights, self.options.seed)

    # -- helpers used by the shapes and the users -----------------------------------------------------

    def elapsed_s(self) -> float | None:
        if self.start_epoch_ns is None:
            return None
        return (time.time_ns() - self.start_epoch_ns) / 1e9

    def workload(self, name: str):
        wl = self.workloads.get(name)
        if wl is None:
            from .workloads import get_workload

            wl = self.workloads[name] = get_workload(name, self.target, self.workload_options)
        return wl

    # -- setup on every process ---------------------------------------------------------------------

    def configure_target(self, uri: str, target_options: dict, workload_options: dict, operations: list,
                         op_timeout_s: float | None = None) -> None:
        from .targets import open_target

        self.target_uri = uri
        self.target_options = target_options
        self.workload_options = workload_options
        self.operation_weights = operations
        if op_timeout_s is None:
            op_timeout_s = parse_duration(self.options.op_timeout)
        self.op_timeout_s = op_timeout_s
        self.target = open_target(uri, target_options, op_timeout_s=op_timeout_s)
        self.workloads = {}

    def make_pacer(self, s: Setup) -> None:
        # Everything alive now (Locust, gevent, drivers, workload tables) lives for the whole run:
        # move it out of the collector's sight. Otherwise the first full collection during the
        # load walks all of it, a ~60 ms stall of every user (seen as a lag spike ~7 s into a
        # 4,000 TPS run); Locust does the same before forking --processes workers.
        gc.collect()
        gc.freeze()
        self.plan = StagePlan.from_dict(s.plan) if s.plan else None
        self.start_epoch_ns = s.start_epoch_ns
        if self.plan is None:
            self.schedule, self.pacer = None, None
            return
        sched = Schedule.from_plan(self.plan)
        for at_s, rate, scale in s.changes:
            sched = sched.changed(at_s, rate_tps=rate, scale=scale)
        self.schedule = sched
        mix = self.operation_mix()
        # the master's time zero in this worker's clock; and completion seconds back in the master's
        self.recorder.wall_offset_ns = wall_ns() - time.perf_counter_ns() - s.clock_offset_ns
        self.pacer = Pacer(sched, start_epoch_ns=s.start_epoch_ns + s.clock_offset_ns, wall_ns=wall_ns,
                           mix=mix, sink=self.recorder,
                           op_ids=[self.recorder.op_id(n) for n in mix.names], worker_index=s.index,
                           worker_count=s.count, arrivals=s.arrivals, seed=s.seed, max_lag_s=s.max_lag_s)

    def apply_rate_change(self, at_s: float, rate_tps: float | None, scale: float | None) -> None:
        if self.schedule is None:
            return
        self.schedule = self.schedule.changed(at_s, rate_tps=rate_tps, scale=scale)
        self.changes.append([at_s, rate_tps, scale])
        if self.pacer is not None:
            skipped = self.pacer.set_schedule(self.schedule, at_s)
            if skipped:
                log.warning("rate change: %d late slots of the old rate were dropped (this worker was more than "
                            "%.0f s behind)", skipped, 1.0)
        if self.aggregator is not None:
            self.aggregator.schedule = self.schedule


# -- option parsing shared with the CLI ---------------------------------------------------------------


def resolve_operations(workload, requested: dict) -> list[tuple[str, float]]:
    """The (operation, weight) list for a workload: its defaults, or what --operation asked for."""
    from .errors import WorkloadError

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
    from .user import DbUser

    return [u for u in environment.user_classes if issubclass(u, DbUser)]


# -- events -------------------------------------------------------------------------------------------


@events.init_command_line_parser.add_listener
def _on_parser(parser, **_kw):
    from .spot import add_spot_options

    add_options(parser)
    add_spot_options(parser)


@events.init.add_listener
def _on_init(environment, runner=None, web_ui=None, **_kw):
    if runner is None or environment.parsed_options is None or not dbsurge_user_classes(environment):
        return
    run = DbSurgeRun(environment)
    environment.dbsurge = run
    _active["run"] = run
    if run.role == "worker":
        # this host's own settings: Locust overwrites parsed_options with the master's at every spawn
        run.local_options = {k: getattr(run.options, k, None) for k in ("join_token", "spot_watch", "imds_endpoint")}
        runner.register_message("dbsurge:setup", _on_setup_message)
        runner.register_message("dbsurge:rate", _on_rate_message)
        runner.register_message("dbsurge:share", _on_share_message)
        runner.register_message("dbsurge:close", stopping.on_close_message, concurrent=True)
        runner.register_message("dbsurge:challenge", _on_challenge_message)
        runner.register_message("dbsurge:clock", _on_clock_ping)
        runner.register_message("dbsurge:leave_ok", _on_leave_ok)
        # ask for a challenge once our handlers are in place (a challenge sent at Locust's own
        # "client_ready" could arrive before them and be dropped as an unknown message)
        runner.send_message("dbsurge:hello", {})
        gevent.spawn(stopping.master_watchdog, run)
        gevent.spawn(stopping.loop_lag_monitor, run)
        return
    runner.register_message("dbsurge:final", stopping.on_final_message)
    if run.role == "master":
        run.membership = Membership(run.options.join_token)
        # Locust sends the master's parsed options to every connected worker, proven or not: not the token
        run.options.join_token = None
        runner.register_message("dbsurge:proof", _on_proof_message)
        runner.register_message("dbsurge:hello", _on_hello_message)
        runner.register_message("dbsurge:clock", _on_clock_answer)
        runner.register_message("dbsurge:leave", _on_leave_message)
    if run.role == "local":
        runner.register_message("dbsurge:close", stopping.on_close_message)
        gevent.spawn(stopping.loop_lag_monitor, run)
    try:
        preflight(run)
        from .prometheus import start_exporter

        run.prometheus = start_exporter(run)  # --prometheus-port: listening before any load, or exit 2
    except UserError as e:
        fail(str(e))
    environment.host = run.target.display  # shown as Host in the web UI; secrets removed
    if web_ui is not None:
        from .web import install_web_controls

        install_web_controls(web_ui, run)


def preflight(run: DbSurgeRun) -> None:
    """Everything a user can get wrong, checked before any load: plan, workload, options, target."""
    from .embedded import resolve_embedded
    from .workloads import parse_workload_options

    opts = run.options
    if run.role == "master" and not is_loopback(getattr(opts, "master_bind_host", None)) \
            and not (run.membership and run.membership.token) and not opts.insecure_join:
        raise UserError(f"this master listens on {opts.master_bind_host}, so workers on other hosts can join and "
                        f"receive the plan and the target: set DBSURGE_JOIN_TOKEN (or --join-token) on the master "
                        f"and its workers, or pass --insecure-join")
    from .validate import check_output, validate_locust_options, validate_options

    # numbers first (a nan or 0 in them would break the plan or the shape), then the plan: no network
    validate_options(opts)
    validate_locust_options(opts, shape=run.environment.shape_class is not None)
    build_plan(run)
    workload_options = parse_workload_options(opts.workload_option or [])
    target_options = parse_key_values(opts.target_option, "--target-option")
    requested_ops = parse_operation_weights(opts.operation)
    if opts.max_lag:
        parse_duration(opts.max_lag)
    parse_duration(opts.lag_warn)
    op_timeout = parse_duration(opts.op_timeout)
    if not (0 < op_timeout < math.inf):
        raise UserError(f"bad --op-timeout '{opts.op_timeout}': expected a positive duration such as 30s or 500ms")
    from .checks import check_operations, parse_checks

    checks = parse_checks(opts.check)
    check_output(opts)  # --results-dir writable, --run-id new: else the load would run and record nothing
    if not opts.target:
        raise UserError("no target: pass --target URI (or embedded-postgres / embedded-mongo), or set DBSURGE_TARGET")
    uri, handle = resolve_embedded(opts.target)
    run.embedded_handle = handle
    uri = credentials.for_master(uri, opts.target_secret, opts.target_secret_endpoint_url)
    run.configure_target(uri, target_options, workload_options, [])
    run.credentials = credentials.setup_fields(uri, getattr(run.target, "flavor", None), opts.target_secret,
                                               opts.target_secret_endpoint_url)
    opts.target = credentials.strip_password(uri)  # Locust sends the options to every worker with each spawn
    names = sorted({u.workload for u in dbsurge_user_classes(run.environment)})
    for name in names:
        wl = run.workload(name)
        run.operation_weights = resolve_operations(wl, requested_ops)
    # a check on an operation the workload lacks could only fail, after the whole load
    check_operations(checks, [op for name in names for op in run.workload(name).operations])
    run.target.check()
    from .side import preflight_side

    preflight_side(run)
    if not opts.no_load:
        for name in names:
            wl = run.workload(name)
            if not wl.has_data():
                log.info("loading the default %s data set into %s", name, run.target.display)
                try:
                    wl.load(progress=True)
                except Exception as e:  # a refused write, a full disk...: one line, before any load
                    first = (str(e).strip().splitlines() or [""])[0]
                    raise UserError(f"loading the {name} data set into {run.target.display} failed: "
                                    f"{type(e).__name__}: {redact_text(first)}") from None


def build_plan(run: DbSurgeRun) -> None:
    from .arrival_shape import ArrivalRateShape

    shape = run.environment.shape_class
    if isinstance(shape, ArrivalRateShape):
        run.plan = shape.build_plan(run.options)
        shape.dbsurge_run = run


@events.test_start.add_listener
def _on_test_start(environment, **_kw):
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None:
        return
    if run.role == "worker":
        # now, not at init: Locust installs its own SIGTERM handler after init, and the last one wins
        stopping.install_worker_signal_handlers(run)
        if run.local_options.get("spot_watch") and run.spot_watcher is None:
            from .spot import start_spot_watcher

            run.spot_watcher = start_spot_watcher(
                run.local_options.get("imds_endpoint"), lambda notice: gevent.spawn(stopping.leave, run, notice.reason))
        return
    begin_run(run)


def begin_run(run: DbSurgeRun) -> None:
    """Master or local: time zero, run directory, aggregator, and the plan sent to every worker."""
    opts = run.options
    env = run.environment
    run.finished = False
    run.changes = []
    run.closing, run.awaiting_final, run.lost_workers, run.interrupted = None, set(), [], None
    run.signals, run.exit_code_override, run.stop_reason, run.until_position = 0, None, None, None
    stopping.install_signal_handlers(run)
    # Under a plan, time zero is a little ahead so every worker has the plan before its first slot;
    # a closed-model run starts now.
    delay_s = max(0.0, float(opts.start_delay)) if run.plan else 0.0
    run.start_epoch_ns = time.time_ns() + int(delay_s * 1e9)
    if run.plan and opts.align_start:
        step = int(float(opts.align_start) * 1e9)
        run.start_epoch_ns = -(-run.start_epoch_ns // step) * step  # the next multiple of the step
    start_s = run.start_epoch_ns / 1e9
    names = sorted({u.workload for u in dbsurge_user_classes(env)})
    run_id = opts.run_id or new_run_id("-".join(names))
    if run.rundir is not None:  # a second test from the web UI gets its own directory
        run_id = new_run_id("-".join(names))
    run.rundir = RunDirectory(opts.results_dir, run_id)
    stage_names = [s.name for s in run.plan.stages] if run.plan else ["run"]
    run.aggregator = Aggregator(run.rundir, stage_names=stage_names)
    run.schedule = Schedule.from_plan(run.plan) if run.plan else None
    run.aggregator.set_schedule(run.schedule, start_s)
    run.rundir.write_meta(
        run_id=run_id, started_utc=utc_iso(start_s), ended_utc=None, command=sys.argv,
        workload=names, target=run.target.describe() if hasattr(run.target, "describe") else run.target.display,
        target_display=run.target.display, workload_options=run.workload_options,
        operations=run.operation_weights, plan=_plan_meta(run.plan, start_s), arrivals=opts.arrivals,
        seed=opts.seed, max_lag=opts.max_lag, role=run.role,
        workers=(env.runner.worker_count if run.role == "master" else 1),
        cloudwatch=opts.cloudwatch or [], runners=opts.runner or [], region=opts.cloudwatch_region,
        versions=_versions(),
        options={k: v for k, v in vars(opts).items() if k not in ("target",) and _jsonable(v)},
    )
    run.rundir.event("run_start", at=start_s, run_id=run_id)
    for cid, why in (run.membership.refused.items() if run.membership else []):
        run.rundir.event("worker_refused", worker=cid, reason=why, host=_worker_address(env, cid))
    if run.plan:
        for st, stage in zip(run.plan.starts, run.plan.stages):
            if math.isfinite(st):
                run.rundir.event("stage", at=start_s + st, stage=stage.name, target_tps=stage.mean_tps)
    max_lag_s = parse_duration(opts.max_lag) if opts.max_lag else None
    if run.role == "master":
        _await_proofs(run)
        workers = _worker_ids(env.runner, run)
        _measure_clocks(run, workers)
        run.shares = {cid: i for i, cid in enumerate(workers)}
        for cid, i in run.shares.items():
            s = _setup_for(run, i, len(workers), max_lag_s, cid)
            env.runner.send_message("dbsurge:setup", s.__dict__, client_id=cid)
            run.rundir.event("worker_join", worker=cid, index=i, count=len(workers),
                             host=_worker_address(env, cid))
    else:
        run.make_pacer(_setup_for(run, 0, 1, max_lag_s))
        run.ready.set()
    run.side_tasks = [gevent.spawn(_master_loop, run)]
    if run.role == "master":
        run.side_tasks.append(gevent.spawn(_membership_loop, run))
    from .side import start_side_collectors

    run.side_tasks += start_side_collectors(run)


def _setup_for(run: DbSurgeRun, index: int, count: int, max_lag_s: float | None, worker: str | None = None) -> Setup:
    return Setup(
        target_uri=credentials.strip_password(run.target_uri), target_options=run.target_options, workload_options=run.workload_options,
        operations=run.operation_weights, plan=run.plan.to_dict() if run.plan else None,
        start_epoch_ns=run.start_epoch_ns, index=index, count=count, arrivals=run.options.arrivals,
        seed=run.options.seed, max_lag_s=max_lag_s, changes=list(run.changes), op_timeout_s=run.op_timeout_s,
        clock_offset_ns=run.clocks.offset_ns(worker) if worker else 0,
        credentials=run.credentials,
    )


def _plan_meta(plan: StagePlan | None, start_s: float) -> dict | None:
    if plan is None:
        return None
    d = plan.to_dict()
    for st in d["stages"]:
        st["start_utc"] = utc_iso(start_s + st["start_s"])
        st["end_utc"] = utc_iso(start_s + st["start_s"] + st["duration_s"]) if st["duration_s"] else None
    return d


def _jsonable(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool, list))


def _versions() -> dict:
    import platform

    import gevent as g
    import locust

    out = {"python": platform.python_version(), "locust": locust.__version__, "gevent": g.__version__}
    try:
        from . import __version__

        out["dbsurge"] = __version__
        import psycopg

        out["psycopg"] = psycopg.__version__
        import pymongo

        out["pymongo"] = pymongo.version
    except Exception:  # optional drivers: report what is there
        pass
    return out


#: A worker whose last heartbeat is older than this is lost: its share moves to the others. A worker
#: pauses after `stopping.MASTER_SILENCE_S` (shorter) without the master's answers, so both never send.
LOST_AFTER_S = 2.0


def _worker_ids(runner, run: DbSurgeRun | None = None) -> list[str]:
    """Workers that may take a share: connected, heard from within `LOST_AFTER_S`, proven when a token is required."""
    ids = sorted(c.id for c in runner.clients.values() if c.state != "missing")
    if run is not None:
        now = time.time()
        ids = [c for c in ids if now - run.last_seen.get(c, now) <= LOST_AFTER_S and c not in run.departed]
        if run.membership is not None:
            ids = run.membership.members(ids)
    return ids


@events.heartbeat_sent.add_listener
def _on_heartbeat_sent(client_id, timestamp, **_kw):
    """Master: Locust answers each worker heartbeat; that answer dates the worker's last sign of life."""
    run = _active["run"]
    if run is not None and run.role == "master":
        run.last_seen[client_id] = timestamp


def _membership_loop(run: DbSurgeRun) -> None:
    """Master: every 0.25 s, move shares when a worker is lost or joins (detection within `LOST_AFTER_S`);
    every 10 s, measure the workers' clocks again."""
    next_clock = time.monotonic() + 10.0
    while not run.finished:
        gevent.sleep(0.25)
        if time.monotonic() >= next_clock:
            next_clock = time.monotonic() + 10.0
            for cid in list(run.shares):
                run.environment.runner.send_message("dbsurge:clock", {"t1": wall_ns()}, client_id=cid)
        if run.closing is not None or run.plan is None:
            continue
        try:
            _reshare_if_needed(run)
        except Exception as e:
            run.note_problem("re-sharing the plan", e)


def number_at(run: DbSurgeRun, elapsed_s: float) -> int:
    """The first arrival number due at or after plan time ``elapsed_s``."""
    from .arrivals import ArrivalSequence

    if run.sequence is None:
        run.sequence = ArrivalSequence(run.options.arrivals, run.options.seed)
    return run.sequence.first_at_or_after(run.schedule.cumulative(max(0.0, elapsed_s)))


def _worker_address(env, cid: str) -> str | None:
    """The worker's host as Locust knows it (its id starts with the hostname), for events and the summary."""
    return cid.rsplit("_", 1)[0] if "_" in cid else None


def _await_proofs(run: DbSurgeRun, timeout_s: float = 3.0) -> None:
    """Give connected workers a moment to answer their challenge before the plan is shared."""
    if run.membership is None or run.membership.token is None:
        return
    m = run.membership

    def undecided() -> list[str]:
        ids = [c.id for c in run.environment.runner.clients.values() if c.state != "missing"]
        return [w for w in ids if w not in m.proven and w not in m.refused]

    deadline = time.monotonic() + timeout_s
    while undecided() and time.monotonic() < deadline:
        gevent.sleep(0.05)
    for cid in undecided():
        _refuse(run, cid, "did not answer the join challenge")


def _refuse(run: DbSurgeRun, cid: str, why: str) -> None:
    run.membership.refused[cid] = why
    run.membership.nonces.pop(cid, None)
    log.warning("worker %s refused (%s): it gets no share of the plan and sends no load", cid, why)
    run.safe_event("worker_refused", worker=cid, reason=why, host=_worker_address(run.environment, cid))


def _master_loop(run: DbSurgeRun) -> None:
    """Once a second: local drain, timeline flush, and re-sharing the plan when workers change.

    Nothing that fails here stops the loop (`DbSurgeRun.note_problem`); measurement goes on.
    """
    while not run.finished:
        gevent.sleep(1.0)
        if run.finished:
            return
        if run.role == "local" and run.closing is None:
            run.merge_payload(run.recorder.drain(), source="local")
        try:
            run.aggregator.flush()
        except Exception as e:
            run.note_problem("writing the timeline", e)


def _reshare_if_needed(run: DbSurgeRun) -> None:
    env = run.environment
    workers = _worker_ids(env.runner, run)
    if set(workers) == set(run.shares) or not workers:
        return
    elapsed = run.elapsed_s() or 0.0
    from_number = number_at(run, elapsed + 0.5)
    for cid in sorted(set(run.shares) - set(workers)):
        run.lost_workers.append(cid)
        run.lost_from[cid] = from_number
        silent = time.time() - run.last_seen.get(cid, time.time())
        run.safe_event("worker_lost", worker=cid, from_arrival=from_number, silent_s=round(silent, 3),
                       host=_worker_address(env, cid))
        log.warning("worker %s lost: its share of the rate moves to the others; its unreported arrivals "
                    "are booked as not sent (worker_lost)", cid)
    run.shares = {cid: i for i, cid in enumerate(workers)}
    max_lag_s = parse_duration(run.options.max_lag) if run.options.max_lag else None
    for cid, i in run.shares.items():
        env.runner.send_message("dbsurge:share", {"index": i, "count": len(workers), "from_number": from_number,
                                                  "write_off_until": run.lost_from.pop(cid, from_number),
                                                  "setup": _setup_for(run, i, len(workers), max_lag_s, cid).__dict__},
                                client_id=cid)
    run.safe_event("reshare", workers=len(workers), from_arrival=from_number)


def _on_leave_message(environment, msg, **_kw):
    """Master: a worker leaves gracefully: the others take its share from just ahead, at once."""
    run: DbSurgeRun = environment.dbsurge
    cid = msg.node_id
    if run.plan is None or cid not in run.shares or run.closing is not None:
        environment.runner.send_message("dbsurge:leave_ok", {"until_number": None}, client_id=cid)
        return
    run.departed.add(cid)
    from_number = number_at(run, (run.elapsed_s() or 0.0) + 0.3)
    run.safe_event("worker_leaving", worker=cid, why=(msg.data or {}).get("why"), from_arrival=from_number)
    log.warning("worker %s is leaving (%s): its share moves to the others from arrival %d", cid,
                (msg.data or {}).get("why"), from_number)
    environment.runner.send_message("dbsurge:leave_ok", {"until_number": from_number}, client_id=cid)
    workers = _worker_ids(environment.runner, run)
    run.shares = {w: i for i, w in enumerate(workers)}
    max_lag_s = parse_duration(run.options.max_lag) if run.options.max_lag else None
    for w, i in run.shares.items():
        environment.runner.send_message(
            "dbsurge:share", {"index": i, "count": len(workers), "from_number": from_number,
                              "setup": _setup_for(run, i, len(workers), max_lag_s, w).__dict__}, client_id=w)
    run.safe_event("reshare", workers=len(workers), from_arrival=from_number)


def _on_leave_ok(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    until = (msg.data or {}).get("until_number")
    run.leave_until = int(until) if until is not None else (run.pacer.next_number if run.pacer else 0)


def _resume_share(run: DbSurgeRun, cid: str) -> None:
    """A worker that paused (it lost sight of the master) but was never given up keeps its share:
    nobody else took its slots, so it sends them, late (the lag says so), instead of writing them off."""
    if run.closing is not None or run.plan is None or cid not in run.shares:
        return
    run.environment.runner.send_message("dbsurge:share", {"resume": True}, client_id=cid)
    run.safe_event("worker_resumed", worker=cid)


# -- clocks (see dbsurge.clocks) ---------------------------------------------------------------------------


def _measure_clocks(run: DbSurgeRun, workers: list[str], exchanges: int = 5, timeout_s: float = 1.0) -> None:
    """Master, before the plan is shared: a few NTP-style exchanges with each worker."""
    runner = run.environment.runner
    for _ in range(exchanges):
        for cid in workers:
            runner.send_message("dbsurge:clock", {"t1": wall_ns()}, client_id=cid)
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
    environment.runner.send_message("dbsurge:clock", {"t1": msg.data["t1"], "t2": t2, "t3": wall_ns()})


def _on_clock_answer(environment, msg, **_kw):
    t4 = wall_ns()
    d = msg.data
    environment.dbsurge.clocks.add(msg.node_id, d["t1"], d["t2"], d["t3"], t4)


# -- membership: the join challenge (see dbsurge.membership) ----------------------------------------------


def _on_hello_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    run.last_seen[msg.node_id] = time.time()
    if (msg.data or {}).get("rejoin"):
        _resume_share(run, msg.node_id)
    nonce = run.membership.challenge(msg.node_id)
    if nonce is not None:
        environment.runner.send_message("dbsurge:challenge", {"nonce": nonce}, client_id=msg.node_id)


def _on_proof_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    if run.membership.answer(msg.node_id, (msg.data or {}).get("proof")):
        log.info("worker %s proved the join token", msg.node_id)
    else:
        _refuse(run, msg.node_id, run.membership.refused.get(msg.node_id, "refused"))


def _on_challenge_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    token = run.local_options.get("join_token")
    answer = proof(token, msg.data["nonce"], environment.runner.client_id) if token else None
    environment.runner.send_message("dbsurge:proof", {"proof": answer})


# -- worker side messages --------------------------------------------------------------------------------


def _on_setup_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    s = Setup(**msg.data)
    try:
        credentials.configure_worker(run, s)  # the password from this worker's own sources
    except UserError as e:
        log.error("dbsurge: %s", e)
        return
    run.changes = list(s.changes)
    run.make_pacer(s)
    run.ready.set()


def _on_rate_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    d = msg.data
    run.apply_rate_change(d["at_s"], d.get("rate_tps"), d.get("scale"))


def _on_share_message(environment, msg, **_kw):
    run: DbSurgeRun = environment.dbsurge
    d = msg.data
    if d.get("resume"):
        if run.pacer is not None and run.pacer.paused:
            run.pacer.paused = False
            log.warning("dbsurge: back in touch with the master, which kept this worker's share: sending again")
        return
    if run.pacer is None:  # a worker that joined mid-run
        s = Setup(**d["setup"])
        credentials.configure_worker(run, s)
        run.make_pacer(s)
        run.ready.set()
    if run.pacer.paused:  # back after losing sight of the master: write off what it could not send
        n = run.pacer.rejoin(d["index"], d["count"], d["from_number"], d.get("write_off_until", d["from_number"]))
        log.warning("dbsurge: back in touch with the master: %d slots due meanwhile are booked as not sent "
                    "(worker_lost); sending again", n)
        return
    run.pacer.reshare(d["index"], d["count"], d["from_number"])


# -- live rate changes (web UI, HTTP endpoint) ----------------------------------------------------------


def change_rate(run: DbSurgeRun, *, rate_tps: float | None = None, scale: float | None = None) -> dict:
    """Change the arrival rate from now on, on every worker; returns the new state."""
    if run.schedule is None or run.start_epoch_ns is None:
        raise UserError("no arrival-rate plan is running: start a test with an arrival-rate shape first")
    at_s = max(0.0, (run.elapsed_s() or 0.0) + 0.2)  # a little ahead, so every worker applies it on time
    run.apply_rate_change(at_s, rate_tps, scale)
    if run.role == "master":
        for cid in run.shares:
            run.environment.runner.send_message("dbsurge:rate", {"at_s": at_s, "rate_tps": rate_tps, "scale": scale},
                                                client_id=cid)
    run.rundir.event("rate_change", at_s=at_s, rate_tps=rate_tps, scale=scale)
    run.rundir.write_meta(rate_changes=run.changes)
    return {"at_s": at_s, "rate_tps": rate_tps, "scale": scale}


# -- shipping measurements ------------------------------------------------------------------------------


# Locust's report events carry no environment: the process's run is kept here at init.
_active: dict[str, DbSurgeRun | None] = {"run": None}


@events.report_to_master.add_listener
def _on_report(client_id, data, **_kw):
    run = _active["run"]
    if run is not None:
        data["dbsurge"] = run.recorder.drain()


@events.worker_report.add_listener
def _on_worker_report(client_id, data, **_kw):
    run = _active["run"]
    if run is None or run.aggregator is None or "dbsurge" not in data:
        return
    run.merge_payload(data["dbsurge"], source=client_id)


# -- the end ----------------------------------------------------------------------------------------------


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw):
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None or run.role == "worker" or run.aggregator is None:
        return
    if not environment.parsed_options.headless and run.closing is None:
        # the web UI's Stop: Locust has stopped the users; close the ledger and write the tables
        def stop_from_ui():
            stopping.close_run(run, "interrupted", in_flight_reason="interrupted")
            finish.finish_run(run)

        gevent.spawn(stop_from_ui)


@events.quitting.add_listener
def _on_quitting(environment, **_kw):
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None or run.role == "worker":
        return
    try:
        if run.aggregator is not None and not run.finished:
            if run.closing is None:
                stopping.close_run(run, "interrupted" if run.plan is not None else "users_exhausted",
                                   in_flight_reason="in_flight")
            finish.finish_run(run)
        if run.exit_code is not None:
            environment.process_exit_code = run.exit_code
        if os.environ.get("DBSURGE_QUIET"):
            # `dbsurge run --quiet`: dbsurge's tables were printed; Locust's would repeat them, rounded
            logging.getLogger("locust.stats_logger").setLevel(logging.WARNING)
    finally:
        if run.embedded_handle is not None:
            run.embedded_handle.stop()
