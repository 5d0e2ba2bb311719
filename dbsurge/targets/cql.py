"""CQL targets through scylla-driver: ScyllaDB (shard-aware) and Apache Cassandra, ``cql://`` or ``scylla://``.

``cql://[user[:password]@]host[,host2...][:port][/keyspace]`` (port 9042). The password follows the other
targets' rules (``DBSURGE_TARGET_PASSWORD`` or ``--target-secret`` on each worker; the master never sends it);
``tls=true`` and ``tls_ca_file`` turn on TLS.

The driver is ScyllaDB's fork of the DataStax driver (``pip install 'dbsurge[cql]'``). One driver ``Cluster``
and ``Session`` per process serve every Locust user of that process, as the driver wants it (its pools are per
host and, on ScyllaDB, per shard); a dbsurge `CqlSession` is a user's handle on it. Every statement is prepared
once per process and bound per operation, so that the driver routes it by token (``TokenAwarePolicy`` over
``DCAwareRoundRobinPolicy``) and, on ScyllaDB, to the shard that owns it.

Options: ``consistency`` (ONE, QUORUM, LOCAL_QUORUM, ...; default ONE, as YCSB's cassandra binding),
``serial_consistency`` (SERIAL or LOCAL_SERIAL, for conditional statements),
``local_dc``, ``tls``, ``tls_ca_file``, ``connect_timeout`` (10s), ``op_timeout`` (the driver's request
timeout), ``protocol_version``, ``reactor`` (see `choose_connection_class`).
"""

from __future__ import annotations

import atexit
import logging
import re
import ssl
import sys
import threading
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from dbsurge.base.errors import TargetError, clip
from dbsurge.base.redact import redact_text, redact_uri, register_secret, uri_secrets
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

KNOWN_OPTIONS = frozenset({"consistency", "serial_consistency", "local_dc", "tls", "tls_ca_file", "connect_timeout",
                           "op_timeout", "protocol_version", "reactor", "keyspace"})
DEFAULT_PORT = 9042
#: YCSB's cassandra binding reads and writes at ONE unless told otherwise (cassandra.readconsistencylevel).
DEFAULT_CONSISTENCY = "ONE"
CONSISTENCY_NAMES = ("ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE")
SERIAL_NAMES = ("SERIAL", "LOCAL_SERIAL")
DEFAULT_CONNECT_TIMEOUT_S = 10.0
REACTORS = ("auto", "asyncore", "asyncio", "libev")
#: A keyspace name as CQL takes it unquoted: a letter, then letters, digits or underscores, 48 characters at most
#: (Cassandra's limit). Unquoted names are case-insensitive: the server folds them to lower case, and so does dbsurge.
KEYSPACE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,47}")


def check_keyspace(name: str, where: str) -> str:
    """``name`` as the server will know it (lower case), or a one-line `TargetError` naming ``where`` it came from.

    Anything else would reach the server inside a statement (``CREATE KEYSPACE bad;DROP ...``): refused here.
    """
    if not KEYSPACE_NAME.fullmatch(name):
        raise TargetError(f"{where}: keyspace '{clip(name, 60)}' is not a CQL name: a letter, then up to 47 "
                          f"letters, digits or underscores, e.g. ycsb")
    return name.lower()


#: The driver's loggers that log a failed (re)connection with its traceback.
DRIVER_LOGGERS = ("cassandra.cluster", "cassandra.connection", "cassandra.pool", "cassandra.io.asyncorereactor",
                  "cassandra.policies", "cassandra.metadata")


class _OneLineDriverLogs(logging.Filter):
    """The driver logs each failed attempt to reach a host with the whole traceback: a server killed under load
    printed pages of them into the run's output. Keep the message and the error's last line; drop the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage().rstrip(': ')}: {type(exc).__name__}: {one_line(str(exc), 200)}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_driver_tracebacks() -> None:
    """Install `_OneLineDriverLogs` on the driver's loggers (once; safe to call again)."""
    for name in DRIVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OneLineDriverLogs) for f in logger.filters):
            logger.addFilter(_OneLineDriverLogs())


