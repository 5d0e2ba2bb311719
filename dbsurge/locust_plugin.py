"""dbsurge inside Locust: the listeners, and nothing else.

Importing this module (the locustfiles and shapes do) registers listeners on Locust's events and
sets three of Locust's module settings (report and heartbeat intervals, latency buckets). Each
listener hands over to the module that does the work:

- ``init_command_line_parser``: dbsurge's options (`dbsurge.options`, `dbsurge.spot`).
- ``init``: the run's state (`dbsurge.run_state.DbSurgeRun`, then reached only as
  ``environment.dbsurge``), this role's messages (`dbsurge.protocol.register`), on the master or a
  local run the checks before any load (`dbsurge.preflight`), the Prometheus exporter and the web
  controls; per-environment listeners for the once-a-second reports.
- ``test_start``: the run begins (`dbsurge.lifecycle.begin_run`); a worker arms its SIGTERM leave
  and Spot watcher (`dbsurge.stopping`, `dbsurge.spot`).
- ``report_to_master`` / ``worker_report``: the recorder's payload out, into the aggregator.
- ``heartbeat_sent``: the master dates each worker's last sign of life (membership).
- ``test_stop`` / ``quitting``: the ledger is closed and the tables written (`dbsurge.stopping`,
  `dbsurge.finish`), and the exit code set.
"""

from __future__ import annotations

import argparse
import logging
from functools import partial

import gevent
import locust.runners
import locust.stats
from locust import events

from . import console, finish, latency_buckets, protocol, stopping
from .errors import UserError
from .lifecycle import begin_run
from .membership import Membership, run_token
from .option_types import strict_numbers
from .options import add_options
from .preflight import fail, preflight
from .run_state import DbSurgeRun, ShipToMaster, dbsurge_user_classes
from .size_limits import check_master_bind, check_processes
from .validate import check_web_exposure

log = logging.getLogger("dbsurge")

# Workers report once a second instead of every three: the timeline is per second, and a crash
# loses at most one interval.
locust.runners.WORKER_REPORT_INTERVAL = 1.0
# Heartbeats twice a second (Locust: once), so that a lost worker is known within 2 s
# (protocol.LOST_AFTER_S) while a worker pauses after 1.5 s without the master (three missed
# answers), well before that.
locust.runners.HEARTBEAT_INTERVAL = 0.5
locust.runners.HEARTBEAT_LIVENESS = 5
# Sub-millisecond response times in Locust's own statistics and web UI.
locust.stats.bucket_response_time = latency_buckets.bucket_response_time


#: This process's own options as Locust first parsed them (`_keep_own_options`).
_OWN_OPTIONS: dict = {}


@events.init_command_line_parser.add_listener
def _on_parser(parser, **_kw):
    from .spot import add_spot_options

    add_options(parser)
    add_spot_options(parser)
    _keep_own_options(parser)
    strict_numbers(parser)  # Locust's own numbers too: `-u ٥` and `--web-port 1_000` are not numbers
    parser.error = _one_line_error  # a refused value in dbsurge's one line, not argparse's usage and error


def _one_line_error(message: str) -> None:
    from .errors import clip

    fail(clip(message, 200))


def _keep_own_options(parser) -> None:
    """Keep a copy of what this process was started with, as soon as Locust has parsed it.

    A worker's options are overwritten by the master's with every spawn message, and a worker that
    joins a running test gets its first spawn while it connects, before Locust fires ``init``: read
    there, its join token, Spot watch and target would already be the master's (none, off, stripped).
    """
    parse_args = parser.parse_args

    def parse_and_keep(*args, **kwargs):
        options = parse_args(*args, **kwargs)
        if not _OWN_OPTIONS:  # the first parse is main's; the web UI parses again later
            processes = getattr(options, "processes", None)
            if processes and not getattr(options, "worker", False):
                try:  # Locust forks right after this parse: a refusal later would leave the workers behind
                    check_processes(processes)
                    check_master_bind(processes, getattr(options, "master_bind_host", None))
                except UserError as e:
                    fail(str(e))
                if not getattr(options, "join_token", None):
                    # the forked --processes workers inherit the token in memory, never on a command line
                    options.join_token = run_token()
            _OWN_OPTIONS.update(vars(options))
        return options

    parser.parse_args = parse_and_keep


