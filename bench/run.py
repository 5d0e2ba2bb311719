"""``python bench/run.py`` (``make bench``): dbsurge's generator efficiency, side by side, in one run.

Starts dbsurge's embedded PostgreSQL and MongoDB-wire server, loads pgbench's tables and the
orders and ycsb workloads, then writes bench/RESULTS.md with:

1. throughput and client CPU per operation of pgbench, dbsurge (product lookup, 1 and 2
   processes; YCSB read), plain Locust (1 and 2 processes) and bare driver loops, alternating,
   16 connections, 2 x 10 s by default, ``--quick`` 1 x 3 s (3 repetitions took `make bench` to 20.4
   minutes, over its 20);
   1b. (where Java 17 and Maven are there) client CPU per operation of dbsurge's YCSB-A on an embedded Apache
   Cassandra at a fixed rate against a bare scylla-driver loop under gevent at the same rate (bench/cql_pair.py),
   after table 1, on a server of its own; skipped with the reason elsewhere;
2. the highest arrival rate dbsurge sustains with lag p99 under 1 ms and no drops, per worker
   process count;
3. the recorder's CPU per operation, and disk and memory of a long run projected to 12 hours;
4. a py-spy profile of a worker;
5. (from bench/soak.json, written by ``make soak``) an hour's memory and disk;
6. the master's CPU, loop stall and end of run at 50, 100 and 200 synthetic workers (bench/master_load.py).

    python bench/run.py                      # everything, about 20 minutes
    python bench/run.py --quick              # every section, short (a few minutes)
    python bench/run.py --sections throughput --clients pgbench,dbsurge
    python bench/run.py --engine-variant fast=/path/to/patched/checkout   # adds dbsurge@fast rows
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable as a package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine, report
from bench.clients import CLIENTS, REPO, Env
from bench.measure import become_subreaper

SECTIONS = ("throughput", "rates", "recorder", "longrun", "profile", "master")
DEFAULT_CLIENTS = ("pgbench", "dbsurge", "locust", "dbsurge_p2", "locust_p2", "bare_psycopg", "bare_pq",
                   "bare_pq16", "dbsurge_ycsb", "bare_pymongo", "bare_pymongo_gevent", "dbsurge_ycsb_cql",
                   "bare_cql_gevent")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 repetition of 3 s, short searches and runs")
    p.add_argument("--reps", type=int, help="repetitions of the side-by-side table (default 2; quick 1)")
    p.add_argument("--seconds", type=int, help="duration of each client run (default 10; quick 3)")
    p.add_argument("--short-seconds", type=int, help="duration of the short run for marginal CPU (default 4; quick 1)")
    p.add_argument("--users", type=int, default=16, help="connections / users of the concurrent clients")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    p.add_argument("--clients", default=",".join(DEFAULT_CLIENTS),
                   help=f"comma list of {', '.join(CLIENTS)} (a name@VARIANT runs it on an engine variant)")
    p.add_argument("--engine-variant", action="append", default=[], metavar="LABEL=DIR",
                   help="also run the dbsurge clients with DIR first on PYTHONPATH (a patched checkout), as NAME@LABEL")
    p.add_argument("--rate-seconds", type=int, help="duration of each rate-search run (default 10; quick 3)")
    p.add_argument("--long-run-seconds", type=int, help="the long run's duration (default 60; quick 15)")
    p.add_argument("--scale", type=int, help="pgbench scale (default 10; quick 1)")
    p.add_argument("--products", type=int, help="orders products (default 100000; quick 10000)")
    p.add_argument("--records", type=int, help="ycsb records (default 100000; quick 10000)")
    p.add_argument("--pg-uri", help="use this PostgreSQL instead of starting the embedded one (development)")
    p.add_argument("--mongo-uri", help="use this MongoDB-wire server instead of starting one (development)")
    p.add_argument("--cql-uri", help="use this CQL server for the CQL pair instead of starting Cassandra (development)")
    p.add_argument("--cql-rate", type=int, default=500, help="the CQL pair's fixed rate, ops/s (default 500)")
    p.add_argument("--cql-seconds", type=int, help="duration of each CQL pair run (default 8; quick 4)")
    p.add_argument("--cql-short-seconds", type=int, help="the CQL pair's short run (default 2; quick 1)")
    p.add_argument("--cql-records", type=int, default=10_000, help="ycsb records on the CQL server (default 10000)")
    p.add_argument("--data-dir", type=Path, help="keep the servers' data here (default: a temporary directory)")
    p.add_argument("--workdir", type=Path, help="where client results go (default: a temporary directory)")
    p.add_argument("--output", type=Path, default=REPO / "bench" / "RESULTS.md", help="the report (bench/RESULTS.md)")
    p.add_argument("--json", type=Path, help="also write every raw number here")
    p.add_argument("--render-json", type=Path, metavar="PATH",
                   help="measure nothing: rewrite the report from a file an earlier --json run wrote")
    args = p.parse_args(argv)
    q = args.quick
    args.reps = args.reps or (1 if q else 2)
    args.seconds = args.seconds or (3 if q else 10)
    args.short_seconds = args.short_seconds or (1 if q else 4)
    args.cql_seconds = args.cql_seconds or (4 if q else 8)
    args.cql_short_seconds = args.cql_short_seconds or (1 if q else 2)
    if args.cql_rate < 1 or args.cql_records < 1 or args.cql_short_seconds >= args.cql_seconds:
        p.error("--cql-rate and --cql-records must be positive, --cql-short-seconds below --cql-seconds")
    args.rate_seconds = args.rate_seconds or (3 if q else 10)
    args.long_run_seconds = args.long_run_seconds or (15 if q else 60)
    args.scale = args.scale or (1 if q else 10)
    args.products = args.products or (10_000 if q else 100_000)
    args.records = args.records or (10_000 if q else 100_000)
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    for s in args.sections:
        if s not in SECTIONS:
            p.error(f"unknown section {s!r} (known: {', '.join(SECTIONS)})")
    args.variants = {}
    for item in args.engine_variant:
        label, _, path = item.partition("=")
        if not label or not path or not Path(path).is_dir():
            p.error(f"bad --engine-variant {item!r}: expected LABEL=DIR with an existing DIR")
        args.variants[label] = str(Path(path).resolve())
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for c in clients:
        if c.partition("@")[0] not in CLIENTS:
            p.error(f"unknown client {c!r} (known: {', '.join(CLIENTS)})")
    for label in args.variants:  # each variant runs every dbsurge client beside the original
        clients += [f"{c}@{label}" for c in clients if c.startswith("dbsurge") and "@" not in c]
    args.client_list = clients
    return args


def log(message: str) -> None:
    print(message, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = "python bench/run.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    if args.render_json:
        raw = json.loads(args.render_json.read_text())
        raw["command"] = raw.get("command") or command
    else:
        raw = measure(args)
        raw["command"] = command
    render(raw, args.output)
    if args.json and not args.render_json:
        args.json.write_text(json.dumps(raw, indent=1, default=str))
    log(f"wrote {args.output}")
    return 0


def measure(args: argparse.Namespace) -> dict:
    """Run the sections asked for; everything measured, as plain JSON-able data."""
    import tempfile

    from bench.servers import load_data

    raw: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                 "started": time.time(), "load_before": machine.load_average()}
    become_subreaper()
    needs_mongo = any(CLIENTS[c.partition("@")[0]].kind == "mongo" for c in args.client_list) \
        and "throughput" in args.sections
    tmp = tempfile.TemporaryDirectory(prefix="dbsurge-bench-work-")
    workdir = (args.workdir or Path(tmp.name)).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    only_cql = args.sections == ["throughput"] and all(
        CLIENTS[c.partition("@")[0]].kind == "cql" for c in args.client_list)
    with _servers(args, needs_mongo=needs_mongo, only_cql=only_cql) as servers:
        if not only_cql:
            load_data(servers, scale=args.scale, products=args.products, records=args.records if needs_mongo else 0,
                      log=lambda m: log("  " + m))
        env = Env(servers.pg_uri, servers.mongo_uri, servers.pgbench, servers.pg_port, args.products, args.records,
                  args.users, workdir, cql_rate=args.cql_rate, cql_records=args.cql_records)
        raw["machine"] = machine.describe(None if only_cql else servers.pgbench)
        if "throughput" in args.sections:
            raw.update(_throughput(args, env, has_mongo=bool(servers.mongo_uri)))
        engines = {"": None, **args.variants}  # "" is this checkout's engine
        if "rates" in args.sections:
            from bench.rate_search import search

            log(f"2. highest sustained arrival rate, {args.rate_seconds} s runs")
            raw["rates"] = {}
            for reference in ("pgbench", "bare"):  # the references, in the same run
                best, trials = search(env, 1, seconds=args.rate_seconds, bisect_steps=1 if args.quick else 3,
                                      reference=reference, log=log)
                raw["rates"][f"{reference}/1"] = {"best": asdict(best) if best else None,
                                                  "trials": [asdict(t) for t in trials]}
            for label, path in engines.items():
                for procs in (1, 2):
                    if label:
                        log(f"  engine variant {label}")
                    best, trials = search(env, procs, seconds=args.rate_seconds, bisect_steps=1 if args.quick else 3,
                                          pythonpath=path, log=log)
                    raw["rates"][f"{label or 'this'}/{procs}"] = {"best": asdict(best) if best else None,
                                                                  "trials": [asdict(t) for t in trials]}
        if "recorder" in args.sections:
            from bench.recorder_cost import recorder_cost_in

            log("3a. recorder cost")
            raw["recorder"] = {}
            for label, path in engines.items():
                cost = recorder_cost_in(path, operations=200_000 if args.quick else 2_000_000)
                log(f"  {label or 'this engine'}: record {cost.record_us:.3f} us/op, drain {cost.drain_us:.3f} us/op")
                raw["recorder"][label or "this"] = asdict(cost)
        if "longrun" in args.sections:
            from bench.recorder_cost import long_run

            log(f"3b. long run: {args.long_run_seconds} s at 500 TPS, 2 worker processes")
            long = long_run(env, seconds=args.long_run_seconds, warmup_s=5 if args.quick else 15, log=log)
            log(f"  disk {long.disk_mb_per_h:.1f} MB/h, RSS master {long.growth(long.master_mb):.1f} MB/h, "
                f"workers {long.growth(long.workers_mb):.1f} MB/h")
            raw["longrun"] = asdict(long)
        if "profile" in args.sections:
            from bench.profile_worker import profile_worker

            raw["profile"] = {}
            for label, path in engines.items():
                log(f"4. profile of a worker (py-spy){' on engine variant ' + label if label else ''}")
                prof = profile_worker(env, seconds=3 if args.quick else 8, warmup_s=6 if args.quick else 8,
                                      pythonpath=path, log=log)
                raw["profile"][label or "this"] = asdict(prof) if prof else None
        if "master" in args.sections:
            from bench import master_load

            log("6. the master at 50, 100 and 200 synthetic workers")
            counts = [10, 20] if args.quick else [50, 100, 200]
            raw["master"] = {"started": time.time(), "rows": master_load.measure(
                servers.pg_uri, args.products, counts, 10 if args.quick else 30, 2500, 2, workdir, log=log)}
    raw["finished"] = time.time()
    raw["load_after"] = machine.load_average()
    tmp.cleanup()
    return raw


def _servers(args: argparse.Namespace, *, needs_mongo: bool, only_cql: bool):
    """The servers of the sections asked for: none but the CQL pair's own when only the CQL pair runs."""
    from contextlib import nullcontext

    from bench.servers import Servers, embedded_servers, servers_from_uris

    if args.pg_uri:
        return nullcontext(servers_from_uris(args.pg_uri, args.mongo_uri))
    if only_cql:  # the pair starts its Cassandra itself (bench/cql_pair.py); nothing uses PostgreSQL
        return nullcontext(Servers("", 0, Path("pgbench"), None))
    log("starting embedded PostgreSQL" + (" and MongoDB-wire server" if needs_mongo else ""))
    return embedded_servers(args.data_dir, mongo=needs_mongo)


