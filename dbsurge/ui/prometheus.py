"""A Prometheus endpoint on the master (or the local runner): ``--prometheus-port PORT``.

The exporter keeps its own `CollectorRegistry` (nothing of prometheus_client's default process
metrics, nothing another library registered) and is a custom collector: `observe` adds every
payload the master merges (`DbSurgeRun.merge_payload`, the workers' once-a-second reports) to
running totals, and `collect` turns them into metric families when Prometheus scrapes.

Latency histograms are not fed sample by sample. A payload carries sparse HdrHistogram counts
(`dbsurge.histogram`, microseconds, 3 significant digits); each HdrHistogram bucket index maps to
the first Prometheus bucket whose upper bound (``le``) is at least the lowest value of that
HdrHistogram bucket, so a cell costs one vectorised add whatever its count. HdrHistogram
resolves values to 0.1%, far finer than the Prometheus buckets (`BUCKETS_S`: 50 µs to 60 s).

Metrics (all prefixed ``dbsurge_``; times in seconds):

- ``target_tps``, ``achieved_tps`` (gauges): the plan's rate now; successes per second over the
  last complete seconds (`Aggregator.recent_achieved_tps`);
- ``planned_arrivals_total``: arrivals the plan called for up to now;
- ``operations_total{operation,stage,outcome}``: ``outcome`` is ``ok`` or the failure kind
  (``timeout``, ``connect``, ``server:57P01``...); ``retries_total{operation,stage}``;
- ``dropped_total{operation,stage}``, ``not_sent_total{operation,stage,reason}``,
  ``unknown_total{operation,stage,reason}`` (sent, still in flight when a worker closed its account);
- ``response_seconds``, ``service_seconds``, ``lag_seconds``, ``failed_response_seconds``
  (histograms by ``operation``);
- ``users``, ``workers``, ``worker_clock_offset_seconds{worker}`` (when the run measures them),
  ``stage{stage,index}`` (1 for the stage under way; ``index`` counts from 1, as the console's
  ``stage 2/4``), ``elapsed_seconds``, ``info{run_id,...}``.

Every counter is a whole number, and every series a dashboard asks for exists from zero: each
operation and stage has its ``ok`` operations, retries, drops and each reason of not sent at 0
until something happens, so a panel shows 0, not "No data". At the end of a run the endpoint stays
up for ``--prometheus-grace`` seconds (default 15, one scrape interval of most setups) with the
final values (`PrometheusExporter.linger`), so the last scrape sees how the run ended.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from dbsurge.base.errors import UserError
from dbsurge.measure.cells import NOT_SENT_REASONS, UNKNOWN_REASONS
from dbsurge.measure.histogram import COUNTS_LEN, decode_sparse, value_from_index

#: Seconds the endpoint stays up after the run (``--prometheus-grace``): one scrape interval of most setups.
DEFAULT_GRACE_S = 15.0

#: Upper bounds of the latency buckets, in seconds: 50 µs to 60 s (+Inf is added).
BUCKETS_S: tuple[float, ...] = (
    0.00005, 0.000075, 0.0001, 0.00015, 0.00025, 0.0004, 0.0006, 0.0008,
    0.001, 0.0015, 0.0025, 0.004, 0.006, 0.008,
    0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)
_BOUNDS_US = np.array([round(b * 1e6) for b in BUCKETS_S], dtype=np.int64)
# HdrHistogram counts index -> Prometheus bucket (len(BUCKETS_S) is +Inf)
_INDEX_BUCKET = np.searchsorted(_BOUNDS_US, value_from_index(np.arange(COUNTS_LEN)), side="left")

#: The four latency histograms of a wire cell (`Cell.add_wire`'s order) and their metric names.
HISTOGRAMS: tuple[tuple[int, str, str], ...] = (
    (0, "dbsurge_response_seconds", "response time of successful operations, from the intended start"),
    (1, "dbsurge_service_seconds", "service time of successful operations, from the actual start"),
    (2, "dbsurge_lag_seconds", "lag of every operation sent: actual minus intended start"),
    (3, "dbsurge_failed_response_seconds", "response time of failed operations, from the intended start"),
)


class _Buckets:
    """Non-cumulative counts per Prometheus bucket, plus sum (µs) and count, grown from wire histograms."""

    __slots__ = ("count", "counts", "sum_us")

    def __init__(self) -> None:
        self.counts = np.zeros(len(BUCKETS_S) + 1, dtype=np.int64)
        self.sum_us = 0
        self.count = 0

    def add_wire(self, wire: list) -> None:
        idx, cnt = decode_sparse(wire)
        if idx.size == 0:
            return
        np.add.at(self.counts, _INDEX_BUCKET[idx], cnt)
        self.count += int(cnt.sum())
        self.sum_us += int(wire[4])

    def cumulative(self) -> list[tuple[str, float]]:
        cum = np.cumsum(self.counts)
        out = [(_le(b), float(c)) for b, c in zip(BUCKETS_S, cum[:-1].tolist())]
        out.append(("+Inf", float(cum[-1])))
        return out


def _le(bound: float) -> str:
    return f"{bound:.6f}".rstrip("0").rstrip(".")


class PrometheusExporter:
    """Running totals of a run's measurements, exposed as a Prometheus collector (see the module doc)."""

    def __init__(self, run: Any | None = None) -> None:
        self.run = run
        self.registry = CollectorRegistry(auto_describe=False)
        self.operations: Counter[tuple[str, str, str]] = Counter()  # (operation, stage, outcome)
        self.retries: Counter[tuple[str, str]] = Counter()
        self.dropped: Counter[tuple[str, str]] = Counter()
        self.not_sent: Counter[tuple[str, str, str]] = Counter()
        self.unknown: Counter[tuple[str, str, str]] = Counter()
        self.histograms: dict[str, dict[str, _Buckets]] = {name: defaultdict(_Buckets) for _, name, _ in HISTOGRAMS}
        self.known_ops: set[str] = set()  # every operation seen or in the run's mix: its series start at 0
        self.server = None
        self.registry.register(self)

    # -- input ---------------------------------------------------------------------------------------

    def _stage_name(self, index: int) -> str:
        names = self.run.aggregator.stage_names if self.run is not None and self.run.aggregator else None
        if names and 0 <= index < len(names):
            return names[index]
        return str(index)

    def observe(self, payload: dict, source: str = "local") -> None:
        """Add one `Recorder.drain` payload (what `Aggregator.merge` gets) to the totals."""
        ops = payload.get("ops", [])
        self.known_ops.update(ops)
        for op, stage, wire in payload.get("stages", []):
            name, st = ops[op], self._stage_name(int(stage))
            if wire[4]:
                self.operations[(name, st, "ok")] += int(wire[4])
            for kind, n in wire[6].items():
                self.operations[(name, st, kind)] += int(n)
            if wire[5]:
                self.retries[(name, st)] += int(wire[5])
            for i, metric, _ in HISTOGRAMS:
                self.histograms[metric][name].add_wire(wire[i])
        for stage, op, column, n in payload.get("ledger", []):
            name, st = ops[op], self._stage_name(int(stage))
            if column == "dropped":
                self.dropped[(name, st)] += int(n)
            elif column.startswith("not_sent:"):  # "issued" counts are the ledger's, not an outcome
                self.not_sent[(name, st, column.split(":", 1)[1])] += int(n)
            elif column.startswith("unknown:"):
                self.unknown[(name, st, column.split(":", 1)[1])] += int(n)

    # -- output ----------------------------------------------------------------------------------------

    def describe(self) -> list:
        return []  # metric families vary with the run; the registry is built with auto_describe=False

    def _zero_keys(self) -> list[tuple[str, str]]:
        """(operation, stage) of every series that must exist from zero: the run's operations by its stages."""
        ops = set(self.known_ops)
        if self.run is not None:
            try:
                ops.update(self.run.operation_mix().names)
            except Exception:  # noqa: BLE001, S110 - before the run is set up there is no mix: the payloads name them
                pass
        agg = getattr(self.run, "aggregator", None) if self.run is not None else None
        stages = list(agg.stage_names) if agg is not None and agg.stage_names else []
        return [(op, st) for op in sorted(ops) for st in stages]

    def collect(self):
        """The metric families, computed at scrape time; every counter a whole number, every series from 0."""
        yield from self._run_families()
        zero = self._zero_keys()
        operations = Counter({(op, st, "ok"): 0 for op, st in zero})
        operations.update(self.operations)
        retries_n = Counter({k: 0 for k in zero})
        retries_n.update(self.retries)
        dropped_n = Counter({k: 0 for k in zero})
        dropped_n.update(self.dropped)
        not_sent_n = Counter({(op, st, r): 0 for op, st in zero for r in NOT_SENT_REASONS})
        not_sent_n.update(self.not_sent)
        ops = CounterMetricFamily("dbsurge_operations", "operations completed, by outcome (ok or failure kind)",
                                  labels=["operation", "stage", "outcome"])
        for (op, st, outcome), n in sorted(operations.items()):
            ops.add_metric([op, st, outcome], n)
        yield ops
        retries = CounterMetricFamily("dbsurge_retries", "transactions retried whole (SQLSTATE 40001)",
                                      labels=["operation", "stage"])
        for (op, st), n in sorted(retries_n.items()):
            retries.add_metric([op, st], n)
        yield retries
        dropped = CounterMetricFamily("dbsurge_dropped", "slots skipped because they were later than --max-lag "
                                      "(or stale after a rate change)", labels=["operation", "stage"])
        for (op, st), n in sorted(dropped_n.items()):
            dropped.add_metric([op, st], n)
        yield dropped
        not_sent = CounterMetricFamily("dbsurge_not_sent", "planned arrivals written off, by reason",
                                       labels=["operation", "stage", "reason"])
        for (op, st, reason), n in sorted(not_sent_n.items()):
            not_sent.add_metric([op, st, reason], n)
        yield not_sent
        unknown = CounterMetricFamily("dbsurge_unknown", "planned arrivals sent whose outcome is unknown (still in "
                                      "flight when a worker closed its account), by reason",
                                      labels=["operation", "stage", "reason"])
        unknown_n = Counter({(op, st, r): 0 for op, st in zero for r in UNKNOWN_REASONS})
        unknown_n.update(self.unknown)
        for (op, st, reason), n in sorted(unknown_n.items()):
            unknown.add_metric([op, st, reason], n)
        yield unknown
        for _, metric, doc in HISTOGRAMS:
            fam = HistogramMetricFamily(metric, doc, labels=["operation"])
            for op, b in sorted(self.histograms[metric].items()):
                fam.add_metric([op], b.cumulative(), sum_value=b.sum_us / 1e6)
            yield fam

    def _planned_until(self, t: float) -> int:
        """Whole arrivals due before ``t``: arrival n (from 0) is due when the plan's integral reaches n.

        Once the run has counted its ledger, the ledger's exact total (the same as stages.csv's planned).
        """
        agg = getattr(self.run, "aggregator", None)
        if self.run.ending.finished and agg is not None and agg.planned_arrivals() is not None:
            return int(agg.planned_arrivals())
        return math.ceil(self.run.schedule.cumulative(t) - 1e-9)

    def _run_families(self):  # noqa: C901 - one metric family per block, flat
        run = self.run
        if run is None:
            return
        agg = getattr(run, "aggregator", None)
        elapsed = run.elapsed_s() if hasattr(run, "elapsed_s") else None
        schedule = getattr(run, "schedule", None)
        target = GaugeMetricFamily("dbsurge_target_tps", "the plan's arrival rate now (TPS)")
        achieved = GaugeMetricFamily("dbsurge_achieved_tps", "successful operations per second, last complete seconds")
        planned = CounterMetricFamily("dbsurge_planned_arrivals", "arrivals the plan called for up to now")
        stage = GaugeMetricFamily("dbsurge_stage", "1 for the stage under way", labels=["stage", "index"])
        if schedule is not None and elapsed is not None and elapsed >= 0:
            t = min(elapsed, schedule.end_s)
            target.add_metric([], schedule.rate_at(t) if elapsed < schedule.end_s else 0.0)
            planned.add_metric([], float(self._planned_until(t)))
            if elapsed < schedule.end_s and not run.ending.finished:
                i = schedule.stage_at(elapsed)
                stage.add_metric([self._stage_name(i), str(i + 1)], 1.0)  # 1-based, as the console says it
        elif schedule is not None:
            target.add_metric([], 0.0)
            planned.add_metric([], 0.0)
        if agg is not None:
            achieved.add_metric([], float(agg.recent_achieved_tps()))
        yield from (target, achieved, planned, stage)
        el = GaugeMetricFamily("dbsurge_elapsed_seconds", "seconds since the plan's time zero (negative before it)")
        if elapsed is not None:
            el.add_metric([], elapsed)
        yield el
        runner = getattr(getattr(run, "environment", None), "runner", None)
        users = GaugeMetricFamily("dbsurge_users", "users (connections) running on all workers")
        workers = GaugeMetricFamily("dbsurge_workers", "worker processes taking part (1 for a local run)")
        if runner is not None:
            users.add_metric([], float(getattr(runner, "user_count", 0) or 0))
            count = getattr(runner, "worker_count", None)
            if getattr(run, "has_workers", False) and count is not None:
                workers.add_metric([], float(len(run.shares) if getattr(run, "shares", None) else count))
            else:
                workers.add_metric([], 1.0)
        yield users
        yield workers
        offsets = getattr(run, "clock_offsets", None)
        if isinstance(offsets, dict):
            fam = GaugeMetricFamily("dbsurge_worker_clock_offset_seconds", "worker clock minus master clock",
                                    labels=["worker"])
            for worker, value in sorted(offsets.items()):
                try:
                    v = float(value)
                except (TypeError, ValueError):
                    continue
                if math.isfinite(v):
                    fam.add_metric([str(worker)], v)
            yield fam
        rundir = getattr(run, "rundir", None)
        info = GaugeMetricFamily("dbsurge_info", "the run being measured", labels=["run_id", "role", "target"])
        target_display = getattr(getattr(run, "target", None), "display", "") or ""
        info.add_metric([rundir.run_id if rundir is not None and hasattr(rundir, "run_id") else "",
                         str(getattr(run, "role", "")), str(target_display)], 1.0)
        yield info

    # -- the HTTP endpoint ---------------------------------------------------------------------------

    def serve(self, host: str, port: int) -> None:
        """Listen on host:port (gevent's WSGI server: the master is a gevent process); UserError if it cannot."""
        from gevent.pywsgi import WSGIServer

        server = WSGIServer((host, port), make_wsgi_app(self.registry), log=None, error_log=None)
        try:
            server.start()
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{port} for --prometheus-port: {e.strerror or e}: choose "
                            f"another port") from None
        self.server = server

    def linger(self, grace_s: float, interrupted=lambda: False) -> None:
        """Keep serving the final values for ``grace_s`` seconds after the run, so the last scrape sees them.

        Cut short when ``interrupted()`` turns true (another Ctrl-C: the person wants out now).
        """
        import time

        import gevent

        if self.server is None or not grace_s or grace_s <= 0:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and not interrupted():
            gevent.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        if self.server is not None:
            self.server.stop(timeout=1)
            self.server = None


def start_exporter(run: Any) -> PrometheusExporter | None:
    """The run's exporter, listening, when ``--prometheus-port`` is set (master or local runner); else None."""
    port = getattr(run.options, "prometheus_port", None)
    if not port:
        return None
    host = getattr(run.options, "prometheus_host", None) or "127.0.0.1"
    exporter = PrometheusExporter(run)
    exporter.serve(host, int(port))
    return exporter


def scrape_text(exporter: PrometheusExporter) -> str:
    """The exposition text of the exporter's registry (tests, debugging)."""
    return generate_latest(exporter.registry).decode()


__all__ = ["BUCKETS_S", "PrometheusExporter", "scrape_text", "start_exporter"]
