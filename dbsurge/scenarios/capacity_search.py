"""``dbsurge scenario capacity``: the highest arrival rate a target sustains within a latency bound.

A step search over short constant-rate engine runs, each exactly

    dbsurge run --workload orders --operation product_lookup --shape constant --rate R --duration Ns --max-lag L

into ``<run-id>/NN-<R>tps/`` (a normal engine run directory). A step passes when the operation's
p99 (response time from the intended start) is under ``--p99``, no slot was dropped and fewer
than 1% of the planned arrivals failed. The rate grows by ``--step-factor`` from ``--start``
until a step fails (or ``--max-rate``), then ``--bisections`` runs halve the interval between
the last good and the first bad rate. The table lists every step (rate, achieved TPS, p99,
failures, dropped, lag cause, verdict); the answer says who was the limit: when a failing step's
lag cause (run.json ``results.lag_causes``) is ``generator`` or ``cap`` (``--max-users``), the
generator, not the target, was the limit and the answer is "above X", never X.
Options this scenario does not know go to every ``dbsurge run`` (``--max-users``, ``--arrivals``, ...).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.config.options import DEFAULTS
from dbsurge.engine.run_command import take_option
from dbsurge.rundir.schema import CAPACITY_TABLE, RUN_JSON, SUMMARY_CSV
from dbsurge.scenarios.arguments import positive, seconds
from dbsurge.scenarios.base import Scenario, Setup
from dbsurge.scenarios.engine_run import annotate_run, pairs, run_engine
from dbsurge.scenarios.files import opt_float, read_meta, read_rows
from dbsurge.scenarios.latency import number
from dbsurge.scenarios.report import Report, Table, say

NAME = "capacity"
STUDY = {"workload": "orders", "operation": "product_lookup", "p99": "50ms", "start": 100.0, "step_factor": 2.0,
         "max_rate": 100000.0, "step_seconds": 30.0, "bisections": 3, "max_lag": "1s"}
QUICK = {"step_seconds": 3.0, "max_rate": 1600.0, "bisections": 2, "products": 2000}
MAX_FAILURE_RATE = 0.01
TABLE_COLUMNS = ["step", "rate_tps", "achieved_tps", "p99_ms", "failures", "failure_rate", "dropped", "lag_cause",
                 "verdict", "reason", "exit_code"]
LIMIT_CAUSES = ("generator", "cap")


@dataclass
class Step:
    """One engine run of the search and what it measured."""

    step: str
    rate_tps: float
    achieved_tps: float | None
    p99_ms: float | None
    failures: int
    failure_rate: float
    dropped: int
    lag_cause: str
    verdict: str
    reason: str
    exit_code: int
    finding: str = ""
    service_ms: float | None = None  # the operation's median service time (actual start to end)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default=None, help="the workload (default orders)")
    p.add_argument("--operation", default=None,
                   help="the one operation sent and judged (default product_lookup; 'all' for the workload's mix)")
    p.add_argument("--p99", default=None, help="p99 response-time bound of a passing step (default 50ms)")
    p.add_argument("--start", type=float, default=None, help="first rate in TPS (default 100)")
    p.add_argument("--step-factor", type=float, default=None, help="rate growth per step (default 2)")
    p.add_argument("--max-rate", type=float, default=None,
                   help="highest rate tried, TPS (100000; quick: from 1600 up to what the pool serves at the "
                        "measured service time)")
    p.add_argument("--step-seconds", type=float, default=None, help="length of each step (default 30; quick 3)")
    p.add_argument("--bisections", type=int, default=None, help="bisection runs after the first failure (3; quick 2)")
    p.add_argument("--max-lag", default=None, help="a slot later than this is dropped, failing the step (default 1s)")


def check(setup: Setup) -> None:
    args = setup.args
    setup.values["p99_ms"] = seconds(args.p99, "--p99") * 1000.0
    positive(setup.values["p99_ms"], "--p99")
    positive(args.start, "--start")
    positive(args.step_seconds, "--step-seconds")
    seconds(args.max_lag, "--max-lag")
    if args.step_factor <= 1:
        raise UserError(f"--step-factor must be above 1 (got {args.step_factor:g})")
    if args.max_rate < args.start:
        raise UserError(f"--max-rate {args.max_rate:g} is below --start {args.start:g}")
    if args.bisections < 0:
        raise UserError("--bisections must not be negative")
    setup.settings["p99_ms"] = setup.values["p99_ms"]
    # --quick without --max-rate: 1,600 TPS is only where the search starts to adapt (`adapted_ceiling`)
    setup.values["adapt_ceiling"] = bool(args.quick) and "max_rate" not in setup.given


# -- the search ---------------------------------------------------------------------------------------


def step_command(setup: Setup, uri: str, parent: Path, step_id: str, rate: float) -> list[str]:
    """``dbsurge run`` arguments of one constant-rate step."""
    args = setup.args
    wopts = list(args.workload_option or [])
    if args.quick and args.workload == "orders" and not any(o.strip().startswith("products=") for o in wopts):
        wopts.append(f"products={QUICK['products']}")
    cmd = ["--workload", args.workload, "--shape", "constant", "--rate", f"{rate:g}", "--target", uri,
           "--duration", f"{args.step_seconds:g}s", "--max-lag", args.max_lag, "--quiet",
           "--results-dir", str(parent), "--run-id", step_id, "--seed", str(args.seed)]
    if args.operation and args.operation != "all":
        cmd += ["--operation", args.operation]
    cmd += pairs("--target-option", args.target_option) + pairs("--workload-option", wopts)
    return cmd + setup.rest


def lag_cause(causes: list[str]) -> str:
    """The step's lag cause: generator before cap before target; '' when it never lagged."""
    for cause in ("generator", "cap", "target"):
        if cause in causes:
            return cause
    return ""


