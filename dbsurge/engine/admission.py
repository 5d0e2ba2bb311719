"""Locust's view of the workers, narrowed to the admitted ones: only they count and get users.

Locust's master counts a worker as "ready" as soon as it connects, and ``--expect-workers N``
starts the test once N are ready; its user dispatcher hands users to the same list. A worker
that has not proved the join token yet, or was refused (`dbsurge.engine.membership`), would count toward
N and take users, so the plan would start on fewer real workers and be re-split when the last one
came. `AdmittedWorkerNodes` replaces the master's ``runner.clients``: its ``ready`` list holds
only workers the `Membership` admits, so ``--expect-workers`` waits for N admitted workers and
Locust's dispatcher gives users to none but them. Refused workers stay in the mapping (Locust
answers their heartbeats), named in events.jsonl and on the console by `dbsurge.engine.protocol`.
"""

from __future__ import annotations

from locust.runners import WorkerNodes

from dbsurge.engine.membership import Membership


class AdmittedWorkerNodes(WorkerNodes):
    """``runner.clients`` of a master: ``ready`` lists admitted workers only (proven, not refused)."""

    def __init__(self, membership: Membership, nodes: WorkerNodes | None = None) -> None:
        super().__init__()
        self.membership = membership
        for k, v in (nodes or {}).items():
            self[k] = v

    @property
    def ready(self) -> list:
        return [c for c in super().ready if self.membership.admitted(c.id)]


def admit_only_members(runner, membership: Membership) -> None:
    """Master: from now on Locust counts and dispatches to admitted workers only (without a token: not refused)."""
    if not isinstance(runner.clients, AdmittedWorkerNodes):
        runner.clients = AdmittedWorkerNodes(membership, runner.clients)