def _throughput(args: argparse.Namespace, env: Env, *, has_mongo: bool) -> dict:
    """Table 1 (every client but the CQL pair), then section 1b (the CQL pair, on its own server)."""
    from bench.throughput import run_table

    out: dict = {}
    kinds = {c: CLIENTS[c.partition("@")[0]].kind for c in args.client_list}
    clients = [c for c, kind in kinds.items() if kind != "cql" and (has_mongo or kind != "mongo")]
    if clients:
        log(f"1. side by side: {', '.join(clients)}; {args.reps} x {args.seconds} s (+ {args.short_seconds} s)")
        samples = run_table(env, clients, reps=args.reps, long_s=args.seconds, short_s=args.short_seconds,
                            variants=args.variants, log=log)
        out["throughput"] = [asdict(s) for s in samples]
        out["clients"] = clients
    cql_clients = [c for c, kind in kinds.items() if kind == "cql"]
    if cql_clients:
        from bench import cql_pair

        log(f"1b. CQL pair: {', '.join(cql_clients)} at {args.cql_rate} ops/s; {args.reps} x {args.cql_seconds} s "
            f"(+ {args.cql_short_seconds} s)")
        out["cql"] = cql_pair.measure(env, cql_clients, reps=args.reps, long_s=args.cql_seconds,
                                      short_s=args.cql_short_seconds, cql_uri=args.cql_uri, data_dir=args.data_dir,
                                      log=log)
    return out


