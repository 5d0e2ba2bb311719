"""A connection that could not be opened, as a user books it: the failure kind and its one-line message.

A server that refuses a connection for a reason of its own (full, starting up, shutting down) is told
from one nobody answered, so the ledger says ``connect:53300`` rather than a bare ``connect``. This
module imports neither Locust nor gevent: tests read it without monkey-patching their own process.
"""

from __future__ import annotations

from dbsurge.base.redact import redact_text


class ConnectFailure(Exception):
    """A user could not open its connection; the slot fails with kind ``connect``, or ``connect:<code>``
    when the server refused it for a reason of its own (``connect:53300``: too many clients)."""

    kind = "connect"


#: What a server says when it refuses a connection, and its SQLSTATE: libpq's connect reports the
#: server's message but no SQLSTATE, so the message is what tells a full server from a down one.
REFUSALS = (
    ("too many clients", "53300"), ("remaining connection slots are reserved", "53300"),
    ("too many connections for role", "53300"), ("too many connections for database", "53300"),
    ("the database system is starting up", "57P03"), ("the database system is shutting down", "57P03"),
    ("the database system is in recovery mode", "57P03"), ("too many open connections", "maxIncomingConnections"),
)


def refusal_code(exc: BaseException) -> str | None:
    """The server's reason for refusing a connection (a SQLSTATE or MongoDB's limit), or None."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        code = getattr(e, "sqlstate", None)
        if isinstance(code, str) and code[:2] in ("53", "57"):  # insufficient resources, operator intervention
            return code
        text = str(e).lower()
        for needle, known in REFUSALS:
            if needle in text:
                return known
        e = e.__cause__ or e.__context__
    return None


def as_connect_error(exc: BaseException) -> ConnectFailure:
    """`exc` (a binding's connect error) as the ConnectFailure a slot is failed with, its cause kept."""
    err = ConnectFailure(describe(exc))
    code = refusal_code(exc)
    if code:
        err.kind = f"connect:{code}"
    err.__cause__ = exc
    return err


#: How much of a failure's message is kept: the whole of a server's reason (a refused connection's
#: "FATAL:  sorry, too many clients already" comes after a long prefix), bounded all the same.
MESSAGE_LIMIT = 1000


def describe(exc: BaseException) -> str:
    """`exc` as one redacted line, at most MESSAGE_LIMIT characters."""
    text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 1] + "…"
    return redact_text(f"{type(exc).__name__}: {text}")
