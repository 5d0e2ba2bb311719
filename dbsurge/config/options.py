"""dbsurge's command-line options, added to Locust's parser.

Every option has an environment-variable alias (``DBSURGE_<NAME>``), so a worker on a Spot host
or a container can be configured without a long command line. Defaults live here, in one place.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterable

from dbsurge.base.errors import UserError, clip
from dbsurge.config.option_types import ascii_float, ascii_int

#: The URI schemes a target may have (`dbsurge.targets` registers them; a test keeps the two equal), and the
#: embedded servers dbsurge starts by name (`dbsurge.embedded.servers.resolve_embedded`): every help text and
#: error that lists targets says them from here, so none lists fewer than the code takes.
TARGET_SCHEMES = ("postgresql", "postgres", "dsql", "mongodb", "mongodb+srv", "dynamodb", "alternator", "cql",
                  "scylla")
EMBEDDED_TARGETS = ("embedded-postgres", "embedded-mongo", "embedded-dynamodb", "embedded-cassandra")
#: ``postgresql://, dsql://, ...`` (the aliases postgres:// and mongodb+srv:// left out of the help's list)
SCHEMES_TEXT = ", ".join(f"{s}://" for s in TARGET_SCHEMES if s not in ("postgres", "mongodb+srv"))
EMBEDDED_TEXT = " / ".join(EMBEDDED_TARGETS)
TARGET_HELP = f"database URI ({SCHEMES_TEXT}) or {EMBEDDED_TEXT} (started and stopped for the run)"
#: What a command without a target says.
NO_TARGET = f"no target: pass --target URI (or {EMBEDDED_TEXT}), or set DBSURGE_TARGET"

#: An operation weight (and the web form's): ASCII digits only, since float() alone also takes "nan", "inf", "1_0"
#: and Arabic-Indic or fullwidth digits.
WEIGHT_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

DEFAULTS = {
    "target": None,
    "results_dir": "results",
    "baseline_tps": 1000.0,
    "max_users": 200,
    "arrivals": "uniform",
    "seed": 42,
    "drain": 2.0,
    "op_timeout": "30s",
    "start_delay": 1.0,
}


#: The groups of ``dbsurge run --help``, in order: name -> title.
GROUPS = {
    "target": "target: the database and how to reach it",
    "workload": "workload: what each operation does",
    "plan": "plan: the arrival rate over time (open model)",
    "measurement": "measurement: what is recorded and where",
    "checks": "checks: when the run fails",
    "collectors": "collectors: the database's and the cloud's view",
    "distribution": "distribution: masters and workers",
}


class _LocustGroup:
    """One of ``locust --help``'s groups for dbsurge's options, added through Locust's own add_argument.

    Locust's parser takes the web-UI keywords (``include_in_web_ui``, ``is_secret``) and argparse's
    groups do not, so each option is added to the parser and its action then moved from the
    parser's general options to this group: Locust's web UI and its config files see the option as
    before, and ``--help`` shows it under dbsurge's heading.
    """

    def __init__(self, parser, title: str) -> None:
        self.parser = parser
        self.group = parser.add_argument_group(title)

    def add_argument(self, *flags: str, **kwargs):
        action = self.parser.add_argument(*flags, **kwargs)
        general = self.parser._optionals._group_actions
        if action in general:
            general.remove(action)
            self.group._group_actions.append(action)
        return action


def locust_help_groups(parser):
    """``group(name)`` for `add_options`: dbsurge's options in their own groups of ``locust -f ... --help``."""
    groups: dict[str, _LocustGroup] = {}

    def group(name: str) -> _LocustGroup:
        if name not in groups:
            groups[name] = _LocustGroup(parser, f"dbsurge {GROUPS[name]}")
        return groups[name]

    return group


