"""DynamoDB-API targets through boto3: Amazon DynamoDB and ScyllaDB Alternator (and any DynamoDB-API server).

URIs:

- ``dynamodb://`` (or ``dynamodb://dynamodb.<region>.amazonaws.com``): Amazon DynamoDB over HTTPS, the
  region from the option ``region``, the host name, ``AWS_REGION``/``AWS_DEFAULT_REGION`` or the AWS
  config file;
- ``dynamodb://host:port``: another DynamoDB-API endpoint (DynamoDB Local, moto's server, the
  ``embedded-dynamodb`` target) over plain HTTP unless ``tls=true``;
- ``alternator://host:port``: ScyllaDB Alternator (port 8000 by default; ``tls=true`` for its HTTPS port).

Credentials come from where boto3 looks for them (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE`` or the option ``profile``, an instance role), never from the URI: a URI with a user or a
password is refused, since it would sit on a command line and in shell history. Endpoints other than
Amazon's (Alternator without ``alternator_enforce_authorization``, moto, DynamoDB Local) accept any
signature, so when boto3 finds no credentials for them the session signs with placeholder ones.

Throttling (``ProvisionedThroughputExceededException``, ``ThrottlingException``, ``RequestLimitExceeded``)
is retried by the session itself, not by botocore (whose retries are turned off), with exponential backoff
and full jitter, up to ``throttle_retries`` times and never past ``op_timeout``: each retry adds one to
`Session.retries`, which the ledger reports apart from failures, and an operation still throttled after
them fails with its own kind, ``throttled``.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from dbsurge.base.backoff import Backoff
from dbsurge.base.errors import TargetError, clip
from dbsurge.base.redact import install_log_redaction, redact_uri
from dbsurge.targets import (
    DEFAULT_OP_TIMEOUT_S,
    DISPLAY_LIMIT,
    ConnectError,
    Session,
    Target,
    check_ca_file,
    check_host_name,
    check_options,
    generic_kind,
    negotiation,
    one_line,
    option_bool,
    option_int,
    option_op_timeout,
    option_seconds,
    register_binding,
)

KNOWN_OPTIONS = frozenset(
    {
        "flavor",
        "region",
        "profile",
        "tls",
        "tls_ca_file",
        "consistent_read",
        "throttle_retries",
        "throttle_backoff",
        "connect_timeout",
        "op_timeout",
        "max_pool_size",
        "table_prefix",
    }
)

#: Error codes DynamoDB (and Alternator) answer when a request goes over a rate: booked as ``throttled``.
THROTTLING_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded", "Throttling"}
)
#: Codes of a request the server could not authenticate, and what each says of the credentials: the check ends
#: the run in one line with it; an operation refused so mid-run (a key deleted or expired) fails as
#: ``connect:<code>``, the ledger's kind of a server that refused the connection for a reason of its own.
#: DynamoDB and Alternator answer the first five; the IAM forms (``SignatureDoesNotMatch``, ``InvalidClientTokenId``)
#: come from servers that answer as AWS's query APIs do.
AUTH_CODES: dict[str, str] = {
    "InvalidSignatureException": "the signature does not match (wrong secret key?)",
    "SignatureDoesNotMatch": "the signature does not match (wrong secret key?)",
    "UnrecognizedClientException": "the access key id is not one the server knows (wrong access key id, a deleted "
                                   "key, or another account's?)",
    "InvalidClientTokenId": "the access key id is not one the server knows (wrong access key id, a deleted key, or "
                            "another account's?)",
    "ExpiredTokenException": "the session token has expired (get new temporary credentials)",
    "MissingAuthenticationTokenException": "the request carried no signature",
    "IncompleteSignatureException": "the signature is incomplete",
}
#: Where boto3 found the credentials (its provider's ``method``), for the line that says they were refused.
CREDENTIAL_SOURCES = {
    "env": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment",
    "shared-credentials-file": "the shared credentials file",
    "config-file": "the AWS config file",
    "assume-role": "a role assumed from the AWS config file",
    "sso": "AWS SSO",
    "custom-process": "the profile's credential_process",
}

DEFAULT_REGION = "us-east-1"  # what the non-Amazon endpoints get when nothing names one; they ignore it
DEFAULT_ALTERNATOR_PORT = 8000
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_THROTTLE_RETRIES = 5
# The AWS SDKs' base delay for DynamoDB is 25 ms (other services use 100 ms), doubling per attempt.
DEFAULT_THROTTLE_BACKOFF_S = 0.025
THROTTLE_BACKOFF_CAP_S = 1.0
PLACEHOLDER_KEY = "dbsurge"  # signs requests to endpoints that do not check signatures


class ThrottledError(Exception):
    """An operation still throttled after the session's retries; classified as ``throttled``."""

    def __init__(self, code: str, attempts: int, message: str) -> None:
        super().__init__(f"{code} after {attempts} attempts: {message}")
        self.code = code
        self.attempts = attempts


