"""The embedded DynamoDB-API server: moto's DynamoDB in a process of its own, with an optional rate limit.

``python -m dbsurge.embedded.dynamodb_server --port P [--host 127.0.0.1] [--throttle-rate N] [--throttle-burst B]``
serves moto's own WSGI application (the one ``moto_server`` runs) on a threaded werkzeug server.
`EmbeddedDynamo` in `dbsurge.embedded.servers` starts and stops it.

With ``--throttle-rate N`` a token bucket in front of moto admits N data-plane requests per second
(GetItem, PutItem, UpdateItem, BatchWriteItem...; table administration is never throttled) with bursts
of B (default N/10, at least 1), and answers the others as DynamoDB does when a table goes over its
capacity: HTTP 400 with ``ProvisionedThroughputExceededException``. That is real throttling, seen by
the client over HTTP: the binding's retries, their backoff and the ``throttled`` failure kind are
exercised end to end. `ThrottleMiddleware` counts what it admitted and refused; ``GET /dbsurge/throttle``
returns those counts as JSON.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from dbsurge.base.errors import UserError
from dbsurge.config.option_names import OneLineParser

#: Operations a table's capacity covers (DynamoDB throttles these, not the control plane).
DATA_PLANE = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "BatchGetItem", "BatchWriteItem",
                        "Query", "Scan", "TransactGetItems", "TransactWriteItems"})
TARGET_PREFIX = "DynamoDB_20120810."
THROTTLED_BODY = json.dumps({
    "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
    "message": "The level of configured provisioned throughput for the table was exceeded "
               "(dbsurge embedded-dynamodb rate limit)",
}).encode()
STATS_PATH = "/dbsurge/throttle"

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; `take` spends one if there is one.

    >>> clock = iter([0.0, 0.0, 0.0, 0.5]).__next__
    >>> bucket = TokenBucket(rate=2, burst=1, clock=clock)
    >>> bucket.take(), bucket.take(), bucket.take()
    (True, False, True)
    """

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = burst
        self._last = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class ThrottleMiddleware:
    """WSGI middleware: data-plane DynamoDB requests beyond the bucket's rate get ProvisionedThroughputExceeded."""

    def __init__(self, app: Wsgi, bucket: TokenBucket | None) -> None:
        self.app = app
        self.bucket = bucket
        self.admitted = 0
        self.throttled = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == STATS_PATH:
            body = json.dumps({"admitted": self.admitted, "throttled": self.throttled,
                               "rate": self.bucket.rate if self.bucket else None}).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).removeprefix(TARGET_PREFIX)
        if self.bucket is not None and operation in DATA_PLANE:
            if not self.bucket.take():
                self.throttled += 1
                # the request body is read and dropped, so that a kept-alive connection stays in step
                length = int(environ.get("CONTENT_LENGTH") or 0)
                if length:
                    environ["wsgi.input"].read(length)
                start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0"),
                                                   ("Content-Length", str(len(THROTTLED_BODY)))])
                return [THROTTLED_BODY]
            self.admitted += 1
        return self.app(environ, start_response)


def build_app(throttle_rate: float | None = None, throttle_burst: float | None = None) -> ThrottleMiddleware:
    """moto's multi-service WSGI app behind a `ThrottleMiddleware` (no limit when ``throttle_rate`` is None)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    bucket = None
    if throttle_rate:
        bucket = TokenBucket(throttle_rate, throttle_burst or max(1.0, throttle_rate / 10))
    return ThrottleMiddleware(DomainDispatcherApplication(create_backend_app), bucket)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT."""
    parser = OneLineParser(prog="python -m dbsurge.embedded.dynamodb_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--throttle-rate", type=float, default=None, help="data-plane requests per second admitted")
    parser.add_argument("--throttle-burst", type=float, default=None, help="requests admitted at once (rate/10)")
    try:
        args = parser.parse_args(argv)
    except UserError as err:
        sys.stderr.write(f"{err}\n")
        return err.exit_code
    from moto.moto_server.threaded_moto_server import MotoRequestHandler
    from werkzeug.serving import make_server

    server = make_server(args.host, args.port, build_app(args.throttle_rate, args.throttle_burst), threaded=True,
                         request_handler=MotoRequestHandler)

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever to return: call it from another thread
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"dbsurge embedded dynamodb (moto) on {args.host}:{args.port}"
          + (f", throttled at {args.throttle_rate:g} requests/s" if args.throttle_rate else ""), flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
