"""Secrets: no password on a command line, in a message, in the run directory, or from the master.

A real role with a password (``Sup3r-S3cret?pw``: an unescaped ``?``) on the session's PostgreSQL, with
scram-sha-256 for it in pg_hba.conf; then ``dbsurge run --processes 2`` with the password in the URI, in
DBSURGE_TARGET, and in AWS Secrets Manager (moto), scanning every process's command line while it runs.
A worker started without any way to the password records ``connect`` failures with one clear line.
Unit tests: `redact_uri` for many spellings, `dbsurge.config.credentials`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote, quote_plus

import psutil
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runs import REPO, explain, only_run_dir, read_json

from dbsurge.base.errors import TargetError
from dbsurge.base.redact import redact_text, redact_uri, register_uri_secrets, uri_password
from dbsurge.config import credentials
from dbsurge.embedded.servers import free_port
from dbsurge.engine.run_command import move_target_to_env
from dbsurge.targets import open_target

ROLE = "dbsurge_secret_app"
PASSWORD = "Sup3r-S3cret?pw"
FORMS = (PASSWORD, quote(PASSWORD, safe=""), quote_plus(PASSWORD))
AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


# ---- redact_uri: however the password is spelled --------------------------------------------------------

SPELLINGS = [
    "pa?ss", "p@ss", "pa/ss", "pa#ss", "pa:ss", "p%40ss%3F", "a/b?c#d@e:f", "p@ss@w0rd", "pw?x=1&y=2",
    "?leading", "trailing@", "with space", "pa%ss", "p+w", "üñí©ødé", "pa;ss", "pa[ss]",
]


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "dsql", "mongodb", "mongodb+srv"])
@pytest.mark.parametrize("password", SPELLINGS)
def test_redact_uri_masks_every_spelling(scheme, password):
    for written in (password, quote(password, safe="")):
        for rest in ("db.example.com:5432/app?sslmode=require", "h1:1,h2:2/app", "[::1]:5432/app", "h", "h/"):
            uri = f"{scheme}://app:{written}@{rest}"
            red = redact_uri(uri)
            assert red == f"{scheme}://app:***@{rest}", uri
            assert uri_password(uri) == written


@settings(max_examples=300, deadline=None)
@given(password=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=4, max_size=24),
       encode=st.booleans())
def test_redact_uri_and_text_never_show_the_password(password, encode):
    written = quote(password, safe="") if encode else password
    uri = f"postgresql://app:{written}@db.example.com:5432/app?sslmode=require"
    assert redact_uri(uri) == "postgresql://app:***@db.example.com:5432/app?sslmode=require"
    register_uri_secrets(uri)
    line = redact_text(f"connection to {uri} failed: password {password!s} / {written} rejected")
    assert written not in line and password not in line


@pytest.mark.parametrize(("uri", "expected"), [
    ("postgresql://h/db?application_name=me@example.com&sslmode=require",
     "postgresql://h/db?application_name=me@example.com&sslmode=require"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("postgresql://u:pw@/db?host=/tmp", "postgresql://u:***@/db?host=/tmp"),
    ("postgresql://u:pw@%2Ftmp/db", "postgresql://u:***@%2Ftmp/db"),
    ("postgresql://u@h/db?password=x%3F", "postgresql://u@h/db?password=***"),
    # an "@" in the last query value: more is masked, never less
    ("postgresql://u:pw@h/db?application_name=me@x", "postgresql://u:***@x"),
])
def test_redact_uri_edge_cases(uri, expected):
    assert redact_uri(uri) == expected


@pytest.mark.parametrize("uri", [
    "postgresql://app:pa?ss-word@127.0.0.1:1/db",
    "postgresql://app:pa%3Fss-word@127.0.0.1:1/db",
    "postgresql://app:pa/ss-word@127.0.0.1:1/db",
    "postgresql://app:pa@ss-word@127.0.0.1:1/db",
    "postgresql://app:pa%ss-word@127.0.0.1:1/db",
    "postgresql://app:pa#ss:word@127.0.0.1:1/db",
    "mongodb://app:pa?ss-word@127.0.0.1:1/db?serverSelectionTimeoutMS=300",
    "mongodb://app:pa%3Fss-word@127.0.0.1:1/db?serverSelectionTimeoutMS=300",
    "mongodb://app:pa@ss-word@127.0.0.1:1/db",
    "mongodb://app:pa/ss-word@127.0.0.1:1/db",
    "mongodb://app:pa:ss-word@127.0.0.1:1/db",
])
def test_target_errors_never_show_the_password(uri):
    with pytest.raises(TargetError) as info:
        open_target(uri).check()
    message = str(info.value)
    for fragment in ("pa?ss", "pa%3Fss", "pa/ss", "pa@ss", "pa%ss", "ss-word", "ss:word", "pa#ss"):
        assert fragment not in message, message
    assert "app:***@127.0.0.1:1/db" in message and "\n" not in message


def test_unescaped_delimiters_are_refused_with_a_hint():
    with pytest.raises(TargetError, match=r"unescaped '/': percent-encode it"):
        open_target("postgresql://app:pa/ss-word@h/db")
    with pytest.raises(TargetError, match=r"unescaped '\?'"):
        open_target("mongodb://app:pa?ss-word@h/db")
    open_target("postgresql://app:pa?ss:w#rd@h/db")  # libpq reads these as the password


# ---- credentials ---------------------------------------------------------------------------------------------


def test_strip_and_restore_the_password():
    uri = "postgresql://app:Sup3r-S3cret?pw@h:5433/db?sslmode=require"
    assert credentials.strip_password(uri) == "postgresql://app@h:5433/db?sslmode=require"
    assert credentials.password_of(uri) == PASSWORD
    back = credentials.with_credentials(credentials.strip_password(uri), PASSWORD)
    assert back == "postgresql://app:Sup3r-S3cret%3Fpw@h:5433/db?sslmode=require"
    assert credentials.password_of(back) == PASSWORD
    assert credentials.strip_password("postgresql://app@h/db?password=x&sslmode=require") == \
        "postgresql://app@h/db?sslmode=require"
    assert credentials.strip_password("mongodb://u:p%2Bw@h1,h2/?replicaSet=rs0") == "mongodb://u@h1,h2/?replicaSet=rs0"
    assert credentials.password_of("mongodb://u:p+w@h/") == "p w"  # pymongo reads "+" as a space
    assert credentials.strip_password("postgresql://h/db?application_name=me@x") == \
        "postgresql://h/db?application_name=me@x"  # no userinfo: untouched
    assert credentials.identity("postgresql://app:x@H:5432/db") == credentials.identity("postgres://app@h/other")
    assert credentials.identity("postgresql://app@h:5433/db") != credentials.identity("postgresql://app@h/db")
    assert credentials.identity("postgresql://other@h/db") != credentials.identity("postgresql://app@h/db")


class FakeSecrets:
    def __init__(self, value):
        self.value, self.calls = value, 0

    def get_secret_value(self, SecretId):
        self.calls += 1
        if isinstance(self.value, Exception):
            raise self.value
        return {"SecretString": self.value}


def test_resolve_order():
    uri = "postgresql://app@h/db"
    wanted = {"needs_password": True, "target_secret": "arn:aws:secretsmanager:eu-west-1:1:secret:x"}
    secret = FakeSecrets(json.dumps({"username": "app", "password": "from-the-secret"}))
    own = credentials.Sources(target="postgresql://app:from-own-uri@h:5432/db")
    # (a) the worker's own URI for the same login, then DBSURGE_TARGET, then DBSURGE_TARGET_PASSWORD
    assert credentials.password_of(credentials.resolve(uri, wanted, own, {}, secret)) == "from-own-uri"
    env = {"DBSURGE_TARGET": "postgresql://app:from-env-uri@h/db", "DBSURGE_TARGET_PASSWORD": "from-env-pw"}
    assert credentials.password_of(credentials.resolve(uri, wanted, None, env, secret)) == "from-env-uri"
    other = {"DBSURGE_TARGET": "postgresql://app:nope@elsewhere/db", "DBSURGE_TARGET_PASSWORD": "from-env-pw"}
    assert credentials.password_of(credentials.resolve(uri, wanted, None, other, secret)) == "from-env-pw"
    assert secret.calls == 0
    # (b) the secret: the worker's own ARN or the master's
    assert credentials.password_of(credentials.resolve(uri, wanted, None, {}, secret)) == "from-the-secret"
    assert secret.calls == 1
    # nothing needed: trust auth, DSQL, a URI that has one
    assert credentials.resolve(uri, {"needs_password": False}, None, {}) == uri
    assert credentials.resolve("postgresql://app:x@h/db", wanted, None, {}) == "postgresql://app:x@h/db"
    with pytest.raises(TargetError) as info:
        credentials.resolve("postgresql://app@h:5432/db", {"needs_password": True}, None, {})
    assert str(info.value) == ("no password for user app on host h:5432: set DBSURGE_TARGET_PASSWORD or "
                               "--target-secret on this worker")


def test_secret_formats_and_errors():
    full = {"username": "admin", "password": "p?w", "host": "secret-host", "port": 5433, "dbname": "app"}
    assert credentials.apply_secret("postgresql://db.example.com/", full) == \
        "postgresql://admin:p%3Fw@db.example.com/app"  # the URI's host wins; the dbname fills in
    assert credentials.apply_secret("postgresql:///?sslmode=require", full) == \
        "postgresql://admin:p%3Fw@secret-host:5433/app?sslmode=require"
    assert credentials.apply_secret("postgresql://admin@h/db", full) == "postgresql://admin:p%3Fw@h/db"
    with pytest.raises(TargetError, match="for user admin but the target URI names user app"):
        credentials.apply_secret("postgresql://app@h/db", full)
    assert credentials.parse_secret("plain-password") == {"password": "plain-password"}
    with pytest.raises(TargetError, match="no \"password\" field"):
        credentials.parse_secret('{"username": "x"}')
    from botocore.exceptions import ClientError, NoCredentialsError

    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "GetSecretValue")
    with pytest.raises(TargetError, match=r"cannot read --target-secret arn:x: AccessDeniedException: not allowed"):
        credentials.fetch_secret("arn:x", client=FakeSecrets(denied))
    with pytest.raises(TargetError, match="no AWS credentials"):
        credentials.fetch_secret("arn:x", client=FakeSecrets(NoCredentialsError()))
    assert credentials.region_of("arn:aws:secretsmanager:us-west-2:123456789012:secret:db-AbCdEf") == "us-west-2"
    assert credentials.setup_fields("dsql://admin@x.dsql.us-east-1.on.aws", "dsql")["needs_password"] is False


def test_every_writer_of_run_json_and_events_removes_secrets(tmp_path):
    """run.json and events.jsonl are written by one writer, which removes secrets whoever calls it: the run
    itself, `update_run_json` (the collectors, ``dbsurge cost``) and `append_event`."""
    from dbsurge.collectors.rundata import append_event, update_run_json

    from dbsurge.rundir import RunDirectory

    rd = RunDirectory(tmp_path, "r1")
    rd.write_meta(target="postgresql://u:hunter2@db/x")
    rd.close()
    update_run_json(rd.path, cost_inputs={"uri": "postgresql://u:hunter2@db/x", "password": "hunter2"})
    append_event(rd.path, {"kind": "error", "message": "mongodb://u:hunter2@db/"})
    text = (rd.path / "run.json").read_text() + (rd.path / "events.jsonl").read_text()
    assert "hunter2" not in text and "***" in text


def test_move_target_to_env():
    assert move_target_to_env(["run", "--target", "u", "--quiet"]) == (["run", "--quiet"], "u")
    assert move_target_to_env(["run", "--target=u", "-t", "1s"]) == (["run", "-t", "1s"], "u")
    assert move_target_to_env(["run", "--quiet"]) == (["run", "--quiet"], None)


# ---- real runs --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pw_role(pg_server):
    """A superuser role that must give its password (scram-sha-256), on the session's PostgreSQL."""
    admin = psycopg.connect(pg_server.uri, autocommit=True)
    hba = Path(admin.execute("show hba_file").fetchone()[0])
    original = hba.read_text()
    try:
        admin.execute(f"drop role if exists {ROLE}")
        admin.execute(f"create role {ROLE} login superuser password '{PASSWORD}'")
        hba.write_text(f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n" + original)
        admin.execute("select pg_reload_conf()")
        time.sleep(0.3)
        with pytest.raises(psycopg.OperationalError):  # the password is really needed
            psycopg.connect(f"postgresql://{ROLE}@127.0.0.1:{pg_server.port}/postgres", connect_timeout=5).close()
        psycopg.connect(f"postgresql://{ROLE}:{quote(PASSWORD)}@127.0.0.1:{pg_server.port}/postgres").close()
        yield pg_server.port
    finally:
        hba.write_text(original)
        admin.execute("select pg_reload_conf()")
        admin.close()


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DBSURGE_TARGET", "AWS_"))}
    return {**env, **extra}


def _scan_command_lines(proc: subprocess.Popen, timeout: float) -> tuple[set[int], list[str]]:
    """Until `proc` ends: every process's command line, every 50 ms. Returns (pids seen, leaks)."""
    seen, leaks, top_clean = set(), [], False
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        for p in psutil.process_iter(["pid", "cmdline"]):
            line = " ".join(p.info["cmdline"] or [])
            if "locust" in line or "dbsurge" in line:
                seen.add(p.info["pid"])
            if any(form in line for form in FORMS):
                # `dbsurge run --target URI` as typed: it re-executes itself without it at once
                if p.info["pid"] == proc.pid and not top_clean:
                    continue
                leaks.append(f"{p.info['pid']}: {line}")
            elif p.info["pid"] == proc.pid:
                top_clean = True
        time.sleep(0.05)
    return seen, leaks


def _assert_secret_free(tmp_path: Path, out: str, err: str) -> Path:
    for form in FORMS:
        assert form not in out and form not in err
    run = only_run_dir(tmp_path / "results")
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "run.json" for p in files)
    for p in files:
        data = p.read_bytes()
        for form in FORMS:
            assert form.encode() not in data, p
    return run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["uri", "env", "secret"])
