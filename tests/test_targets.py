"""Targets against real servers: URI parsing, one-line check errors, 40001 retries, DSQL tokens, gevent waits.

No driver is mocked: PostgreSQL and the MongoDB-wire server are the session's embedded ones
(`pg_server`, `mongo_server` from conftest.py); DSQL is exercised against the embedded PostgreSQL with
real boto3-signed tokens (fake credentials, signing is local) and TLS turned off.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psycopg
import pytest

from dbsurge.base import redact
from dbsurge.base.errors import TargetError
from dbsurge.base.redact import SecretFilter, redact_text, redact_uri, register_secret
from dbsurge.targets import Target, open_target, register_binding
from dbsurge.targets.mongo import MongoTarget
from dbsurge.targets.postgres import DsqlTokenProvider, PostgresTarget, explain_connect_error

# ---- parsing, no network ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "options", "kind", "flavor"),
    [
        ("postgresql://u@db.example.com:5432/app", None, "postgres", "postgres"),
        ("postgres://u@db.example.com/app", None, "postgres", "postgres"),
        ("postgresql://u@a2.cluster-abc.eu-west-1.rds.amazonaws.com/app", None, "postgres", "aurora"),
        ("postgresql://u@10.0.0.5/app", {"flavor": "aurora"}, "postgres", "aurora"),
        ("dsql://abcdefghijklmnopqrstuvwxyz.dsql.us-east-1.on.aws", None, "postgres", "dsql"),
        ("postgresql://admin@abcdefghijklmnopqrstuvwxyz.dsql.eu-west-2.on.aws/postgres", None, "postgres", "dsql"),
        ("postgresql://admin@abc.us-east-1.dsql.amazonaws.com/postgres", None, "postgres", "dsql"),
        ("postgresql://admin@10.0.0.5/postgres", {"flavor": "dsql", "region": "us-west-2"}, "postgres", "dsql"),
        ("mongodb://127.0.0.1:27017/", None, "mongo", "mongo"),
        ("mongodb+srv://cluster0.example.net/", None, "mongo", "mongo"),
        ("mongodb://u:p@docdb-1.cluster-abc.us-east-1.docdb.amazonaws.com:27017/?tls=false", None, "mongo", "docdb"),
        ("mongodb://127.0.0.1:27017/", {"flavor": "docdb", "tls": "false"}, "mongo", "docdb"),
    ],
)
def test_open_target_picks_binding_and_flavor(uri, options, kind, flavor):
    target = open_target(uri, options)
    assert (target.kind, target.flavor) == (kind, flavor)
    assert isinstance(target, Target)


def test_flavor_defaults():
    dsql = open_target("dsql://abcdefghijklmnopqrstuvwxyz.dsql.us-east-1.on.aws").describe()
    assert (dsql["user"], dsql["dbname"], dsql["sslmode"], dsql["region"]) == (
        "admin",
        "postgres",
        "verify-full",
        "us-east-1",
    )
    assert dsql["sslrootcert"] and dsql["max_connection_age_s"] == 55 * 60
    aurora = open_target("postgresql://u@a.cluster-x.eu-west-1.rds.amazonaws.com/app").describe()
    assert aurora["sslmode"] == "require" and aurora["max_connection_age_s"] is None
    plain = open_target("postgresql://u@db.example.com/app?isolation=serializable&retry_attempts=3")
    assert (plain.describe()["isolation"], plain.retry_attempts) == ("serializable", 3)  # dbsurge options in the URI
    assert plain.describe()["sslmode"] is None and plain.describe()["connect_timeout_s"] == 10


def test_docdb_defaults(tmp_path):
    ca = tmp_path / "global-bundle.pem"
    ca.write_bytes((Path(__file__).parent / "fixtures" / "test-ca.pem").read_bytes())  # a real PEM: it is loaded
    docdb = open_target("mongodb://u:pw@d.cluster-x.us-east-1.docdb.amazonaws.com:27017/", {"tls_ca_file": str(ca)})
    info = docdb.describe()
    assert (info["tls"], info["replica_set"], info["read_preference"], info["retry_writes"]) == (
        True,
        "rs0",
        "secondaryPreferred",
        False,
    )
    newer = open_target(
        "mongodb://d.cluster-x.us-east-1.docdb.amazonaws.com:27017/",
        {"tls_ca_file": str(ca), "engine_version": "8.0.2"},
    )
    assert newer.describe()["retry_writes"] is True
    assert info["database"] == "dbsurge" and "pw" not in str(info)


@pytest.mark.parametrize(
    ("uri", "options", "expected"),
    [
        ("foo://x", None, "bad target URI 'foo://x': scheme must be postgresql://, postgres://, dsql://, mongodb://, "
                    "mongodb+srv://, dynamodb://, alternator://, cql:// or scylla://"),
        ("postgressql://h/db", None, "(did you mean postgresql://?)"),
        ("embedded-postgress", None, "or one of embedded-postgres, embedded-mongo, embedded-dynamodb, "
                                     "embedded-cassandra (did you mean embedded-postgres?)"),
        ("not a uri", None, "scheme must be"),
        ("embedded-postgres", None, "embedded targets"),
        ("", None, "no target given"),
        ("postgresql://u:hunter22@h/db?bogus=1", None, 'invalid URI query parameter: "bogus"'),
        ("postgresql://u@h/db", {"isolation": "snapshot"}, "isolation='snapshot'"),
        ("postgresql://u@h/db", {"retry_attempts": "many"}, "expected an integer"),
        ("postgresql://u@h/db", {"max_connection_age": "soon"}, "expected e.g. 30s, 2m, 1h or 250ms"),
        ("postgresql://u@h/db", {"colour": "blue"}, "unknown postgres target option colour"),
        ("postgresql://u@h/db", {"sslrootcert": "/nonexistent/ca.pem"}, "missing CA file"),
        ("postgresql://u@h/db", {"flavor": "oracle"}, "expected postgres, aurora or dsql"),
        ("postgresql://u@10.0.0.5/postgres", {"flavor": "dsql"}, None),  # region: from env or config, else error
        ("mongodb://u:hunter22@h/?readPreference=bogus", None, "Not a valid read preference"),
        ("mongodb://h/", {"w": "-1"}, "bad option w"),
        ("mongodb://h/", {"verbose": "1"}, "unknown mongo target option verbose"),
        ("mongodb://d.cluster-x.us-east-1.docdb.amazonaws.com:27017/", None, "DocumentDB needs its CA bundle"),
        (
            "mongodb://d.cluster-x.us-east-1.docdb.amazonaws.com:27017/",
            {"tls_ca_file": "/nonexistent/b.pem"},
            "missing CA file",
        ),
    ],
)
def test_bad_targets_fail_with_one_line(uri, options, expected, monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(TargetError) as info:
        open_target(uri, options)
    message = str(info.value)
    assert "\n" not in message and "hunter22" not in message
    assert expected is None or expected in message, message
    if expected is None:
        assert "DSQL region" in message


def test_registry_rejects_a_duplicate_name():
    with pytest.raises(ValueError, match="already registered"):

        @register_binding("postgres")
        class Another(PostgresTarget):
            schemes = ("another",)


def test_display_and_describe_carry_no_secrets():
    target = open_target("postgresql://alice:s3cr3t-pw@db.example.com:5432/app?sslmode=require")
    assert target.display == "postgresql://alice:***@db.example.com:5432/app?sslmode=require"
    assert "s3cr3t-pw" not in str(target.describe())
    mongo = open_target("mongodb://bob:m0ng0-pw@127.0.0.1:27017/app?authSource=admin")
    assert mongo.display == "mongodb://bob:***@127.0.0.1:27017/app?authSource=admin"
    assert "m0ng0-pw" not in str(mongo.describe()) and mongo.describe()["database"] == "app"


# ---- redaction ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:p@ss/w0rd@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u@h/db?password=x&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ("mongodb://u:pw@h1,h2/?replicaSet=rs0", "mongodb://u:***@h1,h2/?replicaSet=rs0"),
        (
            "mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:abc,SERVICE_NAME:x",
            "mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:***,SERVICE_NAME:x",
        ),
        (
            "h.dsql.us-east-1.on.aws/?Action=DbConnectAdmin&X-Amz-Credential=AKIA%2F2026&X-Amz-Date=20260101T000000Z"
            "&X-Amz-Signature=abc123&X-Amz-Security-Token=tok",
            "h.dsql.us-east-1.on.aws/?Action=DbConnectAdmin&X-Amz-Credential=***&X-Amz-Date=20260101T000000Z"
            "&X-Amz-Signature=***&X-Amz-Security-Token=***",
        ),
        ("postgresql://h/db", "postgresql://h/db"),
    ],
)
def test_redact_uri(uri, expected):
    assert redact_uri(uri) == expected


def test_redact_text_and_secret_filter():
    assert redact_text("login with hunter2 or hunter2%21", ["hunter2!"]) == "login with hunter2 or ***"
    register_secret("registered-secret-value")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "password is %s", ("registered-secret-value",), None)
    assert SecretFilter().filter(record) is True
    assert record.getMessage() == "password is ***"
    assert "registered-secret-value" in redact.registered_secrets()


# ---- PostgreSQL: check() ------------------------------------------------------------------------


def test_check_ok_and_session_basics(pg_server):
    target = open_target(pg_server.uri)
    target.check()
    session = target.connect()
    try:
        assert session.conn.autocommit
        assert session.execute("select %s::int + 1", (41,)).fetchone() == (42,)
        assert session.conn.execute("show application_name").fetchone() == ("dbsurge",)
        assert session.retries == 0
    finally:
        session.close()
        session.close()


def test_check_connection_refused_is_one_line():
    started = time.monotonic()
    with pytest.raises(TargetError) as info:
        open_target("postgresql://nobody@127.0.0.1:1/x").check()
    message = str(info.value)
    assert "connection refused" in message and "\n" not in message
    assert message.startswith("target postgresql://nobody@127.0.0.1:1/x: ")
    assert time.monotonic() - started < 2


def test_check_against_a_paused_server_times_out(pg_server):
    target = open_target(pg_server.uri, {"connect_timeout": "1"})
    pg_server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(TargetError) as info:
            target.check()
        elapsed = time.monotonic() - started
    finally:
        pg_server.resume()
    assert "timeout" in str(info.value) and "\n" not in str(info.value)
    assert elapsed < 3.5  # libpq's minimum connect_timeout is 2 s


def test_check_wrong_password(pg_server):
    """The embedded server trusts 127.0.0.1; one pg_hba line makes a role of ours use a password."""
    admin = psycopg.connect(pg_server.uri, autocommit=True)
    hba = Path(admin.execute("show hba_file").fetchone()[0])
    original = hba.read_text()
    try:
        admin.execute("drop role if exists dbsurge_pw_test")
        admin.execute("create role dbsurge_pw_test login password 'right-password'")
        hba.write_text("host all dbsurge_pw_test 127.0.0.1/32 scram-sha-256\n" + original)
        admin.execute("select pg_reload_conf()")
        time.sleep(0.3)  # the postmaster reloads on SIGHUP asynchronously
        base = f"127.0.0.1:{pg_server.port}/postgres"
        open_target(f"postgresql://dbsurge_pw_test:right-password@{base}").check()
        with pytest.raises(TargetError) as info:
            open_target(f"postgresql://dbsurge_pw_test:wrong-password@{base}").check()
        message = str(info.value)
        assert "authentication failed" in message and "wrong password" in message
        assert "wrong-password" not in message and "\n" not in message
    finally:
        hba.write_text(original)
        admin.execute("select pg_reload_conf()")
        admin.close()


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            'connection failed: connection to server at "10.1.1.1", port 5432 failed: No route to host',
            "unreachable host",
        ),
        ('connection failed: root certificate file "/x.pem" does not exist', "missing CA file"),
        ("connection failed: SSL error: certificate verify failed", "TLS error"),
        ("connection timeout expired", "timeout"),
    ],
)
def test_explain_connect_error_wording(message, expected):
    target = open_target("postgresql://u@db.example.com/app")
    assert explain_connect_error(psycopg.OperationalError(message), target).startswith(expected)


# ---- PostgreSQL: transactions -------------------------------------------------------------------


@pytest.fixture
def counter_table(pg_server):
    with psycopg.connect(pg_server.uri, autocommit=True) as conn:
        conn.execute("drop table if exists dbsurge_t_counter")
        conn.execute("create table dbsurge_t_counter (id int primary key, v int not null)")
        conn.execute("insert into dbsurge_t_counter values (1, 0)")
    yield "dbsurge_t_counter"
    with psycopg.connect(pg_server.uri, autocommit=True) as conn:
        conn.execute("drop table if exists dbsurge_t_counter")


def _increment(conn: psycopg.Connection) -> int:
    (value,) = conn.execute("select v from dbsurge_t_counter where id = 1").fetchone()
    conn.execute("update dbsurge_t_counter set v = %s where id = 1", (value + 1,))
    return value + 1


def test_serialization_failure_is_retried_and_commits(pg_server, counter_table):
    target = open_target(pg_server.uri, {"isolation": "serializable", "retry_base_ms": "1"})
    a, b = target.connect(), target.connect()
    attempts = []

    def conflicting(conn):
        attempts.append(1)
        (value,) = conn.execute("select v from dbsurge_t_counter where id = 1").fetchone()  # A's snapshot
        if len(attempts) == 1:
            assert b.run_transaction(_increment) == 1  # B reads, updates and commits meanwhile
        conn.execute("update dbsurge_t_counter set v = %s where id = 1", (value + 10,))  # A: 40001 the 1st time
        return value + 10

    try:
        assert a.run_transaction(conflicting) == 11
        assert (a.retries, b.retries, len(attempts)) == (1, 0, 2)
        assert a.execute("select v from dbsurge_t_counter where id = 1").fetchone() == (11,)
    finally:
        a.close()
        b.close()


def test_retries_are_bounded(pg_server, counter_table):
    target = open_target(pg_server.uri, {"isolation": "serializable", "retry_attempts": "3", "retry_base_ms": "1"})
    a, b = target.connect(), target.connect()

    def always_conflicting(conn):
        conn.execute("select v from dbsurge_t_counter where id = 1").fetchone()
        b.run_transaction(_increment)
        conn.execute("update dbsurge_t_counter set v = v + 100 where id = 1")

    try:
        with pytest.raises(psycopg.errors.SerializationFailure):
            a.run_transaction(always_conflicting)
        assert a.retries == 2  # three runs: two retries, then the conflict is raised as a failure
        assert a.execute("select v from dbsurge_t_counter where id = 1").fetchone() == (3,)
        assert a.run_transaction(lambda conn: conn.execute("select 1").fetchone()) == (1,)  # session still usable
    finally:
        a.close()
        b.close()


def test_concurrent_conflicts_under_threads_all_commit(pg_server, counter_table):
    target = open_target(pg_server.uri, {"isolation": "serializable", "retry_attempts": "50"})
    sessions = [target.connect() for _ in range(4)]
    errors: list[BaseException] = []

    def work(session):
        try:
            for _ in range(25):
                session.run_transaction(_increment)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors
        assert sessions[0].execute("select v from dbsurge_t_counter where id = 1").fetchone() == (100,)
        assert sum(s.retries for s in sessions) >= 1
    finally:
        for session in sessions:
            session.close()


def test_old_connections_are_recycled_between_operations(pg_server):
    session = open_target(pg_server.uri, {"max_connection_age": "300ms"}).connect()
    try:
        first_pid = session.execute("select pg_backend_pid()").fetchone()[0]
        with session.conn.transaction():  # never recycled while the caller has a transaction open
            time.sleep(0.35)
            assert session.conn.execute("select pg_backend_pid()").fetchone()[0] == first_pid
        assert session.conn.execute("select pg_backend_pid()").fetchone()[0] != first_pid
        assert session.reconnects == 1
    finally:
        session.close()


# ---- DSQL: a fresh IAM token per connection -----------------------------------------------------


@pytest.fixture
def fake_aws(monkeypatch):
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_dsql_signs_a_fresh_token_per_connection_and_never_shows_it(pg_server, fake_aws, caplog):
    caplog.set_level(logging.DEBUG)
    signer = DsqlTokenProvider()
    tokens: list[str] = []

    def counting_provider(host: str, region: str, user: str) -> str:
        tokens.append(signer(host, region, user))
        return tokens[-1]

    uri = f"dsql://postgres@127.0.0.1:{pg_server.port}/postgres"
    options = {"sslmode": "disable", "region": "us-east-1", "max_connection_age": "500ms"}
    target = open_target(uri, options, token_provider=counting_provider)
    assert target.flavor == "dsql" and target.user == "postgres"
    session = target.connect()
    try:
        first_pid = session.execute("select pg_backend_pid()").fetchone()[0]
        time.sleep(1.05)  # past max_connection_age, and into another second: tokens carry a 1 s X-Amz-Date
        # The connection is past max_connection_age: the next transaction reconnects with a new token.
        assert session.run_transaction(lambda conn: conn.execute("select pg_backend_pid()").fetchone()[0]) != first_pid
    finally:
        session.close()

    assert len(tokens) == 2 and tokens[0] != tokens[1]
    assert all("X-Amz-Signature=" in t and t.startswith("127.0.0.1/?Action=DbConnect") for t in tokens)
    shown = [target.display, str(target.describe()), caplog.text] + [r.getMessage() for r in caplog.records]
    for token in tokens:
        signature = token.split("X-Amz-Signature=")[1].split("&")[0]
        for text in shown:
            assert token not in text and signature not in text


def test_dsql_admin_user_gets_an_admin_token(fake_aws):
    signer = DsqlTokenProvider()
    assert "Action=DbConnectAdmin" in signer("abc.dsql.us-east-1.on.aws", "us-east-1", "admin")
    assert "Action=DbConnect&" in signer("abc.dsql.us-east-1.on.aws", "us-east-1", "app_user")


def test_dsql_without_credentials_fails_with_one_line(pg_server, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    target = open_target(
        f"dsql://postgres@127.0.0.1:{pg_server.port}/postgres", {"sslmode": "disable", "region": "us-east-1"}
    )
    with pytest.raises(TargetError, match="no AWS credentials"):
        target.check()


# ---- MongoDB --------------------------------------------------------------------------------------


def test_mongo_check_and_session(mongo_server):
    target = open_target(mongo_server.uri, {"database": "dbsurge_t"})
    assert isinstance(target, MongoTarget)
    target.check()
    session = target.connect()
    try:
        assert session.db.name == "dbsurge_t" and session.retries == 0
        assert session.db.command("ping")["ok"] == 1
    finally:
        session.close()


def test_mongo_check_fails_quickly_and_clearly():
    started = time.monotonic()
    with pytest.raises(TargetError) as info:
        open_target("mongodb://127.0.0.1:1/", {"server_selection_timeout_ms": "500"}).check()
    assert time.monotonic() - started < 3
    message = str(info.value)
    assert "connection refused" in message and "\n" not in message


# ---- gevent: psycopg waits through the hub ------------------------------------------------------

_GEVENT_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from gevent import monkey
    monkey.patch_all()
    import gevent
    import psycopg
    from dbsurge.base.errors import TargetError
    from dbsurge.targets import open_target
    from dbsurge.targets.gevent_wait import wait_gevent, wait_conn_gevent

    mode, uri = sys.argv[1], sys.argv[2]
    ticks = []
    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.05)
    gevent.spawn(ticker)

    if mode == "concurrency":
        target = open_target(uri)
        sessions = [target.connect() for _ in range(4)]
        assert psycopg.waiting.wait is wait_gevent and psycopg.waiting.wait_conn is wait_conn_gevent
        started = time.monotonic()
        jobs = [gevent.spawn(s.execute, "select pg_sleep(0.5)") for s in sessions]
        gevent.joinall(jobs, raise_error=True)
        elapsed = time.monotonic() - started
        for s in sessions:
            assert s.execute("select %s::int", (7,)).fetchone() == (7,)
            s.close()
        print(f"elapsed={elapsed:.3f} ticks={len(ticks)}")
    else:
        target = open_target(uri, {"connect_timeout": "1"})
        started = time.monotonic()
        try:
            target.check()
            print("no error")
        except TargetError as exc:
            print(f"elapsed={time.monotonic() - started:.3f} ticks={len(ticks)} error={exc}")
    """
)