def load_driver() -> Any:
    """The CQL driver's package (``cassandra``, from scylla-driver), its tracebacks made one line; a `TargetError`
    saying what to install when it is missing. The embedded Cassandra checks for it the same way."""
    try:
        import cassandra
    except ImportError:
        raise TargetError("CQL targets need scylla-driver: pip install 'dbsurge[cql]'") from None
    quiet_driver_tracebacks()
    return cassandra


def consistency_level(name: str, option: str, allowed: tuple[str, ...]) -> int:
    """The driver's ``ConsistencyLevel`` value for ``name``; `TargetError` naming the allowed ones."""
    key = name.strip().upper()
    if key not in allowed:
        raise TargetError(f"target option {option}='{clip(name)}': expected one of {', '.join(allowed)}")
    return getattr(load_driver().ConsistencyLevel, key)


def choose_connection_class(reactor: str) -> Any:
    """The driver's connection class for ``reactor``.

    ``auto``: under gevent's monkey patching (every Locust process) the asyncore reactor, whose ``select`` and
    sockets gevent has made cooperative: the driver's own gevent reactor was removed in scylla-driver 3.29.12
    (scylladb/python-driver#969), and its default libev reactor would block gevent's hub in C. Elsewhere, the
    driver's default. ``asyncore`` needs Python < 3.12 or the ``pyasyncore`` package.
    """
    gevent_patched = "gevent.monkey" in sys.modules and sys.modules["gevent.monkey"].is_module_patched("socket")
    if reactor == "auto":
        reactor = "asyncore" if gevent_patched else "default"
    try:
        if reactor == "asyncore":
            from cassandra.io.asyncorereactor import AsyncoreConnection

            return AsyncoreConnection
        if reactor == "asyncio":
            from cassandra.io.asyncioreactor import AsyncioConnection

            return AsyncioConnection
        if reactor == "libev":
            from cassandra.io.libevreactor import LibevConnection

            return LibevConnection
    except ImportError as exc:
        raise TargetError(f"target option reactor={reactor}: not available here ({one_line(str(exc), 80)})") from None
    from cassandra.cluster import DefaultConnection

    return DefaultConnection


class CqlSession(Session):
    """One Locust user's handle on the process' driver session: `execute` runs one bound statement.

    `prepare(cql)` returns the process-wide prepared statement for ``cql`` with the target's consistency
    levels set, so that every statement bound from it carries them.
    """

    def __init__(self, target: CqlTarget, driver_session: Any) -> None:
        self.target = target
        self.session = driver_session
        self.retries = 0
        self._timeout = target.op_timeout_s

    def prepare(self, cql: str) -> Any:
        return self.target.prepared(self.session, cql)

    def execute(self, statement: Any, values: Any = None) -> Any:
        """Execute and fetch the first page; bounded by op_timeout (the driver's request timeout)."""
        return self.session.execute(statement, values, timeout=self._timeout)

    def close(self) -> None:
        """Nothing to release per user: the driver session belongs to the process (closed at exit)."""


