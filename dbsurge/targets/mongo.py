"""MongoDB-compatible targets through pymongo: MongoDB (and MongoDB-wire servers) and Amazon DocumentDB.

DocumentDB (host ``*.docdb.amazonaws.com`` or option ``flavor=docdb``) gets the settings AWS documents
for it: TLS with the RDS CA bundle (``tls_ca_file``; DocumentDB's CA is in no public trust store),
``replicaSet=rs0``, ``readPreference=secondaryPreferred``, and ``retryWrites=false``, which engines
before 8.0.2 reject.

Each session owns a `MongoClient` with a small pool: a Locust user runs one operation at a time.

Time bounds: ``timeoutMS`` (default op_timeout; pymongo's client-side operation timeout) bounds each
operation as a whole, its retry included; ``socketTimeoutMS`` (default op_timeout) each exchange on a socket,
``connectTimeoutMS`` each connect, ``serverSelectionTimeoutMS`` the wait for a usable server and
``waitQueueTimeoutMS`` (default op_timeout) the wait for a pooled connection. pymongo reconnects by
itself after a failure. `MongoTarget.classify` names the kind of each failure.
"""

from __future__ import annotations

import re
import ssl
from typing import Any

import pymongo
from pymongo import MongoClient, common
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    ExecutionTimeout,
    InvalidURI,
    NetworkTimeout,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WaitQueueTimeoutError,
    WTimeoutError,
)
from pymongo.uri_parser import parse_uri

from dbsurge.base.errors import TargetError, clip
from dbsurge.base.redact import redact_text, redact_uri, register_secret, uri_secrets
from dbsurge.targets import (
    DEFAULT_OP_TIMEOUT_S,
    DISPLAY_LIMIT,
    OFF_WORDS,
    Session,
    Target,
    check_ca_file,
    check_host_name,
    check_options,
    check_password_spelling,
    generic_kind,
    negotiation,
    one_line,
    option_bool,
    option_int,
    option_op_timeout,
    register_binding,
)

try:  # the SRV-free part of parse_uri: it checks a mongodb+srv:// URI without a DNS lookup (pymongo 4.12+)
    from pymongo.uri_parser_shared import _validate_uri
except ImportError:  # pragma: no cover - an older pymongo: such a URI is refused in one line
    _validate_uri = None

KNOWN_OPTIONS = frozenset(
    {
        "flavor",
        "tls",
        "tls_ca_file",
        "replica_set",
        "read_preference",
        "read_concern",
        "w",
        "j",
        "retry_writes",
        "engine_version",
        "max_pool_size",
        "server_selection_timeout_ms",
        "connect_timeout_ms",
        "socket_timeout_ms",
        "wait_queue_timeout_ms",
        "timeout_ms",
        "op_timeout",
        "database",
        "app_name",
    }
)

DEFAULT_DATABASE = "dbsurge"
DEFAULT_MAX_POOL_SIZE = 2
DEFAULT_SERVER_SELECTION_TIMEOUT_MS = 5000
DEFAULT_CONNECT_TIMEOUT_MS = 10000
# DocumentDB accepts retryable writes from engine 8.0.2 on.
DOCDB_RETRYABLE_WRITES_SINCE = (8, 0, 2)
DOCDB_CA_BUNDLE_URL = "https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem"


class MongoSession(Session):
    """One `MongoClient` (`client`) and its database (`db`) for one Locust user."""

    def __init__(self, client: MongoClient[Any], database: str) -> None:
        self.client = client
        self.db = client[database]
        self.retries = 0

    def close(self) -> None:
        """Close the client and its connections."""
        self.client.close()


