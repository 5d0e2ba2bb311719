"""Checks of dbsurge's options that cut across modules, all before any load and any run directory.

Every bad value ends in one `UserError` line (exit 2) that names the flag and says what it takes:

    >>> finite_positive(float("nan"), "--rate")
    Traceback (most recent call last):
    ...
    dbsurge.base.errors.UserError: --rate must be a positive number, not nan
    >>> positive_int(0, "--users")
    Traceback (most recent call last):
    ...
    dbsurge.base.errors.UserError: --users must be a whole number of at least 1, not 0

Two callers: `dbsurge.engine.preflight.preflight` (what ``locust -f ...`` users hit, on the master or the
local runner) and `cli.run_main` / `cli._preflight`, so that ``dbsurge run`` fails before it starts an
embedded server or the Locust child. Parsers of one syntax (plans, checks, weights) live with the
syntax; this module checks numbers, names and places.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dbsurge.base.errors import UserError, clip
from dbsurge.config.checks import check_operations, parse_checks
from dbsurge.config.cloudwatch_presets import parse_presets
from dbsurge.config.option_names import OneLineParser
from dbsurge.config.options import add_options, parse_key_values, parse_operation_weights
from dbsurge.config.size_limits import check_processes, check_users
from dbsurge.engine.membership import is_loopback
from dbsurge.plan.stage_plan import MAX_DURATION_S, MAX_TPS, format_duration, parse_duration
from dbsurge.rundir.schema import LOCUST_CSV_SUFFIXES
from dbsurge.targets import read_op_timeout
from dbsurge.workloads import WORKLOADS, get_workload, parse_workload_options

# A run id is a directory name under --results-dir, never a path: no '/', no '..', no hidden name.
# Explicit ASCII classes, not \w, which takes any Unicode letter.
RUN_ID_MAX = 100
_RUN_ID = re.compile(rf"[A-Za-z0-9_-][A-Za-z0-9._-]{{0,{RUN_ID_MAX - 1}}}")


def _shown(value: Any) -> str:
    """A value as the user would have typed it: 0 rather than 0.0."""
    return f"{value:g}" if isinstance(value, float) else clip(value)


def _number(value: Any, flag: str, what: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{flag} must be {what}, not '{clip(value)}'") from None
    if not math.isfinite(x):  # nan compares false to everything: reject it before any comparison
        raise UserError(f"{flag} must be {what}, not {_shown(value)}")
    return x


def finite_positive(value: Any, flag: str, *, zero_ok: bool = False, maximum: float | None = None,
                    what: str | None = None) -> float:
    """`value` as a finite float > 0 (>= 0 with `zero_ok`, <= `maximum` if given), else `UserError` naming `flag`."""
    what = what or ("a number of 0 or more" if zero_ok else "a positive number")
    x = _number(value, flag, what)
    if x < 0 or (x == 0 and not zero_ok):
        raise UserError(f"{flag} must be {what}, not {_shown(value)}")
    if maximum is not None and x > maximum:
        raise UserError(f"{flag} must be {what}, at most {maximum:g}, not {_shown(value)}")
    return x


def seconds_option(value: Any, flag: str, *, zero_ok: bool = False) -> float:
    """A number of seconds (already a float from the parser): finite, positive (or 0), at most a year."""
    what = "a number of seconds of 0 or more" if zero_ok else "a positive number of seconds"
    x = finite_positive(value, flag, zero_ok=zero_ok, what=what)
    if x > MAX_DURATION_S:
        raise UserError(f"{flag} must be at most a year ({format_duration(MAX_DURATION_S)}), not {_shown(value)}")
    return x


def duration_option(text: str, flag: str, *, zero_ok: bool = True) -> float:
    """A duration as text (``100ms``, ``2m``, a bare number of seconds) with the flag in any error."""
    try:
        value = parse_duration(text)
    except UserError as e:
        raise UserError(f"{flag}: {e}") from None
    if value == 0 and not zero_ok:
        raise UserError(f"{flag} must be a positive duration such as 100ms or 1s, not '{clip(text)}'")
    return value


def positive_int(value: Any, flag: str, *, minimum: int = 1) -> int:
    """`value` as an int >= `minimum`, else `UserError` naming `flag`."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value).strip())
        except ValueError:
            raise UserError(f"{flag} must be a whole number of at least {minimum}, not '{clip(value)}'") from None
    if value < minimum:
        raise UserError(f"{flag} must be a whole number of at least {minimum}, not {value}")
    return value


