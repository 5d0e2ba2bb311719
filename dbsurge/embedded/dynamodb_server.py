"""The embedded DynamoDB-API server: moto's DynamoDB in a process of its own, with an optional rate limit.

``python -m dbsurge.embedded.dynamodb_server --port P [--host 127.0.0.1] [--throttle-rate N] [--throttle-burst B]
[--credentials-file FILE]`` serves moto's own WSGI application (the one ``moto_server`` runs) on a threaded
werkzeug server. `EmbeddedDynamo` in `dbsurge.embedded.servers` starts and stops it.

With ``--credentials-file FILE`` the server checks every request's SigV4 signature, as Amazon does: once it
listens it makes an IAM user (``dbsurge``, allowed ``dynamodb:*`` and ``iam:*``) with an access key through
moto's own IAM API on the same port, turns moto's IAM authentication on (its ``INITIAL_NO_AUTH_ACTION_COUNT``
setting, to 0: no request unchecked after that) and only then writes the key to FILE, an AWS shared credentials
file (profile ``default``, mode 0600): whoever reads the file meets a server that checks it. moto answers a
refused DynamoDB request in its IAM form (HTTP 403, an XML ``SignatureDoesNotMatch`` or ``InvalidClientTokenId``);
`AuthErrorsAsDynamoDB` answers it as DynamoDB does (HTTP 400, JSON ``InvalidSignatureException``,
``UnrecognizedClientException``, ``AccessDeniedException``), so that a client meets Amazon's answers here.

With ``--throttle-rate N`` a token bucket in front of moto admits N data-plane requests per second
(GetItem, PutItem, UpdateItem, BatchWriteItem...; table administration is never throttled) with bursts
of B (default N/10, at least 1), and answers the others as DynamoDB does when a table goes over its
capacity: HTTP 400 with ``ProvisionedThroughputExceededException``. That is real throttling, seen by
the client over HTTP: the binding's retries, their backoff and the ``throttled`` failure kind are
exercised end to end. `ThrottleMiddleware` counts what it admitted and refused; ``GET /dbsurge/throttle``
returns those counts as JSON.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
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
#: The IAM user whose access key ``--credentials-file`` receives.
IAM_USER = "dbsurge"
#: moto's IAM error code of a refused request -> DynamoDB's own code and message for it (what Amazon answers).
DYNAMODB_AUTH_ERRORS = {
    "SignatureDoesNotMatch": ("InvalidSignatureException",
                              ("The request signature we calculated does not match the signature you provided. Check "
                               "your AWS Secret Access Key and signing method. Consult the service documentation for "
                               "details.")),
    "InvalidClientTokenId": ("UnrecognizedClientException", "The security token included in the request is invalid."),
    "AccessDenied": ("AccessDeniedException", None),  # moto's own message: it names the user and the action
}

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


class AuthErrorsAsDynamoDB:
    """WSGI middleware: a DynamoDB request moto's IAM check refused is answered as DynamoDB answers it.

    moto answers in its IAM services' form (HTTP 403, an XML ``<Code>SignatureDoesNotMatch</Code>``), which a
    DynamoDB client parses as an error with the code "403"; DynamoDB itself answers HTTP 400 with a JSON
    ``__type`` (`DYNAMODB_AUTH_ERRORS`). Other answers, and requests to moto's other services, pass unchanged.
    """

    def __init__(self, app: Wsgi) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not str(environ.get("HTTP_X_AMZ_TARGET", "")).startswith(TARGET_PREFIX):
            return self.app(environ, start_response)
        answer: dict[str, Any] = {}

        def keep(status: str, headers: list, exc_info: Any = None) -> Callable[[bytes], None]:
            answer.update(status=status, headers=headers)
            return lambda data: None  # moto's application writes nothing through it

        body = self.app(environ, keep)
        try:
            data = b"".join(body)
        finally:
            getattr(body, "close", lambda: None)()
        status, headers = answer["status"], answer["headers"]
        if status.startswith("403"):
            translated = _dynamodb_auth_error(data)
            if translated is not None:
                data = translated
                status = "400 Bad Request"
                headers = [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(data)))]
        start_response(status, headers)
        return [data]


def _dynamodb_auth_error(xml: bytes) -> bytes | None:
    """DynamoDB's JSON answer for moto's XML refusal `xml`, or None when it is not one `DYNAMODB_AUTH_ERRORS` has."""
    text = xml.decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]+)</Code>", text)
    if code is None or code.group(1) not in DYNAMODB_AUTH_ERRORS:
        return None
    dynamo_code, message = DYNAMODB_AUTH_ERRORS[code.group(1)]
    if message is None:
        found = re.search(r"<Message>([^<]*)</Message>", text)
        message = found.group(1) if found else dynamo_code
    return json.dumps({"__type": f"com.amazon.coral.service#{dynamo_code}", "message": message}).encode()


def build_app(throttle_rate: float | None = None, throttle_burst: float | None = None) -> ThrottleMiddleware:
    """moto's multi-service WSGI app behind a `ThrottleMiddleware` (no limit when ``throttle_rate`` is None)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    bucket = None
    if throttle_rate:
        bucket = TokenBucket(throttle_rate, throttle_burst or max(1.0, throttle_rate / 10))
    return ThrottleMiddleware(AuthErrorsAsDynamoDB(DomainDispatcherApplication(create_backend_app)), bucket)


