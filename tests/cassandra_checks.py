"""What the Cassandra tests check before they start a JVM (tests/conftest.py `cql_uri`, tests/test_cql_contract.py,
tests/test_cql_hosts.py): one copy of the Java-and-jars check and of "is the session's server running".

- `need_java_and_jars(hint)`: Java 17 found and Cassandra's jars fetched (Maven, once per machine); otherwise the
  test skips and says what to install, or fails in CI (CI=true), where `make test` installs both.
- `session_cassandra_running()`: whether `dbsurge embedded status cassandra` says a kept server runs in this
  session's $DBSURGE_HOME (one JVM at a time: a test that starts its own skips then).
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest


def need_java_and_jars(hint: str = "") -> None:
    """Skip the test (fail it in CI) unless Java and Cassandra's jars are there; `hint` ends the skip's reason."""
    from dbsurge.embedded import cassandra_jvm
    from dbsurge.base.errors import UserError

    try:
        cassandra_jvm.find_java()
        cassandra_jvm.cassandra_jars()
    except UserError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the CQL tests against a real Cassandra: {exc}")
        pytest.skip(f"no CQL server: {exc}{hint}")


def session_cassandra_running() -> bool:
    """True when the session's kept Cassandra (`dbsurge embedded start cassandra`) runs."""
    from dbsurge.embedded.servers import embedded_main

    with contextlib.redirect_stdout(io.StringIO()) as status:
        embedded_main(["status", "cassandra"])
    return status.getvalue().strip() != "cassandra: stopped"
