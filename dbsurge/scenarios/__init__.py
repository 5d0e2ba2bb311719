"""The studies' experiments as scenarios: ``dbsurge scenario NAME [options]``.

Each scenario runs one experiment of the source studies (docs/architecture.md, "Scenarios",
lists the modules and the files each scenario writes), writes a run directory
``results/<run-id>/`` (run.json, its raw data as CSV, its table as ``<scenario>.csv`` and in
summary.md) and prints the study's table. ``--quick`` scales the
study's defaults down so that a scenario runs in seconds against the embedded targets;
``--from results/<run-id>`` prints a finished run's table again (after ``dbsurge collect`` has
added capacity, for instance).

The registry below holds one line per scenario, so ``dbsurge scenario --help`` imports nothing
else; a scenario's module is imported when it runs. A module provides ``main(argv) -> int``, in
practice its `dbsurge.scenarios.base.Scenario`'s ``main``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from dbsurge.base.errors import UserError
from dbsurge.collectors.scenario_hooks import ScenarioReports
from dbsurge.config.help_examples import epilog

# name -> (module, one line for `dbsurge scenario --help`)
SCENARIOS: dict[str, tuple[str, str]] = {
    "spike": ("dbsurge.scenarios.spike",
              "study 001: orders at 20%->200%->100%->5% of a baseline; per-stage TPS, p95/p99, failures, capacity"),
    "capacity": ("dbsurge.scenarios.capacity_search",
                 "the highest constant rate with p99 under a bound (step search, bisect); target or generator limit"),
    "idle": ("dbsurge.scenarios.idle",
             "study 001: close every connection, wait, then time a new connection, a first query and 20 more"),
    "cache": ("dbsurge.scenarios.cache",
              "study 000 exp. 1: 1,000 seeded reads warm, then the same reads cold (after idle or a restart)"),
    "rewarm": ("dbsurge.scenarios.rewarm",
               "study 000 exp. 2: C clients x R reads/s on a hot set; 30 s buckets and the trace of the first second"),
    "longscan": ("dbsurge.scenarios.longscan",
                 "study 000 exp. 3: one 1%-match full scan timed batch by batch; first/middle/last 10 batches"),
    "ycsb-load": ("dbsurge.scenarios.ycsb_load",
                  "study 002: YCSB load phase, batched or not, with N clients; insert throughput and latency"),
    "ycsb-run": ("dbsurge.scenarios.ycsb_run",
                 "study 002: YCSB workload A at a target rate or flat out; throughput, read/update p99, scalability"),
    "longrun": ("dbsurge.scenarios.longrun",
                "study 002: a target rate held for hours (12h); throughput and read/update P99 per window, spikes"),
}



def _report(name: str, run_dir: Path) -> Any:
    """A scenario's report of a run directory, from its files alone (its module's pure ``report``)."""
    return importlib.import_module(SCENARIOS[name][0]).SCENARIO.report(Path(run_dir))


def _write_report(run_dir: Path, report: Any, *, title: str) -> None:
    from dbsurge.scenarios.report import write_report

    write_report(run_dir, report, title=title)


#: The scenarios as the reports and comparisons call them (`dbsurge.collectors.scenario_hooks`).
SCENARIO_REPORTS = ScenarioReports(names=frozenset(SCENARIOS), report=_report, write_report=_write_report)

USAGE = "usage: dbsurge scenario NAME [options]   (dbsurge scenario NAME --help for a scenario's options)"


def scenario_help() -> str:
    """The list printed by ``dbsurge scenario --help``: one line per scenario."""
    width = max(len(name) for name in SCENARIOS)
    lines = [USAGE, "", "scenarios:"]
    lines += [f"  {name.ljust(width)}  {line}" for name, (_, line) in SCENARIOS.items()]
    lines += ["", "common options: --target URI|embedded-postgres|embedded-mongo|embedded-dynamodb|embedded-cassandra,",
              "  --target-option K=V, --workload-option K=V, --quick (scaled-down defaults for embedded targets),",
              "  --seed, --results-dir, --run-id, --from results/<run-id> (print a finished run's table again)", "",
              epilog("scenario")]
    return "\n".join(lines)


def scenario_main(argv: list[str]) -> int:
    """``dbsurge scenario NAME [options]``: run one scenario; ``--help`` lists them."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(scenario_help())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    entry = SCENARIOS.get(name)
    if entry is None:
        raise UserError(f"unknown scenario '{name}' (known: {', '.join(SCENARIOS)}); see dbsurge scenario --help")
    module = importlib.import_module(entry[0])
    sys.stdout.flush()
    return int(module.main(rest) or 0)


__all__ = ["SCENARIOS", "scenario_help", "scenario_main"]