def judge_step(run_dir: Path, rate: float, operation: str, p99_bound_ms: float, code: int) -> Step:
    """Read one step's summary.csv and run.json and give its verdict."""
    rows = {r["operation"]: r for r in read_rows(run_dir, SUMMARY_CSV)}
    total = rows.get("ALL", {})
    op_row = rows.get(operation, total) if operation != "all" else total
    results = (read_meta(run_dir).get("results") or {}) if (run_dir / RUN_JSON).is_file() else {}
    p99 = opt_float(op_row.get("p99_ms"))
    failure_rate = opt_float(total.get("failure_rate")) or 0.0
    dropped = int(total.get("dropped") or 0)
    reasons = []
    if not total:
        reasons.append(f"no results (exit {code})")
    if p99 is None or p99 > p99_bound_ms:
        reasons.append(f"p99 {number(p99, 2)} ms > {p99_bound_ms:g} ms")
    if dropped:
        reasons.append(f"{dropped} dropped")
    if failure_rate >= MAX_FAILURE_RATE:
        reasons.append(f"failure rate {failure_rate * 100:.2f}%")
    findings = results.get("behind_plan") or []
    return Step(step=run_dir.name, rate_tps=rate, achieved_tps=opt_float(total.get("achieved_tps")), p99_ms=p99,
                failures=int(total.get("failures") or 0), failure_rate=failure_rate, dropped=dropped,
                lag_cause=lag_cause(results.get("lag_causes") or []), verdict="fail" if reasons else "pass",
                reason="; ".join(reasons), exit_code=code, finding=findings[0] if findings else "",
                service_ms=opt_float(op_row.get("service_p50_ms")))


def run_step(setup: Setup, uri: str, parent: Path, rate: float, index: int) -> Step:
    step_id = f"{index:02d}-{rate:g}tps"
    say(f"step {index}: {rate:g} TPS for {setup.args.step_seconds:g} s")
    code = run_engine(step_command(setup, uri, parent, step_id, rate))
    step = judge_step(parent / step_id, rate, setup.args.operation, setup.values["p99_ms"], code)
    say(f"step {index}: {step.verdict} ({step.reason or 'within bounds'})")
    return step


def adapted_ceiling(step: Step, floor: float, users: int) -> float:
    """The highest rate worth trying after a passing step: what ``users`` connections could serve at the
    step's median service time (Little's law), at least ``floor``, at most the study's ``--max-rate``.

    On an embedded server a lookup takes a fraction of a millisecond, so a fixed ``--quick`` ceiling of
    1,600 TPS passed every step and found no limit; this one lets the search go on until the target or
    the generator fails a step.

    >>> adapted_ceiling(Step("01", 100, 100, 1, 0, 0, 0, "", "pass", "", 0, service_ms=0.5), 1600, 200)
    100000.0
    >>> adapted_ceiling(Step("01", 100, 100, 1, 0, 0, 0, "", "pass", "", 0, service_ms=100.0), 1600, 20)
    1600.0
    """
    if not step.service_ms or step.service_ms <= 0:
        return floor
    return float(min(STUDY["max_rate"], max(floor, users / (step.service_ms / 1000.0))))


def _users(rest: list[str]) -> int:
    """The pool cap the steps run with (``--users`` / ``--max-users`` passed on, else the default)."""
    for flag in ("--max-users", "--users"):
        value, _ = take_option(list(rest), flag)
        if value is not None and value.isdigit():
            return int(value)
    return int(DEFAULTS["max_users"])


