"""The CQL binding against a real CQL server: YCSB-A load (batched and not) and run, through `dbsurge` itself.

No CQL server installs on these machines, so this module runs only where ``DBSURGE_TEST_CQL_URI`` names
one, e.g. the compose ``scylla`` profile::

    docker compose --profile scylla up -d scylla        # wait until it is healthy
    DBSURGE_TEST_CQL_URI=cql://127.0.0.1:9042 .venv/bin/python -m pytest -q tests/test_cql_contract.py

Without it every test here is skipped, and says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ledger_checks import ledger
from runs import dbsurge, explain, only_run_dir, read_csv, read_json

URI = os.environ.get("DBSURGE_TEST_CQL_URI", "").strip()
pytestmark = [
    pytest.mark.skipif(not URI, reason="no CQL server: set DBSURGE_TEST_CQL_URI=cql://HOST:9042 (the compose "
                                       "scylla profile gives one) to run the CQL contract tests"),
    pytest.mark.serial,  # the run asserts a delivered rate
]
pytest.importorskip("cassandra", reason="scylla-driver is not installed (pip install 'dbsurge[cql]')")

RECORDS = 2000
KEYSPACE = "dbsurge_contract"


def test_check_and_a_bad_consistency_fail_or_pass_in_one_line(tmp_path: Path) -> None:
    from dbsurge.targets import open_target

    open_target(URI).check()
    proc = dbsurge("load", "--workload", "ycsb", "--target", URI, "--target-option", "consistency=MOST",
                   cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "consistency" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("batch", "table"), [("1", "ut_contract_single"), ("50", "ut_contract_batch")])
def test_ycsb_load_with_and_without_unlogged_batches(tmp_path: Path, batch: str, table: str) -> None:
    proc = dbsurge("scenario", "ycsb-load", "--target", URI, "--records", str(RECORDS), "--clients", "4",
                   "--batch-size", batch, "--drop", "--workload-option", f"table={table}",
                   "--workload-option", f"keyspace={KEYSPACE}", "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, explain(proc)
    row = read_csv(only_run_dir(tmp_path / "results") / "ycsb-load.csv")[0]
    assert row["inserted"] == str(RECORDS) and row["failures"] == "0", row
    assert row["calls"] == str(RECORDS // int(batch))


@pytest.mark.parametrize("consistency", ["ONE", "QUORUM"])
def test_ycsb_a_run_at_a_constant_rate(tmp_path: Path, consistency: str) -> None:
    load = dbsurge("load", "--workload", "ycsb", "--target", URI, "--workload-option", f"recordcount={RECORDS}",
                   "--workload-option", f"keyspace={KEYSPACE}", "--workload-option", "batchsize=50",
                   cwd=tmp_path, timeout=600)
    assert load.returncode == 0, explain(load)
    proc = dbsurge("run", "--workload", "ycsb", "--target", URI, "--shape", "constant", "--rate", "200",
                   "--duration", "5s", "--workload-option", f"recordcount={RECORDS}",
                   "--workload-option", f"keyspace={KEYSPACE}", "--target-option", f"consistency={consistency}",
                   "--results-dir", str(tmp_path / "results"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 1000 and total["ok"] == 1000
    meta = read_json(run / "run.json")
    assert meta["target"]["kind"] == "cql" and meta["target"]["consistency"] == consistency