@register_binding("cql")
class CqlTarget(Target):
    """A CQL cluster (ScyllaDB or Cassandra); see the module doc for the URI and the options."""

    kind = "cql"
    schemes = ("cql", "scylla")
    flavors = ("scylla", "cql")

    def __init__(
        self, uri: str, options: dict[str, str] | None = None, *, op_timeout_s: float = DEFAULT_OP_TIMEOUT_S
    ) -> None:
        self.display = clip(redact_uri(uri), DISPLAY_LIMIT)
        options = {k: str(v) for k, v in (options or {}).items()}
        check_options(self.kind, options, KNOWN_OPTIONS)
        # Options may also come in the query string (cql://host/ks?tls=true&tls_ca_file=...); the options win.
        options = {**dict(parse_qsl(urlsplit(uri).query)), **options}
        check_options(self.kind, options, KNOWN_OPTIONS)
        self._secrets = uri_secrets(uri)
        for secret in self._secrets:
            register_secret(secret)
        netloc_hosts, user, password = _split_netloc(uri, self.display)
        self.hosts, self.port = netloc_hosts
        self.user, self._password = user, password
        self.keyspace = _uri_keyspace(uri, options, self.display)
        self.flavor = "scylla" if uri.lower().startswith("scylla://") else "cql"
        self.consistency_name = options.get("consistency", DEFAULT_CONSISTENCY).strip().upper()
        self.consistency = consistency_level(self.consistency_name, "consistency", CONSISTENCY_NAMES)
        serial = options.get("serial_consistency")
        self.serial_consistency_name = serial.strip().upper() if serial else None
        self.serial_consistency = consistency_level(serial, "serial_consistency", SERIAL_NAMES) if serial else None
        self.local_dc = options.get("local_dc") or None
        self.tls_ca_file = options.get("tls_ca_file") or None
        if self.tls_ca_file:
            self.tls_ca_file = check_ca_file(self.display, "tls_ca_file", self.tls_ca_file)
        self.tls = bool(option_bool(options, "tls", bool(self.tls_ca_file)))
        self.connect_timeout_s = option_seconds(options, "connect_timeout", DEFAULT_CONNECT_TIMEOUT_S) \
            or DEFAULT_CONNECT_TIMEOUT_S
        self.op_timeout_s = option_op_timeout(options, op_timeout_s)
        self.protocol_version = option_int(options, "protocol_version", None, minimum=3)
        self.reactor = options.get("reactor", "auto").strip().lower()
        if self.reactor not in REACTORS:
            raise TargetError(f"target option reactor='{clip(self.reactor)}': expected one of {', '.join(REACTORS)}")
        self._lock = threading.Lock()
        self._cluster: Any = None
        self._session: Any = None
        self._prepared: dict[str, Any] = {}
        #: What `check` learnt from the server (release, negotiated protocol, shard awareness), for run.json.
        self.server: dict[str, Any] = {}

    # ---- the driver's objects -------------------------------------------------------------------

    def cluster_kwargs(self, *, connect_timeout_s: float | None = None) -> dict[str, Any]:
        """The keyword arguments of the driver's ``Cluster`` for this target (the password included)."""
        load_driver()
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
        from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
        from cassandra.query import tuple_factory

        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=self.local_dc)),
            consistency_level=self.consistency,
            serial_consistency_level=self.serial_consistency,
            request_timeout=self.op_timeout_s,
            # Rows as plain tuples: the driver's default, named_tuple_factory, builds a namedtuple class for every
            # result set (about 90 us an operation, 22% of a YCSB-A worker's profile); no workload reads by name.
            row_factory=tuple_factory,
        )
        kwargs: dict[str, Any] = {
            "contact_points": list(self.hosts),
            "port": self.port,
            "execution_profiles": {EXEC_PROFILE_DEFAULT: profile},
            "connect_timeout": connect_timeout_s or self.connect_timeout_s,
            "control_connection_timeout": connect_timeout_s or self.connect_timeout_s,
            "connection_class": choose_connection_class(self.reactor),
        }
        if self.protocol_version:
            kwargs["protocol_version"] = self.protocol_version
        if self.user:
            kwargs["auth_provider"] = PlainTextAuthProvider(username=self.user, password=self._password or "")
        if self.tls:
            context = ssl.create_default_context(cafile=self.tls_ca_file)
            kwargs["ssl_context"] = context
            kwargs.update(named_endpoints(self.hosts, self.port))
        return kwargs

    def prepared(self, driver_session: Any, cql: str) -> Any:
        """The process-wide prepared statement of ``cql`` with the target's consistency levels."""
        statement = self._prepared.get(cql)
        if statement is None:
            statement = self.configure(driver_session.prepare(cql))
            self._prepared[cql] = statement
        return statement

    def configure(self, statement: Any) -> Any:
        """Set the target's consistency (and serial consistency) on a driver statement; returns it."""
        statement.consistency_level = self.consistency
        if self.serial_consistency is not None:
            statement.serial_consistency_level = self.serial_consistency
        return statement

    def _shared_session(self) -> Any:
        with self._lock:
            if self._session is None:
                from cassandra.cluster import Cluster

                cluster = Cluster(**self.cluster_kwargs())
                try:
                    self._session = cluster.connect()
                except Exception:
                    cluster.shutdown()
                    raise
                self._cluster = cluster
                atexit.register(self.shutdown)
            return self._session

    def shutdown(self) -> None:
        """Close the process' driver cluster (at exit; safe to call twice)."""
        with self._lock:
            cluster, self._cluster, self._session = self._cluster, None, None
            self._prepared.clear()
        if cluster is not None:
            cluster.shutdown()

    def connect(self) -> CqlSession:
        """A user's handle on the process' driver session (connected on first use)."""
        try:
            return CqlSession(self, self._shared_session())
        except TargetError:
            raise
        except Exception as exc:
            raise ConnectError(f"target {self.display}: {self._explain(exc)}") from exc

    def check(self) -> None:
        """Connect once (its own short-lived cluster) and read ``system.local``; one-line `TargetError`."""
        load_driver()
        from cassandra.cluster import Cluster

        cluster = None
        try:
            cluster = Cluster(**self.cluster_kwargs(connect_timeout_s=min(5.0, self.connect_timeout_s)))
            session = cluster.connect()
            row = session.execute("SELECT release_version FROM system.local", timeout=min(10.0, self.op_timeout_s))
            self.server = self._server_facts(cluster, row.one())
            self._negotiated = self.negotiation_record(self.server)
        except TargetError:
            raise
        except Exception as exc:
            raise TargetError(f"target {self.display}: {self._explain(exc)}") from None
        finally:
            if cluster is not None:
                cluster.shutdown()

    @staticmethod
    def _server_facts(cluster: Any, row: Any) -> dict[str, Any]:
        """The server's release, the protocol version the driver settled on, and whether routing is shard-aware.

        Shard awareness needs the server to advertise ``SCYLLA_SHARD`` and its kin in its SUPPORTED answer:
        ScyllaDB does, Apache Cassandra does not, so on Cassandra the driver routes by token to the node only.
        """
        hosts = list(cluster.metadata.all_hosts())
        return {"release_version": row[0] if row else None,  # rows are tuples (`cluster_kwargs`)
                "protocol_version": cluster.protocol_version,
                "shard_aware": bool(hosts) and all(getattr(h, "sharding_info", None) is not None for h in hosts)}

    def negotiation_record(self, server: dict[str, Any]) -> dict[str, Any]:
        """What the check's cluster negotiated (`negotiation.record`) from `_server_facts`: release_version, the
        native protocol version, TLS as `cluster_kwargs` sets it up (``ssl.create_default_context``: chain and host
        name verified against ``tls_ca_file`` or the system's store; the version and cipher from one probe
        handshake with the same context, since the driver keeps its sockets to itself), the authenticator."""
        host = self.hosts[0] if self.hosts else ""
        tls_version = cipher = None
        source = "a probe handshake with the driver's SSL context settings (the driver does not expose its own)"
        if self.tls:
            tls_version, cipher, why = negotiation.probe_tls(host, self.port, ca_file=self.tls_ca_file, verify=True,
                                                             check_host_name=True)
            if why:
                source += f"; the probe failed: {why}"
        tls = negotiation.tls_facts(in_use=self.tls, verified=self.tls, host_name_checked=True,
                                    ca_file=self.tls_ca_file or "system trust store", version=tls_version,
                                    cipher=cipher, setting=f"tls={'true' if self.tls else 'false'}", source=source)
        version = server.get("protocol_version")
        return negotiation.record(
            kind=self.kind, flavor=self.flavor, endpoint=f"{host}:{self.port}", host=host, display=self.display,
            driver=self.describe_driver(), server_version=server.get("release_version"),
            protocol=f"CQL native protocol v{version}" if version else None, tls=tls,
            auth="PasswordAuthenticator (SASL PLAIN)" if self.user else "none (no user in the URI)",
            fix="pass tls=true and tls_ca_file=CA_FILE", shard_aware=server.get("shard_aware"))

    @staticmethod
    def describe_driver() -> str | None:
        """The CQL driver and its version (None when it is not installed)."""
        try:
            import cassandra

            # RateLimitReached is ScyllaDB's: scylla-driver has it, DataStax's cassandra-driver does not
            name = "scylla-driver" if hasattr(cassandra, "RateLimitReached") else "cassandra-driver"
            return f"{name} {cassandra.__version__}"
        except ImportError:
            return None

    # ---- failures -------------------------------------------------------------------------------

    def classify(self, exc: BaseException) -> str:
        """The failure kind of `exc` (see `Target.classify`), from the driver's errors.

        ``timeout``: the driver's own request timeout (``OperationTimedOut``: op_timeout passed); the server's
        answers keep their name: ``server:ReadTimeout`` / ``server:WriteTimeout`` (the coordinator did not hear
        from enough replicas in time), ``server:Unavailable`` (too few replicas alive for the consistency),
        ``server:Overloaded``, ``server:ReadFailure`` / ``server:WriteFailure``, ``server:InvalidRequest``...;
        ``throttled``: ScyllaDB's per-partition rate limit (``RateLimitReached``); ``connect``: no host could
        be reached (``NoHostAvailable``) or authentication failed; ``disconnect``: a connection closed midway.
        """
        kind = generic_kind(exc)
        if kind is not None:
            return kind
        cassandra = load_driver()
        from cassandra.cluster import NoHostAvailable
        from cassandra.connection import ConnectionException
        from cassandra.protocol import OverloadedErrorMessage

        if isinstance(exc, cassandra.OperationTimedOut):
            return "timeout"
        rate_limited = getattr(cassandra, "RateLimitReached", None)  # scylla-driver's; not in cassandra-driver
        if rate_limited is not None and isinstance(exc, rate_limited):
            return "throttled"
        if isinstance(exc, (NoHostAvailable, cassandra.AuthenticationFailed)):
            return self._classify_no_host(exc)  # authentication failed: no hosts' errors, so connect
        if isinstance(exc, ConnectionException):
            return "disconnect"
        if isinstance(exc, OverloadedErrorMessage):
            return "server:Overloaded"
        named = (cassandra.ReadTimeout, cassandra.WriteTimeout, cassandra.Unavailable, cassandra.ReadFailure,
                 cassandra.WriteFailure, cassandra.CDCWriteFailure, cassandra.FunctionFailure,
                 cassandra.InvalidRequest, cassandra.Unauthorized, cassandra.AlreadyExists,
                 cassandra.ConfigurationException)
        for cls in named:
            if isinstance(exc, cls):
                return f"server:{cls.__name__}"
        if isinstance(exc, cassandra.RequestExecutionException):
            return f"server:{type(exc).__name__.removesuffix('ErrorMessage') or 'error'}"
        return "other"

    def _classify_no_host(self, exc: BaseException) -> str:
        """``NoHostAvailable`` is the driver's wrapper for "every host it tried failed", and not only to connect:
        its default retry policy answers a coordinator's Unavailable by trying the next host, and on a single
        node there is none, so a QUORUM the replicas cannot meet arrives as NoHostAvailable({host: Unavailable}).
        When every host failed the same way on a live connection, that is the failure; otherwise ``connect``.
        """
        inner = [e for e in (getattr(exc, "errors", None) or {}).values() if isinstance(e, BaseException)]
        kinds = {self.classify(e) for e in inner if type(e).__name__ != "NoHostAvailable"}
        if len(kinds) == 1 and len(inner) == len(getattr(exc, "errors", {}) or {}):
            kind = kinds.pop()
            if kind.startswith("server:") or kind in ("timeout", "throttled"):
                return kind
        return "connect"

    def _explain(self, exc: BaseException) -> str:
        name = type(exc).__name__
        if name == "NoHostAvailable":
            errors = getattr(exc, "errors", {}) or {}
            first = next(iter(errors.values()), None)
            if first is not None and "Authentication" in type(first).__name__:
                return "authentication failed (wrong user name or password)"
            text = str(first) if first is not None else ""
            where = f"{', '.join(self.hosts)} port {self.port}"
            if any(s in text.lower() for s in ("ssl", "tls", "certificate")):
                return f"TLS error talking to {where}: {self._tls_cause(text)}"
            if not self.tls and first is not None and self._speaks_tls():
                return (f"the node at {where} takes TLS only (client_encryption_options, optional: false) and this "
                        f"connection had TLS off: pass tls=true and tls_ca_file=CA_FILE")
            why = f": {one_line(text, 120)}" if first is not None else ""
            return f"no host reachable at {where}{why}"
        return redact_text(f"{name}: {one_line(str(exc), 160)}", self._secrets)

    def _tls_cause(self, text: str) -> str:
        """A failed handshake's cause in words (another CA, a host name the certificate does not carry, expired),
        then OpenSSL's reason without its source line."""
        detail = re.sub(r" \(_ssl\.c:\d+\)", "", one_line(text, 400)).rstrip(".")
        detail = detail.rsplit("certificate verify failed: ", 1)[-1]
        low = detail.lower()
        ca = f"tls_ca_file={self.tls_ca_file}" if self.tls_ca_file else "the system's trust store"
        if "has expired" in low:
            return f"the server's certificate has expired ({detail})"
        if "mismatch" in low or "not valid for" in low:
            return f"the server's certificate does not name the host it was reached by ({detail})"
        if "local issuer" in low or "self-signed" in low or "self signed" in low:
            return f"the server's certificate is not signed by a CA in {ca} ({detail})"
        return one_line(detail, 160)

    def _speaks_tls(self) -> bool:
        """True when the first host completes a TLS handshake (not verified): the node wants TLS, the client had none."""
        version, _, _ = negotiation.probe_tls(self.hosts[0], self.port, ca_file=None, verify=False,
                                              check_host_name=False, timeout_s=3.0)
        return version is not None

    def describe(self) -> dict[str, Any]:
        """Secret-free settings for run.json."""
        driver = self.describe_driver()
        return {"kind": self.kind, "flavor": self.flavor, "display": self.display, "hosts": list(self.hosts),
                "port": self.port, "user": self.user, "keyspace": self.keyspace,
                "consistency": self.consistency_name, "serial_consistency": self.serial_consistency_name,
                "local_dc": self.local_dc, "tls": self.tls, "tls_ca_file": self.tls_ca_file,
                "connect_timeout_s": self.connect_timeout_s, "op_timeout_s": self.op_timeout_s,
                "protocol_version": self.protocol_version, "reactor": self.reactor, "driver": driver,
                # token-aware routing always; shard-aware only where the server is ScyllaDB (`_server_facts`)
                "routing": "token-aware over DC-aware round robin",
                "server_release": self.server.get("release_version"),
                "negotiated_protocol_version": self.server.get("protocol_version"),
                "shard_aware": self.server.get("shard_aware")}