def search(setup: Setup, uri: str, parent: Path) -> list[Step]:
    """Grow the rate until a step fails, then bisect between the last good and the first bad rate."""
    args = setup.args
    steps: list[Step] = []
    rate, good, bad = args.start, None, None
    ceiling = args.max_rate
    while True:
        steps.append(run_step(setup, uri, parent, rate, len(steps) + 1))
        if not steps[-1].passed:
            bad = rate
            break
        good = rate
        if setup.values.get("adapt_ceiling"):
            ceiling = max(ceiling, adapted_ceiling(steps[-1], args.max_rate, _users(setup.rest)))
        if rate >= ceiling:
            break
        rate = min(rate * args.step_factor, ceiling)
    setup.values["ceiling"] = ceiling
    for _ in range(args.bisections if good is not None and bad is not None else 0):
        mid = round((good + bad) / 2)
        if mid in (good, bad):
            break
        steps.append(run_step(setup, uri, parent, mid, len(steps) + 1))
        good, bad = (mid, bad) if steps[-1].passed else (good, mid)
    return steps


def answer(steps: list[Step], max_rate: float) -> tuple[str, str]:
    """(limit, sentence): limit is target, generator, none (never passed) or search (max-rate passed)."""
    passed = [s for s in steps if s.passed]
    failed = [s for s in steps if not s.passed]
    best = max((s.rate_tps for s in passed), default=None)
    limited = [s for s in failed if s.lag_cause in LIMIT_CAUSES]
    if limited:
        s = limited[0]
        above = f"capacity above {best:g} TPS" if best is not None else "no capacity measured"
        return "generator", (f"{above}: the generator, not the target, was the limit (lag cause {s.lag_cause} at "
                             f"{s.rate_tps:g} TPS: {s.finding or s.reason})")
    if best is None:
        return "none", f"no rate passed: the lowest tried, {steps[0].rate_tps:g} TPS, failed ({steps[0].reason})"
    if not failed:
        return "search", f"capacity above {best:g} TPS: every step passed up to --max-rate {max_rate:g}"
    first_bad = min(s.rate_tps for s in failed)
    achieved = next(s.achieved_tps for s in passed if s.rate_tps == best)
    return "target", (f"the target's capacity is about {best:g} TPS (achieved {number(achieved, 1)} TPS; "
                      f"{first_bad:g} TPS failed: {next(s.reason for s in failed if s.rate_tps == first_bad)})")


def launch(setup: Setup, uri: str, run_id: str) -> int:
    """Run the search into ``<results>/<run-id>/`` and write its run.json."""
    parent = Path(setup.args.results_dir) / run_id
    parent.mkdir(parents=True, exist_ok=True)
    steps = search(setup, uri, parent)
    limit, sentence = answer(steps, setup.values.get("ceiling", setup.args.max_rate))
    best = max((s.rate_tps for s in steps if s.passed), default=None)
    annotate_run(parent, run_id=run_id, scenario=NAME, scenario_settings=setup.settings,
                 target_name=setup.args.target,
                 results={"steps": [asdict(s) for s in steps], "limit": limit, "capacity_tps": best,
                          "answer": sentence})
    return 0 if best is not None else 1


def after(setup: Setup, run_id: str, code: int) -> int:
    SCENARIO.show(Path(setup.args.results_dir) / run_id)
    return code


# -- the table (pure, from the parent's run.json) -----------------------------------------------------------


def report(run_dir: Path) -> Report:
    meta = read_meta(run_dir)
    results = meta.get("results") or {}
    settings = meta.get("scenario_settings") or {}
    steps = results.get("steps") or []
    display = [[s["step"], number(s["rate_tps"], 0), number(s["achieved_tps"], 1), number(s["p99_ms"], 2),
                f"{s['failures']} ({s['failure_rate'] * 100:.2f}%)", str(s["dropped"]), s["lag_cause"] or "-",
                s["verdict"] + (f": {s['reason']}" if s["reason"] else "")] for s in steps]
    headers = ["step", "rate TPS", "achieved TPS", f"{settings.get('operation', '')} p99 ms", "failures", "dropped",
               "lag cause", "verdict"]
    csv_rows = [{k: s.get(k) for k in TABLE_COLUMNS} for s in steps]
    table = Table(title=f"Capacity search (p99 < {settings.get('p99', '')}, no drops, failures < 1%)",
                  headers=headers, rows=display, csv_name=CAPACITY_TABLE, csv_columns=TABLE_COLUMNS,
                  csv_rows=csv_rows)
    notes = [f"Answer: {results.get('answer', '')}",
             f"Each step is an engine run directory under {run_dir} ({settings.get('step_seconds', 0):g} s constant "
             f"rate); p99 is response time from the intended start."]
    return Report(heading=f"dbsurge scenario capacity: {meta.get('target_name') or ''}", tables=[table], notes=notes)


SCENARIO = Scenario(NAME, "The highest arrival rate a target sustains within a p99 bound (step search, then bisect).",
                    STUDY, QUICK, report=report, options=add_options, check=check, launch=launch, after=after)


def main(argv: list[str]) -> int:
    return SCENARIO.main(argv)
