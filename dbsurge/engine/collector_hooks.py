"""What the engine asks of the collectors, through hooks that the layer above fills in.

``dbsurge.collectors`` (the side collectors, the report) stands above the engine and imports from
it; the engine never imports it back. It asks for them through `collectors()`: the side
collectors' preflight, start and stop, the report, the capacity per stage. The composition layer
hands them in with `install` before a run: `dbsurge.locust_plugin` in a Locust process,
`dbsurge.commands.cli` in ``dbsurge run``'s parent (which finalises what a dead child left), both with
`dbsurge.collectors.hooks.COLLECTOR_HOOKS`; a test may hand in its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbsurge.base.hooks import HookSlot


@dataclass(frozen=True, kw_only=True)
class CollectorHooks:
    """The collectors as the engine calls them; ``run`` is the engine's run object."""

    #: check --cloudwatch and --cost-cap before any load (one `UserError` line on failure)
    preflight: Callable[[Any], None]
    #: start what the options ask for beside the load; returns the started tasks (greenlets or ``stop()``-ables)
    start: Callable[[Any], list]
    #: stop the tasks `start` returned (``run.side_tasks``)
    stop: Callable[[Any], None]
    #: build report.html and summary.md from a run directory; returns the report's path
    build_report: Callable[[Path], Path]
    #: the collector's maximum capacity per stage of a run directory, as the summary's column shows it
    stage_capacity: Callable[[Path], dict[str, str]]


_slot: HookSlot[CollectorHooks] = HookSlot("collectors", "dbsurge.locust_plugin or dbsurge.commands.cli",
                                            "dbsurge.engine.collector_hooks.install")
#: Hand the engine its collectors (again: the last one wins).
install = _slot.install
#: The installed collectors; none installed is a programming error in the composition layer.
collectors = _slot.get
