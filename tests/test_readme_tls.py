"""The README's cloud examples with TLS have local twins that run here as written.

Each twin is the ```sh block after a ``<!-- twin: KIND -->`` mark in README.md: `dbsurge embedded start KIND --tls`,
a run against the URI it prints (its CA file where the cloud's bundle goes), and the stop. The test runs the block
with bash in a private $DBSURGE_HOME and asserts it exits 0 with the run verified over TLS. The Cassandra twin
starts a JVM: it runs alone (tests/conftest.py, SERIAL_TESTS).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from runs import REPO, only_run_dir, read_json

from dbsurge.embedded.servers import EmbeddedPostgres


def _twin(kind: str) -> str:
    readme = (REPO / "README.md").read_text()
    found = re.search(rf"<!-- twin: {kind} -->\n```sh\n(.*?)\n```", readme, re.DOTALL)
    assert found, f"README.md has no twin block for {kind}"
    return found.group(1)


def _run_twin(kind: str, tmp_path: Path) -> None:
    script = _twin(kind)
    assert f"dbsurge embedded start {kind} --tls" in script and f"dbsurge embedded stop {kind} --tls" in script
    env = {**os.environ, "DBSURGE_HOME": str(tmp_path / "home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, text=True,
                              capture_output=True, timeout=600, check=False)
    finally:  # the server never outlives the test, whatever the block did
        subprocess.run(["bash", "-c", f"dbsurge embedded stop {kind} --tls"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    negotiated = read_json(only_run_dir(tmp_path / "results") / "run.json")["negotiated"]
    tls = negotiated["tls"]
    assert (tls["in_use"], tls["verified"], tls["host_name_checked"]) == (True, True, True), negotiated
    assert tls["ca_file"].endswith("dbsurge-embedded-ca.pem") and negotiated["warnings"] == []
    assert f"stopped embedded {kind}-tls" in proc.stderr


@pytest.mark.parametrize("kind", ["postgres", "mongo"])
def test_the_readme_twins_run_as_written(kind: str, tmp_path: Path) -> None:
    if kind == "postgres":
        try:
            EmbeddedPostgres(tmp_path / "probe", tls=True)
        except Exception as exc:  # noqa: BLE001 - no PostgreSQL with OpenSSL here: as tests/test_tls.py does
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI must run the README's PostgreSQL twin: {exc}")
            pytest.skip(str(exc))
    _run_twin(kind, tmp_path)


def test_the_readme_cassandra_twin_runs_as_written(tmp_path: Path) -> None:
    from cassandra_checks import need_java_and_jars

    pytest.importorskip("cassandra", reason="scylla-driver is not installed (pip install 'dbsurge[cql]')")
    need_java_and_jars("")
    _run_twin("cassandra", tmp_path)
