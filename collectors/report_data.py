"""What a run's report reads, merged once (`load_report_data`): the tables (`collectors.report`) and the plots
(`collectors.timeline_plots`) both take it, and neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from dbsurge.collectors.cost import CostReport, estimate_cost
from dbsurge.collectors.merge import merge_run, stage_capacity_frame
from dbsurge.collectors.rundata import RunInfo, open_run, read_cloudwatch, read_events, read_stages

from dbsurge.base.errors import UserError


@dataclass
class ReportData:
    """Everything the plots and tables read."""

    run: RunInfo
    merged: pd.DataFrame
    cloudwatch: pd.DataFrame
    stages_csv: pd.DataFrame | None
    capacity: pd.DataFrame
    cost: CostReport | None
    cost_error: str | None
    events: list[dict]

    @property
    def operations(self) -> list[str]:
        ops = []
        for column in self.merged.columns:
            if column.endswith(".p99_ms") and not column.startswith(("pg.", "mongo.", "cw.", "ALL.")):
                ops.append(column[: -len(".p99_ms")])
        return ops


def load_report_data(run_dir: str | Path) -> ReportData:
    """Merge the run, estimate its cost, and read what the report shows."""
    run = open_run(run_dir)
    merged = merge_run(run.path)
    cloudwatch = read_cloudwatch(run.path)
    cost, cost_error = None, None
    try:
        cost = estimate_cost(run.path)
    except UserError as exc:
        cost_error = str(exc)
    return ReportData(
        run=run,
        merged=merged,
        cloudwatch=cloudwatch,
        stages_csv=read_stages(run.path),
        capacity=stage_capacity_frame(run.stages, cloudwatch),
        cost=cost,
        cost_error=cost_error,
        events=read_events(run.path),
    )
