"""The ``dbsurge`` command.

    dbsurge run --workload ycsb --target embedded-mongo --users 8 --duration 10s --processes 2
    dbsurge run --workload orders --target embedded-postgres --shape spike --baseline-tps 200 --stage-seconds 20
    dbsurge load --workload ycsb --target postgresql://... --workload-option recordcount=100000
    dbsurge embedded start|stop|status [postgres|mongo|all]
    dbsurge scenario NAME [options]          (dbsurge scenario --help lists them)
    dbsurge collect|report|cost results/<run>
    dbsurge runners up|status|down|verify --run-id ID [options]   (EC2 Spot hosts for workers)
    dbsurge worker --master-host ADDR [--join-token-secret ARN]   (a Locust worker; secrets from AWS)
    dbsurge rerun results/<run> [--target URI]        (the same plan, workload, options and seed again)
    dbsurge compare results/<a> results/<b> [--labels A,B] [--html FILE]
    dbsurge run ... --repeat 3                       (results/<run-id>/1..3 and their spread)

``dbsurge run`` is `locust -f locustfiles/<workload>.py[,shapes/<shape>.py] --headless ...` for
people who do not think in Locust flags: it checks everything first (one line and exit 2 on any
mistake, before load), starts an embedded target when asked, then runs Locust. Options it does not
know pass through to Locust and dbsurge's Locust plugin (``--stages``, ``--check``, ``--max-lag``...).
"""

from __future__ import annotations

import signal as _signal
import sys as _sys

#: SIGINT and SIGTERM that reached the command before `main` could act on them (Python is still importing).
#: From the command's first line they are recorded, not raised: an exception raised in the middle of an
#: import can be swallowed by a library's ``except BaseException`` (the run then went on and said OK) or
#: end in a KeyboardInterrupt traceback. `main` and `locust_child.run_child` honour what was recorded.
EARLY_SIGNALS: list[int] = []


def _record_early(signum, _frame):
    EARLY_SIGNALS.append(signum)


if __name__ == "__main__" or _sys.argv[0].rsplit("/", 1)[-1] == "dbsurge":  # the command, not an import
    for _sig in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(_sig, _record_early)

import argparse  # noqa: E402 - after the early signal handlers
import importlib.resources  # noqa: E402 - after the early signal handlers
import os  # noqa: E402 - after the early signal handlers
import sys  # noqa: E402 - after the early signal handlers

from dbsurge import __version__
from dbsurge.base.errors import EXIT_SIGNAL, UserError, WorkloadError
from dbsurge.base.redact import uri_password
from dbsurge.collectors.hooks import COLLECTOR_HOOKS
from dbsurge.collectors.scenario_hooks import install as install_scenario_reports
from dbsurge.commands.repeat import RunCommand, repeat_main
from dbsurge.config.credentials import for_master
from dbsurge.config.help_examples import epilog
from dbsurge.config.option_names import OneLineParser
from dbsurge.config.option_types import ascii_int
from dbsurge.config.options import EMBEDDED_TEXT, GROUPS, NO_TARGET, SCHEMES_TEXT, add_options, parse_key_values
from dbsurge.config.size_limits import check_plan_size
from dbsurge.embedded.servers import free_port, resolve_embedded
from dbsurge.engine import locust_child
from dbsurge.engine.collector_hooks import install as install_collectors
from dbsurge.engine.locust_child import END_WITH_PLAN_ENV, run_child  # the scenarios run Locust through it too
from dbsurge.engine.run_command import (
    RUN_OPTIONS,
    SHAPES,
    WORKLOADS,
    asks_for_repeat,
    locust_namespace,
    move_target_to_env,
    run_parser,
)
from dbsurge.engine.validate import (
    check_master_bind,
    check_offline,
    check_plan_choice,
    check_port_free,
    check_web_exposure,
    check_workload_checks,
    validate_locust_options,
    validate_run_args,
)
from dbsurge.plan.stage_plan import StagePlan
from dbsurge.rundir.schema import MERGED, REPORT_HTML, SUMMARY_MD, TIMELINE_PNG
from dbsurge.scenarios import SCENARIO_REPORTS
from dbsurge.targets import describe_failure, open_target
from dbsurge.workloads import get_workload, parse_workload_options