def add_options(parser, group=None) -> None:
    """Register dbsurge's options on Locust's argument parser (``init_command_line_parser``).

    ``group(name)`` (optional) returns what the options of group ``name`` (one of `GROUPS`) are
    added to: ``dbsurge run --help`` passes one that makes argparse groups (`help_groups`), so the
    help is generated from these very definitions. Without it every option goes on ``parser``:
    Locust's own add_argument takes the web-UI keywords (include_in_web_ui, is_secret), its
    argument groups do not.
    """
    def section(name: str):
        return group(name) if group is not None else parser

    g = section("target")
    g.add_argument("--target", env_var="DBSURGE_TARGET", default=None, is_secret=True,
                   help=TARGET_HELP)
    g.add_argument("--target-secret", env_var="DBSURGE_TARGET_SECRET", default=None, include_in_web_ui=False,
                   metavar="ARN", help="AWS Secrets Manager secret with the target's password (RDS format: username, "
                                       "password); read on the master and on every worker, never sent")
    g.add_argument("--target-secret-endpoint-url", env_var="DBSURGE_TARGET_SECRET_ENDPOINT_URL", default=None,
                   include_in_web_ui=False, help="Secrets Manager endpoint (default: AWS_ENDPOINT_URL or AWS's)")
    g.add_argument("--target-option", env_var="DBSURGE_TARGET_OPTION", action="append", default=None,
                   metavar="KEY=VALUE", include_in_web_ui=False,
                   help="binding option, e.g. sslrootcert=..., tls_ca_file=..., isolation=serializable (repeatable)")
    g = section("workload")
    g.add_argument("--workload-option", env_var="DBSURGE_WORKLOAD_OPTION", action="append", default=None,
                   metavar="KEY=VALUE", include_in_web_ui=False,
                   help="workload property, YCSB names accepted, e.g. recordcount=10000 (repeatable)")
    g.add_argument("--operation", env_var="DBSURGE_OPERATION", action="append", default=None,
                   metavar="NAME[=WEIGHT]", include_in_web_ui=False,
                   help="restrict or weight the workload's operations, e.g. product_lookup=3 (repeatable)")
    g = section("measurement")
    g.add_argument("--results-dir", env_var="DBSURGE_RESULTS_DIR", default=DEFAULTS["results_dir"],
                   include_in_web_ui=False, help="where run directories go (default: results)")
    g.add_argument("--run-id", env_var="DBSURGE_RUN_ID", default=None, include_in_web_ui=False,
                   help="name of the run directory (default: UTC time, workload and a random suffix)")
    g.add_argument("--prometheus-port", env_var="DBSURGE_PROMETHEUS_PORT", type=ascii_int, default=None,
                   include_in_web_ui=False,
                   help="serve Prometheus metrics on this port, on the master or local runner (default: off); "
                        "see docs/prometheus.md")
    g.add_argument("--prometheus-host", env_var="DBSURGE_PROMETHEUS_HOST", default="127.0.0.1",
                   include_in_web_ui=False, help="address the Prometheus endpoint binds to (default 127.0.0.1)")
    g.add_argument("--prometheus-grace", env_var="DBSURGE_PROMETHEUS_GRACE", type=float, default=15.0,
                   include_in_web_ui=False, metavar="SECONDS",
                   help="seconds the Prometheus endpoint stays up after the run with the final values, so the last "
                        "scrape sees them (default 15; 0: none)")
    g = section("plan")
    g.add_argument("--baseline-tps", env_var="DBSURGE_BASELINE_TPS", type=ascii_float, default=DEFAULTS["baseline_tps"],
                   help="the rate that stage percentages refer to (default 1000)")
    g.add_argument("--stages", env_var="DBSURGE_STAGES", default=None,
                   help="stage plan for --shape stages (or replacing the spike's), e.g. '2m@20%%,1m@200%%,2m@100%%,"
                        "1m@5%%' or '30s@500tps,30s@ramp(500tps..2000tps)'")
    g.add_argument("--stage-seconds", env_var="DBSURGE_STAGE_SECONDS", type=ascii_float, default=None,
                   help="spike shape: make every stage this long (keeps the rates; not with --stages)")
    g.add_argument("--rate", env_var="DBSURGE_RATE", type=ascii_float, default=None,
                   help="constant shape: the arrival rate in TPS")
    g.add_argument("--max-rate", env_var="DBSURGE_MAX_RATE", type=ascii_float, default=None, include_in_web_ui=False,
                   help="highest rate a live change (web UI, POST /dbsurge/rate) may ask for, in TPS "
                        "(default: 10 times the plan's peak, at most 10,000,000)")
    g.add_argument("--max-users", env_var="DBSURGE_MAX_USERS", type=ascii_int, default=DEFAULTS["max_users"],
                   help="most concurrent users (connections) the shapes may start (default 200)")
    g.add_argument("--arrivals", env_var="DBSURGE_ARRIVALS", choices=["uniform", "poisson"],
                   default=DEFAULTS["arrivals"], help="arrival process: evenly spaced (default) or poisson (seeded)")
    g.add_argument("--max-lag", env_var="DBSURGE_MAX_LAG", default=None,
                   help="skip and count as dropped any slot later than this, e.g. 100ms or 1s")
    g = section("checks")
    g.add_argument("--fail-on-lag", env_var="DBSURGE_FAIL_ON_LAG", action="store_true", default=False,
                   include_in_web_ui=False, help="exit 1 when the generator fell behind the plan or dropped slots")
    g.add_argument("--lag-warn", env_var="DBSURGE_LAG_WARN", default="5ms", include_in_web_ui=False,
                   help="lag p99 above which a stage counts as behind the plan (default 5ms)")
    g.add_argument("--check", env_var="DBSURGE_CHECK", default=None, include_in_web_ui=False,
                   help="thresholds evaluated at the end, e.g. 'order_create.p99<50ms,failure_rate<1%%'; "
                        "exit 1 on failure")
    g = section("plan")
    g.add_argument("--seed", env_var="DBSURGE_SEED", type=ascii_int, default=DEFAULTS["seed"], include_in_web_ui=False,
                   help="seed for arrivals and operation choice (default 42)")
    g = section("target")
    g.add_argument("--op-timeout", env_var="DBSURGE_OP_TIMEOUT", default=DEFAULTS["op_timeout"],
                   include_in_web_ui=False,
                   help="give up on an operation after this long, e.g. 5s (default 30s): it fails with kind "
                        "timeout; the target option op_timeout overrides it per target")
    g = section("plan")
    g.add_argument("--drain", env_var="DBSURGE_DRAIN", type=ascii_float, default=DEFAULTS["drain"], include_in_web_ui=False,
                   help="seconds to let in-flight operations finish after the plan ends, a signal or the web UI's "
                        "Stop (default 2)")
    g.add_argument("--start-delay", env_var="DBSURGE_START_DELAY", type=ascii_float, default=DEFAULTS["start_delay"],
                   include_in_web_ui=False, help="seconds between test start and the plan's time zero (default 1)")
    g.add_argument("--align-start", env_var="DBSURGE_ALIGN_START", type=ascii_float, default=None, include_in_web_ui=False,
                   help="put the plan's time zero on a multiple of this many wall-clock seconds, e.g. 60 to line "
                        "stages up with CloudWatch's one-minute periods")
    g = section("collectors")
    g.add_argument("--cloudwatch", env_var="DBSURGE_CLOUDWATCH", action="append", default=None,
                   metavar="PRESET:ID", include_in_web_ui=False,
                   help="attach CloudWatch metrics during the run, e.g. aurora:my-cluster (repeatable)")
    g.add_argument("--cloudwatch-region", env_var="DBSURGE_CLOUDWATCH_REGION", default=None, include_in_web_ui=False,
                   help="AWS region for --cloudwatch (default: AWS_DEFAULT_REGION / the profile's)")
    g.add_argument("--cloudwatch-endpoint-url", env_var="DBSURGE_CLOUDWATCH_ENDPOINT_URL", default=None,
                   include_in_web_ui=False, help="CloudWatch endpoint (default: AWS_ENDPOINT_URL or AWS's)")
    g.add_argument("--cloudwatch-interval", env_var="DBSURGE_CLOUDWATCH_INTERVAL", type=ascii_float, default=60.0,
                   include_in_web_ui=False, help="seconds between CloudWatch polls during a run (default 60)")
    g.add_argument("--runner", env_var="DBSURGE_RUNNER", action="append", default=None, metavar="TYPE[:COUNT]",
                   include_in_web_ui=False, help="load-generator instance type(s) for the cost, e.g. m7g.4xlarge:2")
    g.add_argument("--cost-cap", env_var="DBSURGE_COST_CAP", type=ascii_float, default=None, include_in_web_ui=False,
                   help="stop the test when the cost estimate passes this many USD")
    g.add_argument("--no-db-sampler", env_var="DBSURGE_NO_DB_SAMPLER", action="store_true", default=False,
                   include_in_web_ui=False, help="do not sample pg_stat_database / serverStatus during the run")
    g = section("workload")
    g.add_argument("--no-load", env_var="DBSURGE_NO_LOAD", action="store_true", default=False, include_in_web_ui=False,
                   help="do not load the default data set when the target has none")
    g = section("distribution")
    g.add_argument("--join-token", env_var="DBSURGE_JOIN_TOKEN", default=None, is_secret=True,
                   include_in_web_ui=False,
                   help="shared secret a worker must prove to get a share of the plan (required on a master that "
                        "listens beyond loopback; prefer the environment variable: it does not show in ps)")
    g.add_argument("--insecure-join", env_var="DBSURGE_INSECURE_JOIN", action="store_true", default=False,
                   include_in_web_ui=False,
                   help="let any worker that reaches a non-loopback master join without a token")
    g.add_argument("--web-host-allow", env_var="DBSURGE_WEB_HOST_ALLOW", action="append", default=None,
                   metavar="NAME", include_in_web_ui=False,
                   help="a host name the web UI may be reached by besides its own address (a proxy's, a DNS "
                        "name); a request with any other Host header is refused (repeatable)")
    _add_replacing(g, "--web-auth", env_var="DBSURGE_WEB_AUTH", default=None, is_secret=True,
                   include_in_web_ui=False, metavar="USER:PASSWORD",
                   help="ask every web UI request for this user and password (HTTP basic auth); required, or "
                        "--web-insecure, when --web-host is beyond loopback (prefer the environment variable)")
    g.add_argument("--web-insecure", env_var="DBSURGE_WEB_INSECURE", action="store_true", default=False,
                   include_in_web_ui=False,
                   help="serve the web UI beyond loopback without authentication, on purpose: anyone who "
                        "reaches it can start load")
    # The web UI binds to loopback unless told otherwise: a load generator's UI can start load. The
    # master's port follows Locust: a master the user asked for (--master) listens on every address,
    # as Locust's does, and must then be given a join token (dbsurge.engine.preflight); a --processes master
    # only has workers on this host, so it stays on loopback.
    parser.set_defaults(web_host="127.0.0.1", master_bind_host=default_master_bind())


