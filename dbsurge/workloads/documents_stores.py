"""The documents workload's stores: its table or collection, load, reads by id and full scan on each database.

`DocumentsWorkload` (``documents.py``) is the same on PostgreSQL and MongoDB; what differs is here, one
`DocumentsStore` per target kind, registered with ``@register_store("documents", kind)`` and looked up once
when the workload is made. Nothing here times an operation: the engine times ``read_by_id``, and the full
scan hands each batch's arrival time (measured by `dbsurge.measure.timing.Laps`, the one clock) to its caller.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import bson

from dbsurge.measure.timing import Laps
from dbsurge.workloads.base import LOAD_CHUNK, pg_executor
from dbsurge.workloads.documents import COLUMNS, MATCH, TABLE, BatchCallback, make_docs, make_rows
from dbsurge.workloads.loading import mongo_count_present, mongo_load, pg_count_present, pg_execute, pg_load
from dbsurge.workloads.stores import register_store

PG_SELECT = f"select id, category, payload from {TABLE} where id = %s"
PG_STATIO = (
    "select coalesce(sum(heap_blks_read), 0) + coalesce(sum(idx_blks_read), 0), "
    "coalesce(sum(heap_blks_hit), 0) + coalesce(sum(idx_blks_hit), 0) "
    f"from pg_statio_user_tables where relname = '{TABLE}'"
)


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

    def reader(self, session: Any, draw: Callable[[], float], span: int) -> Callable[[], object]:
        """The workload's ``read_by_id``: an id drawn inside the operation, read with `id_reader`."""
        read = self.id_reader(session)

        def read_by_id() -> object:
            return read(int(draw() * span))

        return read_by_id

    @abstractmethod
    def id_reader(self, session: Any) -> Callable[[int], object]:
        """``read(doc_id)``: one complete read of a document by an id the caller chose; `LookupError` if missing
        (the workload draws the id, `reader`; the cache scenarios choose it: the same ids warm and cold, a trace)."""

    def publish_counters(self, session: Any) -> None:
        """Make what this session did visible in the server's cache counters now (nothing where it already is)."""

    @abstractmethod
    def cache_counters(self, session: Any) -> dict | None:
        """``{"read": pages or blocks read into the cache, "hit": found there}`` for the documents, from the
        server's own counters; None where the server gives none (Aurora DSQL, secantusdb)."""

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

    def id_reader(self, session: Any) -> Callable[[int], object]:
        execute = pg_executor(session)

        def read(doc_id: int) -> object:
            row = execute(PG_SELECT, (doc_id,), prepare=True).fetchone()
            if row is None:
                raise LookupError(f"documents: no row with id {doc_id}")
            return row

        return read

    def publish_counters(self, session: Any) -> None:
        # PostgreSQL 15+ hands a backend's counters over when it goes idle, at most once a second: now, so that
        # another connection sees them (older servers, DSQL: the counters are then a little late or absent)
        with contextlib.suppress(Exception):
            session.conn.execute("select pg_stat_force_next_flush()")

    def cache_counters(self, session: Any) -> dict | None:
        """``pg_statio_user_tables`` for the documents table: heap and index blocks hit in shared buffers or read."""
        row = session.conn.execute(PG_STATIO).fetchone()
        return {"read": int(row[0]), "hit": int(row[1])}

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

    def id_reader(self, session: Any) -> Callable[[int], object]:
        find_one = session.db[TABLE].find_one

        def read(doc_id: int) -> object:
            doc = find_one({"_id": doc_id})
            if doc is None:
                raise LookupError(f"documents: no document with _id {doc_id}")
            return doc

        return read

    def cache_counters(self, session: Any) -> dict | None:
        """``serverStatus().wiredTiger.cache``: pages requested from the cache, pages read into it."""
        cache = session.client.admin.command("serverStatus").get("wiredTiger", {}).get("cache", {})
        read = cache.get("pages read into cache")
        requested = cache.get("pages requested from the cache")
        if read is None or requested is None:
            return None
        return {"read": int(read), "hit": max(0, int(requested) - int(read))}

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