@register_binding("mongo")
class MongoTarget(Target):
    """A MongoDB or DocumentDB deployment.

    `options` (strings; URI options such as ``replicaSet=`` work too, options win): ``flavor``
    (mongo|docdb), ``tls``, ``tls_ca_file``, ``replica_set``, ``read_preference``, ``read_concern``, ``w``,
    ``j``, ``retry_writes``, ``engine_version`` (DocumentDB, e.g. 8.0.2: enables retryable writes),
    ``max_pool_size`` (default 2), ``server_selection_timeout_ms`` (5000), ``connect_timeout_ms``
    (10000), ``database`` (default: the URI's, else ``dbsurge``), ``app_name`` (dbsurge).

    Time bounds: ``op_timeout`` (a duration such as ``5s``; default `op_timeout_s`, 30 s) is the default
    of ``timeout_ms`` (pymongo's timeoutMS: the whole operation, a retryable read's retry included, must
    end within it, else ``NetworkTimeout``/``ExecutionTimeout``; ``none`` disables), of ``socket_timeout_ms``
    (socketTimeoutMS: one exchange on a socket) and of ``wait_queue_timeout_ms`` (waitQueueTimeoutMS).
    URI options (``timeoutMS=``, ``socketTimeoutMS=`` ...) work as well; these options win. Note that
    pymongo waits for a usable server up to what is left of timeoutMS, not serverSelectionTimeoutMS,
    when timeoutMS is set: a session against a server that is down fails after op_timeout (as
    ``connect``); `check` does not use timeoutMS.
    """

    kind = "mongo"
    schemes = ("mongodb", "mongodb+srv")
    flavors = ("mongo", "docdb")

    def __init__(  # noqa: C901 - one validated option or cost item per line, flat
        self, uri: str, options: dict[str, str] | None = None, *, op_timeout_s: float = DEFAULT_OP_TIMEOUT_S
    ) -> None:
        self.display = clip(redact_uri(uri), DISPLAY_LIMIT)  # it starts every error message: keep those short
        self._uri = uri
        options = {k: str(v) for k, v in (options or {}).items()}
        check_options(self.kind, options, KNOWN_OPTIONS)
        self._secrets: list[str] = uri_secrets(uri)  # as written, before any message
        check_password_spelling(uri, self.display, "/?@:")
        parsed = self._parse(uri)
        self._secrets += [p for p in (parsed.get("password"),) if p]
        for secret in self._secrets:
            register_secret(secret)
        uri_options = {k.lower(): v for k, v in parsed.get("options", {}).items()}
        self._uri_options = uri_options
        self._parsed_user = parsed.get("username")
        self.database_in_uri = parsed.get("database")
        for host in [h for h, _p in parsed.get("nodelist") or []] + [parsed.get("fqdn") or ""]:
            if not str(host).endswith(".sock"):  # a Unix socket's path
                check_host_name(self.display, str(host))
        self.hosts = [f"{h}:{p}" if p else h for h, p in parsed.get("nodelist") or []] or [parsed.get("fqdn") or ""]
        first_host = (parsed.get("fqdn") or (parsed["nodelist"][0][0] if parsed.get("nodelist") else "")).lower()
        self.flavor = _choose_flavor(first_host, options.get("flavor"))
        docdb = self.flavor == "docdb"
        self.database = options.get("database") or parsed.get("database") or DEFAULT_DATABASE

        kwargs: dict[str, Any] = {"appname": options.get("app_name") or uri_options.get("appname") or "dbsurge"}
        self.tls = option_bool(options, "tls", uri_options.get("tls", uri_options.get("ssl")))
        self.tls_ca_file = options.get("tls_ca_file") or uri_options.get("tlscafile")
        if self.tls_ca_file:
            kwargs["tlsCAFile"] = check_ca_file(self.display, "tls_ca_file", self.tls_ca_file)
            if self.tls is None:
                self.tls = True
        if docdb and self.tls is None:
            self.tls = True  # DocumentDB clusters have TLS on unless it was turned off in the parameter group
        if docdb and self.tls and not self.tls_ca_file:
            raise TargetError(
                f"target {self.display}: DocumentDB needs its CA bundle: pass tls_ca_file=global-bundle.pem "
                f"(from {DOCDB_CA_BUNDLE_URL}), or tls=false if the cluster has TLS turned off"
            )
        if self.tls is not None:
            kwargs["tls"] = self.tls

        self.replica_set = options.get("replica_set") or uri_options.get("replicaset") or ("rs0" if docdb else None)
        self.read_preference = (
            options.get("read_preference")
            or uri_options.get("readpreference")
            or ("secondaryPreferred" if docdb else None)
        )
        self.read_concern = options.get("read_concern") or uri_options.get("readconcernlevel")
        self.w = options.get("w") or uri_options.get("w")
        self.j = option_bool(options, "j", uri_options.get("journal"))
        self.engine_version = _parse_version(options.get("engine_version"))
        self.retry_writes = option_bool(options, "retry_writes", uri_options.get("retrywrites"))
        if self.retry_writes is None and docdb:
            self.retry_writes = self.engine_version is not None and self.engine_version >= DOCDB_RETRYABLE_WRITES_SINCE
        self.max_pool_size = option_int(options, "max_pool_size", DEFAULT_MAX_POOL_SIZE, minimum=1)
        self.server_selection_timeout_ms = option_int(
            options, "server_selection_timeout_ms", DEFAULT_SERVER_SELECTION_TIMEOUT_MS, minimum=1
        )
        self.connect_timeout_ms = option_int(options, "connect_timeout_ms", DEFAULT_CONNECT_TIMEOUT_MS, minimum=1)
        self.op_timeout_s = option_op_timeout(options, op_timeout_s)
        op_timeout_ms = max(1, int(self.op_timeout_s * 1000))
        self.socket_timeout_ms = option_int(
            options, "socket_timeout_ms", _uri_ms(uri_options, "sockettimeoutms", op_timeout_ms), minimum=1
        )
        raw_timeout = str(options.get("timeout_ms", "")).strip().lower()
        self.timeout_ms = None if raw_timeout in OFF_WORDS else option_int(
            options, "timeout_ms", _uri_ms(uri_options, "timeoutms", op_timeout_ms), minimum=1
        )
        self.wait_queue_timeout_ms = option_int(
            options, "wait_queue_timeout_ms", _uri_ms(uri_options, "waitqueuetimeoutms", op_timeout_ms), minimum=1
        )

        for name, value in (
            ("replicaSet", self.replica_set),
            ("readPreference", self.read_preference),
            ("readConcernLevel", self.read_concern),
            ("w", int(self.w) if isinstance(self.w, str) and self.w.isascii() and self.w.isdigit() and len(self.w) < 10
             else self.w),
            ("journal", self.j),
            ("retryWrites", self.retry_writes),
            ("maxPoolSize", self.max_pool_size),
            ("serverSelectionTimeoutMS", self.server_selection_timeout_ms),
            ("connectTimeoutMS", self.connect_timeout_ms),
            ("socketTimeoutMS", self.socket_timeout_ms),
            ("waitQueueTimeoutMS", self.wait_queue_timeout_ms),
            ("timeoutMS", self.timeout_ms),
        ):
            if value is not None:
                kwargs[name] = value
        for name, value in kwargs.items():
            try:
                common.validate(name, value)
            except (ValueError, TypeError, ConfigurationError) as exc:
                raise TargetError(f"target {self.display}: bad option {name}='{clip(value)}': "
                                  f"{one_line(str(exc), 150)}") from None
        self._client_kwargs = kwargs

    def _parse(self, uri: str) -> dict[str, Any]:
        """Parse and validate the URI without network (no SRV lookup)."""
        try:
            if uri.lower().startswith("mongodb+srv://"):
                if _validate_uri is None:
                    raise ImportError("this pymongo has no SRV-free URI parser (pymongo.uri_parser_shared, 4.12+)")
                return _validate_uri(uri)
            return parse_uri(uri)
        except FileNotFoundError:
            raise TargetError(f"target {self.display}: missing CA file named by tlsCAFile in the URI") from None
        except (InvalidURI, ConfigurationError, ValueError, TypeError, ImportError) as exc:
            raise TargetError(f"bad target URI '{clip(self.display)}': "
                              f"{redact_text(one_line(str(exc), 150), self._secrets)}") from None

    def new_client(self, **overrides: Any) -> MongoClient[Any]:
        """A new client with this target's URI and options (TLS, CA file, timeouts), ``overrides`` on top: the
        sessions', the check's and the database sampler's, so each gets what the user set."""
        return MongoClient(self._uri, **{**self._client_kwargs, **overrides})

    @classmethod
    def with_connect_timeout(cls, options: dict[str, str], timeout_s: float) -> dict[str, str]:
        out = dict(options)
        out.setdefault("connect_timeout_ms", str(int(timeout_s * 1000)))
        out.setdefault("server_selection_timeout_ms", str(int(timeout_s * 1000)))
        return out

    def first_contact(self, session: Session) -> None:
        """pymongo connects lazily: a ping makes the connection (and server selection) happen now."""
        session.client.admin.command("ping")

    def connect(self) -> MongoSession:
        """A new session with its own `MongoClient` for one Locust user."""
        try:
            return MongoSession(self.new_client(), self.database)
        except PyMongoError as exc:
            raise TargetError(f"target {self.display}: {self._explain(exc)}") from None

    def check(self) -> None:
        """Run ``ping`` once (server selection bounded by ``server_selection_timeout_ms``); one-line errors."""
        client = None
        try:
            # Without timeoutMS, which would replace serverSelectionTimeoutMS as the wait for a server.
            client = self.new_client(timeoutMS=None)
            client.admin.command("ping")
            self._negotiated = self._negotiation(client)
        except PyMongoError as exc:
            raise TargetError(f"target {self.display}: {self._explain(exc)}") from None
        except (ssl.SSLError, OSError) as exc:  # the CA file changed since open_target, or another TLS file
            raise TargetError(f"target {self.display}: TLS setup failed: {one_line(str(exc), 120)}") from None
        finally:
            if client is not None:
                client.close()

    def _negotiation(self, client: MongoClient[Any]) -> dict[str, Any]:
        """What the check's client negotiated (`negotiation.record`): buildInfo's version, the wire version, TLS
        as the client was told to verify it, and the SASL mechanism pymongo picks from the server's offer.

        pymongo keeps its sockets to itself (no public way to a connection's TLS session), so the TLS version
        and cipher come from one probe handshake with the same CA file and host name check against the server
        the client selected (`negotiation.probe_tls`): what that server agrees with a client so configured.
        """
        host, port = client.address or (self.hosts[0].rsplit(":", 1)[0], 27017)
        try:
            version = str(client.admin.command("buildInfo").get("version") or "") or None
        except PyMongoError:  # a user without the right: the version stays unknown, the run goes on
            version = None
        hello = _hello(client, self._credential_source())
        verify = not (self._uri_flag("tlsallowinvalidcertificates") or self._uri_flag("tlsinsecure"))
        check_host = verify and not self._uri_flag("tlsallowinvalidhostnames")
        in_use = self.tls if self.tls is not None else self._uri.lower().startswith("mongodb+srv://")  # pymongo's default
        tls_version = cipher = None
        source = "a probe handshake with the same CA file and host name check (pymongo does not expose its own)"
        if in_use:
            tls_version, cipher, why = negotiation.probe_tls(host, int(port), ca_file=self.tls_ca_file, verify=verify,
                                                             check_host_name=check_host)
            if why:
                source += f"; the probe failed: {why}"
        settings = [f"tls={'true' if in_use else 'false'}"] + [
            f"{name}=true" for name in ("tlsAllowInvalidCertificates", "tlsAllowInvalidHostnames", "tlsInsecure")
            if self._uri_flag(name.lower())]
        tls = negotiation.tls_facts(in_use=in_use, verified=verify, host_name_checked=check_host,
                                    ca_file=self.tls_ca_file or "system trust store", setting=", ".join(settings),
                                    version=tls_version, cipher=cipher, source=source)
        return negotiation.record(
            kind=self.kind, flavor=self.flavor, endpoint=f"{host}:{port}", host=str(host), display=self.display,
            driver=f"pymongo {pymongo.version}", server_version=version,
            protocol=f"MongoDB wire protocol, wire versions {hello.get('minWireVersion')}-{hello.get('maxWireVersion')}",
            tls=tls, auth=self._auth_mechanism(hello),
            fix="pass tls_ca_file=CA_FILE and drop tlsAllowInvalidCertificates/tlsInsecure from the URI")

    def _uri_flag(self, name: str) -> bool:
        """A boolean URI option (lower-case name) as pymongo parsed it."""
        return bool(self._uri_options.get(name))

    def _credential_source(self) -> str | None:
        """``<authSource>.<user>`` when the URI has a user, for hello's ``saslSupportedMechs``."""
        user = self._parsed_user
        if not user:
            return None
        source = self._uri_options.get("authsource") or self.database_in_uri or "admin"
        return f"{source}.{user}"

    def _auth_mechanism(self, hello: dict[str, Any]) -> str:
        """The mechanism the URI names, else the one pymongo picks from the server's offer to this user."""
        named = self._uri_options.get("authmechanism")
        if not self._parsed_user:
            return "none (no user in the URI)"
        if named and named != "DEFAULT":
            return str(named)
        offered = hello.get("saslSupportedMechs") or []
        if "SCRAM-SHA-256" in offered:
            return "SCRAM-SHA-256"
        return "SCRAM-SHA-1" if offered else "SCRAM (pymongo's default; the server did not list its mechanisms)"

    def connection_limit(self) -> tuple[int | None, int | None]:
        """``serverStatus`` connections: (current + available, current), the server's maxIncomingConnections
        as it counts them; (None, None) where serverStatus is not allowed or not served."""
        client = None
        try:
            client = self.new_client(timeoutMS=None)
            conns = client.admin.command("serverStatus").get("connections") or {}
            current, available = int(conns["current"]), int(conns["available"])
            if available <= 0:  # a server that does not count them (secantusdb says 0): not checked
                return None, None
            return current + available, current
        except (PyMongoError, KeyError, TypeError, ValueError, OSError):
            return None, None
        finally:
            if client is not None:
                client.close()

    def _explain(self, exc: BaseException) -> str:
        return redact_text(explain_mongo_error(exc, self), self._secrets)

    def classify(self, exc: BaseException) -> str:
        """The failure kind of `exc` (see `Target.classify`), from pymongo's errors.

        ``connect``: no usable server within ``server_selection_timeout_ms`` (refused, unreachable, DNS,
        down) or an authentication failure; ``timeout``: ``NetworkTimeout`` (``socket_timeout_ms``),
        ``ExecutionTimeout`` (maxTimeMS), ``WaitQueueTimeoutError``, a write concern timeout,
        ``gevent.Timeout``; ``server:<code>``: an ``OperationFailure`` with its code (``server:11000`` for a
        duplicate key, also inside a bulk write); ``disconnect``: a connection lost midway
        (``AutoReconnect``); ``other``: the rest.
        """
        kind = generic_kind(exc)
        if kind is not None:
            return kind
        if isinstance(exc, ServerSelectionTimeoutError):  # before NetworkTimeout/AutoReconnect: it is both
            return "connect"
        if isinstance(exc, (NetworkTimeout, ExecutionTimeout, WaitQueueTimeoutError, WTimeoutError)):
            return "timeout"
        if isinstance(exc, BulkWriteError):
            errors = (exc.details or {}).get("writeErrors") or []
            code = errors[0].get("code") if errors else exc.code
            return f"server:{code}" if code is not None else "other"
        if isinstance(exc, OperationFailure):
            if exc.code in (18, 13) and not isinstance(exc, ExecutionTimeout):
                return "connect" if exc.code == 18 else f"server:{exc.code}"
            return f"server:{exc.code}" if exc.code is not None else "other"
        if isinstance(exc, (AutoReconnect, ConnectionFailure)):
            return "disconnect"
        return "other"

    def describe(self) -> dict[str, Any]:
        """Secret-free settings for run.json."""
        return {
            "kind": self.kind,
            "flavor": self.flavor,
            "display": self.display,
            "hosts": self.hosts,
            "database": self.database,
            "tls": self.tls,
            "tls_ca_file": self.tls_ca_file,
            "replica_set": self.replica_set,
            "read_preference": self.read_preference,
            "read_concern": self.read_concern,
            "w": self.w,
            "j": self.j,
            "retry_writes": self.retry_writes,
            "engine_version": ".".join(map(str, self.engine_version)) if self.engine_version else None,
            "max_pool_size": self.max_pool_size,
            "server_selection_timeout_ms": self.server_selection_timeout_ms,
            "connect_timeout_ms": self.connect_timeout_ms,
            "op_timeout_s": self.op_timeout_s,
            "socket_timeout_ms": self.socket_timeout_ms,
            "wait_queue_timeout_ms": self.wait_queue_timeout_ms,
            "timeout_ms": self.timeout_ms,
            "driver": f"pymongo {pymongo.version}",
        }