def test_run_with_a_password_keeps_it_secret(tmp_path, pw_role, moto_url, how):
    port = pw_role
    base = f"127.0.0.1:{port}/postgres"
    env = _clean_env()
    args = ["--workload", "orders", "--shape", "constant", "--rate", "20", "--duration", "3s", "--processes", "2",
            "--quiet", "--workload-option", "products=2000"]
    if how == "uri":
        args += ["--target", f"postgresql://{ROLE}:{PASSWORD}@{base}"]  # the "?" unescaped: libpq takes it
    elif how == "env":
        env["DBSURGE_TARGET"] = f"postgresql://{ROLE}:{quote(PASSWORD, safe='')}@{base}"
    else:
        import boto3

        env.update(AWS, AWS_ENDPOINT_URL=moto_url)
        sm = boto3.client("secretsmanager", endpoint_url=moto_url, region_name="us-east-1", **_aws_keys())
        arn = sm.create_secret(Name=f"dbsurge/test-{tmp_path.name}", SecretString=json.dumps(
            {"username": ROLE, "password": PASSWORD, "engine": "postgres", "host": "127.0.0.1", "port": port,
             "dbname": "postgres"}))["ARN"]
        args += ["--target", f"postgresql://{ROLE}@{base}", "--target-secret", arn]
    proc = subprocess.Popen([sys.executable, "-m", "dbsurge.commands.cli", "run", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen, leaks = _scan_command_lines(proc, timeout=100)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not leaks, leaks
    assert len(seen) >= 4, seen  # dbsurge, the Locust master and its two workers were scanned
    completed = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert proc.returncode == 0, explain(completed)
    run = _assert_secret_free(tmp_path, out, err)
    results = read_json(run / "run.json")["results"]
    assert results["operations"] > 0 and results["failures"] == 0, results  # the workers had the password


def _aws_keys() -> dict:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


SPY = """
from locust import events
from locust.runners import WorkerRunner


@events.spawning_complete.add_listener
def _seen(**_kw):
    env = _env["env"]
    if isinstance(env.runner, WorkerRunner):
        with open({out!r}, "a") as f:
            f.write(str(env.parsed_options.target) + "\\n")


_env = {{}}


@events.init.add_listener
def _init(environment, **_kw):
    _env["env"] = environment
"""


@pytest.mark.timeout(90)
def test_a_worker_without_the_password_records_connect_failures(tmp_path, pw_role):
    port = str(free_port())
    # on the worker: the options Locust's master sent with each spawn message (they carry --target)
    spy = tmp_path / "spy.py"
    spy.write_text(SPY.format(out=str(tmp_path / "worker-options.txt")))
    files = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py,{spy}"
    common = ["--operation", "product_lookup", "--workload-option", "products=2000"]
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", files, "--master", "--headless", "--expect-workers", "1",
         "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--rate", "20", "-t", "3s",
         "--no-db-sampler", "--results-dir", str(tmp_path / "results"), *common],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=_clean_env(DBSURGE_TARGET=f"postgresql://{ROLE}:{quote(PASSWORD, safe='')}@127.0.0.1:{pw_role}/postgres"))
    worker = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", files, "--worker", "--master-host", "127.0.0.1", "--master-port",
         port, *common], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env())
    try:
        master_out, _ = master.communicate(timeout=75)
        worker_out, _ = worker.communicate(timeout=15)
    finally:
        for p in (master, worker):
            if p.poll() is None:
                p.kill()
    expected = (f"no password for user {ROLE} on host 127.0.0.1:{pw_role}: set DBSURGE_TARGET_PASSWORD or "
                f"--target-secret on this worker")
    assert expected in worker_out, worker_out[-3000:]
    seen_by_worker = (tmp_path / "worker-options.txt").read_text().split()
    assert seen_by_worker and set(seen_by_worker) == {f"postgresql://{ROLE}@127.0.0.1:{pw_role}/postgres"}
    assert "Traceback" not in worker_out, worker_out[-3000:]
    run = _assert_secret_free(tmp_path, master_out, worker_out)
    results = read_json(run / "run.json")["results"]
    assert results["operations"] > 0 and results["ok"] == 0 and results["failures"] == results["operations"], results
    events = (run / "events.jsonl").read_text()
    assert "connect" in events and "no password for user" in events, events[-2000:]
