"""What a target's check connection negotiated (`Target.negotiated`, run.json's ``negotiated``), for every kind.

The TLS cases against servers that take TLS only are in tests/test_tls.py; here: the record's shape and words
without a network (the CQL builder, the warnings), and the plain embedded servers, whose versions the record
must give as the servers themselves report them.
"""

from __future__ import annotations

import psycopg
import pymongo

from dbsurge.embedded.servers import free_port
from dbsurge.targets import negotiation, open_target


def test_a_target_not_checked_says_so():
    target = open_target("postgresql://u@127.0.0.1:1/db")
    record = target.negotiated()
    assert record["checked"] is False and "not checked" in record["line"] and record["warnings"] == []


def test_tls_without_verification_is_a_warning():
    unverified = negotiation.tls_facts(in_use=True, verified=False, host_name_checked=False, ca_file=None,
                                       setting="sslmode=require", version="TLSv1.3", cipher="X")
    assert unverified["ca_file"] is None and unverified["host_name_checked"] is False
    [warning] = negotiation.tls_warnings(unverified, "db.example.com", "postgresql://db.example.com/x", "fix it")
    assert "does not verify the server's certificate (sslmode=require)" in warning and warning.endswith("fix it")
    chain_only = negotiation.tls_facts(in_use=True, verified=True, host_name_checked=False, ca_file="/ca.pem",
                                       setting="sslmode=verify-ca")
    assert "not that it names db.example.com" in negotiation.tls_warnings(chain_only, "db.example.com", "d", "f")[0]
    full = negotiation.tls_facts(in_use=True, verified=True, host_name_checked=True, ca_file="/ca.pem",
                                 setting="sslmode=verify-full")
    assert negotiation.tls_warnings(full, "db.example.com", "d", "f") == []
    plain = negotiation.tls_facts(in_use=False, verified=False, host_name_checked=False, ca_file=None,
                                  setting="sslmode=disable")
    assert negotiation.tls_warnings(plain, "db.example.com", "d", "f") == []  # said as "without TLS" in the line


def test_the_cql_record_from_what_the_check_read():
    """No Cassandra here (a JVM): the builder from `_server_facts`'s dict; TLS on against a port where nothing
    listens, so the probe says why it has no version rather than inventing one."""
    port = free_port()
    target = open_target(f"cql://app:secret@127.0.0.1:{port}/ks", {"tls": "true"})
    record = target.negotiation_record({"release_version": "5.0.4", "protocol_version": 5, "shard_aware": False})
    assert (record["kind"], record["server_version"], record["protocol"]) == ("cql", "5.0.4", "CQL native protocol v5")
    assert record["driver"].startswith("scylla-driver ")
    assert record["auth"] == "PasswordAuthenticator (SASL PLAIN)"
    tls = record["tls"]
    assert tls["in_use"] and tls["verified"] and tls["ca_file"] == "system trust store"
    assert tls["version"] == negotiation.NOT_EXPOSED and "the probe failed" in tls["source"]
    assert "secret" not in str(record)
    plain = open_target(f"cql://127.0.0.1:{port}/ks").negotiation_record({"release_version": "5.0.4"})
    assert plain["tls"]["in_use"] is False and plain["auth"].startswith("none") and plain["warnings"] == []


def test_postgres_records_the_servers_own_version_and_no_tls(pg_uri):
    target = open_target(pg_uri)
    target.check()
    record = target.negotiated()
    with psycopg.connect(pg_uri) as conn:
        version = conn.execute("show server_version").fetchone()[0]
    assert record["server_version"] == version
    assert record["protocol"].startswith("PostgreSQL protocol 3.")
    assert record["tls"] == {"in_use": False, "setting": "sslmode=prefer", "verified": False,
                             "host_name_checked": False, "ca_file": None}
    assert record["auth"] == "none asked (trust)" and record["warnings"] == []
    assert record["driver"].startswith("psycopg ") and version in record["line"]


def test_mongo_records_build_info_and_the_wire(mongo_uri):
    target = open_target(mongo_uri)
    target.check()
    record = target.negotiated()
    with pymongo.MongoClient(mongo_uri) as client:
        build = client.admin.command("buildInfo")["version"]
    assert record["server_version"] == build and record["driver"] == f"pymongo {pymongo.version}"
    assert record["protocol"].startswith("MongoDB wire protocol, wire versions ")
    assert record["tls"]["in_use"] is False and record["auth"] == "none (no user in the URI)"


def test_dynamodb_records_the_scheme_botocore_and_sigv4(moto_url):
    import botocore

    target = open_target(moto_url.replace("http://", "dynamodb://"))
    target.check()
    record = target.negotiated()
    assert record["endpoint"] == moto_url and record["driver"] == f"botocore {botocore.__version__}"
    assert record["auth"].startswith("AWS SigV4") and record["tls"]["in_use"] is False
    assert record["server_version"]  # moto's Server header


def test_dsql_records_that_the_password_was_a_fresh_iam_token(pg_server, monkeypatch):
    """A DSQL-flavoured target against the embedded server (trust: it does not ask for the token, and the record
    says so); the record names the IAM token and holds neither it nor its signature."""
    from dbsurge.targets.postgres import DsqlTokenProvider

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    signer, tokens = DsqlTokenProvider(), []

    def provider(host: str, region: str, user: str) -> str:
        tokens.append(signer(host, region, user))
        return tokens[-1]

    target = open_target(f"dsql://postgres@127.0.0.1:{pg_server.port}/postgres",
                         {"sslmode": "disable", "region": "us-east-1"}, token_provider=provider)
    target.check()
    record = target.negotiated()
    assert len(tokens) == 1 and record["flavor"] == "dsql"
    assert record["auth"].startswith("IAM token (signed fresh for this connection, valid 900s")
    assert "the server did not ask for it" in record["auth"]
    assert tokens[0] not in str(record) and tokens[0].split("X-Amz-Signature=")[1] not in str(record)