def port_option(value: Any, flag: str) -> int:
    """A TCP port, 1 to 65535 (Locust's own ports included: 70000 was an OverflowError deep in gevent)."""
    port = positive_int(value, flag)
    if port > 65535:
        raise UserError(f"{flag} must be a port number from 1 to 65535, not {port}")
    return port


#: An EC2 instance type as AWS spells it: family (with generation and attributes), a dot, a size.
_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9]+")
#: More runner hosts than this is a typing mistake, not a fleet (raise it here on purpose).
MAX_RUNNER_COUNT = 10_000


def parse_runner(text: Any) -> tuple[str, int]:
    """``--runner`` ``c6g.4xlarge`` or ``c6g.4xlarge:2`` -> (instance type, count); anything else a `UserError`.

        >>> parse_runner("m7g.4xlarge:2")
        ('m7g.4xlarge', 2)
    """
    return parse_name_count(text, "--runner", _INSTANCE_TYPE, "is not an EC2 instance type",
                            "use INSTANCE-TYPE or INSTANCE-TYPE:COUNT, e.g. m7g.4xlarge:2", MAX_RUNNER_COUNT)


def parse_name_count(text: Any, flag: str, name_pattern: re.Pattern, not_a_name: str, usage: str,
                     max_count: int) -> tuple[str, int]:
    """``NAME`` or ``NAME:COUNT`` (``--runner``, ``dbsurge cost --database``) -> (name, count), else `UserError`."""
    name, sep, count = str(text).strip().partition(":")
    if not name_pattern.fullmatch(name):
        raise UserError(f"bad {flag} '{clip(text)}': '{clip(name, 30)}' {not_a_name}: {usage}")
    if sep and not re.fullmatch(r"[0-9]{1,6}", count):
        raise UserError(f"bad {flag} '{clip(text)}': the count must be a whole number of at least 1: {usage}")
    n = int(count) if sep else 1
    if not 1 <= n <= max_count:
        raise UserError(f"bad {flag} '{clip(text)}': the count must be from 1 to {max_count}: {usage}")
    return name, n


def parse_web_auth(text: Any) -> tuple[str, str]:
    """``--web-auth USER:PASSWORD`` -> (user, password), both non-empty; the password is never quoted back."""
    user, sep, password = str(text).partition(":")
    if not sep or not user.strip() or not password:
        raise UserError("bad --web-auth: expected USER:PASSWORD, both non-empty (better in DBSURGE_WEB_AUTH than on "
                        "a command line)")
    return user, password


def check_master_bind(processes: int | None, bind_host: str | None) -> None:
    """``--processes`` workers dial 127.0.0.1: their master must listen on loopback or on every interface."""
    if not processes or is_loopback(bind_host) or (bind_host or "").strip() in ("", "*", "0.0.0.0", "::"):
        return
    raise UserError(f"--processes workers connect to 127.0.0.1, but --master-bind-host {bind_host} does not listen "
                    f"there: leave --master-bind-host out (loopback) or use 0.0.0.0, or run the workers with "
                    f"--worker --master-host {bind_host}")