def named_endpoints(hosts: tuple[str, ...], port: int) -> dict[str, Any]:
    """``contact_points`` and ``endpoint_factory`` for the driver's ``Cluster`` that verify each node's certificate
    against the name the URI gave for it.

    The driver resolves a contact point's name to addresses and, with a context that checks host names, checks
    the certificate against the address (its ``DefaultEndPoint``); the nodes it finds in ``system.peers`` and
    ``system.local`` are addresses too. A certificate for ``localhost`` then fails at ``cql://localhost``, and one
    that names only 127.0.0.1 passes at any name. Here a contact point given by name is an endpoint at each of its
    addresses that asks for that name (``server_hostname``), and so is a node the driver finds at one of them; a
    node given by address, or found at an address no name resolved to, is checked against its address.
    """
    import socket

    from cassandra.connection import DefaultEndPoint, DefaultEndPointFactory

    class NamedEndPoint(DefaultEndPoint):
        """An address whose certificate must name `name` (the driver puts ``ssl_options`` into wrap_socket)."""

        def __init__(self, name: str, address: str, port: int = DEFAULT_PORT) -> None:
            super().__init__(address, port)
            self.name = name

        @property
        def ssl_options(self) -> dict[str, str]:
            return {"server_hostname": self.name}

    class NamedEndPointFactory(DefaultEndPointFactory):
        def __init__(self, names: dict[str, str], port: int) -> None:
            super().__init__(port=port)
            self.names = names

        def create(self, row: Any) -> Any:
            endpoint = super().create(row)
            name = self.names.get(endpoint.address)
            return NamedEndPoint(name, endpoint.address, endpoint.port) if name else endpoint

    names: dict[str, str] = {}
    points: list[Any] = []
    for host in hosts:
        if _is_address(host):
            points.append(host)
            continue
        try:
            addresses = sorted({info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)})
        except OSError:
            points.append(host)  # the driver says it cannot resolve it
            continue
        for address in addresses:
            names.setdefault(address, host)
            points.append(NamedEndPoint(host, address, port))
    return {"contact_points": points, "endpoint_factory": NamedEndPointFactory(names, port)}


