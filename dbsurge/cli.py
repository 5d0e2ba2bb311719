"""The ``dbsurge`` command.

    dbsurge run --workload ycsb --target embedded-mongo --users 8 --duration 10s --processes 2
    dbsurge run --workload orders --target embedded-postgres --shape spike --baseline-tps 200 --stage-seconds 20
    dbsurge load --workload ycsb --target postgresql://... --workload-option recordcount=100000
    dbsurge embedded start|stop|status [postgres|mongo|all]
    dbsurge scenario NAME [options]          (dbsurge scenario --help lists them)
    dbsurge collect|report|cost results/<run>
    dbsurge rerun results/<run> [--target URI]        (the same plan, workload, options and seed again)
    dbsurge compare results/<a> results/<b> [--labels A,B] [--html FILE]
    dbsurge run ... --repeat 3                       (results/<run-id>/1..3 and their spread)

``dbsurge run`` is `locust -f locustfiles/<workload>.py[,shapes/<shape>.py] --headless ...` for
people who do not think in Locust flags: it checks everything first (one line and exit 2 on any
mistake, before load), starts an embedded target when asked, then runs Locust. Options it does not
know pass through to Locust and dbsurge's Locust plugin (``--stages``, ``--check``, ``--max-lag``...).
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
import signal
import subprocess
import sys

from .errors import UserError

SHAPES = ("spike", "stages", "constant")
WORKLOADS = ("orders", "documents", "ycsb")


def locustfile_path(workload: str) -> str:
    if workload not in WORKLOADS:
        from .errors import WorkloadError

        raise WorkloadError(f"unknown workload '{workload}' (known: {', '.join(WORKLOADS)})")
    return str(importlib.resources.files("dbsurge.locustfiles") / f"{workload}.py")


def shape_path(shape: str) -> str:
    if shape not in SHAPES:
        raise UserError(f"unknown shape '{shape}' (known: {', '.join(SHAPES)})")
    return str(importlib.resources.files("dbsurge.shapes") / f"{shape}.py")


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dbsurge run", description="Run a workload against a target (headless Locust).",
                                epilog="Other options (--stages, --check, --max-lag, --workload-option, ...) "
                                       "pass through to Locust and dbsurge's plugin; see `locust --help`.")
    p.add_argument("--workload", required=True, help=f"one of {', '.join(WORKLOADS)}")
    p.add_argument("--target", default=os.environ.get("DBSURGE_TARGET"),
                   help="database URI or embedded-postgres / embedded-mongo")
    p.add_argument("--shape", default=None, help=f"arrival-rate shape: {', '.join(SHAPES)} (default: closed model)")
    p.add_argument("--users", "-u", type=int, default=None,
                   help="concurrent users (closed model), or the cap on users under a shape")
    p.add_argument("--duration", "-t", default=None, help="run time, e.g. 30s or 2m (closed model and constant shape)")
    p.add_argument("--processes", type=int, default=None, help="worker processes on this host (Locust --processes)")
    p.add_argument("--web", action="store_true", help="start Locust's web UI (on 127.0.0.1:8089) instead of headless")
    p.add_argument("--quiet", action="store_true", help="only print the final tables, not Locust's periodic stats")
    p.add_argument("--repeat", default=None, metavar="N",
                   help="run N times into <results>/<run-id>/1..N and print the spread (median, min, max)")
    return p


def run_main(argv: list[str]) -> int:
    if any(a == "--repeat" or a.startswith("--repeat=") for a in argv):
        from .repeat import repeat_main  # N runs in one parent directory

        return repeat_main(argv)
    args, rest = _run_parser().parse_known_args(argv)
    from .embedded import resolve_embedded

    files = locustfile_path(args.workload)
    if args.shape:
        files += "," + shape_path(args.shape)
    if not args.target:
        raise UserError("no target: pass --target URI (or embedded-postgres / embedded-mongo)")
    from .validate import validate_run_args

    validate_run_args(args.users, args.duration, args.processes)
    _preflight(args, rest)
    uri, handle = resolve_embedded(args.target)
    try:
        from .options import parse_key_values
        from .targets import open_target

        ns = _passthrough(rest)
        target = open_target(uri, parse_key_values(ns.target_option, "--target-option"))
        target.check()
        from .validate import check_workload_checks

        check_workload_checks(args.workload, target, ns)  # --check names real operations: before the child
        cmd = [sys.executable, "-m", "locust", "-f", files, "--target", uri]
        if not args.web:
            cmd.append("--headless")
        env = None
        if args.quiet:
            cmd.append("--only-summary")
            env = {**os.environ, "DBSURGE_QUIET": "1"}  # dbsurge's tables only, not Locust's as well
        if args.shape:
            if args.users:
                cmd += ["--max-users", str(args.users)]
        else:
            cmd += ["-u", str(args.users or 8), "-r", str(max(args.users or 8, 10))]
        if args.duration:
            cmd += ["-t", args.duration]
        elif not args.shape and not args.web:
            cmd += ["-t", "30s"]
        if args.processes:
            # a private master port: two runs on one host must never pick up each other's workers
            from .embedded import free_port

            port = str(free_port())
            cmd += ["--processes", str(args.processes), "--master-bind-port", port, "--master-port", port]
        cmd += rest
        return _run_child(cmd, env)
    finally:
        if handle is not None:
            handle.stop()


def _preflight(args, rest: list[str]) -> None:
    """The checks that need no server: plan, workload options, operations (the target is checked by Locust)."""
    from .checks import parse_checks
    from .options import parse_key_values, parse_operation_weights
    from .stage_plan import StagePlan, parse_duration
    from .validate import check_output, validate_options
    from .workloads import WORKLOADS, parse_workload_options
    from .workloads.base import resolve_options

    ns = _passthrough(rest)
    validate_options(ns)
    resolve_options(args.workload, WORKLOADS[args.workload].OPTIONS, parse_workload_options(ns.workload_option or []))
    parse_key_values(ns.target_option, "--target-option")
    parse_operation_weights(ns.operation)
    parse_checks(ns.check)
    if ns.max_lag:
        parse_duration(ns.max_lag)
    if args.shape == "stages" and not ns.stages:
        raise UserError("--shape stages needs --stages, e.g. --stages '30s@100tps,30s@200tps'")
    if args.shape == "constant" and ns.rate is None:
        raise UserError("--shape constant needs --rate TPS")
    if ns.stages:
        StagePlan.parse(ns.stages, ns.baseline_tps)
    check_output(ns)  # last: the others need no file system


def _passthrough(rest: list[str]) -> argparse.Namespace:
    """The plugin's options among the pass-through arguments, parsed as the Locust child will (no Locust import)."""
    from .validate import dbsurge_options

    return dbsurge_options(rest)


