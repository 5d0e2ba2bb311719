"""dbsurge inside Locust: the listeners, and nothing else.

Importing this module (the locustfiles and shapes do) registers listeners on Locust's events and
sets three of Locust's module settings (report and heartbeat intervals, latency buckets). Each
listener hands over to the module that does the work:

- ``init_command_line_parser``: dbsurge's options (`dbsurge.config.options`, `dbsurge.engine.spot_notices`).
- ``init``: the run of this process's role (`dbsurge.engine.roles.new_run`, then reached only as
  ``environment.dbsurge``), which registers its messages and starts its greenlets (``start``); on the
  master or a local run the checks before any load (`dbsurge.engine.preflight`), the Prometheus exporter and
  the web controls; per-environment listeners for the once-a-second reports.
- ``test_start``: the role begins the test (``begin_test``: `dbsurge.engine.lifecycle.begin_run` on the master
  or a local run; a worker arms its SIGTERM leave and Spot watcher, `dbsurge.engine.stopping`, `dbsurge.engine.spot_notices`).
- ``report_to_master`` / ``worker_report``: the recorder's payload out, into the aggregator.
- ``test_stopping`` (a closed-model run): every worker's final account is collected while Locust
  still listens to its workers (it sends them ``quit`` right after), `dbsurge.engine.stopping.close_run`.
- ``test_stop`` / ``quitting``: the ledger is closed and the tables written (`dbsurge.engine.stopping`,
  `dbsurge.engine.finish`), and the exit code set.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from functools import partial

import gevent
import gevent.event
import locust.runners
import locust.stats
from locust import events

from dbsurge.base.errors import EXIT_SIGNAL, EXIT_STOPPED, UserError, clip
from dbsurge.base.redact import redact_text
from dbsurge.collectors.hooks import COLLECTOR_HOOKS
from dbsurge.collectors.scenario_hooks import install as install_scenario_reports
from dbsurge.config.option_names import long_options, refuse_abbreviations
from dbsurge.config.option_types import strict_numbers
from dbsurge.config.options import add_options, locust_help_groups
from dbsurge.config.size_limits import check_processes
from dbsurge.engine import console, finish, lifecycle, locust_child, membership, stopping
from dbsurge.engine.collector_hooks import install as install_collectors
from dbsurge.engine.lease import HEARTBEAT_S
from dbsurge.engine.membership import run_token
from dbsurge.engine.preflight import fail, preflight
from dbsurge.engine.roles import new_run
from dbsurge.engine.run_state import DbSurgeRun, dbsurge_user_classes
from dbsurge.engine.spot_notices import add_spot_options
from dbsurge.engine.validate import check_master_bind, check_report_files, check_web_exposure
from dbsurge.load.user import end_the_last_tests_users
from dbsurge.measure import latency_buckets
from dbsurge.scenarios import SCENARIO_REPORTS
from dbsurge.ui.web import install_web_controls, let_the_page_show_the_ending

log = logging.getLogger("dbsurge")

# Workers report once a second instead of every three: the timeline is per second, and a crash
# loses at most one interval.
locust.runners.WORKER_REPORT_INTERVAL = 1.0
# Heartbeats twice a second (Locust: once), so that a lost worker is known within 2 s
# (lease.LOST_AFTER_S, whose margin counts one heartbeat period: lease.HEARTBEAT_S).
locust.runners.HEARTBEAT_INTERVAL = HEARTBEAT_S
locust.runners.HEARTBEAT_LIVENESS = 5
# Sub-millisecond response times in Locust's own statistics and web UI.
locust.stats.bucket_response_time = latency_buckets.bucket_response_time
# The engine's collectors (side collectors, report), and the scenarios a report may name: handed in here, the
# layers below never import them.
install_collectors(COLLECTOR_HOOKS)
install_scenario_reports(SCENARIO_REPORTS)


#: This process's own options as Locust first parsed them (`_keep_own_options`).
_OWN_OPTIONS: dict = {}
#: The process that imported the plugin: Locust's ``--processes`` workers are forked from it.
_IMPORT_PID = os.getpid()

if "locust.main" in sys.modules:  # loaded by Locust's main (not imported by a test or a tool)
    # SIGINT and SIGTERM are dbsurge's from here on, before any load and after the last file
    stopping.own_signals()
    if locust_child.parent_gone():  # `dbsurge run` died while this process was starting: never load
        os._exit(EXIT_SIGNAL[15])
    from dbsurge.commands.worker import remove_own_tmpdir_at_exit

    remove_own_tmpdir_at_exit()  # a worker's private temporary folder (`dbsurge worker`, the image's entrypoint)


@events.init_command_line_parser.add_listener
def _on_parser(parser, **_kw):
    # under dbsurge's headings in Locust's parser; `locust -f X --help` cannot show them (Locust prints its help
    # before it imports the locustfile, whose import registers this listener): `dbsurge run --help` lists them
    group = locust_help_groups(parser)
    before = set(long_options(parser))
    add_options(parser, group=group)
    add_spot_options(group("distribution"))
    refuse_abbreviations(parser, set(long_options(parser)) - before)  # `--rat 100` is not --rate
    _keep_own_options(parser)
    strict_numbers(parser)  # Locust's own numbers too: `-u ٥` and `--web-port 1_000` are not numbers
    parser.error = _one_line_error  # a refused value in dbsurge's one line, not argparse's usage and error


def _one_line_error(message: str) -> None:
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
            if not getattr(options, "worker", False):
                try:  # Locust makes --csv's directory and opens its files before `init`, and the report at the end
                    check_report_files(options)
                except UserError as e:
                    fail(str(e))
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
            if getattr(options, "worker", False):  # Locust connects next, and waits in silence
                gevent.spawn(_say_why_still_waiting, options.master_host, options.master_port)
        return options

    parser.parse_args = parse_and_keep


#: Set at ``init``: a worker's ``init`` comes after it reached the master.
_INITIALISED = gevent.event.Event()
WORKER_WAIT_HINT_S = 10.0


def _say_why_still_waiting(host: str, port: int) -> None:
    """A worker that has not reached its master after 10 s says where it is trying and what to check."""
    if _INITIALISED.wait(WORKER_WAIT_HINT_S):
        return
    log.warning(membership.waiting_hint(host, port))


def _own_options(environment) -> argparse.Namespace:
    return argparse.Namespace(**_OWN_OPTIONS) if _OWN_OPTIONS else environment.parsed_options


@events.init.add_listener
def _on_init(environment, runner=None, web_ui=None, **_kw):
    if runner is None or environment.parsed_options is None or not dbsurge_user_classes(environment):
        return
    _INITIALISED.set()
    console.set_up_logging()
    own = _own_options(environment)
    run = new_run(environment, own)
    environment.dbsurge = run
    stopping.attach(run)
    # Locust's report events carry no environment: these listeners carry the run themselves
    # first: the drain feeds Locust's tables (dbsurge.load.locust_stats) before Locust's own listener ships them
    _listen_first(environment.events.report_to_master, partial(_on_report, run))
    environment.events.worker_report.add_listener(partial(_on_worker_report, run))
    run.start(runner, forked=os.getppid() == _IMPORT_PID)
    if not run.writes_results:
        return
    try:
        warning = check_web_exposure(own, web=web_ui is not None)  # before the UI listens (Locust starts it later)
        if warning:
            logging.getLogger("dbsurge").warning(warning)
        preflight(run)
        from dbsurge.ui.prometheus import start_exporter  # prometheus_client: not on workers, nor before init

        run.prometheus = start_exporter(run)  # --prometheus-port: listening before any load, or exit 2
    except UserError as e:
        fail(str(e))
    environment.host = run.target.display  # shown as Host in the web UI; secrets removed
    if run.has_workers and not getattr(own, "processes", None):  # a master the user asked for
        log.info(membership.listening_line(own.master_bind_host, own.master_bind_port,
                                           token=run.membership is not None and run.membership.token is not None))
    # Locust sends its parsed options to every worker with each spawn: not the web UI's password
    web_auth = getattr(environment.parsed_options, "web_auth", None)
    environment.parsed_options.web_auth = None
    if web_ui is not None:
        install_web_controls(web_ui, run, web_auth=web_auth or getattr(own, "web_auth", None))


@events.test_start.add_listener
def _on_test_start(environment, **_kw):
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None:
        return
    lifecycle.after_the_last_test(run)  # a Start right after the web UI's Stop: that test's files first
    end_the_last_tests_users(environment.runner)  # then its users still on their way out, before Locust counts them
    try:
        run.begin_test()
    except Exception as e:
        # Locust logs the traceback and goes on; the test's verdict must not read OK (nothing was handed out)
        if run.writes_results and run.aggregator is not None and not run.ending.finished:
            run.ending.start_failed = clip(redact_text(f"{type(e).__name__}: {e}"), 200)
            run.safe_event("test_start_failed", error=run.ending.start_failed)
        raise


# -- once-a-second reports and heartbeats (registered per environment at init) ----------------------------


def _listen_first(hook, listener) -> None:
    """Add ``listener`` to a Locust event hook ahead of the listeners it already has."""
    others = list(hook._handlers)
    for h in others:
        hook.remove_listener(h)
    hook.add_listener(listener)
    for h in others:
        hook.add_listener(h)


def _on_report(run: DbSurgeRun, client_id, data, **_kw):
    # a list of payloads (`DbSurgeRun.take_drained`); Locust's tables are fed before its own listener ships them
    data["dbsurge"] = run.take_drained()


def _on_worker_report(run: DbSurgeRun, client_id, data, **_kw):
    """Master: a worker's report into the aggregator; then the loop runs once (see `stopping.on_final_message`:
    Locust reads waiting messages back to back, and reports sent in the same moment would make one stall)."""
    if run.aggregator is not None and "dbsurge" in data:
        run.merge_payloads(data["dbsurge"], source=client_id)
        gevent.sleep(0)


# -- the end ----------------------------------------------------------------------------------------------


@events.test_stopping.add_listener
def _on_test_stopping(environment, **_kw):
    """Master or local, closed model: collect the final accounts before Locust sends its workers ``quit``.

    A headless ``--run-time`` ends in ``runner.quit()``, which fires this event, then tells every worker
    to quit and stops listening; by ``quitting`` no worker can answer any more. (Under a plan, the
    shape's last tick has closed the run already.)
    """
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None or not run.writes_results or run.aggregator is None or run.ending.closing is not None:
        return
    if run.plan is None:
        stopping.close_run(run, "users_exhausted", in_flight_reason="in_flight")


@events.test_stop.add_listener
def _on_test_stop(environment, **_kw):
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None or not run.writes_results or run.aggregator is None:
        return
    if environment.parsed_options.headless or run.ending.finished:
        return  # headless, Locust quits next: `_on_quitting` writes the tables
    if run.ending.closing is None:
        # the web UI's Stop: Locust has asked the users to stop; an interruption, like a signal, with its own code
        run.ending.interrupted = ("web UI Stop", run.elapsed_s() or 0.0)
        run.ending.exit_code_override = EXIT_STOPPED
        drain_s = float(run.options.drain)  # as a signal: the users finish the slot they are on (DbUser.stop)
        log.warning("the web UI's Stop: stopping the run (in-flight operations get up to %g s; exit %d once "
                    "the process ends)", drain_s, EXIT_STOPPED)

        def stop_from_ui():
            stopping.close_run(run, "interrupted", drain_s=drain_s, in_flight_reason="interrupted")
            finish.finish_run(run)

        gevent.spawn(stop_from_ui)
        return
    # the plan ended (the shape closed the ledger): write the tables now, not when the process ends;
    # under `dbsurge run --web` the process ends too, by the verdict (a hand-run Locust UI stays up)
    # (after the page has been sent the ending: `let_the_page_show_the_ending`, at most a few seconds)
    def finish_at_plan_end():
        ends = bool(os.environ.get(locust_child.END_WITH_PLAN_ENV))
        run.ending.process_exits = ends
        began = time.monotonic()
        finish.finish_run(run)
        ending = run.ending
        if ends and ending.interrupted is None and ending.signals == 0:
            if run.exit_code is not None:
                environment.process_exit_code = run.exit_code
            let_the_page_show_the_ending(environment.web_ui, run, began)
            if ending.signals == 0:  # a signal meanwhile ends the process its own way
                stopping.end_process(run)

    gevent.spawn(finish_at_plan_end)


def _keep_prometheus_for_the_last_scrape(run: DbSurgeRun) -> None:
    """``--prometheus-grace``: the endpoint outlives the run by a scrape interval (`PrometheusExporter.linger`)."""
    if run.prometheus is None:
        return
    grace = float(getattr(run.options, "prometheus_grace", 0) or 0)
    if grace > 0:
        log.info("Prometheus endpoint kept %g s for the last scrape (--prometheus-grace)", grace)
        signals = run.ending.signals
        run.prometheus.linger(grace, interrupted=lambda: run.ending.signals != signals)
    run.prometheus.close()


@events.quitting.add_listener
def _on_quitting(environment, **_kw):
    run: DbSurgeRun | None = getattr(environment, "dbsurge", None)
    if run is None or not run.writes_results:
        return
    try:
        if run.aggregator is not None and not run.ending.finished:
            if run.ending.closing is None:
                stopping.close_run(run, "interrupted" if run.plan is not None else "users_exhausted",
                                   in_flight_reason="in_flight")
            finish.finish_run(run)
        if run.exit_code is not None:
            environment.process_exit_code = run.exit_code
        console.hide_locust_tables()
        _keep_prometheus_for_the_last_scrape(run)
    finally:
        if run.embedded_handle is not None:
            run.embedded_handle.stop()