def _is_address(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def _uri_keyspace(uri: str, options: dict[str, str], display: str) -> str | None:
    """The keyspace the URI names (its path, or the ``keyspace`` option), checked as a CQL name; None if neither.

    The ycsb workload works in this keyspace (`dbsurge.workloads.ycsb_cql`): the load creates it there.
    """
    path = unquote(urlsplit(uri).path).strip("/")
    option = options.get("keyspace", "").strip()
    where = f"bad target URI '{display}'"
    named = {check_keyspace(name, where) for name in (path, option) if name}
    if len(named) > 1:
        raise TargetError(f"{where}: the path names keyspace '{path}' and the option keyspace='{option}': name it once")
    return named.pop() if named else None


def _split_netloc(uri: str, display: str) -> tuple[tuple[tuple[str, ...], int], str | None, str | None]:
    """((hosts, port), user, password) of ``cql://user:pw@h1,h2:port/ks``; one port for every host."""
    rest = uri.split("://", 1)[1]
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    userinfo, at, hostpart = netloc.rpartition("@")
    user = password = None
    if at:
        name, colon, secret = userinfo.partition(":")
        user, password = unquote(name) or None, (unquote(secret) if colon else None)
    hosts, port = [], DEFAULT_PORT
    for item in hostpart.split(","):
        host, colon, port_text = item.strip().rpartition(":") if ":" in item else (item.strip(), "", "")
        if colon:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise TargetError(f"bad target URI '{display}': port '{clip(port_text, 20)}' is not a number "
                                  f"from 1 to 65535")
            port = int(port_text)
        if host:
            check_host_name(display, host)
            hosts.append(host)
    if not hosts:
        raise TargetError(f"bad target URI '{display}': no host; e.g. cql://scylla-1:9042/ycsb")
    return (tuple(hosts), port), user, password