def _own_options(environment) -> argparse.Namespace:
    return argparse.Namespace(**_OWN_OPTIONS) if _OWN_OPTIONS else environment.parsed_options


@events.init.add_listener
def _on_init(environment, runner=None, web_ui=None, **_kw):
    if runner is None or environment.parsed_options is None or not dbsurge_user_classes(environment):
        return
    console.set_up_logging()
    own = _own_options(environment)
    run = DbSurgeRun(environment, own)
    environment.dbsurge = run
    # Locust's report events carry no environment: these listeners carry the run themselves
    environment.events.report_to_master.add_listener(partial(_on_report, run))
    environment.events.worker_report.add_listener(partial(_on_worker_report, run))
    environment.events.heartbeat_sent.add_listener(partial(_on_heartbeat_sent, run))
    if run.role == "worker":
        # this host's own settings: Locust overwrites parsed_options with the master's at every spawn
        run.local_options = {k: getattr(own, k, None) for k in ("join_token", "spot_watch", "imds_endpoint")}
        protocol.register(run, runner)
        logging.getLogger().addHandler(ShipToMaster(run.recorder))
        gevent.spawn(stopping.master_watchdog, run)
        gevent.spawn(stopping.loop_lag_monitor, run)
        if runner.worker_state in (locust.runners.STATE_SPAWNING, locust.runners.STATE_RUNNING):
            _arm_worker(run)  # joined a running test: Locust fired test_start before init, without us
        return
    if run.role == "master":
        run.membership = Membership(run.options.join_token)
        # Locust sends the master's parsed options to every connected worker, proven or not: not the token
        run.options.join_token = None
        environment.parsed_options.join_token = None
        protocol.guard_dispatch(run)
    protocol.register(run, runner)
    if run.role == "local":
        gevent.spawn(stopping.loop_lag_monitor, run)
    try:
        warning = check_web_exposure(own, web=web_ui is not None)  # before the UI listens (Locust starts it later)
        if warning:
            logging.getLogger("dbsurge").warning(warning)
        preflight(run)
        from .prometheus import start_exporter

        run.prometheus = start_exporter(run)  # --prometheus-port: listening before any load, or exit 2
    except UserError as e:
        fail(str(e))
    environment.host = run.target.display  # shown as Host in the web UI; secrets removed
    # Locust sends its parsed options to every worker with each spawn: not the web UI's password
    web_auth = getattr(environment.parsed_options, "web_auth", None)
    environment.parsed_options.web_auth = None
    if web_ui is not None:
        from .web import install_web_controls

        install_web_controls(web_ui, run, web_auth=web_auth or getattr(own, "web_auth", None))


@events.test_start.add_listener
def _on_test_start(environment, **_kw):
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None:
        return
    if run.role == "worker":
        _arm_worker(run)
        return
    begin_run(run)


def _arm_worker(run: DbSurgeRun) -> None:
    """Worker, at test start: SIGTERM leaves gracefully, and the Spot watcher runs if asked for.

    Not at init: Locust installs its own SIGTERM handler after init, and the last one wins.
    """
    stopping.install_worker_signal_handlers(run)
    if run.local_options.get("spot_watch") and run.spot_watcher is None:
        from .spot import start_spot_watcher

        run.spot_watcher = start_spot_watcher(
            run.local_options.get("imds_endpoint"), lambda notice: gevent.spawn(stopping.leave, run, notice.reason))


# -- once-a-second reports and heartbeats (registered per environment at init) ----------------------------


def _on_report(run: DbSurgeRun, client_id, data, **_kw):
    data["dbsurge"] = run.recorder.drain()


def _on_worker_report(run: DbSurgeRun, client_id, data, **_kw):
    if run.aggregator is not None and "dbsurge" in data:
        run.merge_payload(data["dbsurge"], source=client_id)


def _on_heartbeat_sent(run: DbSurgeRun, client_id, timestamp, **_kw):
    """Master: Locust answers each worker heartbeat; that answer dates the worker's last sign of life."""
    if run.role == "master":
        run.last_seen[client_id] = timestamp


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
        console.hide_locust_tables()
    finally:
        if run.embedded_handle is not None:
            run.embedded_handle.stop()