def check_web_exposure(opts: argparse.Namespace, *, web: bool) -> str | None:
    """A web UI beyond loopback needs ``--web-auth`` (or Locust's ``--web-login``) or ``--web-insecure``.

    Returns the warning to print when it is served beyond loopback (None on loopback or without a UI):
    the UI can start load and change the rate.
    """
    host = getattr(opts, "web_host", None)
    if not web or is_loopback(host):
        return None
    shown = host or "every interface"
    auth, login = getattr(opts, "web_auth", None), getattr(opts, "web_login", False)
    if not (auth or login or getattr(opts, "web_insecure", False)):
        raise UserError(f"the web UI would listen on {shown}, beyond this host, and anyone reaching it could start "
                        f"load: pass --web-auth USER:PASSWORD (or set DBSURGE_WEB_AUTH), or --web-insecure to serve "
                        f"it open on purpose, or leave --web-host at 127.0.0.1")
    if auth or login:
        tls = "" if getattr(opts, "tls_cert", None) else " over plain HTTP (the password crosses the network in " \
                                                            "clear: consider --tls-cert and --tls-key)"
        return f"the web UI listens on {shown}, beyond this host, behind a login{tls}"
    return f"the web UI listens on {shown}, beyond this host, WITHOUT authentication (--web-insecure): anyone who " \
           f"reaches it can start load and change the rate"


def check_port_free(host: str | None, port: int | None, flag: str) -> None:
    """`UserError` (one line) when ``host:port`` cannot be bound now, as the server that will listen there binds it.

    Locust binds its web UI only after dbsurge has started an embedded server, loaded the data set and forked
    the Locust child: a port already taken was some 54 lines of traceback, minutes in. A bind with
    SO_REUSEADDR, as gevent's server does (a port in TIME_WAIT is free to it), tells before anything starts.
    """
    import errno
    import socket

    if not port:
        return
    bind_host = None if host in (None, "", "*") else host
    shown = f"{host}:{port}" if bind_host else f"port {port} of every interface"
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(bind_host, port, type=socket.SOCK_STREAM,
                                                                 flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError):
        return  # a name that does not resolve: the server's own error names it
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as e:
            why = {errno.EADDRINUSE: "it is already in use (another web UI, exporter or Locust?)",
                   errno.EADDRNOTAVAIL: "that is not an address of this host"}.get(e.errno or 0)
            raise UserError(f"cannot listen on {clip(shown, 80)} for {flag}: {why or e.strerror or type(e).__name__}: "
                            f"choose another port, or stop what listens there") from None


def validate_options(opts: argparse.Namespace) -> None:  # noqa: C901 - one check per option, flat
    """Check dbsurge's own options (`dbsurge.config.options`) on a parsed namespace; no network, no files.

    Missing attributes are skipped, so a partial namespace (a test's, an old config's) works too.
    """
    def get(name: str) -> Any:
        return getattr(opts, name, None)

    if get("baseline_tps") is not None:
        finite_positive(opts.baseline_tps, "--baseline-tps", maximum=MAX_TPS, what="a positive number of TPS")
    if get("rate") is not None:
        finite_positive(opts.rate, "--rate", maximum=MAX_TPS, what="a positive number of TPS")
    if get("max_rate") is not None:
        finite_positive(opts.max_rate, "--max-rate", maximum=MAX_TPS, what="a positive number of TPS")
    if get("stage_seconds") is not None:
        # 0 used to mean "not given" and ran the study's full 2/1/2/1-minute plan
        seconds_option(opts.stage_seconds, "--stage-seconds")
    if get("drain") is not None:
        seconds_option(opts.drain, "--drain", zero_ok=True)
    if get("start_delay") is not None:
        seconds_option(opts.start_delay, "--start-delay", zero_ok=True)
    if get("align_start") is not None:
        seconds_option(opts.align_start, "--align-start")
    if get("cloudwatch_interval") is not None:
        seconds_option(opts.cloudwatch_interval, "--cloudwatch-interval")
    if get("cost_cap") is not None:
        finite_positive(opts.cost_cap, "--cost-cap", what="a positive number of dollars")
    if get("max_users") is not None:
        positive_int(opts.max_users, "--max-users")
        check_users(opts.max_users, "--max-users")
    for name in ("prometheus_port", "web_port", "master_port", "master_bind_port"):
        if get(name) is not None:  # checked whether or not the feature is on: a later --web must not crash
            port_option(get(name), "--" + name.replace("_", "-"))
    for text in get("runner") or []:
        parse_runner(text)
    if get("web_auth"):  # checked with or without --web: a later --web must not find it malformed
        parse_web_auth(opts.web_auth)
    if get("prometheus_grace") is not None:
        seconds_option(opts.prometheus_grace, "--prometheus-grace", zero_ok=True)
    if get("max_lag"):
        # 0 would turn the limit off without a word (the pacer reads it as "no limit")
        duration_option(opts.max_lag, "--max-lag", zero_ok=False)
    if get("lag_warn"):
        duration_option(opts.lag_warn, "--lag-warn")


