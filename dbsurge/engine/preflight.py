"""Everything a user can get wrong, checked before any load and before a run directory exists.

`preflight(run)` is called by the plugin at Locust's ``init`` on the master (or a local run):
numbers and the plan first (no network), then the options, the results directory, the target
(one connection), the side collectors and the default data set. A mistake ends the process with
one line (`fail`) and exit 2.
"""

from __future__ import annotations

import logging
import sys

import psutil  # Locust's own dependency

from dbsurge.base.errors import UserError
from dbsurge.base.redact import redact_text
from dbsurge.config import credentials
from dbsurge.config.checks import check_operations
from dbsurge.config.options import NO_TARGET
from dbsurge.config.size_limits import check_connections, check_plan_size
from dbsurge.embedded.servers import resolve_embedded
from dbsurge.engine.arrival_shape import ArrivalRateShape
from dbsurge.engine.collector_hooks import collectors
from dbsurge.engine.membership import is_loopback
from dbsurge.engine.run_state import DbSurgeRun, dbsurge_user_classes, resolve_operations
from dbsurge.engine.validate import SHAPE_CLASSES, check_offline, check_plan_choice, validate_locust_options
from dbsurge.measure.timing import time_call

log = logging.getLogger("dbsurge")


def fail(message: str) -> None:
    """End the process with one line on stderr, before any load is sent."""
    sys.stderr.write(f"dbsurge: {message}\n")
    sys.stderr.flush()
    end_forked_workers()
    sys.exit(2)


def end_forked_workers() -> None:
    """Kill this process's ``--processes`` workers: Locust forks them before ``init``, so a master refused in
    its checks would leave them waiting 60 s for its heartbeat. They have sent nothing yet; other children
    (an embedded server) run another command line and are left alone."""
    try:
        me = psutil.Process()
        command = me.cmdline()
        for child in me.children():
            try:
                if child.cmdline() == command:
                    child.kill()
            except psutil.Error:
                continue
    except Exception as e:  # noqa: BLE001 - the refusal itself must still end in its one line
        log.debug("could not end the forked workers: %s", e)


def preflight(run: DbSurgeRun) -> None:
    """Everything a user can get wrong, checked before any load: plan, workload, options, target."""
    opts = run.options
    if run.has_workers and not is_loopback(getattr(opts, "master_bind_host", None)) \
            and not (run.membership and run.membership.token) and not opts.insecure_join:
        where = "every address (*)" if opts.master_bind_host in ("*", "0.0.0.0", "::") else opts.master_bind_host
        raise UserError(f"this master listens on {where}, so workers on other hosts can join and "
                        f"receive the plan and the target: set DBSURGE_JOIN_TOKEN (or --join-token) on the master "
                        f"and its workers, or pass --insecure-join")
    # numbers first (a nan or 0 in them would break the plan or the shape), then the plan: no network
    validate_locust_options(opts, shape=run.environment.shape_class is not None)
    parsed = check_offline(opts)  # the same checks `dbsurge run` makes before its child starts
    check_shape_options(run)
    build_plan(run)
    check_plan_size(run.plan)
    workload_options, target_options = parsed["workload_options"], parsed["target_options"]
    requested_ops, checks = parsed["operations"], parsed["checks"]
    if not opts.target:
        raise UserError(NO_TARGET)
    uri, handle = resolve_embedded(opts.target)
    run.embedded_handle = handle
    uri = credentials.for_master(uri, opts.target_secret, opts.target_secret_endpoint_url)
    run.configure_target(uri, target_options, workload_options, [])
    run.config.credentials = credentials.setup_fields(uri, getattr(run.target, "flavor", None), opts.target_secret,
                                               opts.target_secret_endpoint_url)
    opts.target = credentials.strip_password(uri)  # Locust sends the options to every worker with each spawn
    names = sorted({u.workload for u in dbsurge_user_classes(run.environment)})
    for name in names:
        wl = run.workload(name)
        run.config.operation_weights = resolve_operations(wl, requested_ops)
    # a check on an operation the workload lacks could only fail, after the whole load
    check_operations(checks, [op for name in names for op in run.workload(name).operations])
    run.target.check()  # what it negotiated is said when the test begins (`lifecycle.begin_run`): a refusal
    # after this point is still the one line
    if run.environment.shape_class is None:  # the closed model: every user holds a connection from the start
        limit, in_use = run.target.connection_limit()
        check_connections(getattr(opts, "num_users", None), limit, in_use, run.target.display)
    collectors().preflight(run)
    for name in names:
        if opts.no_load:
            _check_no_load(run, name)
        else:
            _load_default_data(run, name)
    if run.plan is not None:
        run.probe_service_s = probe_service_time(run)
        if run.probe_service_s is not None:
            log.info("probe: the workload's operations took %.3f ms (median) on %s", run.probe_service_s * 1e3,
                     run.target.display)