# What a dead Locust child left is finalised here (`run_child`): its report needs the collectors, and a
# scenario's report its scenario (handed to collectors/ from here: they never import the layers above).
install_collectors(COLLECTOR_HOOKS)
install_scenario_reports(SCENARIO_REPORTS)



def locustfile_path(workload: str) -> str:
    if workload not in WORKLOADS:
        raise WorkloadError(f"unknown workload '{workload}' (known: {', '.join(WORKLOADS)})")
    return str(importlib.resources.files("dbsurge.locustfiles") / f"{workload}.py")


def shape_path(shape: str) -> str:
    if shape not in SHAPES:
        raise UserError(f"unknown shape '{shape}' (known: {', '.join(SHAPES)})")
    return str(importlib.resources.files("dbsurge.shapes") / f"{shape}.py")


#: Locust options shown in ``dbsurge run --help`` because dbsurge's documentation uses them (they pass through).
_LOCUST_SHOWN: list[tuple[str, tuple[str, ...], dict]] = [
    ("configuration", ("--config",), dict(metavar="FILE",  # Locust reads no variable for it
                                          help="a Locust config file with dbsurge's options too (`rate = 80`, "
                                               "`target = ...`); ./locust.conf and ~/.locust.conf are read anyway")),
    ("distribution", ("--web-host",), dict(default="127.0.0.1", env_var="LOCUST_WEB_HOST",
                                           help="the web UI's address (Locust's option; dbsurge binds loopback)")),
    ("distribution", ("--web-port",), dict(type=ascii_int, default=8089, env_var="LOCUST_WEB_PORT",
                                           help="the web UI's port (Locust's option)")),
]

_RUN_DESCRIPTION = "Run a workload against a target: checks everything first, then runs Locust headless."
_RUN_EPILOG = """Each option can also be set in the environment (the variable shown in brackets) or in a config file
(--config FILE, ./locust.conf or ~/.locust.conf, one `name = value` a line, e.g. `rate = 80`): the command
line wins over the environment, the environment over a file, as in Locust. --workload and --shape are not
Locust options: give them on the command line or as DBSURGE_WORKLOAD / DBSURGE_SHAPE, not in a file.
Any other option passes through to Locust (`locust --help`); a name neither knows, here or in a config
file, is refused before anything starts, naming the nearest real option."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """At least 100 columns (a pipe reports 80): one line for most options."""

    def __init__(self, prog: str) -> None:
        import shutil

        super().__init__(prog, max_help_position=34, width=min(max(100, shutil.get_terminal_size().columns), 140))


class _HelpGroup:
    """An argparse group that takes Locust's add_argument keywords and puts default and env alias in the help."""

    def __init__(self, group) -> None:
        self.group = group

    def add_argument(self, *flags: str, env_var: str | None = None, is_secret: bool = False,
                     include_in_web_ui: bool = True, **kwargs):
        notes = []
        default = kwargs.get("default")
        text = kwargs.get("help") or ""
        if default not in (None, False) and "default" not in text:
            notes.append(f"default {default}")
        if env_var:
            notes.append(f"env {env_var}")
        if notes:
            kwargs["help"] = f"{text} [{'; '.join(notes)}]" if text else f"[{'; '.join(notes)}]"
        return self.group.add_argument(*flags, **kwargs)


