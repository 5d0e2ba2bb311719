"""Database targets: one binding per module, registered by name, chosen by URI scheme.

`open_target(uri, options)` parses and validates a target (no network) and returns a `Target`;
`target.check()` connects once and fails with a one-line `TargetError`, and `target.negotiated()` then
says what that connection negotiated (server version, TLS, authentication: `dbsurge.targets.negotiation`);
`target.connect()` gives one `Session` per Locust user. See docs/architecture.md, section "Targets".

Every operation is bounded in time: `open_target(..., op_timeout_s=30.0)` (target option ``op_timeout``)
sets `Target.op_timeout_s`, which each binding enforces in its driver (socket timeouts, a deadline on
every wait, a server-side statement timeout), so that a database that stops answering produces
timeouts, not hangs. A failed operation is classified by `Target.classify(exc)` into one of
`FAILURE_KINDS`; `describe_failure(exc)` gives one redacted line for it.

Bindings live in `dbsurge.targets.postgres` and `dbsurge.targets.mongo` and are imported on first use,
so that a MongoDB run never imports psycopg and the CLI starts fast.
"""

from __future__ import annotations

import importlib
import os
import re
import ssl
import sys
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from dbsurge.base.errors import ConnectError, OperationTimeout, TargetError, clip
from dbsurge.base.redact import redact_text, redact_uri, register_uri_secrets, uri_password
from dbsurge.config.options import EMBEDDED_TARGETS, TARGET_SCHEMES
from dbsurge.plan.stage_plan import read_duration

__all__ = [
    "FAILURE_KINDS",
    "ConnectError",
    "OperationTimeout",
    "Session",
    "Target",
    "TargetError",
    "binding_names",
    "describe_failure",
    "get_binding",
    "open_target",
    "register_binding",
]

DEFAULT_OP_TIMEOUT_S = 30.0

# What `Target.classify` returns; ``server:`` is followed by the SQLSTATE or the MongoDB error code.
FAILURE_KINDS = ("connect", "timeout", "server:<code>", "occ", "throttled", "disconnect", "other")

# Modules that register the built-in bindings when imported.
_BUILTIN_MODULES = ("dbsurge.targets.postgres", "dbsurge.targets.mongo", "dbsurge.targets.dynamodb",
                    "dbsurge.targets.cql")

#: How much of a target's URI `Target.display` shows (it starts every one-line error about the target).
DISPLAY_LIMIT = 120

_bindings: dict[str, type[Target]] = {}
_schemes: dict[str, str] = {}  # URI scheme -> binding name
_builtins_loaded = False


class Session(ABC):
    """One connection (or client) to a target, owned by one Locust user.

    `retries` counts whole-transaction retries after serialization conflicts; they are reported apart
    from failures.
    """

    retries: int = 0

    @abstractmethod
    def close(self) -> None:
        """Release the connection. Safe to call twice."""


