"""Errors a user can cause. Each carries one line that says what is wrong and what to do.

The CLI prints ``dbsurge: <message>`` to stderr and exits non-zero for any `UserError`,
never a traceback. Raise these before any load is sent.
"""

from __future__ import annotations

#: How much of a user's own text an error message quotes: a 100,000-character plan is not echoed back.
QUOTE_LIMIT = 60


def clip(text: object, limit: int = QUOTE_LIMIT) -> str:
    """User text made fit to quote in a one-line message: control characters escaped, cut to `limit` with "…".

        >>> clip("2m@20%\\n" + "x" * 100, 12)
        '2m@20%\\\\nxxx…'
    """
    s = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))
    return s if len(s) <= limit else s[: limit - 1] + "…"


#: Exit codes (README, "Every arrival accounted for, and the exit code"; docs/ledger.md).
EXIT_OK, EXIT_CHECKS, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
EXIT_SIGNAL = {2: 130, 15: 143}  # SIGINT, SIGTERM
#: The web UI's Stop ended the test before the plan did: an interruption, like a signal, but not one.
EXIT_STOPPED = 4


class OperationTimeout(Exception):
    """An operation outlived its time bound, and was ended; classified as ``timeout`` by every binding.

    ``interrupted`` says what became of the connection: True when a bound outside the driver threw this into the
    operation mid-protocol (the user's last-resort bound, a connect bound), so that the connection cannot be trusted
    again and its owner throws it away; False when the session's own deadline ended the operation and closed its
    connection itself (PostgreSQL's `op_timeout`), reconnecting at the next operation. Not a `TimeoutError`: that is
    an `OSError`, which psycopg's waits turn into "connection socket closed" when it is thrown into them.
    """

    def __init__(self, message: object = "", *, interrupted: bool = True) -> None:
        super().__init__(message)
        self.interrupted = interrupted


class UserError(ValueError):
    """A problem in the user's input or environment, explained in one line."""

    exit_code = 2

    def __init__(self, message: object = "", *args: object) -> None:
        # The one-line promise holds even when a message carries a driver's multi-line text or a
        # user's newline: line breaks become spaces here, once, instead of at every raise.
        super().__init__(" ".join(str(message).splitlines()), *args)


class TargetError(UserError):
    """The target cannot be reached or refuses us (bad URI, host down, wrong credentials, missing CA file)."""


class ConnectError(TargetError):
    """A session could not connect or reconnect (refused, unreachable, DNS, authentication, timeout).

    Raised by `dbsurge.targets.Target.connect()` and by a session's lazy reconnect before an operation; the
    message is one redacted line and the driver's exception is the ``__cause__``. Classified as ``"connect"``.
    """


class PlanError(UserError):
    """A malformed stage plan or rate."""


class WorkloadError(UserError):
    """An unknown workload, operation or workload option."""
