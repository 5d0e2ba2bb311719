"""The ycsb workload's interface to a database: `YcsbStore` (one per workload) and `YcsbConnection` (one per client).

`YcsbWorkload` is the same on every database; each kind of target has one `YcsbStore` subclass, registered with
``@register_store("ycsb", kind)`` (`dbsurge.workloads.stores`) in its own module (``ycsb_postgres.py``,
``ycsb_mongo.py``, ``ycsb_dynamodb.py``, ``ycsb_cql.py``) and made once per workload. The workload calls the
store for the schema, the load and the presence checks; `YcsbStore.connect` gives each simulated user a
`YcsbConnection` (go-ycsb's DB interface: read, update, insert, scan), on which the workload's operations,
drawn by the workload, are one bound-method call each. Nothing here times anything: the engine times the
operations (``dbsurge/measure/timing.py``), the ycsb-load scenario its inserts.

The imports run one way: ``ycsb.py -> ycsb_store.py -> ycsb_keys.py`` and ``ycsb_<database>.py -> ycsb_store.py``;
the workload is passed in, never imported.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from dbsurge.base.errors import WorkloadError

#: ``make(rng, first, stop)``: the rows of records ``first..stop-1``, each ``(key, field0, field1, ...)``.
MakeRows = Callable[[random.Random, int, int], list[tuple]]
#: The workload (a `dbsurge.workloads.ycsb.YcsbWorkload`); not imported, so that the imports run one way.
YcsbWorkload = Any


class YcsbStore(ABC):
    """What the ycsb workload needs of one kind of database (go-ycsb's DB interface, for one workload).

    One per workload (`workload`), made when the workload is made, before any network. Methods taking a
    session use it and leave it open: the caller owns it.
    """

    def __init__(self, workload: YcsbWorkload) -> None:
        self.workload = workload

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse (`WorkloadError`, one line) options this database cannot honour, when the workload is made.

        By default the MongoDB-only ``readpreference`` and ``writeconcern``; a store that honours them overrides.
        """
        if options["readpreference"] or options["writeconcern"]:
            raise WorkloadError("workload options readpreference and writeconcern apply to MongoDB targets only")

    def check_no_load(self, session: Any) -> None:
        """Under ``--no-load``: refuse (`WorkloadError`, one line) a schema no operation can run without; nothing
        by default (a table missing on PostgreSQL or a collection on MongoDB fails each operation, and says so)."""

    @abstractmethod
    def create_table(self, session: Any) -> None:
        """Create the table (and keyspace) unless it exists; a database that makes it on first insert does nothing."""

    @abstractmethod
    def drop_table(self, session: Any) -> None:
        """Drop the table if it exists (the ycsb-load scenario's ``--drop``)."""

    @abstractmethod
    def table_has_rows(self, session: Any) -> bool:
        """True if the table exists and holds at least one record."""

    @abstractmethod
    def count_present(self, session: Any, keys: Sequence[str]) -> int:
        """How many of ``keys`` exist (an absent table holds none): `Workload.has_data` probes a few keys."""

    @abstractmethod
    def load(self, session: Any, *, make: MakeRows, start: int, stop: int, batch_size: int, progress: Any) -> int:
        """Insert the missing records ``start..stop-1``, ``batch_size`` per insert; returns how many were written."""

    @abstractmethod
    def batch_inserter(self, session: Any, batch_size: int) -> Callable[[list[tuple]], None]:
        """``insert(rows)``: one insert call of ``rows`` (key first), as unbatched or batched YCSB sends it."""

    @abstractmethod
    def connect(self, session: Any) -> YcsbConnection:
        """One simulated user's `YcsbConnection` on ``session``, its statements prepared."""


class YcsbConnection(ABC):
    """One client's access to the table on its session, everything prepared: go-ycsb's DB interface.

    The workload draws the keys, fields and values and composes the operations (readmodifywrite is a read
    and an update); each method here is one complete database call that raises on failure, `LookupError`
    for YCSB's NOT_FOUND. ``field``: the index of the one field to read or write, None for all of them.
    Subclasses keep their state in ``__slots__``: an operation costs one bound-method call and no dict lookup.
    """

    __slots__ = ()

    #: Whether a client with inserts in its mix first skips the insert keys an earlier run with its seed used
    #: (`exists`, a few point reads); a database whose insert is an upsert may leave it off.
    resumes_inserts: ClassVar[bool] = True

    @abstractmethod
    def read(self, key: str, field: int | None) -> object:
        """The record ``key`` (all fields, or one)."""

    @abstractmethod
    def update(self, key: str, field: int, value: str) -> object:
        """Set one field of the record ``key``."""

    @abstractmethod
    def update_all(self, key: str, values: list[str]) -> object:
        """Set every field of the record ``key`` (``values`` in field order)."""

    @abstractmethod
    def insert(self, key: str, values: Sequence[str]) -> object:
        """Insert the record ``key`` with ``values`` in field order."""

    @abstractmethod
    def scan(self, start: str, count: int, field: int | None) -> object:
        """Up to ``count`` records from ``start`` on, as a list (all fields, or one)."""

    def exists(self, key: str) -> bool:
        """True if the record ``key`` exists (used once per client when `resumes_inserts`)."""
        raise NotImplementedError
