"""CQL client-to-node encryption met for real: Apache Cassandra 5.0 whose native port takes TLS only.

`EmbeddedCassandra(tls=True)` turns on ``client_encryption_options`` with ``optional: false``, its certificate (for
``localhost``, signed by a CA of its own: dbsurge/embedded/certs.py) in a PKCS12 keystore. One JVM for the module
(a GiB, 15-30 s to start here), and the module runs alone (tests/conftest.py, SERIAL_MODULES: one JVM at a time).

- the right CA in the URI's query (``tls=true&tls_ca_file=...``) loads, runs, and records TLS verified, with its
  version, in run.json's negotiated record;
- another CA, a host name the certificate does not carry (127.0.0.1: the driver checked the name against the
  address it resolved, never the name given), and TLS off each end in one line that names the cause, exit 2, before
  any load.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cassandra_checks import need_java_and_jars
from runs import dbsurge, explain, only_run_dir, read_json
from test_bad_input import assert_one_line

from dbsurge.embedded.certs import make_ca
from dbsurge.embedded.servers import EmbeddedCassandra


@pytest.fixture(scope="module")
def cql_tls(embedded_root: Path) -> Iterator[EmbeddedCassandra]:
    pytest.importorskip("cassandra", reason="scylla-driver is not installed (pip install 'dbsurge[cql]')")
    need_java_and_jars("")
    server = EmbeddedCassandra(embedded_root / "cassandra-tls", tls=True, delete_on_stop=True)
    server.start()
    yield server
    server.stop()


def _run(tmp_path: Path, uri: str):
    return dbsurge("run", "--workload", "ycsb", "--target", uri, "--shape", "constant", "--rate", "20",
                   "--duration", "2s", "--workload-option", "recordcount=100", "--results-dir",
                   str(tmp_path / "results"), cwd=tmp_path, timeout=300)


def test_the_right_ca_loads_runs_and_records_the_tls_version(cql_tls: EmbeddedCassandra, tmp_path: Path) -> None:
    assert cql_tls.uri.startswith("cql://localhost:") and "tls=true" in cql_tls.uri
    proc = _run(tmp_path, cql_tls.uri)
    assert proc.returncode == 0, explain(proc)
    meta = read_json(only_run_dir(tmp_path / "results") / "run.json")
    tls = meta["negotiated"]["tls"]
    assert (tls["in_use"], tls["verified"], tls["host_name_checked"]) == (True, True, True)
    assert tls["version"] in ("TLSv1.2", "TLSv1.3") and tls["ca_file"] == str(cql_tls.ca_file)
    assert meta["negotiated"]["server_version"].startswith("5.0") and meta["negotiated"]["warnings"] == []
    assert meta["target"]["tls"] is True


@pytest.mark.parametrize("case, words", [
    ("another CA", "the server's certificate is not signed by a CA in tls_ca_file="),
    ("a name it does not carry", ("the server's certificate does not name the host it was reached by (IP address "
                                  "mismatch, certificate is not valid for '127.0.0.1')")),
    ("TLS off", "takes TLS only (client_encryption_options, optional: false) and this connection had TLS off"),
])
def test_refusals_are_one_line_before_any_load(cql_tls: EmbeddedCassandra, embedded_root: Path, tmp_path: Path,
                                               case: str, words: str) -> None:
    other = make_ca(embedded_root / "cql-other-ca", "other")
    uri = {"another CA": f"cql://localhost:{cql_tls.port}/?tls=true&tls_ca_file={other.ca_file}",
           "a name it does not carry": cql_tls.uri.replace("localhost", "127.0.0.1"),
           "TLS off": f"cql://localhost:{cql_tls.port}/"}[case]
    proc = _run(tmp_path, uri)
    assert_one_line(proc, words, tmp_path / "results")
