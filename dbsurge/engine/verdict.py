"""The verdict: the exit code and the sentence a person reads, decided from the ledger by one function, `decide`.

Everything the end of a run knows that bears on the verdict is gathered into an `Account` first (`finish.judge`
builds it from the run and its tables); `decide` is pure, so every way a run can end goes through the same
rules and a property test can try ledgers of every shape (tests/test_verdict.py).

The rules (README, "Every arrival accounted for, and the exit code"; docs/ledger.md, "Exit codes"):

- 0, ``OK``: the plan was delivered and accounted for (open model: planned known and equal to ok; closed
  model: operations were sent and every worker's final account came), nothing failed, dropped, unknown or
  not sent, and every ``--check`` passed. ``DELIVERED WITH FAILURES`` (0) is the same but for operations that
  failed while every ``--check`` passed (or ``--exit-code-on-error 0``).
- 1, ``FAILED``: a check failed, the target could not take the plan (slots dropped or not sent while every
  user was busy on the database), ``--fail-on-lag`` found lag, or operations failed with no ``--check`` to
  judge them (Locust's ``--exit-code-on-error``, default 1, sets that code).
- 3, ``INCOMPLETE`` / ``STOPPED``: the measurement is incomplete: the tool lost arrivals (not sent by the tool,
  unknown, sent beyond the plan, dropped while the generator fell behind), a worker's final account is missing,
  the plan's arrivals could not be counted (an open-model run with no planned figure), the test's start failed,
  nothing at all was sent, or results were not written; or a stop of dbsurge's own (disk full, cost cap).
- 130/143/4, ``INTERRUPTED``: a signal or the web UI's Stop, whatever the ledger says.

Checks measured on an incomplete ledger all fail: a threshold measured on missing data proves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dbsurge.base.errors import EXIT_CHECKS, EXIT_INCOMPLETE, EXIT_STOPPED

#: Not-sent reasons that mean the tool lost arrivals (exit 3); ``interrupted`` is the user's doing (when the run
#: was interrupted), ``target_silent`` the target's.
TOOL_REASONS = ("worker_lost", "no_connect", "users_exhausted", "in_flight", "unaccounted")
#: Of those, the ones the target is to blame for when it could not take the plan (every user busy on it).
TARGET_CAN_CAUSE = ("users_exhausted", "in_flight")


@dataclass(frozen=True)
class Account:
    """What the end of a run knows that the verdict depends on: the ledger's run totals and how the run ended."""

    open_model: bool  # a plan of arrival rates (planned is counted), or Locust's closed model (no plan)
    planned: int | None  # the plan's arrivals; None when they were not (or could not be) counted
    ok: int = 0
    failed: int = 0
    failed_timeout: int = 0  # of ``failed``: operations that timed out (the target could not take the plan)
    dropped: int = 0
    unknown: int = 0
    unknown_in_flight: int = 0  # of ``unknown``: sent by a live worker and still in flight at the end
    not_sent: dict[str, int] = field(default_factory=dict)  # by reason (`dbsurge.measure.cells.NOT_SENT_REASONS`)
    over_plan: int = 0
    lost_workers: int = 0  # workers lost during the run or whose final account never came
    lag_causes: tuple[str, ...] = ()  # the cause of every stage that lagged or dropped slots (`finish.LagFinding`)
    checks: tuple[bool, ...] = ()  # each ``--check``'s result on the ledger as measured
    fail_on_lag: bool = False
    exit_code_on_error: int = 1  # Locust's: the code of failures no --check judged
    write_failed: bool = False  # the timeline or the tables could not be written
    start_failed: str | None = None  # the test's start raised (nothing of the plan was handed out)
    stop_reason: str | None = None  # a stop of dbsurge's own (disk full, cost cap)
    interrupted: tuple[str, float] | None = None  # (by, at s): a signal or the web UI's Stop
    exit_code_override: int | None = None  # the interruption's or the stop's code

    @property
    def not_sent_total(self) -> int:
        return sum(self.not_sent.values())


@dataclass(frozen=True)
class Decision:
    """The verdict: its exit code, its sentence (first word: OK, DELIVERED WITH FAILURES, FAILED, INCOMPLETE,
    STOPPED or INTERRUPTED), whether the measurement is incomplete, why, and the checks as judged."""

    code: int
    head: str
    incomplete: bool
    reasons: tuple[str, ...]
    checks: tuple[bool, ...]


def target_stuck(a: Account) -> bool:
    """The target could not take the plan: every stage that lagged did so waiting on it, operations timed out,
    or it stopped answering at the end (`target_silent`). The measurement itself is whole."""
    return bool((a.lag_causes and all(c == "target" for c in a.lag_causes)) or a.failed_timeout
                or a.not_sent.get("target_silent", 0))