def help_parser() -> argparse.ArgumentParser:
    """The parser behind ``dbsurge run --help``: its own options, dbsurge's (`dbsurge.config.options`), grouped."""
    p = OneLineParser(prog="dbsurge run", description=_RUN_DESCRIPTION, epilog=epilog("run", _RUN_EPILOG),
                                formatter_class=_HelpFormatter, add_help=False,
                                usage="dbsurge run --workload NAME --target URI [--shape SHAPE] [options]")
    titles = {**GROUPS, "configuration": "configuration and help"}
    groups = {name: _HelpGroup(p.add_argument_group(title)) for name, title in titles.items()}
    groups["configuration"].add_argument("-h", "--help", action="help", help="show this help and exit")
    for name, flags, kw in RUN_OPTIONS + _LOCUST_SHOWN:
        if flags != ("--target",):  # the plugin's own definition (below) is the one shown
            groups[name].add_argument(*flags, **kw)
    add_options(p, group=lambda name: groups[name])
    from dbsurge.engine.spot_notices import add_spot_options

    add_spot_options(groups["distribution"])
    return p


def run_main(argv: list[str]) -> int:  # noqa: C901 - builds the Locust child's command line, one option at a time
    if any(a in ("-h", "--help") for a in argv):
        help_parser().print_help()
        return 0
    if asks_for_repeat(argv):
        # N runs in one parent directory; repeat imports nothing of this module: it is handed what it needs
        return repeat_main(argv, RunCommand(parser=run_parser, locust_namespace=locust_namespace,
                                            check_plan=check_plan, main=run_main))
    args, rest = run_parser().parse_known_args(argv)
    ns = locust_namespace(rest)
    args.workload = args.workload or os.environ.get("DBSURGE_WORKLOAD")
    args.shape = args.shape or os.environ.get("DBSURGE_SHAPE")
    if not args.workload:
        raise UserError(f"no workload: pass --workload NAME ({', '.join(WORKLOADS)}), or set DBSURGE_WORKLOAD")
    # what the Locust child would read from a file or the environment, unless given here
    args.target = args.target or ns.target
    if args.users is None and not args.shape and getattr(ns, "num_users", None):
        args.users = ns.num_users
    if args.processes is None and getattr(ns, "processes", None):
        args.processes = ns.processes
    run_time = getattr(ns, "run_time", None)
    files = locustfile_path(args.workload)
    if args.shape:
        files += "," + shape_path(args.shape)
    if not args.target:
        raise UserError(f"{NO_TARGET} or put `target = URI` in a config file")
    validate_run_args(args.users, args.duration, args.processes)
    _preflight(args, ns)
    uri, handle = resolve_embedded(args.target)
    try:
        checked = for_master(uri, ns.target_secret, ns.target_secret_endpoint_url)  # --target-secret, if any
        target = open_target(checked, parse_key_values(ns.target_option, "--target-option"))
        target.check()

        check_workload_checks(args.workload, target, ns)  # --check names real operations: before the child
        # The target goes in the environment, never on a command line (/proc/PID/cmdline is world-readable);
        # the plugin's --target reads DBSURGE_TARGET, and --processes workers inherit it.
        cmd = [sys.executable, "-m", "locust", "-f", files]
        env = {**os.environ, "DBSURGE_TARGET": uri}
        if not args.web:
            cmd.append("--headless")
        else:
            env[END_WITH_PLAN_ENV] = "1"  # `dbsurge run --web` ends, by its verdict, when the plan does
        cmd += _console_options(args, rest, env)
        if args.shape:
            if args.users:
                cmd += ["--max-users", str(args.users)]
        else:
            cmd += ["-u", str(args.users or 8), "-r", str(max(args.users or 8, 10))]
        if args.duration:
            cmd += ["-t", args.duration]
        elif not args.shape and not args.web and not run_time:
            cmd += ["-t", "30s"]
        if args.processes:
            # a private master port: two runs on one host must never pick up each other's workers

            port = str(free_port())
            cmd += ["--processes", str(args.processes), "--master-bind-port", port, "--master-port", port]
        rest, web_auth = move_target_to_env(rest, "--web-auth")  # a password: the environment, not argv
        if web_auth is not None:
            env["DBSURGE_WEB_AUTH"] = web_auth
        cmd += rest
        return run_child(cmd, env)
    finally:
        if handle is not None:
            handle.stop()