def check_offline(opts: argparse.Namespace, workload: str | None = None) -> dict:
    """The checks that need no server, shared by `dbsurge run` (before its Locust child starts) and the
    plugin's preflight (what ``locust -f`` users hit): numbers, workload and target options,
    operations, checks, durations, and last the results directory. Returns the parsed pieces."""
    validate_options(opts)
    workload_options = parse_workload_options(opts.workload_option or [])
    parsed = {"workload_options": workload_options,
              "target_options": parse_key_values(opts.target_option, "--target-option"),
              "operations": parse_operation_weights(opts.operation), "checks": parse_checks(opts.check)}
    if workload is not None:
        check_operation_names(workload, workload_options, parsed["operations"], parsed["checks"])
    for flag, value in (("--max-lag", opts.max_lag), ("--lag-warn", opts.lag_warn)):
        if value:
            parse_duration(value)
    if getattr(opts, "cloudwatch", None):  # the syntax before the target is even contacted
        parse_presets(opts.cloudwatch)
    _, problem = read_op_timeout(opts.op_timeout)  # the target option op_timeout's own rule
    if problem:
        raise UserError(f"bad --op-timeout '{clip(opts.op_timeout)}': {problem}")
    check_output(opts)  # last: the others need no file system
    return parsed


def check_operation_names(workload: str, workload_options: dict, operations: dict, checks: list) -> None:
    """A typo in --operation or --check (``order_creat``) refused with no target, before an embedded server
    starts: the names against the workload's operations for these options (`Workload.operation_names`)."""
    values = WORKLOADS[workload].resolve(workload_options)
    known = WORKLOADS[workload].operation_names(values)
    unknown = [k for k in operations if k not in known]
    if unknown:
        raise UserError(f"unknown operation '{clip(unknown[0], 40)}' for workload {workload} (known: {', '.join(known)})")
    check_operations(checks, known)


def validate_locust_options(opts: argparse.Namespace, *, shape: bool) -> None:
    """Locust's own options as dbsurge uses them: users, spawn rate and run time, from whatever source
    (``-u``, ``LOCUST_USERS``, a config file's ``users =``, the web UI's form: `dbsurge.ui.web_forms`).

    Under a shape --max-users caps the pool and -u is not read, but a value given must still be one:
    ``-u -3`` ran and wrote ``num_users: -3`` into run.json (``dbsurge run --users -3`` was refused).
    """
    users = getattr(opts, "num_users", None)
    if users is not None:
        positive_int(users, "-u/--users")
        check_users(users, "-u/--users")
    spawn_rate = getattr(opts, "spawn_rate", None)
    if spawn_rate is not None:
        finite_positive(spawn_rate, "-r/--spawn-rate", maximum=MAX_TPS, what="a positive number of users a second")
    run_time = getattr(opts, "run_time", None)
    if run_time is not None and run_time <= 0:
        # Locust reads a run time of 0 as "no limit": the test would never end
        raise UserError(f"-t/--run-time must be positive, e.g. 30s or 2m, not {run_time}: leave it out to run "
                        f"until stopped")
    if run_time is not None and run_time > MAX_DURATION_S:
        raise UserError(f"-t/--run-time must be at most a year ({format_duration(MAX_DURATION_S)}), not {run_time}")


