"""``dbsurge rerun RUN_DIR [--target URI] [--run-id ID] [--results-dir DIR]``: the same load again.

A finished engine run's ``run.json`` holds everything that decides its load: the plan (its
normalised text and baseline), the workload and its options, the operation weights, the arrival
process, the seed, ``--max-lag``, ``--drain``, ``--op-timeout``, the pool cap and the worker
processes. `rebuild_command` turns it back into a ``dbsurge run`` command line with
``--shape stages --stages <plan text>``, so the planned arrivals per stage and operation, and the
seeded operation and key choices, are exactly the original's; only the target may change. The
target's password is never in run.json: it comes from ``--target`` or ``$DBSURGE_TARGET``
(without either, the run's own target without a password). A run.json that cannot be replayed
(no plan and no closed-model settings, an endless plan, live rate changes, a redacted option) is
refused with one line naming what is missing (exit 2). Options after the run directory that
rerun does not know pass on to ``dbsurge run`` (``--check``, ``--quiet``...).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from dbsurge.base.errors import UserError
from dbsurge.base.redact import MASK
from dbsurge.commands.cli import WORKLOADS, run_main
from dbsurge.config.help_examples import epilog
from dbsurge.config.option_names import OneLineParser
from dbsurge.engine.validate import validate_run_id
from dbsurge.rundir import new_run_id
from dbsurge.rundir.reader import check_run_dir, read_meta
from dbsurge.rundir.schema import RUN_JSON
from dbsurge.scenarios.engine_run import annotate_run

EMBEDDED_NAMES = ("embedded-postgres", "embedded-mongo")

# plugin options copied when set: run.json options key -> flag
_COPIED = (("max_lag", "--max-lag"), ("drain", "--drain"), ("op_timeout", "--op-timeout"),
           ("start_delay", "--start-delay"), ("lag_warn", "--lag-warn"), ("align_start", "--align-start"),
           ("check", "--check"), ("cost_cap", "--cost-cap"))
_FLAGS = (("fail_on_lag", "--fail-on-lag"), ("no_db_sampler", "--no-db-sampler"), ("no_load", "--no-load"))


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dbsurge rerun", description="Run a finished run's plan, workload, options and seed again.",
                      epilog=epilog("rerun", "Options it does not know pass on to dbsurge run (--check, --quiet, ...)."),
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="the finished run's directory, results/<run-id>")
    p.add_argument("--target", default=os.environ.get("DBSURGE_TARGET"),
                   help="the target to run against (default: $DBSURGE_TARGET, else the run's own: embedded-postgres / "
                        "embedded-mongo again if it was one, else its URI without password)")
    p.add_argument("--run-id", default=None, help="name of the new run directory (default: a new one)")
    p.add_argument("--results-dir", default=None,
                   help="where the new run goes (default: beside the original; beside its set for one repetition)")
    p.add_argument("--dry-run", action="store_true", help="print the dbsurge run command and stop")
    return p


def load_meta(run_dir: str | Path) -> dict:
    """run.json of an engine run; `UserError` (one line) when the directory is not one."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory: give a run directory such as results/<run-id>")
    return read_meta(path)


def _missing(run_dir: Path, what: str) -> UserError:
    return UserError(f"cannot rerun {run_dir}: {RUN_JSON} {what}")