def check_shape_options(run: DbSurgeRun) -> None:
    """The plan options dbsurge's shape would ignore (`validate.check_plan_choice`), for ``locust -f`` users too.

    --stage-seconds is left alone here: the image's deployments set it whatever the shape. Another
    shape class than dbsurge's three, or none, is not checked: it reads what it reads."""
    shape_class = run.environment.shape_class
    shape = SHAPE_CLASSES.get(type(shape_class).__name__) if shape_class is not None else None
    if shape is None:  # the closed model's own options are Locust's (-u, -t), checked by it
        return
    # Locust's -t under the spike or stages shape: the plan's own length rules (`dbsurge run` refuses --duration)
    run_time = getattr(run.options, "run_time", None) if shape in ("spike", "stages") else None
    for warning in check_plan_choice(shape, run.options, stage_seconds=False, duration=run_time,
                                     duration_flag="-t/--run-time"):
        log.warning(warning)


def _check_no_load(run: DbSurgeRun, name: str) -> None:
    """--no-load: what no operation of workload `name` can run without is there (`Workload.check_no_load`)."""
    wl = run.workload(name)
    try:
        wl.check_no_load()
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - the check's own query failed: one line, before any load
        raise UserError(f"looking for the {name} schema on {run.target.display} failed: {_first_line(e)}") from None


def _load_default_data(run: DbSurgeRun, name: str) -> None:
    """Load workload `name`'s default data set when the target lacks it; any failure is one `UserError` line."""
    wl = run.workload(name)
    try:
        present = wl.has_data()
    except Exception as e:  # noqa: BLE001 - an --op-timeout of 1ms times this query out: one line, no traceback
        raise UserError(f"looking for the {name} data set on {run.target.display} failed: {_first_line(e)}") from None
    if present:
        return
    log.info("loading the default %s data set into %s", name, run.target.display)
    try:
        wl.load(progress=True)
    except Exception as e:  # noqa: BLE001 - a refused write, a full disk...: one line, before any load
        raise UserError(f"loading the {name} data set into {run.target.display} failed: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {redact_text(first)}"


def probe_service_time(run: DbSurgeRun, rounds: int = 3) -> float | None:
    """Time a few of the workload's own operations (each, ``rounds`` times) on one connection: the
    service time the shape sizes the pool by before the run has measured any (instead of a guess).

    They run before time zero and are not part of the ledger. None when they fail (the run will say why).
    """
    import statistics

    try:
        workload = run.workload(sorted({u.workload for u in dbsurge_user_classes(run.environment)})[0])
        session = run.target.connect()
    except Exception:
        return None
    try:
        fns = workload.new_client(session, 12345)
        names = [n for n, _ in run.config.operation_weights if n in fns] or list(fns)
        times = []
        for _ in range(rounds):
            for name in names:
                ok, _, start_ns, end_ns = time_call(fns[name])  # the one timing helper
                if not ok:
                    return None
                times.append((end_ns - start_ns) / 1e9)
        return statistics.median(times) if times else None
    except Exception:
        return None
    finally:
        try:
            session.close()
        except Exception:
            pass


def build_plan(run: DbSurgeRun) -> None:
    shape = run.environment.shape_class
    if isinstance(shape, ArrivalRateShape):
        run.plan = shape.build_plan(run.options)