def validate_run_args(users: int | None, duration: str | None, processes: int | None) -> None:
    """``dbsurge run``'s own --users, --duration and --processes."""
    if users is not None:
        positive_int(users, "--users")
        check_users(users, "--users")
    if duration is not None:
        duration_option(duration, "--duration", zero_ok=False)
    if processes is not None and processes != -1 and processes < 1:  # -1: one per CPU, as in Locust
        raise UserError(f"--processes must be a whole number of at least 1 (or -1 for one per CPU), not {processes}")
    check_processes(processes)


#: The shape each of dbsurge's shape classes is (`check_plan_choice` on the plugin's path).
SHAPE_CLASSES = {"SpikeShape": "spike", "StagesShape": "stages", "ConstantShape": "constant"}


def check_plan_choice(  # noqa: C901 - one rule a line, flat
        shape: str | None, opts: argparse.Namespace, *, duration: Any = None, users: int | None = None,
        stage_seconds: bool = True, duration_flag: str = "--duration") -> list[str]:
    """Refuse plan options that the chosen shape would ignore or that contradict each other; return warnings.

    Each shape reads only some of the plan's options (the spike: --baseline-tps, --stage-seconds or
    --stages; stages: --stages; constant: --rate and the duration; no shape: --users and the
    duration). One it does not read used to be dropped without a word: ``--shape spike --duration
    10s`` ran the 6-minute spike. ``duration`` is ``dbsurge run``'s --duration (or -t), ``users`` its
    --users; `opts` carries the rest (``max_users`` None when not given). ``stage_seconds=False``
    skips --stage-seconds (the image's deployments set it for every shape). The warnings are for
    Locust's own -u and -r, which the constant shape does not read: Locust warns the same way under
    the shapes that ignore them.
    """
    def given(name: str) -> Any:
        value = getattr(opts, name, None)
        return None if value in (None, "") else value

    stages, rate = given("stages"), given("rate")
    seconds = given("stage_seconds") if stage_seconds else None
    if rate is not None and stages is not None:
        raise UserError("--rate and --stages both set the rate: give --stages for a plan of stages, or "
                        "--shape constant --rate TPS for one rate")
    if seconds is not None and stages is not None:
        raise UserError("--stage-seconds and --stages: --stage-seconds reshapes the spike's own plan, which --stages "
                        "replaces: give the durations in --stages, e.g. 20s@20%,20s@200%")
    if shape is None:
        for value, flag, hint in ((stages, "--stages", "--shape stages"), (rate, "--rate", "--shape constant"),
                                  (seconds, "--stage-seconds", "--shape spike")):
            if value is not None:
                raise UserError(f"{flag} needs a shape: add {hint} (without --shape the run is the closed model: "
                                f"--users users for --duration)")
    if shape in ("spike", "stages"):
        if duration not in (None, ""):
            length = ("its stages (2m,1m,2m,1m unless --stages replaces them): use --stage-seconds to make each "
                      "stage that long") if shape == "spike" and stages is None else \
                "its stages: give their durations in --stages"
            raise UserError(f"{duration_flag} {clip(duration, 30)} does not apply to --shape {shape}: the plan's "
                            f"length is {length}")
        if rate is not None:
            raise UserError(f"--rate is the constant shape's rate, not read by --shape {shape}: use --baseline-tps "
                            f"(the percentages' 100%) or absolute rates in --stages, e.g. 30s@200tps")
    if shape == "stages" and seconds is not None:
        raise UserError("--stage-seconds is the spike shape's: under --shape stages give the durations in --stages")
    if shape == "constant":
        if stages is not None:
            raise UserError("--stages is not read by --shape constant: use --shape stages --stages ... for a plan, "
                            "or --rate TPS alone for one rate")
        if seconds is not None:
            raise UserError("--stage-seconds is the spike shape's: under --shape constant the run lasts --duration")
    max_users = given("max_users")
    if shape is None and max_users is not None and users is None:
        raise UserError(f"--max-users {max_users} caps the users a shape starts: without --shape the run is the closed "
                        f"model, whose users are --users (default 8)")
    if users is not None and max_users is not None and int(users) != int(max_users):
        raise UserError(f"--users {users} and --max-users {max_users} disagree: --users is the cap on users under a "
                        f"shape (as --max-users) and the users of the closed model: give one of them")
    warnings = []
    if shape == "constant":
        ignored = [flag for name, flag in (("num_users", "-u/--users"), ("spawn_rate", "-r/--spawn-rate"))
                   if given(name) is not None]
        if ignored:
            warnings.append(f"{' and '.join(ignored)} have no effect under the constant shape (--rate sets the pace, "
                            f"--max-users caps the users): ignored")
    return warnings


