"""The collectors as the engine calls them (`dbsurge.engine.collector_hooks`): side collectors, report, capacity.

Cheap to import (``dbsurge run``'s parent installs them at start): each hook imports its module
when first called, the report and the merge with pandas and matplotlib, the side collectors with gevent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dbsurge.engine.collector_hooks import CollectorHooks


def _preflight(run: Any) -> None:
    from dbsurge.collectors.side import preflight_side

    preflight_side(run)


def _start(run: Any) -> list:
    from dbsurge.collectors.side import start_side_collectors

    return start_side_collectors(run)


def _stop(run: Any) -> None:
    from dbsurge.collectors.side import stop_side_collectors

    stop_side_collectors(run)


def _build_report(run_dir: Path) -> Path:
    from dbsurge.collectors.report import build_report

    return build_report(run_dir)


def _stage_capacity(run_dir: Path) -> dict[str, str]:
    from dbsurge.collectors.merge import stage_capacity, stage_capacity_texts

    return stage_capacity_texts(stage_capacity(run_dir), labels=False, sep="/")


COLLECTOR_HOOKS = CollectorHooks(preflight=_preflight, start=_start, stop=_stop, build_report=_build_report,
                                 stage_capacity=_stage_capacity)