def _console_options(args, rest: list[str], env: dict) -> list[str]:
    """How the Locust child talks (`dbsurge.engine.console`): Locust's chatter and tables only under --verbose."""
    env["DBSURGE_CONSOLE"] = "verbose" if args.verbose else "quiet" if args.quiet else "normal"
    if args.verbose:
        return []
    options = ["--only-summary"]  # no periodic whole-millisecond tables
    if not any(a in ("-L", "--loglevel") or a.startswith("--loglevel=") for a in rest):
        options += ["--loglevel", "WARNING"]  # from Locust's first line on; dbsurge's logger stays at INFO
    return options


def _preflight(args, ns: argparse.Namespace) -> None:
    """The checks that need no server (`validate.check_offline`, the plugin's too), and the shape's plan."""
    if args.shape == "stages" and not ns.stages:
        raise UserError("--shape stages needs --stages, e.g. --stages '30s@100tps,30s@200tps'")
    if args.shape == "constant" and ns.rate is None:
        raise UserError("--shape constant needs --rate TPS")
    if ns.stages:
        check_plan_size(StagePlan.parse(ns.stages, ns.baseline_tps))
    check_master_bind(args.processes, getattr(ns, "master_bind_host", None))
    validate_locust_options(ns, shape=bool(args.shape))  # LOCUST_USERS=-3 or `users = -3` in a file, as the plugin
    check_offline(ns, args.workload)
    check_web_exposure(ns, web=args.web)  # the Locust child prints the warning; here only a refusal
    check_plan(args, ns)
    if args.web:
        check_port_free(getattr(ns, "web_host", None), getattr(ns, "web_port", None), "--web-port")
    if getattr(ns, "prometheus_port", None):  # the exporter binds it only once the load is about to start
        check_port_free(getattr(ns, "prometheus_host", None) or "127.0.0.1", ns.prometheus_port, "--prometheus-port")


def check_plan(args, ns: argparse.Namespace) -> None:
    """Plan options the shape would ignore, or that contradict each other, refused before anything starts
    (`validate.check_plan_choice`); its warnings are the Locust child's to print (it reads the same options)."""
    check_plan_choice(args.shape, ns, duration=args.duration or getattr(ns, "run_time", None), users=args.users)