def default_master_bind(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> str:
    """Locust's ``*`` for a master asked for with ``--master`` (or LOCUST_MODE_MASTER), else ``127.0.0.1``.

    >>> default_master_bind(["-f", "x.py", "--master"], {}), default_master_bind(["--processes", "2"], {})
    ('*', '127.0.0.1')
    """
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    asked = "--master" in argv or environ.get("LOCUST_MODE_MASTER", "").strip().lower() in ("1", "true", "yes", "on")
    return "*" if asked else "127.0.0.1"


def _add_replacing(parser, *flags: str, **kwargs):
    """``add_argument`` that first removes an option of the same name: Locust's retired ``--web-auth``, which
    only says that it was replaced by ``--web-login`` (dbsurge's is basic auth in front of the whole UI)."""
    base = getattr(parser, "parser", parser)  # a help group (`_HelpGroup`) adds to the parser it wraps
    existing = getattr(base, "_option_string_actions", {})  # argparse keeps no public index of options
    for action in {existing[f] for f in flags if f in existing}:
        base._remove_action(action)
        for flag in action.option_strings:
            existing.pop(flag, None)
        for group in getattr(base, "_action_groups", []):
            if action in group._group_actions:
                group._group_actions.remove(action)
    return parser.add_argument(*flags, **kwargs)


def parse_key_values(pairs: Iterable[str] | None, flag: str, error: type[UserError] = UserError) -> dict[str, str]:
    """``["a=1", "b = 2"]`` -> ``{"a": "1", "b": "2"}`` for a repeatable ``KEY=VALUE`` flag.

    A later pair overrides an earlier one; a pair without ``=`` or without a key raises ``error``
    naming the flag: ``bad --target-option 'x': expected key=value``.
    """
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise error(f"bad {flag} '{clip(pair)}': expected key=value")
        out[key.strip()] = value.strip()
    return out


def parse_operation_weights(items: Iterable[str] | None) -> dict[str, float]:
    """``--operation product_lookup=3 --operation order_create`` (or ``a=3,b``) -> ``{name: weight}``."""
    out: dict[str, float] = {}
    for item in (part.strip() for entry in items or [] for part in entry.split(",")):
        if not item:
            continue
        name, _, weight = (x.strip() for x in item.partition("="))
        if not name or (weight and not WEIGHT_NUMBER.fullmatch(weight)):
            raise UserError(f"bad --operation '{clip(item)}': expected NAME or NAME=WEIGHT with a weight of 0 or more, "
                            f"e.g. product_lookup=3")
        value = float(weight) if weight else 1.0
        if not math.isfinite(value):  # 1e400, a 400-digit weight
            raise UserError(f"bad --operation '{clip(item)}': the weight is too large")
        out[name] = value
    return out