class Target(ABC):
    """A database to load: parsed, validated and secret-free to display.

    Subclasses set `kind` (``postgres`` or ``mongo``), `schemes` (the URI schemes they accept) and
    `flavors`, and are registered with `register_binding`.
    """

    kind: ClassVar[str]
    schemes: ClassVar[tuple[str, ...]]
    flavors: ClassVar[tuple[str, ...]]
    flavor: str
    display: str

    @abstractmethod
    def connect(self) -> Session:
        """Open a new session (one per Locust user)."""

    @abstractmethod
    def check(self) -> None:
        """Connect once with a short timeout, run a trivial command, close.

        Raises `TargetError` with one line naming what failed (unreachable host, connection refused,
        timeout, authentication failed, missing CA file, TLS error); never the password or a traceback.
        """

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """A secret-free description for run.json."""

    #: What `check` learnt of its connection (`negotiation.record`); None until a check succeeded.
    _negotiated: dict[str, Any] | None = None

    def negotiated(self) -> dict[str, Any]:
        """What the last successful `check` negotiated, for run.json's ``negotiated`` and the report: the server's
        version, the protocol, TLS (version, cipher, verified or not and against which CA file), the
        authentication mechanism and the driver, with a warning for a verification turned off
        (`dbsurge.targets.negotiation`). Before any check: a record that says so."""
        if self._negotiated is not None:
            return dict(self._negotiated)
        return {"kind": self.kind, "flavor": self.flavor, "checked": False, "warnings": [],
                "line": f"{self.kind} at {self.display}: not checked, nothing negotiated yet"}

    def take_negotiation_of(self, checked: Target) -> None:
        """Keep what ``checked``'s check negotiated: this target is the same one reopened with other options (a
        scenario's shorter connect timeout), the same endpoint, TLS settings and credentials."""
        self._negotiated = checked._negotiated

    def connection_limit(self) -> tuple[int | None, int | None]:
        """(the most connections the server takes, how many are open now); None where it cannot be read."""
        return None, None

    @classmethod
    def with_connect_timeout(cls, options: dict[str, str], timeout_s: float) -> dict[str, str]:
        """``options`` with this binding's connection timeout set to ``timeout_s`` unless the user set it (the idle
        scenario bounds a connect by it); unchanged where the binding has no such option."""
        return dict(options)

    def first_contact(self, session: Session) -> None:
        """Make sure ``session`` has talked to the server (a driver that connects lazily sends a ping); nothing
        where `connect` already did."""

    def settle(self, tables: tuple[str, ...]) -> None:
        """After a fresh bulk load into ``tables``: let the database finish what the load left behind before
        anything is measured; nothing where it has nothing to finish. Never fails: measuring goes on."""

    #: Seconds an operation may take before the driver gives up (set by every binding).
    op_timeout_s: float = DEFAULT_OP_TIMEOUT_S

    #: True when any write may fail with a serialization conflict (Aurora DSQL's optimistic concurrency): a
    #: workload then sends its writes through the session's ``run_transaction``, which retries them and counts
    #: the retries apart from failures. The binding knows its database; a workload asks this, not the flavor.
    optimistic_writes: bool = False

    def classify(self, exc: BaseException) -> str:
        """The kind of a failed operation, a pure function of the exception; one of `FAILURE_KINDS`.

        - ``connect``: could not connect or reconnect (`ConnectError`);
        - ``timeout``: the operation started but did not finish in time (a `TimeoutError`, a
          ``gevent.Timeout``, the driver's own operation timeouts);
        - ``server:<code>``: the server refused the operation with an error code (SQLSTATE, MongoDB code);
        - ``occ``: a serialization conflict still failing after the binding's retries;
        - ``throttled``: the server still refused the request over a rate limit after the binding's retries
          (DynamoDB's ProvisionedThroughputExceededException, ThrottlingException);
        - ``disconnect``: the connection dropped in the middle of the operation;
        - ``other``: anything else.

        The base class knows the first two; bindings add their driver's errors.
        """
        return generic_kind(exc) or "other"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.flavor} {self.display}>"


def generic_kind(exc: BaseException) -> str | None:
    """``connect`` or ``timeout`` for the failures every binding shares, else None."""
    if isinstance(exc, ConnectError):
        return "connect"
    if isinstance(exc, (TimeoutError, OperationTimeout)) or _is_gevent_timeout(exc):
        return "timeout"
    return None


def _is_gevent_timeout(exc: BaseException) -> bool:
    # Without importing gevent: a MongoDB-only process that never used gevent cannot raise its Timeout.
    gevent_timeout = getattr(sys.modules.get("gevent.timeout"), "Timeout", None)
    return gevent_timeout is not None and isinstance(exc, gevent_timeout)


def describe_failure(exc: BaseException, limit: int = 240) -> str:
    """One redacted line for a failed operation: ``TypeName [SQLSTATE]: first line of the message``.

    For the first error event of each kind; registered secrets (passwords, tokens) are masked.
    """
    name = type(exc).__name__
    code = getattr(exc, "sqlstate", None) or getattr(exc, "code", None)
    head = f"{name} [{code}]" if code is not None and not isinstance(code, bool) else name
    message = one_line(str(exc), limit) if str(exc).strip() else ""
    if not message and exc.__cause__ is not None and str(exc.__cause__).strip():
        message = one_line(str(exc.__cause__), limit)
    return redact_text(f"{head}: {message}" if message else head)