def incomplete_reasons(a: Account) -> list[str]:
    """Why the measurement is incomplete, in words; empty when it is whole."""
    stuck = target_stuck(a)
    reasons = []
    lost_by_tool = sum(n for r, n in a.not_sent.items() if r in TOOL_REASONS and not (stuck and r in TARGET_CAN_CAUSE))
    if a.interrupted is None and a.stop_reason is None:
        lost_by_tool += a.not_sent.get("interrupted", 0)  # not sent for an interruption there was not: unaccounted
    unknown = a.unknown - (a.unknown_in_flight if stuck else 0)  # still out at the end on a stuck target: its own
    if a.start_failed:
        reasons.append(f"the test's start failed ({a.start_failed})")
    if a.open_model and a.planned is None:
        reasons.append("the plan's arrivals could not be counted")
    if a.ok + a.failed + a.unknown == 0:
        reasons.append("nothing was sent")
    if lost_by_tool or a.over_plan or unknown > 0:
        reasons.append("the tool lost arrivals (not sent, unknown or sent beyond the plan)")
    if a.lost_workers:
        many = a.lost_workers > 1
        reasons.append(f"{a.lost_workers} worker{'s' if many else ''} lost, {'their' if many else 'its'} final "
                       f"account missing")
    if a.open_model and a.planned is not None and a.planned != (a.ok + a.failed + a.dropped + a.unknown
                                                                 + a.not_sent_total - a.over_plan):
        reasons.append("the ledger does not balance")  # never, by `dbsurge.measure.ledger.balance`: said if ever
    if a.write_failed:
        reasons.append("results were not written")
    if a.stop_reason:
        reasons.append(f"stopped: {a.stop_reason}")
    return reasons


def decide(a: Account) -> Decision:
    """The exit code and the verdict's sentence from the `Account`: the one place both are decided."""
    reasons = incomplete_reasons(a)
    incomplete = bool(reasons)
    checks = tuple(False for _ in a.checks) if incomplete else a.checks
    stuck = target_stuck(a)
    tool_behind = any(c in ("generator", "cap") for c in a.lag_causes)  # the tool as configured
    target_short = stuck and bool(a.not_sent.get("users_exhausted") or a.not_sent.get("in_flight")
                                  or a.not_sent.get("target_silent") or a.unknown_in_flight)
    code = 0
    if not all(checks) or (a.dropped and not tool_behind) or (a.fail_on_lag and a.lag_causes) or target_short:
        code = EXIT_CHECKS  # the database missed its SLO, or could not take the plan
    failures_only = False  # the code comes from the failures alone (the verdict says so, not "a check failed")
    if code == 0 and a.failed and not a.checks:
        # Locust's convention: any failure sets --exit-code-on-error (default 1), unless --check thresholds
        # judged the failures and passed. A database that died mid-run must not exit 0.
        code, failures_only = a.exit_code_on_error, True
    if a.dropped and tool_behind:
        reasons.append("slots dropped while the generator fell behind")
    if reasons:
        code = EXIT_INCOMPLETE  # the measurement is incomplete: the tool lost arrivals
    if a.exit_code_override is not None:
        code = a.exit_code_override
    return Decision(code, _head(a, code, reasons, failures_only), incomplete, tuple(reasons), checks)


def _head(a: Account, code: int, reasons: list[str], failures_only: bool) -> str:
    """The verdict's sentence; its first word follows the code (and the code follows the ledger)."""
    if a.stop_reason:
        return f"STOPPED: {a.stop_reason}"
    if a.interrupted is not None and code == a.exit_code_override:
        return f"INTERRUPTED ({a.interrupted[0]}) at t = {a.interrupted[1]:.1f} s"
    if reasons and code == EXIT_INCOMPLETE:
        return "INCOMPLETE: " + "; ".join(reasons)
    if code in (130, 143, EXIT_STOPPED):
        return {130: "INTERRUPTED (SIGINT)", 143: "INTERRUPTED (SIGTERM)"}.get(code, "INTERRUPTED (web UI Stop)")
    return _delivered_head(a, code, failures_only)


def _delivered_head(a: Account, code: int, failures_only: bool) -> str:
    """The sentence of a run whose measurement is whole: OK, DELIVERED WITH FAILURES or FAILED."""
    if code == 0 and a.failed:
        judged = "every --check passed" if a.checks else "--exit-code-on-error 0"
        if a.open_model:
            return f"DELIVERED WITH FAILURES: every arrival accounted for, {a.failed} operations failed ({judged})"
        return (f"DELIVERED WITH FAILURES: {a.ok + a.failed} operations, {a.failed} failed ({judged}), every worker "
                f"accounted for (closed model: no plan to deliver)")
    if failures_only:
        accounted = "every arrival accounted for" if a.open_model else "every worker accounted for (closed model)"
        return (f"FAILED: {accounted}, {a.failed} operations failed and no --check allowed them "
                f"(--exit-code-on-error {code})")
    if code == 0:
        if a.open_model:
            return "OK: the plan was delivered and accounted for, every check passed"
        return (f"OK: {a.ok} operations, none failed, every worker accounted for"
                + (", every check passed" if a.checks else "") + " (closed model: no plan to deliver)")
    if code == EXIT_CHECKS:
        return "FAILED: a check failed or the target could not take the plan" if a.open_model else \
            "FAILED: a check failed"
    return f"exit {code}"
