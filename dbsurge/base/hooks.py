"""A slot a higher layer fills so that a lower one can call up without importing it.

The engine asks for the side collectors (`dbsurge.engine.collector_hooks`), the reports for the
scenarios' tables (`dbsurge.collectors.scenario_hooks`): each names what it needs as a frozen
dataclass of callables and keeps one `HookSlot` of it. The composition root (`dbsurge.locust_plugin`,
`dbsurge.commands.cli`) fills every slot before a run; a test may fill one with its own.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class HookSlot(Generic[T]):
    """One filled-in value of ``T``; the last `install` wins."""

    def __init__(self, what: str, filled_by: str, install_name: str) -> None:
        self._what, self._filled_by, self._install_name = what, filled_by, install_name
        self._value: T | None = None

    def install(self, value: T) -> None:
        """Fill the slot (again: the last one wins)."""
        self._value = value

    def get(self) -> T:
        """What was installed; an empty slot is a programming error in the composition layer."""
        if self._value is None:
            raise RuntimeError(f"no {self._what} installed: {self._filled_by} hands them in ({self._install_name})")
        return self._value