def make_credentials(url: str, path: Path) -> None:
    """Make the IAM user and its access key through moto's IAM API at `url`, turn IAM authentication on, and write
    the key to `path` (an AWS shared credentials file, mode 0600), in that order."""
    import boto3
    from moto import settings

    # before authentication is on, moto takes any signature: these requests are the only ones it does not check
    iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1", aws_access_key_id="setup",
                       aws_secret_access_key="setup")
    iam.create_user(UserName=IAM_USER)
    policy = {"Version": "2012-10-17",
              "Statement": [{"Effect": "Allow", "Action": ["dynamodb:*", "iam:*"], "Resource": "*"}]}
    iam.put_user_policy(UserName=IAM_USER, PolicyName="dbsurge-embedded", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=IAM_USER)["AccessKey"]
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from now on every request's signature is checked
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"[default]\naws_access_key_id = {key['AccessKeyId']}\n"
                  f"aws_secret_access_key = {key['SecretAccessKey']}\n")
    os.replace(partial, path)  # whole or not there: the readiness check reads it


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT."""
    parser = OneLineParser(prog="python -m dbsurge.embedded.dynamodb_server", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--throttle-rate", type=float, default=None, help="data-plane requests per second admitted")
    parser.add_argument("--throttle-burst", type=float, default=None, help="requests admitted at once (rate/10)")
    parser.add_argument("--credentials-file", type=Path, default=None,
                        help="check SigV4 signatures; write the one IAM user's access key to this file")
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
          + (f", throttled at {args.throttle_rate:g} requests/s" if args.throttle_rate else "")
          + (", checking SigV4 signatures" if args.credentials_file else ""), flush=True)
    failed: list[BaseException] = []
    if args.credentials_file is not None:
        args.credentials_file.unlink(missing_ok=True)  # a previous start's key is not this one's

        def setup() -> None:
            try:
                host = "127.0.0.1" if args.host in ("", "0.0.0.0") else args.host
                make_credentials(f"http://{_bracket(host)}:{args.port}", args.credentials_file)
            except Exception as exc:  # noqa: BLE001 - said in the log; the server stops
                failed.append(exc)
                print(f"could not make the IAM user's access key: {type(exc).__name__}: {exc}", flush=True)
                server.shutdown()

        # from a thread: the IAM requests go to this server, which serves them once serve_forever runs
        threading.Thread(target=setup, daemon=True).start()
    server.serve_forever()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