def load_main(argv: list[str]) -> int:
    p = OneLineParser(prog="dbsurge load", description="Load a workload's data set (idempotent).",
                      epilog=epilog("load"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", required=True, help=f"one of {', '.join(WORKLOADS)}")
    p.add_argument("--target", default=os.environ.get("DBSURGE_TARGET"),
                   help=f"database URI ({SCHEMES_TEXT}) or {EMBEDDED_TEXT} (default: $DBSURGE_TARGET)")
    p.add_argument("--target-secret", default=os.environ.get("DBSURGE_TARGET_SECRET"), metavar="ARN",
                   help="AWS Secrets Manager secret with the password (RDS format)")
    p.add_argument("--target-secret-endpoint-url", default=os.environ.get("DBSURGE_TARGET_SECRET_ENDPOINT_URL"))
    p.add_argument("--workload-option", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--target-option", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    if not args.target:
        raise UserError(NO_TARGET)
    locustfile_path(args.workload)
    wopts = parse_workload_options(args.workload_option or [])
    topts = parse_key_values(args.target_option, "--target-option")
    uri, handle = resolve_embedded(args.target)
    try:
        target = open_target(for_master(uri, args.target_secret, args.target_secret_endpoint_url), topts)
        target.check()
        wl = get_workload(args.workload, target, wopts)
        try:
            n = wl.load(progress=not args.quiet)
        except UserError:
            raise
        except Exception as exc:
            # The database refused the load (a driver's error, not ours): one line, as for a failed check.
            if target.classify(exc) == "other":
                raise

            raise UserError(f"{args.workload} load on {target.display} failed: {describe_failure(exc)}") from None
        print(f"{args.workload}: {n} rows/documents in place on {target.display}")
        return 0
    finally:
        if handle is not None:
            handle.stop()


COMMANDS = {
    "run": "dbsurge.commands.cli:run_main",
    "load": "dbsurge.commands.cli:load_main",
    "embedded": "dbsurge.embedded.servers:embedded_main",
    "scenario": "dbsurge.scenarios:scenario_main",
    "collect": "dbsurge.collectors:collect_main",
    "report": "dbsurge.collectors:report_main",
    "cost": "dbsurge.collectors:cost_main",
    "runners": "dbsurge.cloud.spot_hosts:runners_main",
    "worker": "dbsurge.commands.worker:worker_main",
    "rerun": "dbsurge.commands.rerun:rerun_main",
    "compare": "dbsurge.collectors:compare_main",
}


def hide_target_from_command_line(argv: list[str]) -> None:
    """Re-execute this process with a password-bearing ``--target`` moved into ``DBSURGE_TARGET`` (and a
    ``--web-auth USER:PASSWORD`` into ``DBSURGE_WEB_AUTH``).

    Any user can read a process's command line (/proc/PID/cmdline), only its owner its environment:
    a few milliseconds after start, no dbsurge process shows the password. No-op without one.
    """
    rest, target = move_target_to_env(argv)
    rest, web_auth = move_target_to_env(rest, "--web-auth")
    if (target is None or not uri_password(target)) and web_auth is None:
        return
    if target is not None and not uri_password(target):
        rest = [*rest, "--target", target]  # no password: it may stay where it was given
        target = None
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, **({"DBSURGE_TARGET": target} if target is not None else {}),
           **({"DBSURGE_WEB_AUTH": web_auth} if web_auth is not None else {})}
    os.execve(sys.executable, [sys.executable, "-m", "dbsurge.commands.cli", *rest], env)


#: One line per command for ``dbsurge --help`` (plain text).
COMMAND_HELP = {
    "run": "run a workload against a target under a plan (checks first, then Locust)",
    "load": "load a workload's data set into a target (idempotent)",
    "embedded": "start, stop or show the embedded PostgreSQL, MongoDB-wire and DynamoDB-API servers",
    "scenario": "run one experiment of the studies and print its table (dbsurge scenario --help)",
    "collect": "fetch a finished run's CloudWatch metrics (they arrive minutes late)",
    "report": f"rebuild a run's {SUMMARY_MD}, {MERGED}, {REPORT_HTML} and {TIMELINE_PNG}",
    "cost": "rebuild a run's cost table",
    "rerun": "run a finished run's plan, workload, options and seed again (same or another target)",
    "compare": "compare runs side by side: the study's table, ratios, spread across repetitions, plots",
    "runners": "launch, list, remove and verify EC2 (Spot) hosts that run workers",
    "worker": "run a Locust worker that reads its join token and secrets from AWS",
}


def top_help() -> str:
    """``dbsurge --help``: the commands, one line each."""
    width = max(map(len, COMMAND_HELP))
    lines = ["usage: dbsurge COMMAND [options]", "",
             "Distributed, open-model load testing for databases, built on Locust.", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMAND_HELP.items()]
    lines += ["", "dbsurge COMMAND --help gives each command's options (dbsurge run --help: every option, with "
              "defaults and environment variables).", "dbsurge --version prints the version."]
    return "\n".join(lines)


class Signalled(BaseException):
    """SIGTERM (or SIGINT) reached this process itself, before or after its Locust child ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _signalled(signum, _frame):
    EARLY_SIGNALS.append(signum)  # seen by `run_child` even if a library swallows the exception
    raise Signalled(signum)


def _quiet_when_signalled(unraisable) -> None:
    """`sys.unraisablehook`: a `Signalled` raised where Python cannot raise it (a signal that lands in a
    callback, such as the import system's module-lock callback during a start-up import) is dropped
    without its traceback: `EARLY_SIGNALS` has it, and the command still ends in its one line."""
    if isinstance(unraisable.exc_value, Signalled):
        return
    sys.__unraisablehook__(unraisable)


def _stopped_line(command: str, signum: int) -> tuple[str, int]:
    import signal

    code = EXIT_SIGNAL.get(signum, 128 + signum)
    name = signal.Signals(signum).name
    began = getattr(sys.modules.get("dbsurge.scenarios.scenario_run"), "BEGUN", None)
    if command == "scenario" and began:
        return (f"dbsurge: {name}: the scenario was interrupted after its load began; what it measured is in "
                f"{began[-1]} (exit {code})"), code
    if command in ("run", "scenario"):
        return f"dbsurge: {name} before the load started: nothing was sent (exit {code})", code
    return f"dbsurge: {name}: stopped (exit {code})", code


def main(argv: list[str] | None = None) -> int:
    import signal

    from_command_line = argv is None
    argv = sys.argv[1:] if argv is None else argv
    name = argv[0] if argv else ""
    if from_command_line:  # the command's own process: SIGINT and SIGTERM end it in one line

        locust_child.PENDING_SIGNALS = EARLY_SIGNALS  # a Locust child is never started after one
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _signalled)
        sys.unraisablehook = _quiet_when_signalled
    try:
        if EARLY_SIGNALS:
            raise Signalled(EARLY_SIGNALS[0])
        return _watching_stdout(argv, from_command_line)
    except BrokenPipeError:
        return _broken_pipe()
    except UserError as e:
        sys.stderr.write(f"dbsurge: {e}\n")
        return e.exit_code
    except (KeyboardInterrupt, Signalled) as e:
        line, code = _stopped_line(name, getattr(e, "signum", 2))
        sys.stderr.write(line + "\n")
        return code


#: ``dbsurge ... | head``: the reader closed the pipe; the shell's code for a command ended by SIGPIPE.
EXIT_BROKEN_PIPE = 128 + 13


class _PipeWatch:
    """sys.stdout that remembers a write to a closed pipe: argparse prints help and usage with ``except
    OSError: pass`` around its write, so ``dbsurge run --help | head -3`` would otherwise end in silence
    and exit 0 with its output lost."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self.broken = True
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self.broken = True
            raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _broken_pipe() -> int:
    """The reader of stdout went away (``dbsurge --help | head -3``): one line, not a BrokenPipeError traceback.

    Python ignores SIGPIPE, so every write to the closed pipe raises; stdout is pointed at /dev/null so
    that the interpreter's own flush at exit cannot raise (and print "Exception ignored") again.
    """
    if isinstance(sys.stdout, _PipeWatch):
        sys.stdout = sys.stdout._stream
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (an embedding caller's stream)
        pass
    try:
        sys.stderr.write("dbsurge: stdout was closed before the output was written (broken pipe)\n")
        sys.stderr.flush()
    except OSError:  # stderr went into the same closed pipe
        pass
    return EXIT_BROKEN_PIPE


def _watching_stdout(argv: list[str], from_command_line: bool) -> int:
    """`_command`, with a write to a closed stdout found even where a library swallowed it (`_PipeWatch`)."""
    if from_command_line and not isinstance(sys.stdout, _PipeWatch):
        sys.stdout = _PipeWatch(sys.stdout)
    try:
        code = _command(argv, from_command_line)
    except SystemExit as e:  # argparse's --help and usage errors: their output is flushed below
        if not isinstance(e.code, (int, type(None))):
            raise
        code = e.code or 0
    sys.stdout.flush()  # a reader that went away is found here, not in the interpreter's exit
    if isinstance(sys.stdout, _PipeWatch) and sys.stdout.broken:
        return _broken_pipe()  # a write failed and a library (argparse's help) swallowed its error
    return code


def _command(argv: list[str], from_command_line: bool) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(top_help())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"dbsurge {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if from_command_line and name in ("run", "load", "scenario"):
        hide_target_from_command_line(argv)  # returns only when there is nothing to hide
    if name not in COMMANDS:
        sys.stderr.write(f"dbsurge: unknown command '{name}' (commands: {', '.join(COMMANDS)})\n")
        return 2
    module, func = COMMANDS[name].split(":")
    import importlib

    fn = getattr(importlib.import_module(module), func)
    return int(fn(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
