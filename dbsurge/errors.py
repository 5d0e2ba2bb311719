"""Errors a user can cause. Each carries one line that says what is wrong and what to do.

The CLI prints ``dbsurge: <message>`` to stderr and exits non-zero for any `UserError`,
never a traceback. Raise these before any load is sent.
"""

from __future__ import annotations


class UserError(ValueError):
    """A problem in the user's input or environment, explained in one line."""

    exit_code = 2


class TargetError(UserError):
    """The target cannot be reached or refuses us (bad URI, host down, wrong credentials, missing CA file)."""


class PlanError(UserError):
    """A malformed stage plan or rate."""


class WorkloadError(UserError):
    """An unknown workload, operation or workload option."""
