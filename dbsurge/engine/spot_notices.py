"""Spot interruption notices: a greenlet that watches the instance metadata and says when the host will go.

EC2 tells a Spot instance two minutes before it reclaims it, through the instance metadata
service (IMDS): ``/latest/meta-data/spot/instance-action`` answers 404 until then, and then
``{"action": "terminate", "time": "2026-12-01T10:02:00Z"}`` (or ``stop`` / ``hibernate``). Earlier,
``/latest/meta-data/events/recommendations/rebalance`` may answer ``{"noticeTime": "..."}``: the
instance is at elevated risk. The watcher polls both every 5 s with an IMDSv2 session token
(``PUT /latest/api/token``, then ``GET`` with ``X-aws-ec2-metadata-token``), and calls its callback
once per kind of notice::

    def leave(notice: SpotNotice) -> None:      # str(notice) is a one-line reason
        ...                                     # stop taking slots, drain, report, tell the master

    watcher = start_spot_watcher(imds_endpoint(), leave)   # a gevent Greenlet; watcher.kill() stops it

After an interruption notice the watcher stops (the host is going); after a rebalance
recommendation it goes on watching for the interruption. The caller decides what a rebalance
means (``notice.kind == "rebalance"``).

**When it runs.** Only when asked: ``--spot-watch`` (``DBSURGE_SPOT_WATCH=1``), which ``dbsurge
runners up --spot`` sets on every runner. It is not automatic, because on a host that is not an
EC2 instance (a laptop, a container elsewhere) the default endpoint ``http://169.254.169.254`` is a
link-local address that is someone else's or nobody's, and polling it would be useless traffic.
The endpoint is ``--imds-endpoint`` or ``DBSURGE_IMDS_ENDPOINT`` (tests use a server on 127.0.0.1).

The HTTP client is geventhttpclient's (a Locust dependency): cooperative with or without gevent's
monkey patching, so the watcher never blocks the worker's hub. Each request times out after 1 s.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import gevent

log = logging.getLogger(__name__)

DEFAULT_IMDS_ENDPOINT = "http://169.254.169.254"
TOKEN_PATH = "/latest/api/token"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
TOKEN_TTL_S = 21600  # IMDSv2's longest session: one token serves the whole run


@dataclass(frozen=True)
class SpotNotice:
    """A notice from the instance metadata: ``kind`` is ``interruption`` or ``rebalance``.

    ``action`` and ``time`` are the interruption's (``terminate`` and its UTC time), ``time`` the
    rebalance's ``noticeTime``; ``raw`` is the JSON as served. ``str(notice)`` is the reason in one line.
    """

    kind: str
    action: str = ""
    time: str = ""
    raw: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        if self.kind == "interruption":
            return f"spot interruption notice: {self.action or 'terminate'} at {self.time or 'an unknown time'}"
        return f"spot rebalance recommendation at {self.time or 'an unknown time'}"

    def __str__(self) -> str:
        return self.reason


class MetadataClient(Protocol):
    """What the watcher needs from an IMDS client: a path's body, or None while it answers 404."""

    def get(self, path: str) -> str | None: ...


def imds_endpoint(explicit: str | None = None) -> str:
    """The metadata endpoint: the argument, ``DBSURGE_IMDS_ENDPOINT``, else EC2's link-local address."""
    return (explicit or os.environ.get("DBSURGE_IMDS_ENDPOINT") or DEFAULT_IMDS_ENDPOINT).rstrip("/")


