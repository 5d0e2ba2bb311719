"""The Spot watcher against a local metadata service on 127.0.0.1 (gevent's WSGI server), never EC2's address.

The fake IMDS answers like EC2's: a session token for ``PUT /latest/api/token``, 401 for a GET
without a valid token, 404 on the notice paths until the test sets a notice.
"""

from __future__ import annotations

import json
import time

import gevent
import pytest
from gevent.pywsgi import WSGIServer

from dbsurge.embedded.servers import free_port
from dbsurge.engine.spot_notices import (
    DEFAULT_IMDS_ENDPOINT,
    INSTANCE_ACTION_PATH,
    REBALANCE_PATH,
    ImdsClient,
    SpotNotice,
    imds_endpoint,
    start_spot_watcher,
)


class FakeImds:
    """IMDSv2 paths served from `notices`; `tokens` counts tokens issued, `requests` logs (method, path, token)."""

    def __init__(self) -> None:
        self.notices: dict[str, dict] = {}
        self.token = "tok-0"
        self.tokens = 0
        self.requests: list[tuple[str, str, str | None]] = []

    def __call__(self, environ, start_response):
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        self.requests.append((method, path, environ.get("HTTP_X_AWS_EC2_METADATA_TOKEN")))
        if method == "PUT" and path == "/latest/api/token":
            assert environ.get("HTTP_X_AWS_EC2_METADATA_TOKEN_TTL_SECONDS")
            self.tokens += 1
            self.token = f"tok-{self.tokens}"
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [self.token.encode()]
        if environ.get("HTTP_X_AWS_EC2_METADATA_TOKEN") != self.token:
            start_response("401 Unauthorized", [])
            return [b""]
        if path in self.notices:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [json.dumps(self.notices[path]).encode()]
        start_response("404 Not Found", [("Content-Type", "text/html")])
        return [b"<html>404 - Not Found</html>"]


@pytest.fixture
def imds():
    app = FakeImds()
    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    app.endpoint = f"http://127.0.0.1:{server.server_port}"
    yield app
    server.stop(timeout=1)


def _wait(cond, timeout: float = 30.0) -> None:  # long: a starved machine's first poll took 2.5 s
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        gevent.sleep(0.01)
    assert cond()


def test_notices_in_order_then_the_watch_ends(imds):
    got: list[SpotNotice] = []
    watcher = start_spot_watcher(imds.endpoint, got.append, interval_s=0.05)
    try:
        _wait(lambda: len([r for r in imds.requests if r[1] == INSTANCE_ACTION_PATH]) >= 3)
        assert got == [] and not watcher.dead  # 404s: no notice yet
        imds.notices[REBALANCE_PATH] = {"noticeTime": "2026-12-01T10:00:00Z"}
        _wait(lambda: len(got) == 1)
        assert got[0].kind == "rebalance" and "rebalance" in str(got[0]) and not watcher.dead
        imds.notices[INSTANCE_ACTION_PATH] = {"action": "terminate", "time": "2026-12-01T10:02:00Z"}
        watcher.join(timeout=30)
        assert watcher.dead and watcher.successful()
    finally:
        watcher.kill()
    assert [n.kind for n in got] == ["rebalance", "interruption"]  # each once, however many polls saw it
    assert got[1].action == "terminate" and got[1].time == "2026-12-01T10:02:00Z"
    assert str(got[1]) == "spot interruption notice: terminate at 2026-12-01T10:02:00Z"
    assert imds.tokens == 1 and all(tok == "tok-1" for m, _, tok in imds.requests if m == "GET")


def test_an_expired_token_is_renewed(imds):
    got: list[SpotNotice] = []
    watcher = start_spot_watcher(imds.endpoint, got.append, interval_s=0.05)
    try:
        _wait(lambda: imds.tokens == 1 and len(imds.requests) >= 3)
        imds.token = "rotated"  # the session token expired on the server's side
        imds.notices[INSTANCE_ACTION_PATH] = {"action": "stop", "time": "2026-12-01T11:00:00Z"}
        watcher.join(timeout=30)
    finally:
        watcher.kill()
    assert imds.tokens == 2 and [n.action for n in got] == ["stop"]


class _CountingClient(ImdsClient):
    """The real IMDS client, counting the polls that failed."""

    failed = 0

    def get(self, path: str) -> str | None:
        try:
            return super().get(path)
        except Exception:
            self.failed += 1
            raise


def test_an_unreachable_endpoint_keeps_polling_quietly(caplog):
    """Nothing listens at the endpoint: the first failed poll is logged, the next ones are not, and the watch goes on.

    The test waits for the failed polls themselves, not for a span of time: the first poll does work once per
    process (gevent's resolver starts its first thread), and on a starved machine it failed 2.5 s after the
    start, where a 0.4 s window had seen no poll fail yet (``assert 0 == 1``, once in the suite).
    """
    port = free_port()  # nothing listens there
    client = _CountingClient(f"http://127.0.0.1:{port}")
    watcher = start_spot_watcher(client.endpoint, lambda n: None, interval_s=0.05, client=client)
    try:
        _wait(lambda: client.failed >= 5)
        assert not watcher.dead
    finally:
        watcher.kill()
        client.close()
    assert len([r for r in caplog.records if "metadata unavailable" in r.getMessage()]) == 1


def test_a_failing_callback_does_not_end_the_watch(imds):
    calls = []

    def boom(notice):
        calls.append(notice.kind)
        raise RuntimeError("boom")

    imds.notices[REBALANCE_PATH] = {"noticeTime": "t"}
    watcher = start_spot_watcher(imds.endpoint, boom, interval_s=0.05)
    try:
        _wait(lambda: calls == ["rebalance"])
        gevent.sleep(0.15)
        assert not watcher.dead
        imds.notices[INSTANCE_ACTION_PATH] = {"action": "terminate", "time": "t2"}
        watcher.join(timeout=30)
        assert watcher.dead and calls == ["rebalance", "interruption"]
    finally:
        watcher.kill()


def test_endpoint_default_and_environment(monkeypatch):
    monkeypatch.delenv("DBSURGE_IMDS_ENDPOINT", raising=False)
    assert imds_endpoint() == DEFAULT_IMDS_ENDPOINT == "http://169.254.169.254"
    monkeypatch.setenv("DBSURGE_IMDS_ENDPOINT", "http://127.0.0.1:9/")
    assert imds_endpoint() == "http://127.0.0.1:9" and imds_endpoint("http://127.0.0.2:1") == "http://127.0.0.2:1"