def _run_child(cmd: list[str], env: dict | None = None) -> int:
    """Run Locust as a child in its own process group; forward SIGINT and SIGTERM to it, once each.

    In the terminal's process group the child would get Ctrl-C from the terminal *and* from us,
    two signals for one keypress (the second means "stop at once"); in its own group it gets
    exactly the signals we forward. The child stops gracefully on the first and exits 130/143.
    """
    proc = subprocess.Popen(cmd, env=env, process_group=0)

    def forward(signum, _frame):
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                return proc.wait()
            except InterruptedError:
                continue
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def load_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dbsurge load", description="Load a workload's data set (idempotent).")
    p.add_argument("--workload", required=True, help=f"one of {', '.join(WORKLOADS)}")
    p.add_argument("--target", required=True, help="database URI or embedded-postgres / embedded-mongo")
    p.add_argument("--workload-option", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--target-option", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    from .embedded import resolve_embedded
    from .options import parse_key_values
    from .targets import open_target
    from .workloads import get_workload, parse_workload_options

    locustfile_path(args.workload)
    wopts = parse_workload_options(args.workload_option or [])
    topts = parse_key_values(args.target_option, "--target-option")
    uri, handle = resolve_embedded(args.target)
    try:
        target = open_target(uri, topts)
        target.check()
        wl = get_workload(args.workload, target, wopts)
        n = wl.load(progress=not args.quiet)
        print(f"{args.workload}: {n} rows/documents in place on {target.display}")
        return 0
    finally:
        if handle is not None:
            handle.stop()


COMMANDS = {
    "run": "dbsurge.cli:run_main",
    "load": "dbsurge.cli:load_main",
    "embedded": "dbsurge.embedded:embedded_main",
    "scenario": "dbsurge.scenarios:scenario_main",
    "collect": "dbsurge.collectors:collect_main",
    "report": "dbsurge.collectors:report_main",
    "cost": "dbsurge.collectors:cost_main",
    "rerun": "dbsurge.rerun:rerun_main",
    "compare": "dbsurge.collectors:compare_main",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--version":
        from . import __version__

        print(f"dbsurge {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"dbsurge: unknown command '{name}' (commands: {', '.join(COMMANDS)})\n")
        return 2
    module, func = COMMANDS[name].split(":")
    import importlib

    try:
        fn = getattr(importlib.import_module(module), func)
        return int(fn(rest) or 0)
    except UserError as e:
        sys.stderr.write(f"dbsurge: {e}\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("dbsurge: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
