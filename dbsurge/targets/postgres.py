"""PostgreSQL-compatible targets through psycopg 3: plain PostgreSQL, Aurora, and Aurora DSQL.

- plain: the URI as libpq understands it, plus dbsurge's defaults (``application_name=dbsurge``,
  ``connect_timeout=10``).
- aurora (host ``*.rds.amazonaws.com`` or option ``flavor=aurora``): the same driver, ``sslmode=require``
  by default on AWS hosts.
- dsql (``dsql://``, host ``<id>.dsql.<region>.on.aws`` or ``*.dsql.amazonaws.com``, or ``flavor=dsql``):
  user ``admin``, database ``postgres``, ``sslmode=verify-full`` against a CA bundle found on the host, a
  fresh IAM auth token for every new connection, connections recycled before DSQL's 60-minute limit.

Every session retries a whole transaction on SQLSTATE 40001 (serialization failure; DSQL's optimistic
concurrency conflicts use the same code) with exponential backoff and full jitter, and counts the retries
apart from failures.

Time bounds (see `PostgresTarget`): ``connect_timeout`` for every (re)connect; ``op_timeout`` for every
session operation, enforced on the client by `OperationDeadline` (which also covers a server that
accepts TCP but never answers, e.g. a stopped process, where no socket option helps); a server-side
``statement_timeout`` a little shorter, so that a slow statement is cancelled by the server and the
connection survives; TCP keepalives and ``tcp_user_timeout`` so that a dead peer or a blackholed route
turns into a socket error. `PostgresTarget.classify` names the kind of each failure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from time import monotonic
from typing import Any, TypeVar
from urllib.parse import unquote

import psycopg
from gevent import get_hub
from greenlet import getcurrent
from psycopg import IsolationLevel
from psycopg.adapt import PyFormat, Transformer
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.errors import SerializationFailure, error_from_result
from psycopg.pq import ConnStatus, DiagnosticField, ExecStatus, TransactionStatus

from dbsurge.base.backoff import Backoff
from dbsurge.base.errors import OperationTimeout, TargetError, clip
from dbsurge.base.redact import (
    install_log_redaction,
    redact_text,
    redact_uri,
    register_secret,
    uri_secrets,
    userinfo_span,
)
from dbsurge.targets import (
    DEFAULT_OP_TIMEOUT_S,
    DISPLAY_LIMIT,
    ConnectError,
    Session,
    Target,
    check_ca_file,
    check_host_name,
    check_options,
    check_password_spelling,
    generic_kind,
    gevent_wait,
    negotiation,
    one_line,
    option_int,
    option_op_timeout,
    option_seconds,
    register_binding,
)

T = TypeVar("T")

# (host, region, user) -> IAM auth token. Injected in tests to count and inspect tokens.
TokenProvider = Callable[[str, str, str], str]

# Options that are libpq connection parameters: they may come in the URI query too, options win.
_LIBPQ_OPTIONS = (
    "sslmode",
    "sslrootcert",
    "application_name",
    "user",
    "dbname",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
)
# Options that only dbsurge understands: accepted in the URI query as well, and removed before libpq sees it.
_DBSURGE_OPTIONS = (
    "flavor",
    "connect_timeout",
    "isolation",
    "retry_attempts",
    "retry_base_ms",
    "retry_cap_ms",
    "max_connection_age",
    "region",
    "endpoint_url",
    "token_expires_in",
    "database",
    "prepare_threshold",
    "op_timeout",
    "statement_timeout",
)
KNOWN_OPTIONS = frozenset(_LIBPQ_OPTIONS + _DBSURGE_OPTIONS)

_ISOLATION_LEVELS = {
    "read_committed": IsolationLevel.READ_COMMITTED,
    "repeatable_read": IsolationLevel.REPEATABLE_READ,
    "serializable": IsolationLevel.SERIALIZABLE,
    "default": None,
}

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_RETRY_ATTEMPTS = 10
DEFAULT_RETRY_BASE_MS = 5
DEFAULT_RETRY_CAP_MS = 1000
# DSQL closes connections after 60 minutes; recycle well before, spread over the last 10% so that users
# that connected together do not all reconnect in the same second.
DSQL_MAX_CONNECTION_AGE_S = 55 * 60.0
_RECYCLE_SPREAD = 0.1
DEFAULT_TOKEN_EXPIRES_S = 900
# TCP keepalives (libpq parameters): a silent peer is declared dead after about 5 + 3 * 2 = 11 s idle.
DEFAULT_KEEPALIVES = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2", "keepalives_count": "3"}
# The server-side statement_timeout is this much shorter than op_timeout (at most 10% of it), so that the
# server cancels a slow statement (57014, the connection survives) before the client deadline closes it.
STATEMENT_TIMEOUT_LEAD_S = 0.5

_DSQL_HOST = re.compile(r"\.dsql(-fips)?\.[a-z0-9-]+\.on\.aws$|\.dsql\.amazonaws\.com$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-\d+$")
# CA bundles of the common distributions. psycopg-binary's bundled OpenSSL looks for the "system" store in
# its own build directory (/usr/lib/psycopg-openssl), which does not exist, so libpq's
# sslrootcert=system does not work with it: dbsurge passes a concrete file instead.
_SYSTEM_CA_FILES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
    "/usr/local/etc/openssl/cert.pem",
)


def system_ca_file() -> str:
    """A CA bundle file to verify public endpoints (DSQL) with, or ``system`` when none is found."""
    candidate = os.environ.get("SSL_CERT_FILE")
    if candidate and os.path.isfile(candidate):
        return candidate
    for path in _SYSTEM_CA_FILES:
        if os.path.isfile(path):
            return path
    try:
        import certifi

        return certifi.where()
    except ImportError:
        return "system"


def is_dsql_host(host: str) -> bool:
    """True for Aurora DSQL endpoints (``<id>.dsql.<region>.on.aws``, ``*.dsql.amazonaws.com``)."""
    return bool(_DSQL_HOST.search(host.lower().rstrip(".")))


def region_from_host(host: str) -> str | None:
    """The AWS region named in an endpoint host, e.g. ``us-east-1`` in ``abc.dsql.us-east-1.on.aws``."""
    for label in host.lower().split("."):
        if _AWS_REGION.match(label):
            return label
    return None


class DsqlTokenProvider:
    """Signs DSQL IAM auth tokens with boto3's ``dsql`` client: local SigV4 signing, no network call.

    One client per region, created once (client creation is slow) and shared by all sessions.
    """

    def __init__(self, endpoint_url: str | None = None, expires_in: int = DEFAULT_TOKEN_EXPIRES_S) -> None:
        self.endpoint_url = endpoint_url
        self.expires_in = expires_in
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        install_log_redaction()  # botocore logs each signature at DEBUG level

    def _client(self, region: str) -> Any:
        client = self._clients.get(region)
        if client is None:
            with self._lock:
                client = self._clients.get(region)
                if client is None:
                    import boto3  # only DSQL needs it; it takes a while to import

                    client = boto3.session.Session().client("dsql", region_name=region, endpoint_url=self.endpoint_url)
                    self._clients[region] = client
        return client

    def __call__(self, host: str, region: str, user: str) -> str:
        client = self._client(region)
        if user == "admin":
            return client.generate_db_connect_admin_auth_token(Hostname=host, Region=region, ExpiresIn=self.expires_in)
        return client.generate_db_connect_auth_token(Hostname=host, Region=region, ExpiresIn=self.expires_in)


class PostgresConnectError(ConnectError, psycopg.OperationalError):
    """A session could not connect or reconnect; the psycopg error (if any) is the ``__cause__``."""


_local = threading.local()  # the current operation's deadline of a thread, without gevent
_unbounded_wait: Any = None


class OperationDeadline:
    """Bounds each operation of one session to ``op_timeout`` seconds from its start.

    Under gevent: a libev timer of the session, started when an operation begins and stopped when it
    ends (about 0.3 us for both). Should it fire, it closes the session's connection (whose late answer would
    otherwise reach the next statement, and whose transaction must not be rolled back over a dead socket)
    and throws `OperationTimeout` into the greenlet, which is waiting: on the socket (psycopg's wait,
    `PreparedLookup`'s), in a reconnect, or in a retry's backoff. Without gevent, psycopg's own wait
    function is wrapped (`_bounded_wait`) to wait no longer than the thread's current deadline.
    Nested operations (`execute` inside `run_transaction`) share the outermost one's deadline.
    """

    __slots__ = ("_timer", "armed", "expires_at", "seconds", "session")

    def __init__(self, session: PostgresSession, seconds: float) -> None:
        self.session = session
        self.seconds = seconds
        self.expires_at = 0.0
        self.armed = False
        # `again` (not `start`) arms it: libev's ev_timer_again counts `repeat` from now, where a stopped
        # timer restarted with ev_timer_start would only get what was left of its previous run.
        self._timer = get_hub().loop.timer(seconds, seconds) if gevent_wait.gevent_active() else None
        if self._timer is None:
            _install_bounded_wait()

    def arm(self) -> bool:
        """Start the deadline unless one runs; True if this call started it (and must `disarm` it)."""
        if self.armed:
            return False
        self.armed = True
        if self._timer is not None:
            self._timer.again(self._fire, getcurrent())
        else:
            self.expires_at = monotonic() + self.seconds
            _local.deadline = self
        return True

    def disarm(self) -> None:
        self.armed = False
        if self._timer is not None:
            self._timer.stop()
        else:
            _local.deadline = None

    def _fire(self, greenlet: Any) -> None:
        self._timer.stop()  # it repeats (see `arm`)
        if self.armed and not greenlet.dead:
            greenlet.throw(self.expire())

    def expire(self) -> OperationTimeout:
        """Close the session's connection (it reconnects on the next operation); the error to raise."""
        self.session._drop_connection()
        return OperationTimeout(f"no answer within op_timeout={self.seconds:g}s (connection closed)", interrupted=False)


def _bounded_wait(gen: Any, fileno: int, interval: float = 0.0, timeout: float | None = None) -> Any:
    """psycopg's wait (without gevent), no longer than the deadline of the thread's current operation."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None or timeout is not None:
        return _unbounded_wait(gen, fileno, interval, timeout)
    try:
        remaining = deadline.expires_at - monotonic()
        if remaining <= 0:
            raise psycopg.errors._WaitTimeout("wait timeout expired")
        return _unbounded_wait(gen, fileno, interval, remaining)
    except psycopg.errors._WaitTimeout:
        raise deadline.expire() from None


def _install_bounded_wait() -> None:
    global _unbounded_wait
    if psycopg.waiting.wait is not _bounded_wait and psycopg.waiting.wait is not gevent_wait.wait_gevent:
        _unbounded_wait = psycopg.waiting.wait
        psycopg.waiting.wait = _bounded_wait


class PostgresSession(Session):
    """One autocommit psycopg connection for one Locust user.

    `conn` is the connection. Reading it, `execute` and `run_transaction` first reconnect when the
    connection has reached `max_connection_age` (only between transactions) or broke; on the hot path
    that costs one monotonic comparison.

    Failures: every operation (`execute`, `run_transaction`, a `lookup`) raises `OperationTimeout` when it
    has not finished within ``op_timeout`` (the connection is then closed), `PostgresConnectError` when
    the reconnect before it fails (bounded by ``connect_timeout`` and by ``op_timeout``), and psycopg's
    errors otherwise (a server error with its SQLSTATE, `SerializationFailure` once the retries are spent,
    `OperationalError` for a connection lost midway). After any failure that leaves the connection
    unusable, the next operation reconnects first.
    """

    def __init__(self, target: PostgresTarget) -> None:
        self.target = target
        self.retries = 0
        self.reconnects = 0
        self._max_attempts = target.retry_attempts
        self._backoff = Backoff(target.retry_base_ms / 1000.0, target.retry_cap_ms / 1000.0)
        self._recycle_at = float("inf")
        self._deadline = OperationDeadline(self, target.op_timeout_s)
        self._conn: psycopg.Connection[Any] = self._open()
        # One cursor per connection, reused by `execute`: a new cursor per statement (what
        # ``Connection.execute`` does) costs about 12 us of client CPU per statement.
        self._cursor: psycopg.Cursor[Any] = self._conn.cursor()

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The connection, renewed first if it is due (see `maybe_recycle`)."""
        if monotonic() >= self._recycle_at:
            self.maybe_recycle()
        return self._conn

    def _open(self) -> psycopg.Connection[Any]:
        """A new connection; `PostgresConnectError` with one line if that fails."""
        target = self.target
        started = monotonic()
        try:
            conn = target.new_connection()
        except OperationTimeout:
            raise PostgresConnectError(
                f"target {target.display}: no connection within op_timeout={target.op_timeout_s:g}s"
            ) from None
        except TargetError as exc:  # the DSQL token could not be signed
            raise PostgresConnectError(str(exc)) from exc
        except psycopg.Error as exc:
            raise PostgresConnectError(f"target {target.display}: {target._explain(exc, monotonic() - started)}") from exc
        age = self.target.max_connection_age
        if age is None:
            self._recycle_at = float("inf")
        else:
            self._recycle_at = monotonic() + age * (1.0 - _RECYCLE_SPREAD * random.random())
        return conn

    def reconnect(self) -> None:
        """Close the connection and open a new one (with a fresh token on DSQL).

        Should opening fail, the error is raised and the next operation tries again.
        """
        self._recycle_at = 0.0
        try:
            self._conn.close()
        except Exception:  # closing a broken connection may fail; the new one is what matters
            pass
        self._conn = self._open()
        self._cursor = self._conn.cursor()
        self.reconnects += 1

    def maybe_recycle(self) -> None:
        """Reconnect if the connection is too old or broke, unless a transaction is open on it.

        Cheap when nothing is due: one monotonic comparison.
        """
        if monotonic() < self._recycle_at:
            return
        conn = self._conn
        if conn.closed or conn.broken or conn.info.transaction_status == TransactionStatus.IDLE:
            self.reconnect()
        # else: a transaction the caller opened on `conn` is in progress: recycle after it.

    def execute(self, sql: Any, params: Any = None, *, prepare: bool | None = None) -> psycopg.Cursor[Any]:
        """Run one statement (autocommit) and return its cursor, whose rows the caller fetches.

        The cursor is the session's own, reused by the next `execute`: fetch its rows first.
        """
        deadline = self._deadline
        owner = deadline.arm()
        try:
            if monotonic() >= self._recycle_at:
                self.maybe_recycle()
            return self._cursor.execute(sql, params, prepare=prepare)
        except BaseException:
            self._after_failure()
            raise
        finally:
            if owner:
                deadline.disarm()

    def lookup(self, sql: str, *, prepare_now: bool = True) -> Callable[[Sequence[Any]], Any]:
        """``fetch(params) -> first row (a tuple) or None`` for one read-only statement, on the fast path.

        For the key lookups that dominate read workloads: the statement (``%s`` placeholders, no
        ``%%``) is prepared once per connection and run through libpq directly (`PreparedLookup`),
        on the open connection at once unless ``prepare_now`` is false (a statement the workload may
        never run; it is prepared at its first call). Without gevent (psycopg waits by itself) it is
        ``execute(sql, params, prepare=True).fetchone()``.
        """
        if not gevent_wait.gevent_active():
            return lambda params: self.execute(sql, params, prepare=True).fetchone()
        lookup = PreparedLookup(self, sql)
        if prepare_now:
            lookup.prepare_now()
        return lookup

    def run_transaction(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn(conn)`` inside one transaction and return its result.

        On SQLSTATE 40001 the whole transaction is rolled back and run again after the backoff of
        `dbsurge.base.backoff` (``uniform(0, min(cap, base * 2**n))``, "full jitter", ``retry_base_ms`` and
        ``retry_cap_ms``), up to ``retry_attempts`` runs in all; each rerun adds one to `retries`. The last conflict is raised. `fn` must not open nested transactions
        (savepoints), which DSQL does not support.
        """
        deadline = self._deadline
        owner = deadline.arm()
        attempt = 1
        try:
            while True:
                if monotonic() >= self._recycle_at:
                    self.maybe_recycle()
                conn = self._conn
                try:
                    with conn.transaction():
                        return fn(conn)
                except SerializationFailure:
                    if attempt >= self._max_attempts:
                        raise
                    delay = self._backoff.delay(attempt - 1)
                    attempt += 1
                    self.retries += 1
                    time.sleep(delay)  # looked up at call time: gevent's patched sleep under Locust
        except BaseException:
            self._after_failure()
            raise
        finally:
            if owner:
                deadline.disarm()

    def _mark_if_broken(self) -> None:
        conn = self._conn
        if conn.broken or conn.closed:
            self._recycle_at = 0.0

    def _after_failure(self) -> None:
        """After a failed operation: drop a connection that broke or still has a query in flight."""
        conn = self._conn
        if conn.closed or conn.pgconn.status != ConnStatus.OK or conn.pgconn.transaction_status not in _USABLE:
            self._drop_connection()

    def _drop_connection(self) -> None:
        """Close the connection now; the next operation reconnects."""
        self._recycle_at = 0.0
        with contextlib.suppress(psycopg.Error, OSError):  # a broken connection is gone either way
            self._conn.close()

    def close(self) -> None:
        """Close the connection."""
        self._recycle_at = float("inf")
        if self._deadline.armed:
            self._deadline.disarm()
        self._conn.close()


class _InterruptedRollback(logging.Filter):
    """Drops psycopg's "error ignored in rollback ...: another command is already in progress".

    psycopg logs it when an operation is interrupted while a statement of its transaction is in flight:
    a user stopped at the run's end (Locust kills busy users, each in the middle of its transaction),
    or an operation bound thrown in. The rollback cannot be sent before the answer is read; dbsurge
    closes such a connection (`PostgresSession._after_failure`) and the interruption itself is what the
    run records. Without this, every closed-model run of a transaction mix ended with one such warning per busy user.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("error ignored in rollback" in message and "another command is already in progress" in message)


logging.getLogger("psycopg.transaction").addFilter(_InterruptedRollback())

# Transaction states of a connection that can take the next statement (not ACTIVE: a query in flight).
_USABLE = (TransactionStatus.IDLE, TransactionStatus.INTRANS, TransactionStatus.INERROR)


class PreparedLookup:
    """One read-only statement of one session, run through libpq (``psycopg.pq``) under gevent.

    Per call: one ``PQsendQueryPrepared`` with text parameters of unspecified type (the server
    infers them from the statement, so a parameter's Python type never has to match a prepared
    type), a wait on a reused libev watcher of the connection's socket, and psycopg's own
    `Transformer` to turn the first row into the Python values ``execute(...).fetchone()`` gives,
    with the loaders chosen on the first call. This skips what psycopg's ``Connection.execute``
    does per call (a new cursor and transformer, query conversion, prepared-statement
    bookkeeping), about half the client CPU of a key lookup. An exception while a query is in
    flight (a broken connection, the greenlet killed) closes the connection, whose unread answer
    would otherwise reach the next query; the session reconnects on the next call.
    """

    _names = iter(range(1, 1 << 62))

    def __init__(self, session: PostgresSession, sql: str) -> None:
        if "%%" in sql or "%(" in sql:
            raise ValueError("PreparedLookup takes %s placeholders only")
        parts = sql.split("%s")
        self.sql = "".join(p + (f"${i + 1}" if i < len(parts) - 1 else "") for i, p in enumerate(parts)).encode()
        self.formats = [PyFormat.TEXT] * (len(parts) - 1)
        self.session = session
        self.name = f"_dbsurge_{next(self._names)}".encode()
        self._conn: psycopg.Connection[Any] | None = None

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        """Prepare the statement on a (new) connection."""
        self._conn = None
        self.pgconn = pgconn = conn.pgconn
        self.tx = Transformer(conn)
        self.loaders_set = False
        self.encoding = conn.info.encoding
        hub = get_hub()
        self.hub_wait = hub.wait
        self.read_watcher = hub.loop.io(pgconn.socket, 1)
        self.write_watcher = hub.loop.io(pgconn.socket, 2)
        pgconn.send_prepare(self.name, self.sql, None)
        result = self._results()
        if result.status != ExecStatus.COMMAND_OK:
            raise error_from_result(result, encoding=self.encoding)
        self._conn = conn

    def prepare_now(self) -> None:
        """Prepare the statement on the session's open connection now: when the user connects, before its first slot.

        Prepared at the first call instead, each user's first operation paid a round trip more than
        the rest (at 1 ms from the database, 1 ms more response time), and at a run's start every user
        paid it at once, in the first milliseconds of the plan. A failure here changes nothing: the
        first call prepares again and reports what goes wrong as that operation's outcome. A prepare
        cut off mid-way (a broken connection, the deadline) closes the connection, whose unread
        answer would reach the next query; the session reconnects on the next call.
        """
        conn = self.session._conn
        if conn is None or conn.closed:
            return
        deadline = self.session._deadline
        owner = deadline.arm()
        try:
            self._setup(conn)
        except Exception:
            pgconn = conn.pgconn
            if not conn.closed and (pgconn.status != ConnStatus.OK or pgconn.transaction_status not in _USABLE):
                self._close_midway(conn)
        except BaseException:
            self._close_midway(conn)
            raise
        finally:
            if owner:
                deadline.disarm()

    def _results(self) -> Any:
        """Flush, then read until libpq has the whole answer; the last result.

        It waits for the socket before the first read even when the answer may already be there
        (the server can run on this CPU during our send): the wait is a turn through the hub, so
        every user gets its turn after each query, as with psycopg's own waiting. Reading first
        lets one user run query after query while the other users' answers wait (measured: p50
        0.05 ms, p99 20 ms instead of 0.8 and 2.5 ms).
        """
        pgconn, wait, read_watcher = self.pgconn, self.hub_wait, self.read_watcher
        while pgconn.flush():
            wait(self.write_watcher)
        last = None
        while True:
            wait(read_watcher)
            pgconn.consume_input()
            while not pgconn.is_busy():
                result = pgconn.get_result()
                if result is None:
                    return last
                last = result

    def __call__(self, params: Sequence[Any]) -> Any:
        session = self.session
        deadline = session._deadline
        owner = deadline.arm()
        try:
            if monotonic() >= session._recycle_at:
                session.maybe_recycle()
            conn = session._conn
            try:
                if conn is not self._conn:
                    self._setup(conn)
                tx = self.tx
                self.pgconn.send_query_prepared(self.name, tx.dump_sequence(params, self.formats))
                result = self._results()
                if result.status == ExecStatus.FATAL_ERROR and self._forgotten(result):
                    # psycopg's rollback sent DEALLOCATE ALL (see `_forgotten`): prepare again, send again,
                    # within the same deadline. The server did nothing wrong, so nothing is booked on it.
                    self._setup(conn)
                    tx = self.tx  # a new one, without loaders: `loaders_set` is false again
                    self.pgconn.send_query_prepared(self.name, tx.dump_sequence(params, self.formats))
                    result = self._results()
            except BaseException:
                self._close_midway(conn)
                raise
        finally:
            if owner:
                deadline.disarm()
        if result.status != ExecStatus.TUPLES_OK:
            if self.pgconn.status != ConnStatus.OK:  # e.g. 57P01: the server ended the session
                self._close_midway(conn)
            raise error_from_result(result, encoding=self.encoding)
        if not result.ntuples:
            return None
        tx.set_pgresult(result, set_loaders=not self.loaders_set)
        self.loaders_set = True
        return tx.load_row(0, tuple)

    def _forgotten(self, result: Any) -> bool:
        """True when the server no longer knows this statement (SQLSTATE 26000) and the connection is idle.

        psycopg prepares statements of its own once one has run ``prepare_threshold`` times, and when a
        transaction of the session rolls back (a timeout, a deadlock, a serialization failure retried,
        any error in `run_transaction`) it sends ``DEALLOCATE ALL`` to drop them: that drops this
        statement too, which psycopg does not know of. Without this check every later lookup of the
        connection failed with 26000 until it reconnected, booked as the database's failures.
        """
        if result.error_field(DiagnosticField.SQLSTATE) != b"26000":
            return False
        pgconn = self.pgconn
        return pgconn.status == ConnStatus.OK and pgconn.transaction_status == TransactionStatus.IDLE

    def _close_midway(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = None
        self.session._recycle_at = 0.0
        try:
            conn.close()
        except Exception:
            pass


_STATEMENT_TIMEOUT_SET = re.compile(r"statement_timeout\s*=", re.IGNORECASE)


@register_binding("postgres")
class PostgresTarget(Target):
    """A PostgreSQL, Aurora PostgreSQL or Aurora DSQL database.

    `options` (all strings; the dbsurge ones may also be given in the URI query): ``flavor``
    (postgres|aurora|dsql), ``connect_timeout`` (seconds, default 10; libpq rounds below 2 up to 2),
    ``sslmode``, ``sslrootcert`` (CA file), ``application_name`` (default dbsurge), ``user``, ``dbname``
    (or ``database``), ``isolation`` (read_committed|repeatable_read|serializable), ``retry_attempts``
    (default 10), ``retry_base_ms`` (5), ``retry_cap_ms`` (1000), ``max_connection_age`` (DSQL default
    55m, else never), ``prepare_threshold`` (psycopg's, default 5; ``none`` disables), and for DSQL
    ``region``, ``endpoint_url`` and ``token_expires_in`` (seconds, default 900).
    `token_provider` replaces the boto3 signer for DSQL (tests count tokens with it).

    Time bounds: ``op_timeout`` (a duration such as ``5s`` or ``500ms``; default `op_timeout_s`, 30 s)
    bounds every session operation on the client (`OperationDeadline`); ``statement_timeout`` (a
    duration, ``none`` disables; default op_timeout minus up to 0.5 s, not on DSQL, and not when the URI
    already sets one through ``options=-c statement_timeout=...``) is set on the server; the libpq
    parameters ``keepalives`` (1), ``keepalives_idle`` (5 s), ``keepalives_interval`` (2 s),
    ``keepalives_count`` (3) and ``tcp_user_timeout`` (milliseconds, default op_timeout) detect a dead
    peer; ``connect_timeout`` bounds every connect. Libpq parameters may come in the URI too.
    """

    kind = "postgres"
    schemes = ("postgresql", "postgres", "dsql")
    flavors = ("postgres", "aurora", "dsql")

    def __init__(  # noqa: C901 - one validated option or cost item per line, flat
        self,
        uri: str,
        options: dict[str, str] | None = None,
        *,
        op_timeout_s: float = DEFAULT_OP_TIMEOUT_S,
        token_provider: TokenProvider | None = None,
    ) -> None:
        self.display = clip(redact_uri(uri), DISPLAY_LIMIT)  # it starts every error message: keep those short
        # the password as written, before any message (a short one is not registered, but masked here)
        self._secrets: list[str] = uri_secrets(uri)
        check_password_spelling(uri, self.display, "/@")
        scheme, _, rest = uri.partition("://")
        scheme = scheme.lower()
        libpq_uri, uri_options = _split_dbsurge_query("postgresql://" + rest)
        options = {**uri_options, **{k: str(v) for k, v in (options or {}).items()}}
        check_options(self.kind, options, KNOWN_OPTIONS)
        try:
            params: dict[str, Any] = conninfo_to_dict(libpq_uri)
        except (psycopg.Error, ValueError) as exc:  # ValueError: e.g. %80, a percent-escape that is not UTF-8
            raise TargetError(f"bad target URI '{clip(self.display)}': "
                              f"{redact_text(one_line(str(exc), 150), self._secrets)}") from None
        if params.get("password"):
            self._secrets.append(params["password"])
            register_secret(params["password"])

        self.host = str(params.get("host") or "")
        for host in self.host.split(","):
            if not host.startswith(("/", "@")):  # a Unix socket's directory (or Linux's abstract namespace)
                check_host_name(self.display, host)
        first_host = self.host.split(",")[0]
        self.flavor = _choose_flavor(scheme, first_host, options.get("flavor"), self.display)
        # Aurora DSQL's optimistic concurrency can refuse any write with 40001 (see `Target.optimistic_writes`)
        self.optimistic_writes = self.flavor == "dsql"
        is_aws = first_host.lower().rstrip(".").endswith((".amazonaws.com", ".on.aws", ".amazonaws.com.cn"))

        for name in _LIBPQ_OPTIONS:
            if options.get(name):
                params[name] = options[name]
        if options.get("database"):
            params["dbname"] = options["database"]
        params.setdefault("application_name", "dbsurge")
        self.application_name = str(params["application_name"])
        if self.flavor == "dsql":
            params.setdefault("user", "admin")
            params.setdefault("dbname", "postgres")
            params.setdefault("sslmode", "verify-full")
            if params["sslmode"] in ("verify-ca", "verify-full"):
                params.setdefault("sslrootcert", system_ca_file())
        elif self.flavor == "aurora" and is_aws:
            params.setdefault("sslmode", "require")
        ca_file = params.get("sslrootcert")
        if ca_file and ca_file != "system":
            check_ca_file(self.display, "sslrootcert", ca_file)

        self.connect_timeout_s = option_seconds(options, "connect_timeout", None)
        if self.connect_timeout_s is None:
            # the URI's own connect_timeout, read like the option (float() would take nan and inf)
            in_uri = {"connect_timeout": str(params.get("connect_timeout") or "")}
            self.connect_timeout_s = option_seconds(in_uri, "connect_timeout", None) or DEFAULT_CONNECT_TIMEOUT_S
        # libpq takes whole seconds; psycopg enforces at least 2 like libpq does.
        params["connect_timeout"] = str(max(1, int(-(-self.connect_timeout_s // 1))))
        self._set_time_bounds(params, options, op_timeout_s)

        self.isolation = _isolation(options.get("isolation"))
        self.retry_attempts = option_int(options, "retry_attempts", DEFAULT_RETRY_ATTEMPTS, minimum=1) or 1
        self.retry_base_ms = option_int(options, "retry_base_ms", DEFAULT_RETRY_BASE_MS, minimum=0) or 0
        self.retry_cap_ms = option_int(options, "retry_cap_ms", DEFAULT_RETRY_CAP_MS, minimum=0) or 0
        default_age = DSQL_MAX_CONNECTION_AGE_S if self.flavor == "dsql" else None
        self.max_connection_age = option_seconds(options, "max_connection_age", default_age)
        threshold = options.get("prepare_threshold", "5").strip().lower()
        self.prepare_threshold = (
            None if threshold in ("none", "off", "") else option_int(options, "prepare_threshold", 5)
        )

        self.user = str(params.get("user") or "")
        self.dbname = str(params.get("dbname") or "")
        self.port = str(params.get("port") or "")
        self.sslmode = params.get("sslmode")
        self.sslrootcert = params.get("sslrootcert")
        self.region: str | None = None
        self._token_provider: TokenProvider | None = None
        if self.flavor == "dsql":
            self.region = options.get("region") or region_from_host(first_host) or _default_region()
            if not self.region:
                raise TargetError(
                    f"target {self.display}: cannot tell the DSQL region from the host name; pass option region=..."
                )
            expires = option_seconds(options, "token_expires_in", DEFAULT_TOKEN_EXPIRES_S) or DEFAULT_TOKEN_EXPIRES_S
            self._token_expires_s = int(expires)
            self._token_provider = token_provider or DsqlTokenProvider(options.get("endpoint_url"), int(expires))
            self._token_host = first_host
            params.pop("password", None)  # the token is the password, made per connection
        self._conninfo = make_conninfo("", **params)

    def _set_time_bounds(self, params: dict[str, Any], options: dict[str, str], op_timeout_s: float) -> None:
        """op_timeout, keepalives, tcp_user_timeout and statement_timeout into `params` (see the class doc)."""
        self.op_timeout_s = option_op_timeout(options, op_timeout_s)
        for name, value in DEFAULT_KEEPALIVES.items():
            params.setdefault(name, value)
        params.setdefault("tcp_user_timeout", str(int(self.op_timeout_s * 1000)))
        for name in ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"):
            try:
                int(str(params[name]))
            except ValueError:
                raise TargetError(f"target option {name}={params[name]!r}: expected an integer") from None
        self.keepalives = {name: int(params[name]) for name in DEFAULT_KEEPALIVES}
        self.tcp_user_timeout_ms = int(params["tcp_user_timeout"])
        lead = min(STATEMENT_TIMEOUT_LEAD_S, 0.1 * self.op_timeout_s)
        default = None if self.flavor == "dsql" else self.op_timeout_s - lead
        statement_timeout = option_seconds(options, "statement_timeout", default)
        self.statement_timeout_ms: int | None = None
        libpq_options = str(params.get("options") or "")
        if _STATEMENT_TIMEOUT_SET.search(libpq_options):
            self.statement_timeout_ms = None  # the user's own, through libpq's options
            self.statement_timeout_source = "uri"
        elif statement_timeout is not None:
            self.statement_timeout_ms = max(1, int(statement_timeout * 1000))
            params["options"] = f"{libpq_options} -c statement_timeout={self.statement_timeout_ms}".strip()
            self.statement_timeout_source = "option" if "statement_timeout" in options else "op_timeout"
        else:
            self.statement_timeout_source = "off"

    # Connections

    def new_connection(self, *, application_name: str | None = None) -> psycopg.Connection[Any]:
        """A new autocommit connection with this target's settings (and a fresh token on DSQL): the sessions' and
        the database sampler's, which names itself with ``application_name`` (the target's own otherwise)."""
        gevent_wait.install()
        extra: dict[str, Any] = {}
        if application_name is not None:
            extra["application_name"] = application_name
        if self._token_provider is not None:
            extra["password"] = self._new_token()
        conn = psycopg.Connection.connect(
            self._conninfo, autocommit=True, prepare_threshold=self.prepare_threshold, **extra
        )
        if self.isolation is not None:
            conn.isolation_level = self.isolation
        return conn

    def _new_token(self) -> str:
        assert self._token_provider is not None and self.region is not None
        try:
            token = self._token_provider(self._token_host, self.region, self.user)
        except Exception as exc:
            raise TargetError(f"target {self.display}: {_explain_token_error(exc)}") from None
        self._secrets.append(token)
        del self._secrets[:-8]  # the password (if any) and the last few tokens, for redacting messages
        register_secret(token, transient=True)
        return token

    @classmethod
    def with_connect_timeout(cls, options: dict[str, str], timeout_s: float) -> dict[str, str]:
        out = dict(options)
        out.setdefault("connect_timeout", f"{timeout_s:g}")
        return out

    def settle(self, tables: tuple[str, ...]) -> None:
        """VACUUM ANALYZE the tables and CHECKPOINT (when allowed).

        A bulk load leaves work behind that would land on the first measurements: hint bits set (and
        pages dirtied) by the first reads, autovacuum and the checkpointer writing the new pages. The
        study's clusters had long settled before its snapshots; so should ours.
        """
        session = self.connect()
        try:
            # DSQL has no VACUUM or CHECKPOINT, and a user may lack the right: measure anyway
            for table in tables:
                with contextlib.suppress(Exception):
                    session.conn.execute(f"vacuum analyze {table}")
            with contextlib.suppress(Exception):
                session.conn.execute("checkpoint")
        finally:
            session.close()

    def connect(self) -> PostgresSession:
        """A new session (one connection) for one Locust user."""
        return PostgresSession(self)

    def check(self) -> None:
        """Connect once (``connect_timeout``), run ``select 1`` (``op_timeout``), close; one-line `TargetError`."""
        started = monotonic()
        try:
            session = PostgresSession(self)
        except ConnectError as exc:
            raise TargetError(str(exc)) from None
        try:
            session.execute("select 1").fetchone()
            self._negotiated = self._negotiation(session)
        except (psycopg.Error, OperationTimeout) as exc:
            raise TargetError(f"target {self.display}: {self._explain(exc, monotonic() - started)}") from None
        finally:
            session.close()

    def _negotiation(self, session: PostgresSession) -> dict[str, Any]:
        """What the check's connection negotiated (`negotiation.record`): libpq's TLS facts, the server's version
        and the authentication the server asked for."""
        conn = session._conn
        pgconn = conn.pgconn
        effective = {o.keyword.decode(): (o.val.decode() if o.val is not None else None) for o in pgconn.info
                     if o.keyword in (b"sslmode", b"sslrootcert")}
        sslmode = effective.get("sslmode") or "prefer"
        ca_file = _root_cert_file(effective.get("sslrootcert"))
        in_use = bool(pgconn.ssl_in_use)
        version, cipher, source = _libpq_ssl_attribute(pgconn, b"protocol"), _libpq_ssl_attribute(pgconn, b"cipher"), \
            "libpq"
        if in_use and version is None:  # a libpq this process cannot reach by name: the server's view of it
            with contextlib.suppress(psycopg.Error, TypeError):
                version, cipher = session.execute(
                    "select version, cipher from pg_stat_ssl where pid = pg_backend_pid()").fetchone()
                source = "the server's pg_stat_ssl"
        # libpq verifies the chain whenever it has a root certificate, even under sslmode=require (its docs)
        verified = in_use and (sslmode in ("verify-ca", "verify-full") or ca_file is not None)
        tls = negotiation.tls_facts(in_use=in_use, verified=verified, host_name_checked=sslmode == "verify-full",
                                    ca_file=ca_file, setting=f"sslmode={sslmode}", version=version, cipher=cipher,
                                    source=source)
        protocol = getattr(conn.info, "full_protocol_version", None) or pgconn.protocol_version * 10000
        host = str(conn.info.host or self.host)
        return negotiation.record(
            kind=self.kind, flavor=self.flavor, endpoint=f"{host}:{conn.info.port}", host=host, display=self.display,
            driver=self.describe()["driver"], server_version=conn.info.parameter_status("server_version"),
            protocol=f"PostgreSQL protocol {protocol // 10000}.{protocol % 10000}", tls=tls,
            auth=self._auth_mechanism(session), fix="connect with sslmode=verify-full and sslrootcert=CA_FILE")

    def _auth_mechanism(self, session: PostgresSession) -> str:
        """How the server authenticated the check's connection: the IAM token on DSQL, else what PostgreSQL 16+'s
        ``system_user`` says (``scram-sha-256:user``), else whether libpq sent a password at all."""
        if self.flavor == "dsql":  # the token `new_connection` signed for this very connection was its password
            asked = "" if session._conn.pgconn.used_password else "; the server did not ask for it"
            return (f"IAM token (signed fresh for this connection, valid {self._token_expires_s}s; a new one for "
                    f"every connection{asked})")
        method = None
        with contextlib.suppress(psycopg.Error, TypeError, IndexError):  # before PostgreSQL 16: no system_user
            value = session.execute("select system_user").fetchone()[0]
            method = str(value).split(":", 1)[0] if value else None
        used_password = bool(session._conn.pgconn.used_password)
        if method:
            return method.upper() if method.startswith("scram") else method
        if used_password:
            return "password (the server asked for one; before PostgreSQL 16 it does not say which method)"
        return "none asked (trust)"

    def connection_limit(self) -> tuple[int | None, int | None]:
        """``max_connections`` minus the reserved ones, and the backends open now (None: not readable)."""
        try:
            session = PostgresSession(self)
        except ConnectError:
            return None, None
        try:
            row = session.execute(
                "select current_setting('max_connections')::int - current_setting('superuser_reserved_connections')"
                "::int, (select count(*) from pg_stat_activity where backend_type = 'client backend')").fetchone()
            return int(row[0]), int(row[1])
        except (psycopg.Error, OperationTimeout, TypeError, ValueError):  # DSQL and others may not have them
            return None, None
        finally:
            session.close()

    def classify(self, exc: BaseException) -> str:
        """The failure kind of `exc` (see `Target.classify`), from psycopg's errors.

        ``connect``: `PostgresConnectError` (a session's (re)connect) or psycopg's ``ConnectionTimeout``;
        ``timeout``: `OperationTimeout`, ``statement_timeout`` (57014 "due to statement timeout"), a socket
        that timed out (``tcp_user_timeout``, keepalives), ``gevent.Timeout``; ``occ``: SQLSTATE 40001;
        ``server:<SQLSTATE>``: any other server error (``server:57P01`` for a server shutting down);
        ``disconnect``: a connection lost midway without a SQLSTATE; ``other``: the rest.
        """
        kind = generic_kind(exc)
        if kind is not None:
            return kind
        if isinstance(exc, OperationTimeout):
            return "timeout"
        if isinstance(exc, psycopg.errors.ConnectionTimeout):
            return "connect"
        if not isinstance(exc, psycopg.Error):
            return "other"
        sqlstate = exc.sqlstate
        if sqlstate:
            if sqlstate == "40001":
                return "occ"
            if sqlstate == "57014" and "statement timeout" in str(exc):
                return "timeout"
            return f"server:{sqlstate}"
        if isinstance(exc, psycopg.OperationalError):
            return "timeout" if "timed out" in str(exc).lower() else "disconnect"
        return "other"

    def _explain(self, exc: BaseException, elapsed: float) -> str:
        return redact_text(explain_connect_error(exc, self, elapsed), self._secrets)

    def describe(self) -> dict[str, Any]:
        """Secret-free settings for run.json."""
        info: dict[str, Any] = {
            "kind": self.kind,
            "flavor": self.flavor,
            "display": self.display,
            "host": self.host,
            "port": self.port,
            "dbname": self.dbname,
            "user": self.user,
            "sslmode": self.sslmode,
            "sslrootcert": self.sslrootcert,
            "connect_timeout_s": self.connect_timeout_s,
            "op_timeout_s": self.op_timeout_s,
            "statement_timeout_ms": self.statement_timeout_ms,
            "statement_timeout_source": self.statement_timeout_source,
            "tcp_user_timeout_ms": self.tcp_user_timeout_ms,
            "keepalives": self.keepalives,
            "isolation": self.isolation.name.lower() if self.isolation is not None else "default",
            "retry_attempts": self.retry_attempts,
            "retry_base_ms": self.retry_base_ms,
            "retry_cap_ms": self.retry_cap_ms,
            "max_connection_age_s": self.max_connection_age,
            "prepare_threshold": self.prepare_threshold,
            "driver": f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()})",
        }
        if self.flavor == "dsql":
            info["region"] = self.region
            info["auth"] = "IAM token per connection"
        return info


def _verify_failure(target: PostgresTarget) -> str:
    """Why the server's certificate did not verify, in OpenSSL's words: libpq only says "certificate verify
    failed", so one probe handshake (PostgreSQL's SSLRequest first) with the same CA file asks OpenSSL."""
    ca_file = _root_cert_file(target.sslrootcert)
    host = target.host.split(",")[0]
    shown = f"sslrootcert={ca_file}" if ca_file else "no sslrootcert"
    if not host or host.startswith(("/", "@")) or ca_file is None or ca_file == "system trust store":
        return f"the server's certificate did not verify against {shown}"
    _, _, why = negotiation.probe_tls(host, int((target.port or "5432").split(",")[0]), ca_file=ca_file,
                                      verify=True, check_host_name=False, preamble=_SSL_REQUEST, accept=b"S")
    if why and "expired" in why:
        return f"the server's certificate has expired ({why}; checked against {shown})"
    if why and ("issuer" in why or "self-signed" in why or "self signed" in why):
        return f"the server's certificate is not signed by the CA in {shown} ({why})"
    return f"the server's certificate did not verify against {shown}" + (f" ({why})" if why else "")


#: PostgreSQL's SSLRequest: length 8, code 80877103 (1234.5679); the server answers S to go on in TLS.
_SSL_REQUEST = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")


def _root_cert_file(sslrootcert: str | None) -> str | None:
    """The CA file libpq verifies with: ``sslrootcert`` (``system``: the system's store), else
    ``~/.postgresql/root.crt`` when it exists (libpq's default), else None."""
    if sslrootcert:
        return "system trust store" if sslrootcert == "system" else sslrootcert
    default = os.path.expanduser("~/.postgresql/root.crt")
    return default if os.path.isfile(default) else None


_libpq: Any = None


def _libpq_ssl_attribute(pgconn: Any, name: bytes) -> str | None:
    """libpq's ``PQsslAttribute`` (``protocol``, ``cipher``) of a connection; None where it cannot be called.

    psycopg does not wrap it, so it is called on the libpq this process has loaded (psycopg's binary build
    bundles its own), found by name in the process's memory map.
    """
    global _libpq
    if _libpq is None:
        _libpq = False
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            with open("/proc/self/maps") as maps:
                path = next((line.split()[-1] for line in maps if "/libpq" in line and ".so" in line), None)
            if path is not None:
                lib = ctypes.CDLL(path)
                lib.PQsslAttribute.restype = ctypes.c_char_p
                lib.PQsslAttribute.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
                _libpq = lib
    if not _libpq or not getattr(pgconn, "pgconn_ptr", None):
        return None
    value = _libpq.PQsslAttribute(pgconn.pgconn_ptr, name)
    return value.decode() if value else None


def _split_dbsurge_query(uri: str) -> tuple[str, dict[str, str]]:
    """Move dbsurge's own options out of the URI query, which libpq would reject.

    The parameters libpq gets are passed on byte for byte (libpq does not read ``+`` as a space).
    """
    span = userinfo_span(uri)
    query_at = uri.find("?", span[1] if span else 0)  # a "?" in the password is not the query
    if query_at < 0:
        return uri, {}
    base, query = uri[:query_at], uri[query_at + 1 :]
    keep: list[str] = []
    ours: dict[str, str] = {}
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if unquote(key) in _DBSURGE_OPTIONS:
            ours[unquote(key)] = unquote(value)
        elif part:
            keep.append(part)
    return (f"{base}?{'&'.join(keep)}" if keep else base), ours


def _choose_flavor(scheme: str, host: str, option: str | None, display: str) -> str:
    by_host = "dsql" if scheme == "dsql" or is_dsql_host(host) else None
    if by_host is None and host.lower().rstrip(".").endswith(".rds.amazonaws.com"):
        by_host = "aurora"
    if option:
        flavor = option.strip().lower()
        if flavor not in PostgresTarget.flavors:
            raise TargetError(f"target option flavor='{clip(option)}': expected postgres, aurora or dsql")
        if scheme == "dsql" and flavor != "dsql":
            raise TargetError(f"target {display}: a dsql:// URI cannot have flavor={flavor}")
        return flavor
    return by_host or "postgres"


def _isolation(raw: str | None) -> IsolationLevel | None:
    if raw is None or not raw.strip():
        return None
    key = raw.strip().lower().replace(" ", "_").replace("-", "_")
    if key not in _ISOLATION_LEVELS:
        raise TargetError(
            f"target option isolation='{clip(raw)}': expected read_committed, repeatable_read or serializable")
    return _ISOLATION_LEVELS[key]


def _default_region() -> str | None:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    try:
        import boto3

        return boto3.session.Session().region_name  # from the AWS config file; no network
    except Exception:
        return None


def _explain_token_error(exc: BaseException) -> str:
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return (
            "cannot sign the DSQL auth token: no AWS credentials "
            "(set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run with an IAM role)"
        )
    return f"cannot sign the DSQL auth token: {name}: {one_line(str(exc))}"


#: libpq's FATAL for a database name the server does not have (its SQLSTATE 3D000 is not on a failed connect).
_NO_DATABASE = re.compile(r'database "([^"]*)" does not exist')


def explain_connect_error(exc: BaseException, target: PostgresTarget, elapsed: float | None = None) -> str:  # noqa: C901 - one message per libpq failure, a table
    """One line saying why connecting to (or querying) `target` failed, from a psycopg error."""
    message = str(exc)
    low = message.lower()
    sqlstate = getattr(exc, "sqlstate", None)
    where = f"{target.host or 'local socket'}{':' + target.port if target.port else ''}"
    if isinstance(exc, psycopg.errors.ConnectionTimeout) or "timeout expired" in low or "timed out" in low:
        took = f" (gave up after {elapsed:.1f}s)" if elapsed is not None else ""
        return (
            f"timeout: {where} did not answer within connect_timeout={target.connect_timeout_s:g}s{took}; "
            "the host is down, firewalled, or the server is stopped"
        )
    if "connection refused" in low:
        return f"connection refused by {where}: is the server running and accepting TCP connections there?"
    if any(
        s in low
        for s in (
            "could not translate host name",
            "failed to resolve host",
            "name or service not known",
            "nodename nor servname",
            "temporary failure in name resolution",
        )
    ):
        return f"unknown host '{clip(target.host)}': the DNS lookup failed"
    if any(s in low for s in ("no route to host", "network is unreachable", "host is unreachable")):
        return f"unreachable host {where}: no network route to it"
    if sqlstate == "28P01" or "password authentication failed" in low or "pam authentication failed" in low:
        if target.flavor == "dsql":
            return (
                f"authentication failed for user '{clip(target.user)}': the IAM token was rejected "
                "(check the region, the IAM policy's dsql:DbConnect/DbConnectAdmin and the clock)"
            )
        return f"authentication failed for user '{clip(target.user)}' (wrong password)"
    if "no password supplied" in low or "fe_sendauth" in low:
        return f"authentication failed for user '{clip(target.user)}': the server wants a password and none was given"
    if sqlstate == "3D000" or _NO_DATABASE.search(message):
        name = target.dbname or (_NO_DATABASE.search(message) or [None, "?"])[1]
        return (f"database '{clip(name)}' does not exist on {where}: create it (createdb {clip(name)}), or name "
                f"another in the URI's path (.../DBNAME) or with --target-option database=DBNAME")
    if sqlstate == "28000" or ("role" in low and "does not exist" in low):
        return f"authentication failed: {one_line(message)}"
    if "root certificate file" in low and ("does not exist" in low or "no such file" in low):
        return f"missing CA file: {one_line(message)}"
    if "no pg_hba.conf entry" in low and "no encryption" in low:
        return (f"the server at {where} takes TLS only (pg_hba.conf has no rule for a connection without it) and "
                f"this one had sslmode={target.sslmode or 'prefer'}: connect with sslmode=verify-full and "
                f"sslrootcert=CA_FILE")
    if "certificate verify failed" in low:  # libpq says no more: `_verify_failure` asks OpenSSL why
        return f"TLS error: {_verify_failure(target)}"
    if "does not match host name" in low:
        names = re.search(r'server certificate for ("[^"]*"(?: \(and \d+ other names?\))?)', message)
        carries = f" (it is for {names.group(1)})" if names else ""
        return (f"TLS error: the server's certificate does not name the host '{clip(target.host, 60)}'{carries}, "
                f"which sslmode={target.sslmode} checks: connect by a name the certificate carries")
    if any(s in low for s in ("ssl", "tls", "certificate", "server does not support")):
        return f"TLS error: {one_line(message)}"
    return f"{type(exc).__name__}: {one_line(message)}"
