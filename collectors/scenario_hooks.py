"""What the reports and comparisons ask of the scenarios, handed in from above.

A scenario's tables are built by its own pure ``report(run_dir)`` (`dbsurge.scenarios`), which stands
above collectors/ and imports from it. The report of a scenario's run (`scenario_report`) and
``dbsurge compare`` (`compare`) ask for those tables through `scenarios()`; `dbsurge.commands.cli` and
`dbsurge.locust_plugin` hand in `dbsurge.scenarios.SCENARIO_REPORTS` with `install`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbsurge.base.hooks import HookSlot


@dataclass(frozen=True, kw_only=True)
class ScenarioReports:
    """The scenarios as the reports call them."""

    #: the scenarios dbsurge knows, by name (run.json's ``scenario``)
    names: Collection[str]
    #: (scenario name, run directory) -> the scenario's report (its tables), built from the files alone
    report: Callable[[str, Path], Any]
    #: (run directory, report, title=...): write the report's CSVs and its summary.md section
    write_report: Callable[..., None]


_slot: HookSlot[ScenarioReports] = HookSlot("scenarios", "dbsurge.commands.cli or dbsurge.locust_plugin",
                                             "dbsurge.collectors.scenario_hooks.install")
#: Hand the reports the scenarios (again: the last one wins).
install = _slot.install
#: The installed scenarios; none installed is a programming error in the composition layer.
scenarios = _slot.get