def _hello(client: MongoClient[Any], credential_source: str | None) -> dict[str, Any]:
    """The server's ``hello`` (with ``saslSupportedMechs`` for a user), or {} where it is refused."""
    command: dict[str, Any] = {"hello": 1}
    if credential_source:
        command["saslSupportedMechs"] = credential_source
    try:
        return dict(client.admin.command(command))
    except PyMongoError:
        return {}


def _uri_ms(uri_options: dict[str, Any], name: str, default: int) -> int:
    """A millisecond timeout from the URI (pymongo parses those into seconds), else `default`."""
    value = uri_options.get(name)
    return default if value is None else max(1, int(float(value) * 1000))


def _choose_flavor(host: str, option: str | None) -> str:
    if option:
        flavor = option.strip().lower()
        if flavor not in MongoTarget.flavors:
            raise TargetError(f"target option flavor='{clip(option)}': expected mongo or docdb")
        return flavor
    return "docdb" if host.rstrip(".").endswith(".docdb.amazonaws.com") else "mongo"


def _parse_version(raw: str | None) -> tuple[int, ...] | None:
    if raw is None or not raw.strip():
        return None
    try:
        return tuple(int(part) for part in raw.strip().split("."))
    except ValueError:
        raise TargetError(
            f"target option engine_version='{clip(raw)}': expected a version such as 5.0.0 or 8.0.2") from None