def register_binding(name: str):
    """Class decorator: register a `Target` subclass under `name` and for its URI schemes.

    A name or scheme registered twice is a programming error (`ValueError`), not a user error.
    """

    def decorate(cls: type[Target]) -> type[Target]:
        if name in _bindings:
            raise ValueError(f"target binding {name!r} is already registered by {_bindings[name].__qualname__}")
        for scheme in cls.schemes:
            if scheme in _schemes:
                raise ValueError(f"URI scheme {scheme!r} is already taken by target binding {_schemes[scheme]!r}")
        _bindings[name] = cls
        for scheme in cls.schemes:
            _schemes[scheme] = name
        return cls

    return decorate


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in _BUILTIN_MODULES:
            importlib.import_module(module)


def binding_names() -> list[str]:
    """The registered binding names."""
    _load_builtins()
    return sorted(_bindings)


def get_binding(name: str) -> type[Target]:
    """The `Target` class registered under `name`; `TargetError` if there is none."""
    _load_builtins()
    try:
        return _bindings[name]
    except KeyError:
        raise TargetError(f"unknown target binding {name!r}: known are {', '.join(sorted(_bindings))}") from None


def _scheme_list() -> str:
    """Every registered scheme, in the help's order (`TARGET_SCHEMES`), then any a plugin binding added."""
    order = [s for s in TARGET_SCHEMES if s in _schemes] + sorted(set(_schemes) - set(TARGET_SCHEMES))
    schemes = [f"{s}://" for s in order]
    return ", ".join(schemes[:-1]) + f" or {schemes[-1]}" if len(schemes) > 1 else "".join(schemes)


def _did_you_mean(word: str, known: list[str]) -> str:
    """`` (did you mean embedded-postgres?)`` for a near miss (difflib), else ""."""
    import difflib

    close = difflib.get_close_matches(word.lower(), known, n=1, cutoff=0.85)
    return f" (did you mean {close[0]}?)" if close else ""


def open_target(
    uri: str, options: dict[str, str] | None = None, *, op_timeout_s: float = DEFAULT_OP_TIMEOUT_S, **binding_kwargs: Any
) -> Target:
    """Parse and validate a target URI and its options; no network.

    The binding is chosen by scheme: ``postgresql://``/``postgres://``/``dsql://`` (flavors postgres,
    aurora, dsql) and ``mongodb://``/``mongodb+srv://`` (flavors mongo, docdb). The flavor follows from
    the host name (``*.rds.amazonaws.com``: aurora, ``*.dsql.<region>.on.aws``: dsql,
    ``*.docdb.amazonaws.com``: docdb) or the option ``flavor``. `binding_kwargs` go to the binding's
    constructor (e.g. ``token_provider=`` for DSQL). `op_timeout_s` bounds every operation (the target
    option ``op_timeout``, a duration such as ``5s``, overrides it) and ends up in `Target.op_timeout_s`.
    Raises `TargetError` with one line.
    """
    _load_builtins()
    if not isinstance(uri, str) or not uri.strip():
        raise TargetError("no target given: pass a URI such as postgresql://user@host:5432/db or mongodb://host/")
    uri = uri.strip()
    register_uri_secrets(uri)  # before any message names the URI: masked in drivers' messages and logs too
    scheme, sep, _rest = uri.partition("://")
    if not sep:
        if uri.lower() in EMBEDDED_TARGETS:
            hint = " (embedded targets are started by `dbsurge run`/`dbsurge embedded start`)"
        else:
            hint = _did_you_mean(uri, list(EMBEDDED_TARGETS))
        # the quote is clipped short: the two lists already take most of a one-line message
        raise TargetError(f"bad target URI '{clip(redact_uri(uri), 32)}': scheme must be {_scheme_list()}, or one of "
                          f"{', '.join(EMBEDDED_TARGETS)}{hint}")
    name = _schemes.get(scheme.lower())
    if name is None:
        hint = _did_you_mean(scheme, list(_schemes))
        raise TargetError(f"bad target URI '{clip(redact_uri(uri), 32)}': scheme must be {_scheme_list()}"
                          + (hint.replace("?)", "://?)") if hint else ""))
    if not op_timeout_s or op_timeout_s <= 0:
        raise ValueError(f"op_timeout_s must be positive, not {op_timeout_s!r}")
    return _bindings[name](uri, dict(options or {}), op_timeout_s=float(op_timeout_s), **binding_kwargs)