class ImdsClient:
    """IMDSv2 over HTTP: a session token first (``PUT``), then ``GET`` with it; a 401 renews the token once."""

    def __init__(self, endpoint: str, *, timeout_s: float = 1.0, token_ttl_s: int = TOKEN_TTL_S):
        from geventhttpclient import HTTPClient

        parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"bad IMDS endpoint {endpoint!r}: expected http://HOST[:PORT]")
        self.endpoint = endpoint
        self.token_ttl_s = token_ttl_s
        self._token: str | None = None
        self._http = HTTPClient(parts.hostname, parts.port or 80, connection_timeout=timeout_s,
                                network_timeout=timeout_s)

    def _token_now(self) -> str:
        if self._token is None:
            resp = self._http.request("PUT", TOKEN_PATH, b"",
                                      {"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_s)})
            body = resp.read().decode()
            if resp.status_code != 200:
                raise OSError(f"IMDS token request answered {resp.status_code}")
            self._token = body.strip()
        return self._token

    def get(self, path: str) -> str | None:
        for _attempt in range(2):
            resp = self._http.request("GET", path, headers={"X-aws-ec2-metadata-token": self._token_now()})
            body = resp.read().decode()
            if resp.status_code == 200:
                return body
            if resp.status_code == 404:
                return None
            if resp.status_code == 401:  # the token expired: one new one, one more try
                self._token = None
                continue
            raise OSError(f"IMDS {path} answered {resp.status_code}")
        raise OSError(f"IMDS {path}: the token was refused twice")

    def close(self) -> None:
        self._http.close()


def _parse(body: str) -> dict:
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def check_once(client: MetadataClient, seen: set[str]) -> list[SpotNotice]:
    """The notices the metadata shows now that are not in `seen` (which it updates). Pure but for `client`."""
    out = []
    if "interruption" not in seen:
        body = client.get(INSTANCE_ACTION_PATH)
        if body is not None:
            raw = _parse(body)
            out.append(SpotNotice("interruption", str(raw.get("action", "")), str(raw.get("time", "")), raw))
    if "rebalance" not in seen and not out:  # an interruption supersedes a rebalance recommendation
        body = client.get(REBALANCE_PATH)
        if body is not None:
            raw = _parse(body)
            out.append(SpotNotice("rebalance", "", str(raw.get("noticeTime", "")), raw))
    seen.update(n.kind for n in out)
    return out


def start_spot_watcher(endpoint: str | None, on_notice: Callable[[SpotNotice], Any], interval_s: float = 5.0,
                       client: MetadataClient | None = None) -> gevent.Greenlet:
    """Start polling the instance metadata every `interval_s`; call `on_notice(notice)` once per kind.

    `endpoint` None means `imds_endpoint()`. `client` replaces the HTTP client (anything with
    ``get(path) -> str | None``). The first poll is at once. An unreachable or failing metadata
    service is logged once and polled again; an exception in `on_notice` is logged, never raised
    into the hub. The greenlet ends after an interruption notice; ``kill()`` it to stop earlier.
    """
    if interval_s <= 0:
        raise ValueError("interval_s must be positive")
    own = client is None
    client = client or ImdsClient(imds_endpoint(endpoint))

    def watch() -> None:
        seen: set[str] = set()
        failing = False
        try:
            while "interruption" not in seen:
                try:
                    notices = check_once(client, seen)
                    failing = False
                except Exception as err:  # noqa: BLE001 - a flaky metadata service must not end the watch
                    if not failing:
                        log.warning("spot watcher: instance metadata unavailable (%s); still polling", err)
                    failing = True
                    notices = []
                for notice in notices:
                    log.warning("%s", notice.reason)
                    try:
                        on_notice(notice)
                    except Exception:
                        log.exception("spot watcher: the notice callback failed")
                if "interruption" not in seen:
                    gevent.sleep(interval_s)
        finally:
            if own and hasattr(client, "close"):
                client.close()

    return gevent.spawn(watch)


def add_spot_options(parser: Any) -> None:
    """``--spot-watch`` and ``--imds-endpoint`` on Locust's parser (for the plugin's ``init_command_line_parser``)."""
    parser.add_argument("--spot-watch", env_var="DBSURGE_SPOT_WATCH", action="store_true", default=False,
                        include_in_web_ui=False,
                        help="watch the EC2 instance metadata for Spot interruption notices and leave gracefully")
    parser.add_argument("--imds-endpoint", env_var="DBSURGE_IMDS_ENDPOINT", default=None, include_in_web_ui=False,
                        help=f"instance metadata endpoint for --spot-watch (default {DEFAULT_IMDS_ENDPOINT})")
