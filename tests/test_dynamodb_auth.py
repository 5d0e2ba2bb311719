"""The DynamoDB-API target against a server that checks SigV4 signatures, as Amazon does.

moto's server takes any signature unless its IAM authentication is on; `EmbeddedDynamo(auth=True)` turns it on
after making one IAM user's access key through moto's IAM API (`dbsurge.embedded.dynamodb_server`), and answers
a refused request as DynamoDB does (``InvalidSignatureException``, ``UnrecognizedClientException``). Then:

- the right key loads, runs and delivers every arrival, the secret in no output and no file of the run;
- a wrong secret key, an access key id the server does not know, and no credentials at all each end in one
  line that names the cause, exit 2, before any load (no run directory);
- a key deleted mid-run: the operations after it fail as ``connect:UnrecognizedClientException``, the ledger
  balances, and the run does not exit 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from ledger_checks import ledger
from runs import dbsurge, explain, only_run_dir, read_csv, read_json, run_files
from test_bad_input import assert_one_line

from dbsurge.embedded.servers import EmbeddedDynamo

RECORDS = 200
WRONG_SECRET = "not-the-secret-key-5Yq"


@pytest.fixture(scope="module")
def signed(embedded_root: Path) -> Iterator[EmbeddedDynamo]:
    """An embedded DynamoDB-API server that checks every request's signature against its IAM user's key."""
    server = EmbeddedDynamo(embedded_root / "dynamodb-auth", delete_on_stop=True, auth=True)
    server.start()
    yield server
    server.stop()


def _env(key_id: str, secret: str) -> dict[str, str]:
    # the credentials in the environment only, as a user would set them; no file of this machine's
    return {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials", "AWS_CONFIG_FILE": "/nonexistent/config"}


def _run(tmp_path: Path, server: EmbeddedDynamo, env: dict[str, str], *extra: str, rate: int = 40,
         duration: str = "2s"):
    return dbsurge("run", "--workload", "ycsb", "--target", server.uri, "--shape", "constant", "--rate", str(rate),
                   "--duration", duration, "--workload-option", f"recordcount={RECORDS}", *extra, "--results-dir",
                   str(tmp_path / "results"), cwd=tmp_path, env=env, timeout=240)


def _secret_nowhere(secret: str, proc, results: Path) -> None:
    assert secret not in proc.stdout + proc.stderr
    for path in results.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_the_servers_key_delivers_and_signs_every_request(signed: EmbeddedDynamo, tmp_path: Path) -> None:
    key_id, secret = signed.credentials()
    proc = _run(tmp_path, signed, _env(key_id, secret))
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    total = ledger(run)
    assert total["planned"] == 80 and total["ok"] == 80 and total["failures"] == 0
    assert read_json(run / "run.json")["negotiated"]["auth"].startswith("AWS SigV4")
    _secret_nowhere(secret, proc, tmp_path / "results")


@pytest.mark.parametrize("case, words", [
    ("wrong secret key", ("the AWS credentials were refused: the signature does not match (wrong secret key?) "
                          "(InvalidSignatureException; they came from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the "
                          "environment)")),
    ("unknown access key id", "the AWS credentials were refused: the access key id is not one the server knows"),
    ("no credentials", "the server checks AWS credentials (UnrecognizedClientException) and none were found"),
])
def test_refused_credentials_are_one_line_before_any_load(signed: EmbeddedDynamo, tmp_path: Path, case: str,
                                                          words: str) -> None:
    key_id, secret = signed.credentials()
    env = {"wrong secret key": _env(key_id, WRONG_SECRET),
           "unknown access key id": _env("AKIADBSURGEUNKNOWN00", secret),
           "no credentials": _env("", "")}[case]
    proc = _run(tmp_path, signed, env)
    assert_one_line(proc, words, tmp_path / "results")
    assert WRONG_SECRET not in proc.stdout + proc.stderr and secret not in proc.stdout + proc.stderr


def _first_ok_second(results: Path, deadline_s: float) -> bool:
    """Wait until the run's timeline.csv has a second with a successful operation in it."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for timeline in run_files(results, "timeline.csv"):
            try:  # a file being written: its last line may be cut short
                if any(int(r["count"] or 0) > int(r["failures"] or 0) for r in read_csv(timeline)):
                    return True
            except (OSError, ValueError, KeyError):
                pass
        time.sleep(0.1)
    return False


def test_a_key_deleted_mid_run_fails_its_operations_as_refused_credentials(signed: EmbeddedDynamo,
                                                                           tmp_path: Path) -> None:
    admin_id, admin_secret = signed.credentials()
    iam = boto3.client("iam", endpoint_url=f"http://127.0.0.1:{signed.port}", region_name="us-east-1",
                       aws_access_key_id=admin_id, aws_secret_access_key=admin_secret)
    key = iam.create_access_key(UserName="dbsurge")["AccessKey"]
    results = tmp_path / "results"
    env = {**os.environ, **_env(key["AccessKeyId"], key["SecretAccessKey"])}
    # 12 s at 20/s: the key goes once a second of the run has delivered, long before the plan ends
    proc = subprocess.Popen([sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "ycsb", "--target",
                             signed.uri, "--shape", "constant", "--rate", "20", "--duration", "12s",
                             "--workload-option", f"recordcount={RECORDS}", "--results-dir", str(results)],
                            cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _first_ok_second(results, 180), "the run never delivered an operation"
        iam.delete_access_key(UserName="dbsurge", AccessKeyId=key["AccessKeyId"])
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert proc.returncode == 1, explain(done)  # failures and no --check: Locust's --exit-code-on-error
    total = ledger(only_run_dir(results))
    assert total["ok"] > 0 and total["failed_connect"] > 0 and total["failed_connect"] == total["failures"]
    assert f"connect:UnrecognizedClientException={total['failed_connect']}" in total["failed_detail"]
    assert "UnrecognizedClientException" in stdout + stderr  # the first failure, as it happened
    _secret_nowhere(key["SecretAccessKey"], done, results)
