"""``dbsurge run``'s command line, for every command that builds one (the ``dbsurge`` command, ``--repeat``, the
scenarios): its own options, the namespace Locust's child will see, and edits of an argv (a secret moved out of it,
an option taken from it).

Below the commands and the scenarios, so that both read the same definitions and neither imports the other's.
"""

from __future__ import annotations

import argparse
import os

from dbsurge.base.errors import UserError, clip
from dbsurge.config.config_files import check_config_files
from dbsurge.config.option_names import known_env, refuse_abbreviations, refuse_unknown, warn_unknown_env
from dbsurge.config.option_types import ascii_int, strict_numbers
from dbsurge.config.options import TARGET_HELP, add_options
from dbsurge.engine.validate import _PlainParser

SHAPES = ("spike", "stages", "constant")
WORKLOADS = ("orders", "documents", "ycsb")


#: ``dbsurge run``'s own options (the rest are dbsurge's plugin options, `dbsurge.config.options`, and Locust's):
#: group, flags, add_argument keywords.
RUN_OPTIONS: list[tuple[str, tuple[str, ...], dict]] = [
    ("target", ("--target",), dict(default=None, env_var="DBSURGE_TARGET",
                                   help=TARGET_HELP)),
    ("workload", ("--workload",), dict(default=None, env_var="DBSURGE_WORKLOAD",
                                       help=f"the workload: one of {', '.join(WORKLOADS)} (required)")),
    ("plan", ("--shape",), dict(default=None, env_var="DBSURGE_SHAPE",
                                help=f"arrival-rate shape: {', '.join(SHAPES)} (default: none, the closed model)")),
    ("plan", ("--users", "-u"), dict(type=ascii_int, default=None, env_var="LOCUST_USERS",
                                     help="concurrent users (closed model, default 8), or the cap on users under a "
                                          "shape (as --max-users)")),
    ("plan", ("--duration", "-t"), dict(default=None, env_var="LOCUST_RUN_TIME",
                                        help="run time, e.g. 30s or 2m (closed model and constant shape; closed "
                                             "model default 30s; refused with spike and stages, which last as "
                                             "long as their stages)")),
    ("measurement", ("--quiet",), dict(action="store_true",
                                       help="no progress lines: stage changes, warnings and the final tables")),
    ("measurement", ("--verbose",), dict(action="store_true",
                                         help="Locust's own log lines and periodic tables as well as dbsurge's")),
    ("measurement", ("--repeat",), dict(default=None, metavar="N",
                                        help="run N times into <results>/<run-id>/1..N and print the spread "
                                             "(median, min, max) of each stage's figures")),
    ("distribution", ("--processes",), dict(type=ascii_int, default=None, env_var="LOCUST_PROCESSES",
                                            help="worker processes on this host (-1: one per CPU; Locust's "
                                                 "--processes)")),
    ("distribution", ("--web",), dict(action="store_true",
                                      help="start Locust's web UI (on 127.0.0.1:8089) instead of headless; the process "
                                           "ends with the plan, by its verdict; the UI's Stop is an "
                                           "interruption (exit 4)")),
]


def run_parser() -> argparse.ArgumentParser:
    """``dbsurge run``'s own options; dbsurge's and Locust's stay in the rest (for the child, `locust_namespace`)."""
    p = _PlainParser(prog="dbsurge run", add_help=False, allow_abbrev=False)
    for _, flags, kw in RUN_OPTIONS:
        kw = {k: v for k, v in kw.items() if k != "env_var"}  # the environment is read by `locust_namespace`
        p.add_argument(*flags, **kw)
    return p


def locust_namespace(rest: list[str], help_hint: str = "dbsurge run --help",
                      extra: list[str] | None = None) -> argparse.Namespace:
    """Locust's and dbsurge's options as the Locust child will see them: config files < environment < ``rest``.

    Parsed with Locust's own configargparse parser plus dbsurge's options (`dbsurge.config.options`,
    `dbsurge.engine.spot_notices`), so --config, locust.conf, LOCUST_* and DBSURGE_* mean here what they mean to
    Locust. An option name nobody knows, on the command line or in a config file, is refused here,
    before any server starts (`dbsurge.config.option_names.refuse_unknown`). Locust is imported without its
    gevent monkey-patching: this process only waits for the child and forwards signals.
    """
    set_here = "LOCUST_SKIP_MONKEY_PATCH" not in os.environ
    if set_here:
        os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
    try:
        from locust.argument_parser import get_parser
    finally:
        if set_here:
            os.environ.pop("LOCUST_SKIP_MONKEY_PATCH", None)  # the child patches as usual
    from dbsurge.engine.spot_notices import add_spot_options

    parser = get_parser()
    add_options(parser)
    add_spot_options(parser)
    strict_numbers(parser)
    parser.set_defaults(max_users=None)  # None: not given (`check_plan_choice`); the Locust child has the default
    check_config_files(getattr(parser, "_default_config_files", []), rest)

    def error(message: str) -> None:
        raise UserError(clip(message, 200))

    parser.error = error  # type: ignore[method-assign]
    refuse_abbreviations(parser)  # configargparse takes --rat as --rate; the Locust child would too
    ns, unknown = parser.parse_known_args(list(rest))
    own = [f for _, flags, _kw in RUN_OPTIONS for f in flags if f.startswith("--")]
    refuse_unknown(parser, list(rest), unknown, extra=own + (extra or []), help_hint=help_hint)
    _warn_unknown_env_once(parser)
    return ns


_ENV_CHECKED: list[bool] = []


def _warn_unknown_env_once(parser) -> None:
    """A ``DBSURGE_*`` variable that no option reads (``DBSURGE_RATEE``): one warning per process, naming the nearest."""
    if not _ENV_CHECKED:
        _ENV_CHECKED.append(True)
        warn_unknown_env(known_env(parser, [kw["env_var"] for _, _f, kw in RUN_OPTIONS if kw.get("env_var")]))


def move_target_to_env(argv: list[str], flag: str = "--target") -> tuple[list[str], str | None]:
    """`argv` without its ``--target URI`` / ``--target=URI`` (the last one wins), and that URI.

    `flag` names another option whose value is a secret (``--web-auth``)."""
    out: list[str] = []
    target = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out += argv[i:]
            break
        if arg == flag and i + 1 < len(argv):
            target = argv[i + 1]
            i += 2
            continue
        if arg.startswith(flag + "="):
            target = arg.partition("=")[2]
        else:
            out.append(arg)
        i += 1
    return out, target


def asks_for_repeat(argv: list[str]) -> bool:
    """Whether a ``dbsurge run`` command line has ``--repeat N`` (or ``--repeat=N``)."""
    return any(a == "--repeat" or a.startswith("--repeat=") for a in argv)


def take_option(argv: list[str], flag: str) -> tuple[str | None, list[str]]:
    """The value of ``flag`` (``--flag V`` or ``--flag=V``, the last one wins) and argv without it."""
    value, out, i = None, [], 0
    while i < len(argv):
        a = argv[i]
        if a == flag:
            if i + 1 >= len(argv):
                raise UserError(f"{flag} needs a value")
            value, i = argv[i + 1], i + 2
            continue
        if a.startswith(flag + "="):
            value = a[len(flag) + 1:]
        else:
            out.append(a)
        i += 1
    return value, out
