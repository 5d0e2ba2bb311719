"""The ycsb workload's interface to a database, `YcsbStore`, and the client pieces its stores share.

`YcsbWorkload` is the same on every database; each kind of target has one `YcsbStore` subclass, registered with
``@register_store("ycsb", kind)`` (`dbsurge.workloads.stores`) in its own module (``ycsb_postgres.py``,
``ycsb_mongo.py``, ``ycsb_dynamodb.py``, ``ycsb_cql.py``) and made once per workload. The workload calls the
store for the schema, the load and the presence checks, and `YcsbStore.client` hands each simulated user its
operations (read, update, insert, scan, readmodifywrite) as closures with everything prepared, so that an
operation costs one call, as before there were stores. Nothing here times anything: the engine times the
operations (``dbsurge/timing.py``), the ycsb-load scenario its inserts.

The imports run one way: ``ycsb.py -> stores.py``, and ``ycsb_<database>.py -> ycsb_store.py -> ycsb_keys.py``;
the workload is passed in, never imported.
"""

from __future__ import annotations

import atexit
import os
import random
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbsurge.errors import WorkloadError
from dbsurge.workloads.ycsb_keys import ClientKeys, first_free, scan_length_generator

Operations = dict[str, Callable[[], object]]
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
    def client(self, session: Any, seed: int) -> Operations:
        """One simulated user's operations on ``session``: name -> zero-argument callable, each one complete
        operation that raises on failure (`LookupError` for YCSB's NOT_FOUND)."""


class ClientCommon:
    """Key drawing, value generation and insert numbering of one client, shared by the SQL and MongoDB stores."""

    def __init__(self, workload: YcsbWorkload, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.keys = ClientKeys(workload.recordcount, workload.insert_base(seed))
        self.choose = workload.request_generator(rng, self.keys.count).next
        if workload.options["tracekeys"]:
            self.choose = traced(self.choose, f"{workload.options['tracekeys']}-{os.getpid()}.bin")
        self.scan_length = scan_length_generator(workload, rng).next
        self.key_for = workload.key_for
        self.fields = workload.fields
        self.read_all = workload.options["readallfields"]
        self.write_all = workload.options["writeallfields"]
        self.wants_inserts = "insert" in workload.operations
        self.record = lambda: workload.record(rng)
        length = workload.options["fieldlength"]
        nbytes = (length + 1) // 2
        randbytes = rng.randbytes
        self.value = (
            (lambda: randbytes(nbytes).hex()) if length % 2 == 0 else (lambda: randbytes(nbytes).hex()[:length])
        )
        self.field_index = lambda: int(rng.random() * len(self.fields))

    def next_key(self) -> str:
        index = self.choose()
        keys = self.keys
        if index >= keys.recordcount:
            index = keys.base + index - keys.recordcount
        return self.key_for(index)

    def next_insert_key(self) -> str:
        # Taken before the insert runs: a failed insert leaves a gap rather than a key retried forever.
        keys = self.keys
        keynum = keys.base + keys.inserted
        keys.inserted += 1
        return self.key_for(keynum)

    def resume_inserts(self, exists: Callable[[str], bool]) -> None:
        """Skip the insert numbers an earlier run with this client seed already used."""
        if self.wants_inserts:
            self.keys.inserted = first_free(lambda keynum: exists(self.key_for(keynum)), self.keys.base)


def traced(choose: Callable[[], int], path: str, flush_every: int = 1000) -> Callable[[], int]:
    """``choose`` that also appends each record number it draws to ``path`` (int64), so a test can check
    the distribution of the keys actually requested, reads and updates alike."""
    buf = array("q")

    def flush() -> None:
        if buf:
            with open(path, "ab") as f:
                f.write(buf.tobytes())
            del buf[:]

    atexit.register(flush)

    def traced_choose() -> int:
        index = choose()
        buf.append(index)
        if len(buf) >= flush_every:
            flush()
        return index

    return traced_choose