class DynamoSession(Session):
    """One boto3 DynamoDB client for one Locust user; `call` runs a request with throttling retries.

    `client` is the boto3 client (its own connection pool of ``max_pool_size``); `consistent_read`
    is the target's option, which the workloads pass as ``ConsistentRead`` on reads.
    """

    def __init__(self, client: Any, target: DynamoTarget, *, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        self.client = client
        self.consistent_read = target.consistent_read
        self.retries = 0
        self._attempts = target.throttle_retries + 1
        self._backoff = Backoff(target.throttle_backoff_s, THROTTLE_BACKOFF_CAP_S, rng)
        self._budget_s = target.op_timeout_s
        self._sleep = sleep
        self._closed = False

    def call(self, method: Callable[..., dict[str, Any]], /, **request: Any) -> dict[str, Any]:
        """``method(**request)``, retried while the server throttles it; `ThrottledError` when retries run out.

        The backoff is `dbsurge.base.backoff`'s "full jitter" (a uniform wait up to base * 2**attempt,
        capped at `THROTTLE_BACKOFF_CAP_S`): it spreads the retries of many users instead of sending them
        back in step. A retry that would end past the operation's time budget is not made.
        """
        from botocore.exceptions import ClientError

        started = time.monotonic()
        for attempt in range(self._attempts):
            try:
                return method(**request)
            except ClientError as exc:
                code = error_code(exc)
                if code not in THROTTLING_CODES:
                    raise
                wait = self._backoff.delay(attempt)
                last = attempt == self._attempts - 1
                if last or time.monotonic() - started + wait >= self._budget_s:
                    raise ThrottledError(code, attempt + 1, error_message(exc)) from exc
                self.retries += 1
                self._sleep(wait)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the client's connection pool. Safe to call twice."""
        if not self._closed:
            self._closed = True
            close = getattr(self.client, "close", None)  # botocore >= 1.33
            if close is not None:
                close()


@register_binding("dynamodb")
class DynamoTarget(Target):
    """A DynamoDB-API endpoint: Amazon DynamoDB (flavor ``dynamodb``) or ScyllaDB Alternator (``alternator``).

    Options: ``region``, ``profile`` (an AWS profile name), ``tls`` (default: true for Amazon, false for
    another host), ``tls_ca_file``, ``consistent_read`` (strongly consistent reads; default false, as YCSB's
    dynamodb binding), ``throttle_retries`` (5) and ``throttle_backoff`` (25ms: the first retry's longest
    wait), ``connect_timeout`` (10s), ``op_timeout`` (30s: botocore's read timeout, and the budget of an
    operation with its retries), ``max_pool_size`` (2 connections per user), ``table_prefix`` (put in front
    of the workload's table names, to keep several runs apart in one account).
    """

    kind = "dynamodb"
    schemes = ("dynamodb", "alternator")
    flavors = ("dynamodb", "alternator")

    def __init__(  # noqa: C901 - one validated option per line, flat
        self, uri: str, options: dict[str, str] | None = None, *, op_timeout_s: float = DEFAULT_OP_TIMEOUT_S,
        client_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.display = clip(redact_uri(uri), DISPLAY_LIMIT)
        options = {k: str(v) for k, v in (options or {}).items()}
        check_options(self.kind, options, KNOWN_OPTIONS)
        try:
            parts = urlsplit(uri)
            port = parts.port
        except ValueError as exc:
            raise TargetError(f"bad target URI '{self.display}': {one_line(str(exc), 120)}") from None
        if parts.username or parts.password:
            raise TargetError(f"bad target URI '{self.display}': credentials do not go in the URI; set "
                              f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment")
        if parts.path not in ("", "/"):
            raise TargetError(f"bad target URI '{self.display}': a DynamoDB-API URI names an endpoint only "
                              f"(dynamodb://, dynamodb://host:port or alternator://host:port); the table is a "
                              f"workload option")
        # Options may also come in the query string (dynamodb://?region=eu-west-1); the options win.
        options = {**dict(parse_qsl(parts.query)), **options}
        check_options(self.kind, options, KNOWN_OPTIONS)
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        check_host_name(self.display, host)
        self.flavor = _choose_flavor(scheme, options.get("flavor"))
        amazon = not host or host.endswith(".amazonaws.com")
        if self.flavor == "alternator" and not host:
            raise TargetError(f"bad target URI '{self.display}': alternator:// needs a host, e.g. "
                              f"alternator://scylla-node1:{DEFAULT_ALTERNATOR_PORT}")
        self.amazon = amazon and self.flavor == "dynamodb"
        self.tls = option_bool(options, "tls", None)
        if self.tls is None:
            self.tls = self.amazon
        self.tls_ca_file = options.get("tls_ca_file") or None
        if self.tls_ca_file:
            self.tls_ca_file = check_ca_file(self.display, "tls_ca_file", self.tls_ca_file)
        self.region = options.get("region") or _region_from_host(host) or _env_region()
        if not self.region:
            if self.amazon:
                raise TargetError(f"target {self.display}: no AWS region: pass --target-option region=us-east-1, "
                                  f"set AWS_REGION, or name the regional endpoint dynamodb.<region>.amazonaws.com")
            self.region = DEFAULT_REGION
        if host:
            default_port = DEFAULT_ALTERNATOR_PORT if self.flavor == "alternator" else (443 if self.tls else 80)
            self.port = port or default_port
            self.endpoint_url: str | None = f"{'https' if self.tls else 'http'}://{_bracket(host)}:{self.port}"
        else:
            self.port = 443
            self.endpoint_url = None  # boto3 picks the regional endpoint
        self.profile = options.get("profile") or None
        self.consistent_read = bool(option_bool(options, "consistent_read", False))
        self.throttle_retries = int(option_int(options, "throttle_retries", DEFAULT_THROTTLE_RETRIES, minimum=0))
        self.throttle_backoff_s = option_seconds(options, "throttle_backoff", DEFAULT_THROTTLE_BACKOFF_S) or 0.0
        self.connect_timeout_s = option_seconds(options, "connect_timeout", DEFAULT_CONNECT_TIMEOUT_S) \
            or DEFAULT_CONNECT_TIMEOUT_S
        self.op_timeout_s = option_op_timeout(options, op_timeout_s)
        self.max_pool_size = int(option_int(options, "max_pool_size", 2, minimum=1))
        self.table_prefix = options.get("table_prefix", "")
        if self.table_prefix and not all(c.isalnum() or c in "_-." for c in self.table_prefix):
            raise TargetError(f"target option table_prefix='{clip(self.table_prefix)}': DynamoDB table names take "
                              f"letters, digits, '_', '-' and '.' only")
        self._client_factory = client_factory
        self._boto_session: Any = None
        #: True once a client signs with `PLACEHOLDER_KEY` (boto3 found no credentials for a local endpoint)
        self.placeholder_credentials = False

    # ---- clients --------------------------------------------------------------------------------

    def new_client(self, *, connect_timeout_s: float | None = None, read_timeout_s: float | None = None) -> Any:
        """A boto3 DynamoDB client for this endpoint, with botocore's own retries off (see the module doc)."""
        if self._client_factory is not None:
            return self._client_factory(self)
        import boto3
        from botocore.config import Config

        install_log_redaction()  # botocore logs signed headers at DEBUG level
        # One boto3 session per target: it caches the service model, which makes each user's client a few
        # milliseconds of CPU instead of tens (a stall of the event loop while the rate ramps up).
        session = self._boto_session
        if session is None:
            session = boto3.session.Session(profile_name=self.profile) if self.profile else boto3.session.Session()
            self._boto_session = session
        credentials: dict[str, str] = {}
        if not self.amazon and _local_credentials(session) is None:
            credentials = {"aws_access_key_id": PLACEHOLDER_KEY, "aws_secret_access_key": PLACEHOLDER_KEY}
            self.placeholder_credentials = True
        config = Config(
            connect_timeout=connect_timeout_s or self.connect_timeout_s,
            read_timeout=read_timeout_s or self.op_timeout_s,
            retries={"total_max_attempts": 1, "mode": "standard"},  # the session retries throttling itself
            max_pool_connections=self.max_pool_size,
            tcp_keepalive=True,  # dead-peer detection on long-lived pooled connections
        )
        verify: Any = self.tls_ca_file if self.tls_ca_file else None
        return session.client("dynamodb", region_name=self.region, endpoint_url=self.endpoint_url,
                              config=config, verify=verify, **credentials)

    def connect(self) -> DynamoSession:
        """A new session with its own client (boto3 opens connections on the first request)."""
        try:
            return DynamoSession(self.new_client(), self)
        except Exception as exc:  # a bad profile, a credential process that fails
            raise ConnectError(f"target {self.display}: {self._explain(exc)}") from exc

    def check(self) -> None:
        """One ``ListTables`` call (Limit=1) with short timeouts; one-line `TargetError` on failure."""
        try:
            client = self.new_client(connect_timeout_s=min(5.0, self.connect_timeout_s),
                                     read_timeout_s=min(10.0, self.op_timeout_s))
            try:
                answer = client.list_tables(Limit=1)
                self._negotiated = self._negotiation(answer, client)
            finally:
                getattr(client, "close", lambda: None)()
        except Exception as exc:
            raise TargetError(f"target {self.display}: {self._explain(exc)}") from None

    def _negotiation(self, answer: dict[str, Any], client: Any) -> dict[str, Any]:
        """What the check's request negotiated (`negotiation.record`): the endpoint's scheme, its ``Server``
        header, botocore's version, SigV4; over https the TLS version and cipher from one probe handshake with
        botocore's trust settings (its connection pool keeps the socket to itself)."""
        import botocore

        url = urlsplit(client.meta.endpoint_url)
        host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
        headers = (answer.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
        in_use = url.scheme == "https"
        ca_file = self.tls_ca_file or _botocore_ca_bundle()
        tls_version = cipher = None
        source = "a probe handshake with botocore's CA bundle and host name check (botocore does not expose its own)"
        if in_use:
            tls_version, cipher, why = negotiation.probe_tls(host, port, ca_file=ca_file, verify=True,
                                                             check_host_name=True)
            if why:
                source += f"; the probe failed: {why}"
        tls = negotiation.tls_facts(in_use=in_use, verified=in_use, host_name_checked=True,
                                    ca_file=ca_file or "system trust store", version=tls_version, cipher=cipher,
                                    setting=f"{url.scheme}://", source=source)
        return negotiation.record(
            kind=self.kind, flavor=self.flavor, endpoint=f"{url.scheme}://{host}:{port}", host=host,
            display=self.display, driver=f"botocore {botocore.__version__}",
            server_version=headers.get("server"), protocol="DynamoDB JSON 1.0 over HTTP/1.1", tls=tls,
            auth=f"AWS SigV4 (region {self.region})", fix="use the https endpoint (tls=true, tls_ca_file=CA_FILE)")

    def table_name(self, name: str) -> str:
        """The DynamoDB table of a workload's table ``name`` (``table_prefix`` in front)."""
        return f"{self.table_prefix}{name}"

    # ---- failures -------------------------------------------------------------------------------

    def classify(self, exc: BaseException) -> str:
        """The failure kind of `exc` (see `Target.classify`), from botocore's errors.

        ``throttled``: still throttled after the session's retries (`ThrottledError`, or a throttling code
        that reached here another way); ``connect``: the endpoint refused or could not be reached, a connect
        timeout, no credentials; ``connect:<code>``: a request the server could not authenticate
        (``connect:UnrecognizedClientException`` for a key deleted mid-run, `AUTH_CODES`); ``timeout``: no answer within
        ``op_timeout`` (botocore's read timeout); ``disconnect``: the connection closed midway;
        ``server:<code>``: any other error code the server answered (``server:ValidationException``,
        ``server:ResourceNotFoundException``...); ``other``: the rest (a ``LookupError`` from the workload for
        a missing record).
        """
        kind = generic_kind(exc)
        if kind is not None:
            return kind
        if isinstance(exc, ThrottledError):
            return "throttled"
        from botocore import exceptions as bce

        if isinstance(exc, bce.ClientError):
            code = error_code(exc)
            if code in THROTTLING_CODES:
                return "throttled"
            if code in AUTH_CODES:
                return f"connect:{code}"
            return f"server:{code}" if code else "other"
        if isinstance(exc, bce.ReadTimeoutError):
            return "timeout"
        # botocore's ConnectionError: EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError
        if isinstance(exc, (bce.ConnectionError, bce.NoCredentialsError, bce.PartialCredentialsError)):
            return "connect"
        if isinstance(exc, bce.ConnectionClosedError):
            return "disconnect"
        return "other"

    def _explain(self, exc: BaseException) -> str:
        return explain_dynamo_error(exc, self)

    def describe(self) -> dict[str, Any]:
        """Secret-free settings for run.json (no credentials: boto3 holds them, never this object)."""
        import botocore

        return {
            "kind": self.kind,
            "flavor": self.flavor,
            "display": self.display,
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "profile": self.profile,
            "tls": self.tls,
            "tls_ca_file": self.tls_ca_file,
            "consistent_read": self.consistent_read,
            "throttle_retries": self.throttle_retries,
            "throttle_backoff_s": self.throttle_backoff_s,
            "connect_timeout_s": self.connect_timeout_s,
            "op_timeout_s": self.op_timeout_s,
            "max_pool_size": self.max_pool_size,
            "table_prefix": self.table_prefix,
            "driver": f"botocore {botocore.__version__}",
        }


def _botocore_ca_bundle() -> str | None:
    """The CA bundle botocore verifies with when no ``tls_ca_file`` is given (certifi's, or AWS_CA_BUNDLE)."""
    if os.environ.get("AWS_CA_BUNDLE"):
        return os.environ["AWS_CA_BUNDLE"]
    try:
        from botocore.httpsession import get_cert_path

        return get_cert_path(True)
    except Exception:  # noqa: BLE001 - only for the record: the system's store then
        return None


def error_code(exc: BaseException) -> str:
    """The error code of a botocore ``ClientError`` ("" if it has none).

    A server that answers a DynamoDB request in the XML form of AWS's query APIs (moto's IAM check does) gives
    botocore's JSON parser no code but the HTTP status ("403"); the ``<Code>`` of its body is the code then.
    """
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    code = str(error.get("Code") or "")
    if code.isdigit():
        found = re.search(r"<Code>([A-Za-z.]+)</Code>", str(error.get("Message") or ""))
        if found:
            return found.group(1)
    return code


def error_message(exc: BaseException) -> str:
    """The server's message of a botocore ``ClientError``, on one line."""
    return one_line(str((getattr(exc, "response", None) or {}).get("Error", {}).get("Message") or exc), 160)


def explain_dynamo_error(exc: BaseException, target: DynamoTarget) -> str:
    """One line saying why reaching `target` failed, from a botocore error."""
    from botocore import exceptions as bce

    where = target.endpoint_url or f"DynamoDB in {target.region}"
    if isinstance(exc, bce.NoCredentialsError):
        return "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or use a role"
    if isinstance(exc, bce.ProfileNotFound):
        profile = (getattr(exc, "kwargs", None) or {}).get("profile") or target.profile  # AWS_PROFILE's too
        return f"AWS profile {profile!r} not found in the AWS config files"
    if isinstance(exc, bce.ClientError):
        code = error_code(exc)
        if code in AUTH_CODES:
            return _refused_credentials(code, target)
        return f"ListTables failed: {code}: {error_message(exc)}"
    if isinstance(exc, bce.ConnectTimeoutError):
        return f"timeout: {where} did not accept a connection within {target.connect_timeout_s:g}s"
    if isinstance(exc, bce.SSLError):
        return f"TLS error talking to {where}: {one_line(str(exc), 120)}"
    if isinstance(exc, bce.EndpointConnectionError):
        return f"cannot connect to {where}: is the server running and accepting connections there?"
    if isinstance(exc, bce.ReadTimeoutError):
        return f"timeout: {where} did not answer ListTables in time"
    return f"{type(exc).__name__}: {one_line(str(exc), 160)}"


def _refused_credentials(code: str, target: DynamoTarget) -> str:
    """The line for credentials the server refused with `code`: why, and where boto3 found them."""
    if target.placeholder_credentials:
        return (f"the server checks AWS credentials ({code}) and none were found: set AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, in the environment")
    source = ""
    try:
        method = target._boto_session.get_credentials().method  # cached by the session: no new lookup
        source = f"; they came from {CREDENTIAL_SOURCES.get(method, method)}"
    except Exception:  # noqa: BLE001, S110 - only for the message
        pass
    return f"the AWS credentials were refused: {AUTH_CODES[code]} ({code}{source})"


def _choose_flavor(scheme: str, option: str | None) -> str:
    if option:
        flavor = option.strip().lower()
        if flavor not in DynamoTarget.flavors:
            raise TargetError(f"target option flavor='{clip(option)}': expected dynamodb or alternator")
        return flavor
    return "alternator" if scheme == "alternator" else "dynamodb"


def _region_from_host(host: str) -> str | None:
    """``eu-west-1`` in ``dynamodb.eu-west-1.amazonaws.com`` (None for other hosts)."""
    labels = host.split(".")
    if host.endswith(".amazonaws.com") and len(labels) >= 4 and labels[0].startswith("dynamodb"):
        return labels[1]
    return None


def _env_region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


#: boto3's credential providers that ask the network: the EC2 instance metadata service (169.254.169.254) and
#: the container credentials endpoint. Never asked for a target that is not Amazon's (Alternator, a local
#: DynamoDB-API server): on a machine that is not in AWS their requests go to an address nobody named, and
#: when they fail boto3 tries again per client (each user's), in the middle of the run.
_NETWORK_PROVIDERS = ("iam-role", "container-role")


def _local_credentials(session: Any) -> Any:
    """The session's credentials from the environment and the config files only (`_NETWORK_PROVIDERS` removed
    from this session's chain first), or None."""
    resolver = session._session.get_component("credential_provider")
    for name in _NETWORK_PROVIDERS:
        try:
            resolver.remove(name)
        except Exception:  # noqa: BLE001, S110 - not in this botocore's chain: nothing to remove
            pass
    return session.get_credentials()

