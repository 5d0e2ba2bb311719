"""``make demo``: the main job on embedded targets, in about a minute.

Starts an embedded PostgreSQL, an embedded MongoDB-wire server and an embedded DynamoDB-API server
(moto's), loads small data sets, then runs the three workloads through ``dbsurge run`` as a user would:

1. orders on PostgreSQL under study 001's spike plan, scaled down (baseline 100 TPS, 5-second
   stages), with two worker processes;
2. documents on the MongoDB-wire server, reads by id, closed model, 4 users;
3. YCSB workload A on the MongoDB-wire server at a target rate of 300 TPS;
4. YCSB workload A on the DynamoDB-API server (study 002's other side, as Alternator or DynamoDB would
   serve it) at 100 TPS, after a load in BatchWriteItem batches of 25.

Each prints its tables and run directory; the servers stop at the end.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .embedded import EmbeddedDynamo, EmbeddedMongo, EmbeddedPostgres


def _dbsurge(*args: str) -> int:
    cmd = [sys.executable, "-m", "dbsurge.cli", *args]
    print("\n$ dbsurge " + " ".join(args), flush=True)
    return subprocess.call(cmd)


def main() -> int:
    t0 = time.monotonic()
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
                ("run", "--workload", "orders", "--target", pg.uri, "--shape", "spike", "--baseline-tps", "100",
                 "--stage-seconds", "5", "--processes", "2", "--quiet", "--workload-option", "products=2000"),
                ("run", "--workload", "documents", "--target", mongo.uri, "--users", "4", "--duration", "5s",
                 "--quiet", "--workload-option", "documents=5000", "--operation", "read_by_id"),
                ("run", "--workload", "ycsb", "--target", mongo.uri, "--shape", "constant", "--rate", "300",
                 "--duration", "8s", "--quiet", "--workload-option", "recordcount=2000"),
                ("load", "--workload", "ycsb", "--target", dynamo.uri, "--workload-option", "recordcount=1000",
                 "--workload-option", "batchsize=25"),
                ("run", "--workload", "ycsb", "--target", dynamo.uri, "--shape", "constant", "--rate", "100",
                 "--duration", "5s", "--quiet", "--workload-option", "recordcount=1000"),
            ]
            codes = [_dbsurge(*r) for r in runs]
        finally:
            pg.stop()
            mongo.stop()
            dynamo.stop()
    print(f"\ndemo finished in {time.monotonic() - t0:.0f} s; run directories are under results/", flush=True)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