def rebuild_command(meta: dict, run_dir: Path, target: str) -> list[str]:  # noqa: C901 - one run.json field per branch, flat
    """The ``dbsurge run`` arguments (without results-dir and run-id) that replay the run on ``target``."""
    if (meta.get("repetitions") or {}).get("runs"):
        raise _missing(run_dir, "is a set of repetitions: rerun one of them (its directory 1, 2, ...) with --repeat")
    opts = meta.get("options")
    if meta.get("scenario") not in (None, "spike", "ycsb-run") or not isinstance(opts, dict):
        kind = meta.get("scenario") or "unknown"
        raise _missing(run_dir, f"is not an engine run (scenario {kind}): run the scenario again with --seed")
    workload = meta.get("workload")
    names = workload if isinstance(workload, list) else [workload] if workload else []
    if len(names) != 1 or names[0] not in WORKLOADS:
        raise _missing(run_dir, f"has no single known workload (got {names or 'none'})")
    for key in ("seed", "arrivals"):
        if meta.get(key) in (None, ""):
            raise _missing(run_dir, f"has no {key}")
    if meta.get("rate_changes"):
        raise _missing(run_dir, "records live rate changes (web UI or POST /dbsurge/rate): they cannot be replayed")
    cmd = ["--workload", names[0], "--target", target]
    plan = meta.get("plan")
    if isinstance(plan, dict):
        if not plan.get("text"):
            raise _missing(run_dir, "has a plan without its text")
        if plan.get("duration_s") in (None, ""):
            raise _missing(run_dir, "has an endless plan (a constant rate without --duration): nothing to replay")
        cmd += ["--shape", "stages", "--stages", str(plan["text"])]
        if plan.get("baseline_tps") not in (None, ""):
            cmd += ["--baseline-tps", f"{float(plan['baseline_tps']):g}"]
        if opts.get("max_users") not in (None, ""):
            cmd += ["--users", str(int(opts["max_users"]))]
    else:
        users, run_time = opts.get("num_users"), opts.get("run_time")
        if not users or not run_time:
            raise _missing(run_dir, "has no plan and no closed-model users and run time (options.num_users, "
                                    "options.run_time)")
        cmd += ["--users", str(int(users)), "--duration", f"{float(run_time):g}s"]
    cmd += ["--arrivals", str(meta["arrivals"]), "--seed", str(int(meta["seed"]))]
    for key, value in _pairs(meta.get("workload_options"), run_dir, "workload option"):
        cmd += ["--workload-option", f"{key}={value}"]
    for item in opts.get("target_option") or []:
        key, _, value = str(item).partition("=")
        if MASK in value:
            raise _missing(run_dir, f"has target option {key.strip()} redacted: it cannot be replayed")
        cmd += ["--target-option", str(item)]
    for item in opts.get("operation") or []:
        cmd += ["--operation", str(item)]
    for key, flag in _COPIED:
        value = meta.get(key) if key == "max_lag" else opts.get(key)
        if value not in (None, ""):
            cmd += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    for key, flag in _FLAGS:
        if opts.get(key):
            cmd.append(flag)
    processes = opts.get("processes")
    if isinstance(processes, int) and processes > 0:
        cmd += ["--processes", str(processes)]
    for item in meta.get("runners") or []:
        cmd += ["--runner", str(item)]
    return cmd


def _pairs(value: Any, run_dir: Path, what: str) -> list[tuple[str, Any]]:
    if not value:
        return []
    if not isinstance(value, dict):
        raise _missing(run_dir, f"has malformed {what}s")
    for key, v in value.items():
        if MASK in str(v):
            raise _missing(run_dir, f"has {what} {key} redacted: it cannot be replayed")
    return list(value.items())


def default_target(meta: dict) -> str | None:
    """The run's own target: the name it was given when that was an embedded server (``embedded-postgres``:
    its port died with it, so a fresh one is started), else its display URI (never a password)."""
    name = meta.get("target_name")
    if isinstance(name, str) and name in EMBEDDED_NAMES:
        return name
    return meta.get("target_display") or (meta.get("target") or {}).get("display")


def default_results_dir(run_dir: Path) -> Path:
    """Beside the original run: its parent, or, for one repetition of a ``--repeat`` set (``results/X/2``),
    beside the set (``results``), never inside the set's own folder."""
    parent = (run_dir.resolve() if run_dir.name in ("", ".", "..") else run_dir).parent
    try:
        is_set = (parent / RUN_JSON).is_file() and read_meta(parent).get("kind") == "repetitions"
    except (UserError, ValueError):
        is_set = False
    return parent.parent if is_set else parent


def rerun_main(argv: list[str]) -> int:
    """``dbsurge rerun``: rebuild the run's command from run.json and run it."""
    args, rest = _parser().parse_known_args(argv)
    run_dir = Path(args.run_dir)
    check_run_dir(run_dir, warn_missing=False)  # a damaged run.json is one line naming it, not a traceback or a wrong command
    meta = load_meta(run_dir)
    target = args.target or default_target(meta)
    if not target:
        raise _missing(run_dir, "names no target: pass --target URI")
    cmd = rebuild_command(meta, run_dir, target)
    results_dir = args.results_dir or str(default_results_dir(run_dir))
    if args.run_id is not None:
        validate_run_id(args.run_id, results_dir)  # "" is refused, not replaced by a made-up name
    run_id = args.run_id or new_run_id(f"rerun-{cmd[1]}")
    cmd += ["--results-dir", results_dir, "--run-id", run_id, *rest]
    shown = " ".join(_quote(c) for c in cmd)
    print(f"dbsurge: rerun of {run_dir}: dbsurge run {shown}", flush=True)
    if not args.target and target in EMBEDDED_NAMES:
        print(f"dbsurge: target {target} from {RUN_JSON}: a fresh embedded server, as the original had", flush=True)
    elif not args.target:
        print(f"dbsurge: target from {RUN_JSON} (its password is never stored: pass --target URI or set "
              "DBSURGE_TARGET if it needs one)", flush=True)
    if args.dry_run:
        return 0
    code = run_main(cmd)
    new_dir = Path(results_dir) / run_id
    if (new_dir / RUN_JSON).is_file():
        annotate_run(new_dir, rerun_of={"run_dir": str(run_dir), "run_id": meta.get("run_id")})
    return code


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
