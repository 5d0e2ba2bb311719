"""The DynamoDB-API binding against ScyllaDB Alternator: YCSB-A through `dbsurge run`, when a server is given.

Runs only where ``DBSURGE_TEST_ALTERNATOR_URI`` names an Alternator endpoint, e.g. the compose ``scylla``
profile (``alternator://127.0.0.1:8000``); skipped, and saying why, otherwise. The same binding runs
against moto's DynamoDB on every machine (tests/test_dynamodb.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ledger_checks import ledger
from runs import dbsurge, explain, only_run_dir

RECORDS = 2000
ALTERNATOR = os.environ.get("DBSURGE_TEST_ALTERNATOR_URI", "").strip()


@pytest.mark.skipif(not ALTERNATOR, reason="no Alternator endpoint: set DBSURGE_TEST_ALTERNATOR_URI="
                                           "alternator://127.0.0.1:8000 (the compose scylla profile gives one)")
def test_ycsb_a_through_alternator(tmp_path: Path) -> None:
    proc = dbsurge("run", "--workload", "ycsb", "--target", ALTERNATOR, "--shape", "constant", "--rate", "100",
                   "--duration", "5s", "--workload-option", f"recordcount={RECORDS}", "--workload-option",
                   "batchsize=25", "--results-dir", str(tmp_path / "results"), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, explain(proc)
    total = ledger(only_run_dir(tmp_path / "results"))
    assert total["planned"] == 500 and total["ok"] == 500