# Shared helpers for the bindings: option parsing with one-line errors.


def check_options(kind: str, options: dict[str, str], known: frozenset[str]) -> None:
    """Raise `TargetError` for an option name the binding does not know."""
    unknown = sorted(set(options) - known)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(known), n=3)
        hint = (f"did you mean {' or '.join(close)}?" if close
                else f"known are {clip(', '.join(sorted(known)), 160)}")
        raise TargetError(f"unknown {kind} target option{'s' if len(unknown) > 1 else ''} "
                          f"{clip(', '.join(unknown), 40)}: {hint} (docs/architecture.md, Targets, lists them all)")


_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def check_password_spelling(uri: str, display: str, reserved: str) -> None:
    """`TargetError` if the URI's password has a character the driver would read as a delimiter.

    libpq ends the userinfo at the first ``/`` or ``@``, pymongo at ``/ ? @ :`` too: the driver would
    take part of the password for a host or a port and might quote it back in an error. ``%`` must
    start a percent-escape.
    """
    password = uri_password(uri)
    if not password:
        return
    bad = next((c for c in reserved if c in password), None)
    if bad is None and _BAD_PERCENT.search(password):
        bad = "%"
    if bad is not None:
        raise TargetError(f"bad target URI '{clip(display)}': the password has an unescaped '{bad}': "
                          f"percent-encode it, e.g. urllib.parse.quote(password, safe='')")