def _run_gevent_script(mode: str, uri: str) -> dict[str, str]:
    result = subprocess.run(
        [sys.executable, "-c", _GEVENT_SCRIPT, mode, uri],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[-1]
    fields = dict(part.split("=", 1) for part in line.split(" ", 2)[:2])
    fields["line"] = line
    return fields


def test_gevent_wait_lets_queries_overlap(pg_server):
    fields = _run_gevent_script("concurrency", pg_server.uri)
    assert float(fields["elapsed"]) < 1.2, fields["line"]  # 4 x pg_sleep(0.5) overlapped, not 2 s in a row
    assert int(fields["ticks"]) >= 5, fields["line"]  # the hub kept running other greenlets


def test_gevent_connect_timeout_against_a_paused_server(pg_server):
    pg_server.pause()
    try:
        fields = _run_gevent_script("timeout", pg_server.uri)
    finally:
        pg_server.resume()
    assert "timeout" in fields["line"], fields["line"]
    assert float(fields["elapsed"]) < 3.5, fields["line"]
    assert int(fields["ticks"]) >= 20, fields["line"]  # ~2 s of 50 ms ticks: the wait did not block the hub


def test_every_registered_scheme_and_embedded_target_is_in_the_help():
    """`dbsurge run --help` listed postgresql://, dsql://, mongodb:// and two embedded targets while the code took
    dynamodb, alternator, cql, scylla, embedded-dynamodb and embedded-cassandra too."""
    import inspect

    from dbsurge.config.options import EMBEDDED_TARGETS, TARGET_HELP, TARGET_SCHEMES
    from dbsurge.embedded import servers
    from dbsurge.targets import _load_builtins, _schemes

    _load_builtins()
    assert set(_schemes) == set(TARGET_SCHEMES)
    for name in EMBEDDED_TARGETS:
        assert f'"{name}"' in inspect.getsource(servers.resolve_embedded), name
        assert name in TARGET_HELP.replace("- ", "-")
    for scheme in set(TARGET_SCHEMES) - {"postgres", "mongodb+srv"}:
        assert f"{scheme}://" in TARGET_HELP, scheme
