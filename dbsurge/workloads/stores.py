"""The registry of stores: what a workload needs of one kind of database, registered by (workload, target kind).

A workload (`dbsurge.workloads.ycsb.YcsbWorkload`, `dbsurge.workloads.documents.DocumentsWorkload`) is the
same on every database: options, key choice, the operation mix, the load's data. What differs per database
(the schema, the presence check, the load's inserts, the per-client operations) is a store class, registered
here by the workload's name and the target's ``kind`` and looked up once, when the workload is made. So a
workload never branches on the kind of its target, and a new database is one module that registers its stores
(as go-ycsb's ``pkg/ycsb/db.go``: a workload calls the DB interface, a database registers itself).

The built-in stores live in the modules of `_BUILTIN_MODULES` and are imported on the first lookup, so that
importing a workload does not import every driver.
"""

from __future__ import annotations

import importlib
from typing import Any

from dbsurge.base.errors import WorkloadError

__all__ = ["make_store", "register_store", "store_kinds"]

# Modules that register the built-in stores when imported, in the order their kinds are listed in messages.
_BUILTIN_MODULES = (
    "dbsurge.workloads.ycsb_postgres",
    "dbsurge.workloads.ycsb_mongo",
    "dbsurge.workloads.ycsb_dynamodb",
    "dbsurge.workloads.ycsb_cql",
    "dbsurge.workloads.documents_stores",
)

_stores: dict[tuple[str, str], type] = {}
_builtins_loaded = False


def register_store(workload: str, kind: str):
    """Class decorator: register a store class for workload ``workload`` on targets of kind ``kind``.

    A (workload, kind) registered twice is a programming error (`ValueError`), as for target bindings.
    """

    def decorate(cls: type) -> type:
        key = (workload, kind)
        if key in _stores:
            raise ValueError(f"store for workload {workload!r} on {kind!r} targets is already registered by "
                             f"{_stores[key].__qualname__}")
        _stores[key] = cls
        return cls

    return decorate


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in _BUILTIN_MODULES:
            importlib.import_module(module)


def store_kinds(workload: str) -> tuple[str, ...]:
    """The target kinds workload ``workload`` has stores for, in registration order (empty: it has none)."""
    _load_builtins()
    return tuple(key[1] for key in _stores if key[0] == workload)


def make_store(workload: Any) -> Any:
    """The store of ``workload`` for its target's kind (`workload.kind`), made once per workload.

    `WorkloadError` when there is none (`Workload.__init__` has refused such a target before).
    """
    _load_builtins()
    cls = _stores.get((workload.name, workload.kind))
    if cls is None:
        raise WorkloadError(f"workload {workload.name} has no store for {workload.kind} targets")
    return cls(workload)
