"""The side collector: what the database and CloudWatch saw during a run, merged with what the clients measured.

Installed as ``dbsurge.collectors``. Modules (see ``collectors/README.md``):

- `cloudwatch`: presets (``docdb:``, ``aurora:``, ``dsql:``, ``metric:``), `CloudWatchCollector`
  (``get_metric_data``, batched and paginated) and `CloudWatchPoller` (a greenlet during a run).
- `samplers`: `PostgresSampler` (``pg_stat_database``) and `MongoSampler` (``serverStatus``), 1 s.
- `merge`: `merge_run` (``merged.csv``, one row per second) and `stage_capacity`.
- `cost`: `estimate_cost` (``cost.csv``), `load_prices` (``prices.toml``) and `CostGuard`.
- `report`: `build_report` (``report.html``, ``timeline.png``, ``summary.md``).
- `compare`: `compare_main` (``dbsurge compare``) and the comparison section of report.html.
- `cli`: `collect_main`, `report_main`, `cost_main` for ``dbsurge collect|report|cost``.

The three CLI entry points are also here (``dbsurge.collectors:collect_main``); they import their
module on call, so ``import dbsurge.collectors`` stays cheap (no pandas, boto3 or matplotlib).
"""

from __future__ import annotations


def collect_main(argv: list[str]) -> int:
    """``dbsurge collect``: see `dbsurge.collectors.cli.collect_main`."""
    from dbsurge.collectors.cli import collect_main as main

    return main(argv)


def report_main(argv: list[str]) -> int:
    """``dbsurge report``: see `dbsurge.collectors.cli.report_main`."""
    from dbsurge.collectors.cli import report_main as main

    return main(argv)


def cost_main(argv: list[str]) -> int:
    """``dbsurge cost``: see `dbsurge.collectors.cli.cost_main`."""
    from dbsurge.collectors.cli import cost_main as main

    return main(argv)


def compare_main(argv: list[str]) -> int:
    """``dbsurge compare``: see `dbsurge.collectors.compare.compare_main`."""
    from dbsurge.collectors.compare import compare_main as main

    return main(argv)
