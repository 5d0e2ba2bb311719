"""``make demo``: the main job on embedded targets, in about a minute.

Starts an embedded PostgreSQL, an embedded MongoDB-wire server and an embedded DynamoDB-API server
(moto's), loads small data sets, then runs the three workloads through ``dbsurge run`` as a user would:

1. orders on PostgreSQL under study 001's spike plan, scaled down (baseline 100 TPS, 5-second
   stages), with two worker processes;
2. documents on the MongoDB-wire server, reads by id, closed model, 4 users;
3. YCSB workload A on the MongoDB-wire server at a target rate of 300 TPS;
4. YCSB workload A on the DynamoDB-API server (study 002's other side, as Alternator or DynamoDB would
   serve it) at 100 TPS, after a load in BatchWriteItem batches of 25;
5. where Java 17 and Maven (or jars already fetched) are there: YCSB workload A on a real Apache Cassandra
   (`embedded-cassandra`), on the same plan as 3, after the other servers have stopped (one JVM of about a
   GiB on a small machine) and after a warm-up run on that plan, and `dbsurge compare` of the MongoDB-wire
   run against it.

Each prints its tables and run directory; the servers stop at the end. The last lines say how each step
ended (`outcome_lines`): a step that did not exit 0 is named with its run directory, what its exit code
means for the demo and what to do; ``make demo`` alone would end in ``make: *** [Makefile:21: demo] Error 3``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dbsurge.base.errors import UserError
from dbsurge.embedded import cassandra_jvm
from dbsurge.embedded.servers import EmbeddedCassandra, EmbeddedDynamo, EmbeddedMongo, EmbeddedPostgres
from dbsurge.rundir.schema import SUMMARY_MD

#: YCSB-A's plan, the same on the MongoDB-wire server and on Cassandra, so that `dbsurge compare` compares them.
YCSB_PLAN = ("--shape", "constant", "--rate", "300", "--duration", "8s", "--quiet",
             "--workload-option", "recordcount=2000")


def _dbsurge(*args: str) -> int:
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", *args]
    print("\n$ dbsurge " + " ".join(args), flush=True)
    return subprocess.call(cmd)


#: What a step's exit code means for the demo, and what to do about it (README, "Exit codes").
_MEANING = {
    1: ("FAILED: operations failed, a check failed or the server could not take the plan",
        f"read the WARNING and failure lines above the verdict, and the run's {SUMMARY_MD}"),
    2: ("REFUSED: bad input, nothing was sent", ("the line above says what was refused: a bug of the demo's, "
                                                  "please report it")),
    3: (("INCOMPLETE: the tool lost arrivals (not sent, dropped while the generator fell behind) or results were "
         "not written"),
        ("on a demo this almost always means this machine was too busy to keep the plan (a starved worker's lease "
         "lapsed, its arrivals were booked not sent): the servers were not at fault; run `make demo` again when "
         f"the machine is quieter, and see the run's {SUMMARY_MD} for what was lost")),
    130: ("INTERRUPTED (SIGINT)", "run `make demo` again"),
    143: ("INTERRUPTED (SIGTERM)", "run `make demo` again"),
}


def outcome_lines(steps: list[tuple[str, str | None, int]]) -> list[str]:
    """The demo's last lines: how each (step, run directory, exit code) ended and, when one did not exit 0, what
    that means for the demo and what to do.

        >>> outcome_lines([("orders spike on PostgreSQL", "results/demo-orders", 0)])[-1]
        'demo OK: every step exited 0'
    """
    lines = ["", "demo steps:"]
    for name, run_dir, code in steps:
        head = "ok" if code == 0 else _MEANING.get(code, (f"exit {code}", ""))[0].split(":")[0]
        lines.append(f"  {name}: exit {code} ({head})" + (f", {run_dir}" if run_dir and code else ""))
    failed = [(name, run_dir, code) for name, run_dir, code in steps if code]
    if not failed:
        return [*lines, "demo OK: every step exited 0"]
    lines.append(f"demo FAILED: {len(failed)} of {len(steps)} steps did not exit 0 (the demo exits "
                 f"{max(c for _, _, c in failed)}):")
    for name, run_dir, code in failed:
        meaning, todo = _MEANING.get(code, (f"exit {code}", "see the step's output above"))
        where = f" ({run_dir}/{SUMMARY_MD})" if run_dir else ""
        lines.append(f"  {name}: {meaning}; {todo}{where}")
    return lines


def _cassandra_missing() -> str | None:
    """Why the demo cannot run Cassandra here (no Java 17, or no Maven before the jars are cached), else None."""
    try:
        cassandra_jvm.find_java()
        cassandra_jvm.cassandra_jars()
    except UserError as exc:
        return str(exc)
    return None


def _cassandra_part(tmp: str, mongo_run_id: str, stamp: str) -> list[tuple[str, str | None, int]]:
    """YCSB-A on embedded Cassandra after a load in UNLOGGED batches of 20, then the comparison with MongoDB-wire."""
    why = _cassandra_missing()
    if why is not None:
        print(f"\nskipping YCSB-A on Cassandra: {why}", flush=True)
        return []
    cassandra = EmbeddedCassandra(Path(tmp) / "cassandra", delete_on_stop=True)
    print("\nstarting embedded Apache Cassandra (a JVM; 10-20 s) ...", flush=True)
    try:
        cassandra.start()
        run_id = f"demo-ycsb-cassandra-{stamp}"
        steps = [("YCSB load on Cassandra", None,
                  _dbsurge("load", "--workload", "ycsb", "--target", cassandra.uri, "--workload-option",
                           "recordcount=2000", "--workload-option", "batchsize=20", "--quiet"))]
        # A JVM seconds old spends its first seconds compiling, on the generator's cores: a first run measured
        # that (p99 400 ms against 23 on the MongoDB-wire server). The warm-up run is not compared.
        print("\nwarming Cassandra's JVM up with the same plan (not compared) ...", flush=True)
        warm_id = f"demo-ycsb-cassandra-warmup-{stamp}"
        steps.append(("YCSB-A warm-up on Cassandra", f"results/{warm_id}",
                      _dbsurge("run", "--workload", "ycsb", "--target", cassandra.uri, *YCSB_PLAN,
                               "--run-id", warm_id)))
        steps.append(("YCSB-A on Cassandra", f"results/{run_id}",
                      _dbsurge("run", "--workload", "ycsb", "--target", cassandra.uri, *YCSB_PLAN, "--run-id", run_id)))
    finally:
        cassandra.stop()
    steps.append(("compare MongoDB-wire with Cassandra", None,
                  _dbsurge("compare", f"results/{mongo_run_id}", f"results/{run_id}", "--labels",
                           "MongoDB-wire,Cassandra")))
    return steps


def main() -> int:
    t0 = time.monotonic()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    mongo_run_id = f"demo-ycsb-mongo-{stamp}"
    with tempfile.TemporaryDirectory(prefix="dbsurge-demo-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "postgres")
        mongo = EmbeddedMongo(Path(tmp) / "mongo")
        dynamo = EmbeddedDynamo(Path(tmp) / "dynamodb")
        print("starting embedded PostgreSQL, MongoDB-wire and DynamoDB-API servers ...", flush=True)
        pg.start()
        mongo.start()
        dynamo.start()
        try:
            runs = [
                ("orders spike on PostgreSQL", f"demo-orders-{stamp}",
                 ("run", "--workload", "orders", "--target", pg.uri, "--shape", "spike", "--baseline-tps", "100",
                  "--stage-seconds", "5", "--processes", "2", "--quiet", "--workload-option", "products=2000")),
                ("documents reads on MongoDB-wire", f"demo-documents-{stamp}",
                 ("run", "--workload", "documents", "--target", mongo.uri, "--users", "4", "--duration", "5s",
                  "--quiet", "--workload-option", "documents=5000", "--operation", "read_by_id")),
                ("YCSB-A on MongoDB-wire", mongo_run_id,
                 ("run", "--workload", "ycsb", "--target", mongo.uri, *YCSB_PLAN)),
                ("YCSB load on DynamoDB-API", None,
                 ("load", "--workload", "ycsb", "--target", dynamo.uri, "--workload-option", "recordcount=1000",
                  "--workload-option", "batchsize=25")),
                ("YCSB-A on DynamoDB-API", f"demo-ycsb-dynamodb-{stamp}",
                 ("run", "--workload", "ycsb", "--target", dynamo.uri, "--shape", "constant", "--rate", "100",
                  "--duration", "5s", "--quiet", "--workload-option", "recordcount=1000")),
            ]
            steps = [(name, f"results/{run_id}" if run_id else None,
                      _dbsurge(*args, *(("--run-id", run_id) if run_id else ())))
                     for name, run_id, args in runs]
        finally:
            pg.stop()
            mongo.stop()
            dynamo.stop()
        steps += _cassandra_part(tmp, mongo_run_id, stamp)
    print(f"\ndemo finished in {time.monotonic() - t0:.0f} s; run directories are under results/", flush=True)
    print("\n".join(outcome_lines(steps)), flush=True)
    return max(code for _, _, code in steps)


if __name__ == "__main__":
    sys.exit(main())
