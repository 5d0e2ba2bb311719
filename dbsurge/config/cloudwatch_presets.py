"""The CloudWatch presets: what ``--cloudwatch PRESET:ID`` accepts and the metrics each expands to.

The syntax is checked before a run contacts anything (`dbsurge.engine.validate`), and the collector
(`dbsurge.collectors.cloudwatch`) polls the metric queries a spec expands to. Pure: no boto3.

==========================================  =============================================================
spec                                        metrics (namespace, dimensions)
==========================================  =============================================================
``docdb:<cluster-or-instance>``             AWS/DocDB ServerlessDatabaseCapacity (Average, Maximum),
                                            DCUUtilization, BufferCacheHitRatio, DatabaseConnections,
                                            CPUUtilization, ReadIOPS; ``DBClusterIdentifier`` or
                                            ``DBInstanceIdentifier``, whichever `list_metrics` knows
``aurora:<cluster>``                        AWS/RDS ServerlessDatabaseCapacity (Average, Maximum),
                                            ACUUtilization, DatabaseConnections, CPUUtilization,
                                            BufferCacheHitRatio, for the cluster (id ``<cluster>``)
                                            and per role (ids ``<cluster>/writer``, ``<cluster>/reader``)
``aurora:<cluster>/writer`` (or ``reader``)  the same for one role only
``dsql:<cluster-id>``                       AWS/AuroraDSQL TotalDPU, ReadDPU, WriteDPU, ComputeDPU,
                                            TotalTransactions, OccConflicts (Sum), CommitLatency
                                            (Average); the dimension name found with `list_metrics`
``dynamodb:<table>``                        AWS/DynamoDB ConsumedReadCapacityUnits, ConsumedWriteCapacityUnits,
                                            ReadThrottleEvents, WriteThrottleEvents (Sum) for ``TableName``,
                                            and ThrottledRequests (Sum) per operation (ids
                                            ``<table>/GetItem``, ``/PutItem``, ``/UpdateItem``, ``/BatchWriteItem``)
``metric:NS:NAME[:DIM=V,...][:STAT][:SECS]``  any metric; STAT defaults to Average, period to 60 s
==========================================  =============================================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from dbsurge.base.errors import UserError

DEFAULT_PERIOD_S = 60
UNRESOLVED = "?"  # a dimension name still to be found with list_metrics

_CAPACITY = (("ServerlessDatabaseCapacity", ("Average", "Maximum")),)
_DOCDB_METRICS = _CAPACITY + (
    ("DCUUtilization", ("Average",)),
    ("BufferCacheHitRatio", ("Average",)),
    ("DatabaseConnections", ("Average",)),
    ("CPUUtilization", ("Average",)),
    ("ReadIOPS", ("Average",)),
)
_AURORA_METRICS = _CAPACITY + (
    ("ACUUtilization", ("Average",)),
    ("DatabaseConnections", ("Average",)),
    ("CPUUtilization", ("Average",)),
    ("BufferCacheHitRatio", ("Average",)),
)
_DSQL_METRICS = (
    ("TotalDPU", ("Sum",)),
    ("ReadDPU", ("Sum",)),
    ("WriteDPU", ("Sum",)),
    ("ComputeDPU", ("Sum",)),
    ("TotalTransactions", ("Sum",)),
    ("OccConflicts", ("Sum",)),
    ("CommitLatency", ("Average",)),
)
_DYNAMODB_METRICS = (
    ("ConsumedReadCapacityUnits", ("Sum",)),
    ("ConsumedWriteCapacityUnits", ("Sum",)),
    ("ReadThrottleEvents", ("Sum",)),
    ("WriteThrottleEvents", ("Sum",)),
)
# ThrottledRequests has the dimensions TableName and Operation: one series per operation the ycsb binding sends.
DYNAMODB_OPERATIONS = ("GetItem", "PutItem", "UpdateItem", "BatchWriteItem")
PRESET_NAMESPACES = {"docdb": "AWS/DocDB", "aurora": "AWS/RDS", "dsql": "AWS/AuroraDSQL", "dynamodb": "AWS/DynamoDB"}
SPEC_HELP = (
    "use docdb:ID, aurora:CLUSTER[/writer|/reader], dsql:CLUSTER-ID, dynamodb:TABLE or "
    "metric:NAMESPACE:METRIC[:DIM=VALUE,...][:STAT][:SECONDS]"
)
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
_STAT_RE = re.compile(r"^(SampleCount|Average|Sum|Minimum|Maximum|(p|tm|tc|ts|wm|pr|iqm)[0-9.:()%A-Za-z]*)$")


@dataclass(frozen=True)
class MetricQuery:
    """One CloudWatch metric and statistic, and the ``preset``/``id`` its rows are filed under."""

    preset: str
    series_id: str
    namespace: str
    metric: str
    stat: str
    dimensions: tuple[tuple[str, str], ...]
    period_s: int = DEFAULT_PERIOD_S

    @property
    def resolved(self) -> bool:
        return all(name != UNRESOLVED for name, _ in self.dimensions)

    def api_query(self, query_id: str) -> dict:
        return {
            "Id": query_id,
            "MetricStat": {
                "Metric": {
                    "Namespace": self.namespace,
                    "MetricName": self.metric,
                    "Dimensions": [{"Name": n, "Value": v} for n, v in self.dimensions],
                },
                "Period": self.period_s,
                "Stat": self.stat,
            },
            "ReturnData": True,
        }


@dataclass(frozen=True)
class MetricSpecs:
    """What one ``PRESET:ID`` spec expands to.

    ``discover`` names the dimension candidates still to be chosen with `list_metrics`: a tuple of
    names to try in order (DocumentDB: cluster, then instance), or an empty tuple for "whatever
    dimension carries this id" (DSQL). ``None`` when the dimensions are known.
    """

    spec: str
    preset: str
    id: str
    queries: tuple[MetricQuery, ...]
    discover: tuple[str, ...] | None = None
    default_dimension: str | None = None

    @property
    def namespace(self) -> str:
        return self.queries[0].namespace

    def with_dimension(self, name: str) -> MetricSpecs:
        """The same specs with the unresolved dimension name filled in."""
        queries = tuple(
            replace(q, dimensions=tuple((name if n == UNRESOLVED else n, v) for n, v in q.dimensions))
            for q in self.queries
        )
        return replace(self, queries=queries, discover=None)


def parse_preset(spec: str) -> MetricSpecs:
    """Expand ``PRESET:ID`` into metric queries; an unknown or malformed spec is a `UserError`."""
    text = (spec or "").strip()
    preset, sep, rest = text.partition(":")
    preset = preset.strip().lower()
    if not sep or not rest.strip():
        raise UserError(f"malformed CloudWatch spec {spec!r}: {SPEC_HELP}")
    rest = rest.strip()
    if preset == "metric":
        return _parse_generic(text, rest)
    if preset not in PRESET_NAMESPACES:
        raise UserError(f"unknown CloudWatch preset {preset!r} in {spec!r}: {SPEC_HELP}")
    if preset == "aurora":
        return _aurora(text, rest)
    _check_id(text, rest)
    if preset == "dynamodb":
        return _dynamodb(text, rest)
    namespace = PRESET_NAMESPACES[preset]
    metrics = _DOCDB_METRICS if preset == "docdb" else _DSQL_METRICS
    queries = _queries(preset, rest, namespace, metrics, ((UNRESOLVED, rest),))
    if preset == "docdb":
        return MetricSpecs(text, preset, rest, queries, ("DBClusterIdentifier", "DBInstanceIdentifier"), "DBClusterIdentifier")
    return MetricSpecs(text, preset, rest, queries, (), "ClusterId")


def parse_presets(specs: Iterable[str | MetricSpecs]) -> list[MetricSpecs]:
    """`parse_preset` over a list, keeping specs already parsed and dropping duplicates."""
    parsed: dict[str, MetricSpecs] = {}
    for spec in specs:
        item = spec if isinstance(spec, MetricSpecs) else parse_preset(spec)
        parsed.setdefault(item.spec, item)
    return list(parsed.values())


def _check_id(spec: str, ident: str) -> None:
    if not _ID_RE.match(ident):
        raise UserError(f"malformed id {ident!r} in CloudWatch spec {spec!r}: {SPEC_HELP}")


def _queries(preset: str, series_id: str, namespace: str, metrics: Sequence, dims: tuple) -> tuple[MetricQuery, ...]:
    return tuple(
        MetricQuery(preset, series_id, namespace, metric, stat, dims) for metric, stats in metrics for stat in stats
    )


def _aurora(spec: str, rest: str) -> MetricSpecs:
    cluster, _, role = rest.partition("/")
    _check_id(spec, cluster)
    role = role.lower()
    if role not in ("", "writer", "reader"):
        raise UserError(f"unknown Aurora role {role!r} in {spec!r}: use aurora:CLUSTER, aurora:CLUSTER/writer or /reader")
    queries: tuple[MetricQuery, ...] = ()
    if not role:
        queries += _queries("aurora", cluster, "AWS/RDS", _AURORA_METRICS, (("DBClusterIdentifier", cluster),))
    for each in (role,) if role else ("writer", "reader"):
        dims = (("DBClusterIdentifier", cluster), ("Role", each.upper()))
        queries += _queries("aurora", f"{cluster}/{each}", "AWS/RDS", _AURORA_METRICS, dims)
    return MetricSpecs(spec, "aurora", rest, queries)


def _dynamodb(spec: str, table: str) -> MetricSpecs:
    dims = (("TableName", table),)
    queries = _queries("dynamodb", table, "AWS/DynamoDB", _DYNAMODB_METRICS, dims)
    for operation in DYNAMODB_OPERATIONS:
        queries += _queries("dynamodb", f"{table}/{operation}", "AWS/DynamoDB", (("ThrottledRequests", ("Sum",)),),
                            dims + (("Operation", operation),))
    return MetricSpecs(spec, "dynamodb", table, queries)


def _parse_generic(spec: str, rest: str) -> MetricSpecs:
    parts = [p.strip() for p in rest.split(":")]
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise UserError(f"malformed CloudWatch spec {spec!r}: {SPEC_HELP}")
    namespace, metric, extra = parts[0], parts[1], parts[2:]
    dims: tuple[tuple[str, str], ...] = ()
    stat, period = "Average", DEFAULT_PERIOD_S
    for part in extra:
        if "=" in part:
            pairs = []
            for item in part.split(","):
                name, eq, value = item.partition("=")
                if not eq or not name.strip() or not value.strip():
                    raise UserError(f"malformed dimension {item!r} in CloudWatch spec {spec!r}: use NAME=VALUE")
                pairs.append((name.strip(), value.strip()))
            dims = tuple(pairs)
        elif part.isdigit():
            period = int(part)
            if period < 1 or (period > 60 and period % 60) or (period < 60 and period not in (1, 5, 10, 20, 30)):
                raise UserError(f"invalid period {part} s in {spec!r}: use 1, 5, 10, 20, 30 or a multiple of 60")
        elif _STAT_RE.match(part):
            stat = part
        else:
            raise UserError(f"malformed part {part!r} in CloudWatch spec {spec!r}: {SPEC_HELP}")
    series_id = namespace + (":" + ",".join(f"{n}={v}" for n, v in dims) if dims else "")
    query = MetricQuery("metric", series_id, namespace, metric, stat, dims, period)
    return MetricSpecs(spec, "metric", series_id, (query,))


def capacity_unit(preset: str, series_id: str, metric: str) -> str | None:
    """``ACU``, ``DCU``, ``DPU``, ``RRU`` or ``WRU`` for a capacity series (what cost and the stage table use), else
    ``None``. DynamoDB's consumed read and write capacity units of an on-demand table are its request units."""
    namespace = PRESET_NAMESPACES.get(preset) or (series_id.split(":", 1)[0] if preset == "metric" else "")
    if metric == "ServerlessDatabaseCapacity":
        return {"AWS/RDS": "ACU", "AWS/DocDB": "DCU"}.get(namespace)
    if metric == "TotalDPU" and namespace == "AWS/AuroraDSQL":
        return "DPU"
    if namespace == "AWS/DynamoDB" and "/" not in series_id:
        return {"ConsumedReadCapacityUnits": "RRU", "ConsumedWriteCapacityUnits": "WRU"}.get(metric)
    return None