def check_workload_checks(workload: str, target: Any, opts: argparse.Namespace) -> None:
    """--check on `workload` over `target` names only operations the workload has (no network).

    ``dbsurge run`` calls this before it starts Locust; the plugin checks the same in its preflight.
    """
    checks = parse_checks(getattr(opts, "check", None))
    if checks:
        wl = get_workload(workload, target, parse_workload_options(getattr(opts, "workload_option", None) or []))
        check_operations(checks, wl.operations)


def validate_run_id(run_id: str | None, results_dir: str | os.PathLike) -> None:
    """A given run id must be a plain name (see `_RUN_ID`) and must not exist yet under `results_dir`.

    None means "make one up" (`rundir.new_run_id`), which is always new; "" is refused (it used to
    become the made-up name without a word).
    """
    if run_id is None:
        return
    if not run_id.strip():
        raise UserError("--run-id is empty: give the run directory a name, or leave --run-id out for a made-up one")
    if not _RUN_ID.fullmatch(run_id):
        raise UserError(f"bad --run-id '{clip(run_id)}': a run id is a name, not a path: use letters, digits, "
                        f"'.', '_' and '-' (at most {RUN_ID_MAX}, not starting with '.')")
    if os.path.lexists(Path(results_dir).expanduser() / run_id):
        # appending to an old run would mix two runs' timelines and overwrite its run.json
        raise UserError(f"run id {run_id} already exists in {clip(results_dir)}: choose another --run-id "
                        f"or leave it out")


def _probe_directory(root: Path) -> None:
    """Make sure files can be written in `root`: create it (and its missing parents), write and remove a probe
    file, then remove the directories this made, so that a run refused later leaves nothing behind; an
    `OSError` when that fails."""
    missing: list[Path] = []
    try:
        p = root
        while not os.path.lexists(p) and p != p.parent:
            missing.append(p)
            p = p.parent
        if os.path.lexists(root) and not root.is_dir():
            raise NotADirectoryError(20, "not a directory")
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".dbsurge-probe-{os.getpid()}"
        probe.write_text("probe\n")
        probe.unlink()
    finally:
        for d in missing:  # deepest first
            try:
                d.rmdir()
            except OSError:  # not empty (someone else's now) or never made: leave it
                break


def check_results_dir(path: str | os.PathLike) -> None:
    """Make sure run directories can be made under `path` (`_probe_directory`), else one `UserError` line."""
    try:
        _probe_directory(Path(path).expanduser())
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise UserError(f"cannot write run directories under --results-dir {clip(path)}: {reason}: "
                        f"choose a writable directory") from None


#: Where no report file can go: the kernel's own file systems (a write there fails, or changes the system).
_KERNEL_DIRS = ("/proc", "/sys", "/dev")