def explain_mongo_error(exc: BaseException, target: MongoTarget) -> str:
    """One line saying why reaching `target` failed, from a pymongo error."""
    message = str(exc)
    low = _first_server_error(message).lower()  # the topology description would match too much
    where = ", ".join(target.hosts)
    if isinstance(exc, OperationFailure):
        if exc.code == 18 or "authentication failed" in message.lower():
            return "authentication failed (wrong user name or password, or wrong authSource)"
        if exc.code == 13:
            return f"not authorized: {one_line(message)}"
        return f"ping failed: {one_line(message)}"
    if any(s in low for s in ("ssl", "tls", "certificate")):
        return f"TLS error talking to {where}: {_tls_cause(_first_server_error(message), target)}"
    if not target.tls and isinstance(exc, ConnectionFailure) and _speaks_tls(target):
        return (f"the server at {where} takes TLS only and this connection had TLS off: pass tls=true and "
                f"tls_ca_file=CA_FILE")
    if "connection refused" in low:
        return f"connection refused by {where}: is the server running and accepting connections there?"
    if any(
        s in low
        for s in (
            "name or service not known",
            "nodename nor servname",
            "getaddrinfo failed",
            "temporary failure in name resolution",
            "no address associated",
            "dns",
        )
    ):
        return f"unknown host {where}: the DNS lookup failed"
    if any(s in low for s in ("no route to host", "network is unreachable", "host is unreachable")):
        return f"unreachable host {where}: no network route to it"
    if "timed out" in low or "timeout" in low:
        return (
            f"timeout: no usable server at {where} within server_selection_timeout_ms="
            f"{target.server_selection_timeout_ms} (host down or firewalled, wrong replica_set, or TLS mismatch)"
        )
    return f"{type(exc).__name__}: {_first_server_error(message)}"


