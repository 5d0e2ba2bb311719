"""Section 1b: dbsurge's YCSB-A on CQL against a bare scylla-driver loop under gevent, client CPU per operation.

Both clients run YCSB workload A (half reads of every field, half updates of one random field, uniform keys)
on the same embedded Apache Cassandra, at the same fixed arrival rate and consistency (ONE, dbsurge's and
YCSB's default): ``dbsurge run --shape constant`` (`bench.clients` ``dbsurge_ycsb_cql``) and
``bench/bare_loops.py cql_gevent`` (``bare_cql_gevent``: Locust's monkey-patching, one driver session on the
asyncore reactor, the two statements prepared, nothing else). At a fixed rate the server does the same work
for both, so what the ratio shows is what dbsurge's engine costs on top of the driver, per operation.

CPU per operation is table 1's: the kernel's count for each client's whole process tree (dbsurge's CLI and its
Locust process), marginal between a long and a short run, the two clients alternating within each repetition.

The pair runs apart from table 1, on a server of its own started after it (a JVM of 512 MiB heap): a
Cassandra JVM idling beside the other clients' runs would take CPU from them on a 2-core machine. A short
warm-up run at the same rate comes first (a JVM seconds old spends its first seconds compiling). Without Java
17 or Maven the section is one line saying which to install.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path

from bench.clients import CLIENTS, Env
from bench.throughput import Sample, Spread, by_client, paired_ratio, run_client, run_table

NUMERATOR, DENOMINATOR = "dbsurge_ycsb_cql", "bare_cql_gevent"
WARMUP_S = 5


def measure(env: Env, clients: list[str], *, reps: int, long_s: int, short_s: int, cql_uri: str | None,
            data_dir: Path | None, log=print) -> dict:
    """Run the CQL clients on `cql_uri` (or on an embedded Cassandra started here); plain JSON-able data.

    ``{"skipped": reason}`` where Cassandra cannot run here, else the rate, records, consistency and samples.
    """
    from contextlib import nullcontext

    from bench.servers import cassandra_missing, embedded_cassandra, load_ycsb_cql

    if cql_uri is None:
        why = cassandra_missing()
        if why is not None:
            log(f"  skipping the CQL pair: {why}")
            return {"skipped": why}
        log("  starting embedded Apache Cassandra (one JVM, 512 MiB heap)")
    server = nullcontext(cql_uri) if cql_uri else embedded_cassandra(data_dir)
    with server as uri:
        env = replace(env, cql_uri=uri)
        log(f"  loading ycsb recordcount={env.cql_records} on {uri}")
        load_ycsb_cql(uri, env.cql_records)
        log(f"  warm-up: dbsurge YCSB-A at {env.cql_rate} ops/s for {WARMUP_S} s (not counted)")
        run_client(NUMERATOR, env, WARMUP_S)
        samples = run_table(env, clients, reps=reps, long_s=long_s, short_s=short_s, log=log)
    return {"rate": env.cql_rate, "records": env.cql_records, "consistency": env.cql_consistency,
            "reps": reps, "long_s": long_s, "short_s": short_s, "clients": clients,
            "server": _embedded_name() if cql_uri is None else "the server given by --cql-uri",
            "samples": [asdict(s) for s in samples]}


def _embedded_name() -> str:
    from dbsurge.embedded.cassandra_jvm import cassandra_version

    return f"dbsurge's embedded-cassandra, Apache Cassandra {cassandra_version()}, 512 MiB heap"


def cpu_ratio(samples: list[Sample]) -> Spread:
    """dbsurge's marginal CPU per operation over the bare loop's, within each repetition."""
    return paired_ratio(samples, NUMERATOR, DENOMINATOR, "cpu_us_marginal")


def section(raw: dict) -> str:
    """Section 1b of bench/RESULTS.md from what `measure` returned."""
    from bench.report import _table, spread

    head = "## 1b. YCSB-A on CQL: dbsurge against a bare scylla-driver loop under gevent\n\n"
    if raw.get("skipped"):
        return head + f"Skipped: {raw['skipped']}."
    samples = [Sample(**s) for s in raw["samples"]]
    rows = []
    for key, runs in by_client(samples).items():
        rows.append([CLIENTS[key].label, CLIENTS[key].concurrency, spread(Spread.of([r.ops_per_s for r in runs])),
                     spread(Spread.of([r.cpu_us_marginal for r in runs]), 1),
                     spread(Spread.of([r.cpu_us_whole for r in runs]), 1)])
    ratio = cpu_ratio(samples)
    text = (f"{raw['reps']} repetition(s) of {raw['long_s']} s per client (and {raw['short_s']} s for the marginal "
            f"CPU), alternating, both at {raw['rate']:,} ops/s, consistency {raw['consistency']}, "
            f"{raw['records']:,} records (uniform keys), on {raw['server']} on this machine, "
            "after a warm-up run. Median (min–max) over repetitions.\n\n"
            + _table(["client", "concurrency", "ops/s", "client CPU µs/op (marginal)", "client CPU µs/op (whole run)"],
                     rows))
    if not math.isnan(ratio.median):
        text += ("\n\ndbsurge's client CPU per operation is " + spread(ratio, 2, "x")
                 + " the bare loop's (marginal, paired within a repetition). The server shares the two cores "
                   "with the clients: read the spread.")
    return head + text
