"""Workloads: the data a run needs and the operations its users send.

``get_workload(name, target, options)`` picks a workload by name; options are strings (from a
repeatable ``--workload-option key=value``; `parse_workload_options` splits them), and the ycsb
workload accepts YCSB's own property names. A duplicate registration is a programming error.

- ``orders`` (study 001, PostgreSQL): `OrdersWorkload`
- ``documents`` (study 000, MongoDB and PostgreSQL): `DocumentsWorkload`
- ``ycsb`` (study 002, MongoDB and PostgreSQL): `YcsbWorkload`
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dbsurge.base.errors import WorkloadError
from dbsurge.workloads.base import Option, Workload, parse_workload_options
from dbsurge.workloads.documents import DocumentsWorkload
from dbsurge.workloads.orders import OrdersWorkload
from dbsurge.workloads.ycsb import YcsbWorkload

WORKLOADS: dict[str, type[Workload]] = {}


def register(cls: type[Workload]) -> type[Workload]:
    """Add a workload class to the registry under ``cls.name``."""
    if cls.name in WORKLOADS:
        raise ValueError(f"workload {cls.name!r} is registered twice")
    WORKLOADS[cls.name] = cls
    return cls


for _cls in (DocumentsWorkload, OrdersWorkload, YcsbWorkload):
    register(_cls)


def get_workload(name: str, target: Any, options: Mapping[str, object] | None = None) -> Workload:
    """The workload called ``name`` on ``target``, with ``options`` validated.

    Raises `WorkloadError` (one line) for an unknown name, an unknown option or a bad value.
    """
    cls = WORKLOADS.get(name.strip().lower())
    if cls is None:
        raise WorkloadError(f"unknown workload '{name}': known workloads are {', '.join(sorted(WORKLOADS))}")
    return cls(target, options or {})


__all__ = [
    "WORKLOADS",
    "DocumentsWorkload",
    "Option",
    "OrdersWorkload",
    "Workload",
    "YcsbWorkload",
    "get_workload",
    "parse_workload_options",
    "register",
]