def option_int(options: dict[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    """An integer option, or `default` when absent."""
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    text = str(raw).strip()
    # ASCII digits only (int() also takes "1_0" and Arabic-Indic digits), and short enough to mean something
    if not _INT.fullmatch(text):
        raise TargetError(f"target option {name}='{clip(raw)}': expected an integer")
    # a bound on the digits before int(): Python refuses to convert more than 4,300 of them, zeros included
    digits = text.lstrip("+-").lstrip("0") or "0"
    value = (int(digits) if len(digits) <= 12 else _MAX_INT + 1) * (-1 if text.startswith("-") else 1)
    if abs(value) > _MAX_INT:
        raise TargetError(f"target option {name}='{clip(raw)}': too large, at most {_MAX_INT}")
    if value < minimum:
        raise TargetError(f"target option {name}='{clip(raw)}': must be at least {minimum}")
    return value


_INT = re.compile(r"[+-]?[0-9]+")
_MAX_INT = 2**31 - 1  # the drivers' options (pool sizes, timeouts in ms) are 32-bit

#: The words that turn a duration option off (None), for the options that can be off (``statement_timeout``,
#: ``max_connection_age``, ...). ``op_timeout`` cannot: `read_op_timeout` refuses them.
OFF_WORDS = frozenset({"none", "off", "never", "0"})


def option_seconds(options: dict[str, str], name: str, default: float | None) -> float | None:
    """A duration option in seconds, in the command line's one grammar (`dbsurge.plan.stage_plan.read_duration`:
    ``30``, ``1.5s``, ``500ms``, ``55m``, ``1h``); one of `OFF_WORDS`: off (None)."""
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    text = str(raw).strip()
    if text.lower() in OFF_WORDS:
        return None
    value, problem = read_duration(text)
    if problem:
        raise TargetError(f"target option {name}='{clip(raw)}': {problem}")
    if value <= 0:
        raise TargetError(f"target option {name}='{clip(raw)}': must be positive")
    return value


def read_op_timeout(text: str) -> tuple[float, str]:
    """(seconds, "") or (0, what is wrong) for an operation timeout, the same for ``--op-timeout`` and the target
    option ``op_timeout``: a positive duration of the one grammar, never off (every operation has a time bound)."""
    text = str(text).strip()
    if text.lower() in OFF_WORDS:
        return 0.0, "operations must have a time bound, it cannot be turned off: e.g. 30s or 500ms"
    value, problem = read_duration(text)
    if problem:
        return 0.0, problem
    if not value > 0:
        return 0.0, "must be positive, e.g. 30s or 500ms"
    return value, ""


def option_op_timeout(options: dict[str, str], default: float) -> float:
    """The ``op_timeout`` option (`read_op_timeout`: a positive duration; it cannot be turned off), else `default`."""
    raw = options.get("op_timeout")
    if raw is None or str(raw).strip() == "":
        return default
    value, problem = read_op_timeout(raw)
    if problem:
        raise TargetError(f"target option op_timeout='{clip(raw)}': {problem}")
    return value


def option_bool(options: dict[str, str], name: str, default: bool | None) -> bool | None:
    """A boolean option: true/false, yes/no, on/off, 1/0."""
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return default
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise TargetError(f"target option {name}='{clip(raw)}': expected true or false")


#: DNS's bounds (RFC 1035): a label (the part between dots) of 1 to 63 octets, a name of at most 253.
MAX_LABEL, MAX_HOST_NAME = 63, 253


def check_host_name(display: str, host: str) -> None:
    """`TargetError` unless `host` is an IP address or a name DNS can carry, checked where the URI is parsed.

    Python encodes a host name with IDNA before every lookup, and refuses an empty label (``a..b``) or one
    of 64 characters or more with a ``UnicodeError``: from inside a driver's connect that is a traceback
    (psycopg) or a driver's puzzling line (pymongo, the CQL driver, botocore's "Invalid endpoint").
    """
    name = host.strip()
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if not name or _is_ip(bare):
        return
    shown = f"bad target URI '{clip(display)}': host '{clip(host, 80)}'"
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")  # one final dot is the root
    if any(not label for label in labels):
        raise TargetError(f"{shown} has an empty label (two dots in a row, or a dot at either end): a host name "
                          f"is labels of 1 to {MAX_LABEL} characters between dots")
    long = next((label for label in labels if len(label) > MAX_LABEL), None)
    if long is not None:
        raise TargetError(f"{shown} has a label of {len(long)} characters ('{clip(long, 20)}'): a label between "
                          f"dots is at most {MAX_LABEL}")
    try:
        encoded = name.encode("idna")
    except UnicodeError as exc:
        raise TargetError(f"{shown} is not a host name DNS can look up ({one_line(str(exc), 80)})") from None
    if len(encoded.rstrip(b".")) > MAX_HOST_NAME:
        raise TargetError(f"{shown} is {len(encoded)} characters: a host name is at most {MAX_HOST_NAME}")


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_ca_file(display: str, name: str, path: str) -> str:
    """The expanded path of a CA bundle option, after loading it once; `TargetError` naming the file if not.

    A missing file, a directory or a file without PEM certificates would otherwise surface as a
    driver's ssl traceback on the first connection.
    """
    full = os.path.expanduser(path)
    if os.path.exists(full) and not os.path.isfile(full):  # a FIFO would hang the TLS library's read
        raise TargetError(f"target {display}: CA file {name}='{clip(path, 160)}' is not a regular file: pass the "
                          f"path of a PEM CA bundle")
    if not os.path.isfile(full):
        raise TargetError(f"target {display}: missing CA file {name}='{clip(path, 160)}' (no such file): "
                          f"pass the path of a PEM CA bundle")
    try:
        ssl.create_default_context(cafile=full)
    except ssl.SSLError as exc:
        raise TargetError(f"target {display}: CA file {name}='{clip(path, 160)}' is not a PEM certificate bundle "
                          f"({one_line(exc.reason or str(exc), 80)}): pass a PEM CA bundle such as global-bundle.pem"
                          ) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TargetError(f"target {display}: cannot read CA file {name}='{clip(path, 160)}': {reason}") from None
    return full


def one_line(text: str, limit: int = 300) -> str:
    """The first line of a driver message, trimmed, for a one-line `TargetError`."""
    first = " ".join(str(text).strip().splitlines()[:1]).strip()
    return first if len(first) <= limit else first[: limit - 3] + "..."
