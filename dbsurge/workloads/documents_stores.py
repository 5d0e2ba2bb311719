"""The documents workload's stores: its table or collection, load, reads by id and full scan on each database.

`DocumentsWorkload` (``documents.py``) is the same on PostgreSQL and MongoDB; what differs is here, one
`DocumentsStore` per target kind, registered with ``@register_store("documents", kind)`` and looked up once
when the workload is made. Nothing here times an operation: the engine times ``read_by_id``, and the full
scan hands each batch's arrival time (measured by `dbsurge.measure.timing.Laps`, the one clock) to its caller.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import bson

from dbsurge.measure.timing import Laps
from dbsurge.workloads.base import LOAD_CHUNK, pg_executor
from dbsurge.workloads.documents import COLUMNS, MATCH, TABLE, BatchCallback, make_docs, make_rows
from dbsurge.workloads.loading import mongo_count_present, mongo_load, pg_count_present, pg_execute, pg_load
from dbsurge.workloads.stores import register_store


class DocumentsStore(ABC):
    """What the documents workload needs of one kind of database; one per workload (`workload`)."""

    def __init__(self, workload: Any) -> None:
        self.workload = workload

    @abstractmethod
    def create_table(self, session: Any) -> None:
        """Create the table unless it exists (nothing where the first insert makes it)."""

    @abstractmethod
    def count_present(self, session: Any, ids: Sequence[int]) -> int:
        """How many of the document ids ``ids`` exist."""

    @abstractmethod
    def load(self, session: Any, *, progress: Any) -> int:
        """Insert the missing documents ``0..documents-1``; returns how many were written."""

    @abstractmethod
    def reader(self, session: Any, draw: Callable[[], float], span: int) -> Callable[[], object]:
        """``read_by_id()``: read the document ``int(draw() * span)``; `LookupError` when it is missing."""

    @abstractmethod
    def scan_batches(self, session: Any, batch_size: int, on_batch: BatchCallback | None) -> int:
        """The 1%-match full scan batch by batch (see `DocumentsWorkload.scan_batches`); returns documents read."""


@register_store("documents", "postgres")
class PostgresDocuments(DocumentsStore):
    """``documents(id bigint primary key, category text, payload text)``; the scan is a server-side cursor."""

    def create_table(self, session: Any) -> None:
        pg_execute(session, f"create table if not exists {TABLE} (id bigint primary key, category text, payload text)")

    def count_present(self, session: Any, ids: Sequence[int]) -> int:
        return pg_count_present(session, TABLE, "id", ids)

    def load(self, session: Any, *, progress: Any) -> int:
        workload = self.workload
        return pg_load(session, label=workload.name, seed=workload.options["seed"], table=TABLE, columns=COLUMNS,
                       make=make_rows, start=0, stop=workload.documents, statement_rows=LOAD_CHUNK, progress=progress)

    def reader(self, session: Any, draw: Callable[[], float], span: int) -> Callable[[], object]:
        sql = f"select id, category, payload from {TABLE} where id = %s"
        execute = pg_executor(session)

        def read_by_id() -> object:
            doc_id = int(draw() * span)
            row = execute(sql, (doc_id,), prepare=True).fetchone()
            if row is None:
                raise LookupError(f"documents: no row with id {doc_id}")
            return row

        return read_by_id

    def scan_batches(self, session: Any, batch_size: int, on_batch: BatchCallback | None) -> int:
        # A named (server-side) cursor lives in a transaction; each fetchmany is one FETCH round trip.
        # run_transaction also notices a broken connection; a rerun after a conflict starts the count over.
        def scan(conn: Any) -> int:
            total = 0
            index = 0
            with conn.cursor(name="dbsurge_full_scan") as cursor:
                laps = Laps()
                cursor.execute(f"select id, category, payload from {TABLE} where category = %s", (MATCH,))
                while True:
                    rows = cursor.fetchmany(batch_size)
                    if not rows:
                        break
                    elapsed = laps.lap()
                    total += len(rows)
                    if on_batch is not None:
                        on_batch(index, len(rows), elapsed)
                    index += 1
                    laps.restart()
            return total

        return session.run_transaction(scan)


@register_store("documents", "mongo")
class MongoDocuments(DocumentsStore):
    """One document per id (``_id``, ``category``, ``payload``); the scan reads raw batches of a find."""

    def create_table(self, session: Any) -> None:
        """Nothing: MongoDB creates the collection with its first insert."""

    def count_present(self, session: Any, ids: Sequence[int]) -> int:
        return mongo_count_present(session.db[TABLE], ids)

    def load(self, session: Any, *, progress: Any) -> int:
        workload = self.workload
        return mongo_load(session.db[TABLE], label=workload.name, seed=workload.options["seed"], make=make_docs,
                          start=0, stop=workload.documents, batch_size=LOAD_CHUNK, progress=progress)

    def reader(self, session: Any, draw: Callable[[], float], span: int) -> Callable[[], object]:
        find_one = session.db[TABLE].find_one

        def read_by_id() -> object:
            doc_id = int(draw() * span)
            doc = find_one({"_id": doc_id})
            if doc is None:
                raise LookupError(f"documents: no document with _id {doc_id}")
            return doc

        return read_by_id

    def scan_batches(self, session: Any, batch_size: int, on_batch: BatchCallback | None) -> int:
        total = 0
        index = 0
        # find_raw_batches yields exactly one server reply (find, then each getMore) per iteration,
        # so a batch's time is one round trip plus decoding it.
        cursor = session.db[TABLE].find_raw_batches({"category": MATCH}, batch_size=batch_size)
        try:
            laps = Laps()
            for raw in cursor:
                docs = bson.decode_all(raw)
                elapsed = laps.lap()
                if docs:
                    total += len(docs)
                    if on_batch is not None:
                        on_batch(index, len(docs), elapsed)
                    index += 1
                laps.restart()
        finally:
            cursor.close()
        return total
