"""A scenario's command line: the options every scenario takes, and its two sets of defaults.

A scenario's defaults come in two sets: the study's (what a run against a cloud endpoint uses)
and ``--quick`` (scaled down so it runs in seconds on the embedded targets). An option given on
the command line always wins; `apply_defaults` fills in the rest. Every error is a `UserError`
naming the option (one line, exit 2), raised before anything runs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from dbsurge.base.errors import UserError
from dbsurge.config.option_names import OneLineParser
from dbsurge.config.options import EMBEDDED_TEXT, NO_TARGET, SCHEMES_TEXT, parse_key_values
from dbsurge.plan.stage_plan import parse_duration

__all__ = ["NO_TARGET", "ScenarioParser", "apply_defaults", "cloudwatch_flags", "parse_key_values", "positive",
           "require_target", "scenario_parser", "seconds"]


class ScenarioParser(OneLineParser):
    """A scenario's parser: dbsurge's one line (`UserError`, exit 2) instead of usage text and exit 2."""


def scenario_parser(name: str, description: str, *, cloudwatch: bool = False) -> ScenarioParser:
    """A parser with the options every scenario takes."""
    p = ScenarioParser(prog=f"dbsurge scenario {name}", description=description)
    p.add_argument("--target", default=os.environ.get("DBSURGE_TARGET"),
                   help=f"database URI ({SCHEMES_TEXT}) or {EMBEDDED_TEXT} (default: $DBSURGE_TARGET)")
    p.add_argument("--target-option", action="append", default=None, metavar="KEY=VALUE",
                   help="binding option, e.g. connect_timeout=15, isolation=serializable, w=1 (repeatable)")
    p.add_argument("--workload-option", action="append", default=None, metavar="KEY=VALUE",
                   help="workload option, e.g. documents=2000000 (repeatable)")
    p.add_argument("--quick", action="store_true",
                   help="scaled-down defaults that run in seconds on the embedded targets")
    p.add_argument("--seed", type=int, default=42, help="seed of the random choices (default 42)")
    p.add_argument("--results-dir", default="results", help="where run directories go (default: results)")
    p.add_argument("--run-id", default=None, help="name of the run directory (default: UTC time, scenario, suffix)")
    p.add_argument("--from", dest="from_run", default=None, metavar="RUN_DIR",
                   help="print the table of a finished run of this scenario again (nothing is run)")
    if cloudwatch:
        p.add_argument("--cloudwatch", action="append", default=None, metavar="PRESET:ID",
                       help="CloudWatch capacity beside the table, e.g. docdb:my-cluster, aurora:a2 (repeatable)")
        p.add_argument("--cloudwatch-region", default=None, help="AWS region for --cloudwatch (default: the AWS "
                                                                 "settings')")
        p.add_argument("--cloudwatch-endpoint-url", default=None, help="CloudWatch endpoint (default: AWS's)")
    return p


def cloudwatch_flags(args: argparse.Namespace) -> list[str]:
    """The ``--cloudwatch*`` options again, as arguments for ``dbsurge run``."""
    out: list[str] = []
    for value in getattr(args, "cloudwatch", None) or []:
        out += ["--cloudwatch", value]
    if getattr(args, "cloudwatch_region", None):
        out += ["--cloudwatch-region", args.cloudwatch_region]
    if getattr(args, "cloudwatch_endpoint_url", None):
        out += ["--cloudwatch-endpoint-url", args.cloudwatch_endpoint_url]
    return out


def apply_defaults(args: argparse.Namespace, study: dict[str, Any], quick: dict[str, Any]) -> dict[str, Any]:
    """Fill every option left unset (None) with the ``--quick`` or the study's default; returns them all."""
    chosen = {}
    for key, default in study.items():
        value = getattr(args, key, None)
        if value is None:
            value = quick.get(key, default) if args.quick else default
            setattr(args, key, value)
        chosen[key] = value
    return chosen


def require_target(args: argparse.Namespace) -> str:
    """``--target`` (or $DBSURGE_TARGET); `UserError` when neither is set."""
    if not args.target:
        raise UserError(NO_TARGET)
    return args.target


def seconds(text: str | float | None, what: str) -> float:
    """A duration option (``20m``, ``30s``, ``1.5``) in seconds; `UserError` naming the option."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return parse_duration(str(text))
    except UserError as e:
        raise UserError(f"{what}: {e}") from None


def positive(value: float, what: str) -> float:
    if not value > 0:
        raise UserError(f"{what} must be positive (got {value:g})")
    return value