def check_output_file(path: str, flag: str, written: Sequence[str]) -> None:
    """`flag`'s files (`written`: the names Locust makes of `path`) can be written: none is a directory or in
    /proc, /sys or /dev, and each one's directory can be made and written (`_probe_directory`).

    Locust writes --html, --csv and --json-file after the load: a bad one was a traceback from
    ``save_html_report``, no tables, no verdict, exit 1 and a run.json never finalised."""
    for name in written:
        file = Path(name).expanduser()
        absolute = Path(os.path.realpath(file))  # a link into /proc is in /proc
        kernel = next((k for k in _KERNEL_DIRS if absolute == Path(k) or Path(k) in absolute.parents), None)
        if kernel is not None:
            raise UserError(f"bad {flag} {clip(path)}: {clip(str(absolute), 80)} is in {kernel}, the kernel's: give a "
                            f"file in a directory of yours")
        if file.is_dir():
            raise UserError(f"bad {flag} {clip(path)}: {clip(name, 80)} is a directory: give a file name")
        if os.path.lexists(file) and not os.access(file, os.W_OK):
            raise UserError(f"bad {flag} {clip(path)}: {clip(name, 80)} exists and cannot be written")
        try:
            _probe_directory(absolute.parent)
        except OSError as e:
            raise UserError(f"bad {flag} {clip(path)}: cannot write in {clip(str(absolute.parent), 80)}: "
                            f"{e.strerror or type(e).__name__}") from None


def check_report_files(opts: argparse.Namespace) -> None:
    """Locust's --html, --csv and --json-file, checked before any load (`check_output_file`)."""
    html = getattr(opts, "html_file", None)
    if html:
        shown = html
        for term, name in (("{u}", "num_users"), ("{r}", "spawn_rate"), ("{t}", "run_time")):
            value = getattr(opts, name, None)
            if value is not None:  # as Locust's process_html_filename names the file
                shown = shown.replace(term, str(int(value)) if float(value).is_integer() else str(value))
        check_output_file(html, "--html", [shown])
    prefix = getattr(opts, "csv_prefix", None)
    if prefix:
        check_output_file(prefix, "--csv", [prefix + suffix for suffix in LOCUST_CSV_SUFFIXES])
    json_file = getattr(opts, "json_file", None)
    if json_file:
        check_output_file(json_file, "--json-file", [f"{json_file}.json"])


def results_dir_option(value: str | os.PathLike | None) -> str | os.PathLike:
    """--results-dir as the run will use it: None is the default (``results``), an empty one is refused.

    ``--results-dir ''`` used to be checked as ``results`` but written as the working directory: the
    run went into ``./<run-id>``, over an old run of that name there (its run.json replaced, its
    timeline appended to), because the existing-run check had looked in ``results/``."""
    if value is None:
        return "results"
    if not str(value).strip():
        raise UserError("--results-dir is empty: give the directory run directories go in (default: results), or "
                        "leave --results-dir out")
    return value


def check_output(opts: argparse.Namespace) -> None:
    """--results-dir writable and --run-id new and a name, before any load: in the directory the run writes; and
    Locust's --html, --csv and --json-file writable (`check_report_files`)."""
    results_dir = results_dir_option(getattr(opts, "results_dir", None))
    validate_run_id(getattr(opts, "run_id", None), results_dir)
    check_results_dir(results_dir)
    check_report_files(opts)


class _PlainParser(OneLineParser):
    """A parser that takes Locust's extra `add_argument` keywords, reads env vars, raises the bare `UserError`.

    `dbsurge run` must not import Locust (it monkey-patches the process with gevent) to read the
    options it passes through; this parser reads the same definitions (`options.add_options`).
    """

    def add_argument(self, *args: Any, env_var: str | None = None, is_secret: bool = False,
                     include_in_web_ui: bool = True, **kwargs: Any) -> argparse.Action:
        if env_var and os.environ.get(env_var) and kwargs.get("action") in (None, "store"):
            kwargs["default"] = os.environ[env_var]  # argparse applies `type` to a string default
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(clip(message, 200))  # without the prog: `dbsurge run` reads Locust's options here


def dbsurge_options(argv: Sequence[str]) -> argparse.Namespace:
    """dbsurge's plugin options (`dbsurge.config.options`) parsed from `argv`, ignoring anything else (Locust's)."""
    parser = _PlainParser(add_help=False, allow_abbrev=False)
    add_options(parser)
    ns, _ = parser.parse_known_args(list(argv))
    return ns