def _tls_cause(text: str, target: MongoTarget) -> str:
    """A failed handshake's cause first, in words (another CA, a host the certificate does not name, expired),
    then OpenSSL's, without its source line and pymongo's timeouts."""
    detail = re.sub(r" \(_ssl\.c:\d+\)| \(configured timeouts:[^)]*\)", "", text)
    detail = detail.rsplit("certificate verify failed: ", 1)[-1]  # OpenSSL's reason, not the host and code again
    low = detail.lower()
    ca = f"tls_ca_file={target.tls_ca_file}" if target.tls_ca_file else "the system's trust store"
    if "has expired" in low:
        return f"the server's certificate has expired ({detail})"
    if "mismatch" in low or "doesn't match" in low or "not valid for" in low:
        return f"the server's certificate does not name the host it was reached by ({detail})"
    if "local issuer" in low or "self-signed" in low or "self signed" in low:
        return f"the server's certificate is not signed by a CA in {ca} ({detail})"
    return detail


def _speaks_tls(target: MongoTarget) -> bool:
    """True when the first host completes a TLS handshake (not verified): the server wants TLS, the client had none."""
    host, _, port = target.hosts[0].rpartition(":") if ":" in target.hosts[0] else (target.hosts[0], "", "27017")
    if not host or host.endswith(".sock"):
        return False
    version, _, _ = negotiation.probe_tls(host.strip("[]"), int(port or 27017), ca_file=None, verify=False,
                                          check_host_name=False, timeout_s=3.0)
    return version is not None


def _first_server_error(message: str) -> str:
    """pymongo's selection errors list every server and the topology; keep the first server's error."""
    head = message.split(", Timeout:")[0].split(", Topology Description:")[0]
    return one_line(head)