def render(raw: dict, output: Path) -> None:
    """bench/RESULTS.md from what `measure` returned (or a saved ``--json`` file)."""
    from bench.profile_worker import Profile
    from bench.rate_search import Trial
    from bench.recorder_cost import LongRun, RecorderCost

    a = raw["args"]
    long = LongRun(**raw["longrun"]) if raw.get("longrun") else None
    sections = _throughput_sections(raw, long)
    if raw.get("rates"):
        rates = {}
        for key, value in raw["rates"].items():
            label, _, procs = key.rpartition("/")
            rates[("" if label == "this" else label, int(procs))] = (
                Trial(**value["best"]) if value["best"] else None, [Trial(**t) for t in value["trials"]])
        sections.append(report.rates_section(rates, a["rate_seconds"]))
    cost = {("" if k == "this" else k): RecorderCost(**v) for k, v in (raw.get("recorder") or {}).items()}
    if cost or long:
        sections.append(report.recorder_section(cost, long))
    for label, p in (raw.get("profile") or {}).items():
        if p:
            sections.append(report.profile_section(Profile(**p), "" if label == "this" else f" (engine variant {label})"))
    from bench.soak import SOAK_JSON
    from bench.soak import section as soak_section

    if SOAK_JSON.exists():  # `make soak` measures it apart (an hour); every report carries its latest
        sections.append(soak_section(json.loads(SOAK_JSON.read_text())))
    if raw.get("master"):
        from bench.master_load import section as master_section

        sections.append(master_section(raw["master"]["rows"], raw["master"]["started"],
                                       raw.get("command", "python bench/run.py")))
    findings_path = REPO / "bench" / "findings.md"
    info = raw.get("machine") or machine.describe()
    report.write(output, command=raw["command"], started=raw.get("started", time.time()),
                 finished=raw.get("finished", time.time()),
                 machine=report.machine_section(info, raw.get("load_before", "?"), raw.get("load_after", "?")),
                 sections=sections, findings=findings_path.read_text() if findings_path.exists() else None,
                 notes=raw.get("notes"))


def _throughput_sections(raw: dict, long) -> list[str]:
    """The goals, table 1 and section 1b (the CQL pair), from what `measure` returned."""
    from bench import cql_pair
    from bench.throughput import Sample

    a = raw["args"]
    cql = raw.get("cql") or {}
    cql_samples = [Sample(**s) for s in cql.get("samples") or []]
    samples = [Sample(**s) for s in raw.get("throughput") or []]
    labels = _labels(raw.get("clients") or list(dict.fromkeys(s.client for s in samples)))
    sections = [report.goals_section(samples, labels, long, cql_samples)] if samples or cql_samples else []
    if samples:
        sections.append(report.throughput_section(samples, labels, a["reps"], a["seconds"], a["short_seconds"],
                                                  a["users"]))
    if cql:
        sections.append(cql_pair.section(cql))
    return sections


def _labels(keys: list[str]) -> dict[str, tuple[str, str]]:
    out = {}
    for key in keys:
        name, _, variant = key.partition("@")
        c = CLIENTS[name]
        out[key] = (c.label + (f" [{variant}]" if variant else ""), c.concurrency)
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
