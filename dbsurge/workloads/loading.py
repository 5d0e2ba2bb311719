"""Idempotent bulk loading shared by the workloads: insert the rows that are missing, in chunks.

Rows are generated per block of `LOAD_CHUNK` consecutive record numbers, each block from its own
random generator seeded with (workload, seed, block), so the data does not depend on the batch
size, on where a previous load stopped, or on how a load is split between loaders.

Idempotence without ``INSERT ... ON CONFLICT`` (kept out so the loader needs nothing beyond
plain INSERT/SELECT on Aurora DSQL): when the table already has rows, each chunk first asks which
of its keys exist and inserts only the others. A load into an empty table skips that query.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from dbsurge.base.backoff import Backoff
from dbsurge.workloads.base import LOAD_CHUNK, LoadProgress, pg_executor

# (block_random, first, stop) -> rows for record numbers first..stop-1, first key in each row.
MakeRows = Callable[[random.Random, int, int], list[Any]]


def block_random(label: str, seed: int, block: int) -> random.Random:
    """The random generator of one block of record numbers (string seeds hash with SHA-512: stable)."""
    return random.Random(f"dbsurge:{label}:{seed}:{block}")


def blocks(start: int, stop: int) -> list[tuple[int, int, int]]:
    """``(block, first, stop)`` for each `LOAD_CHUNK`-aligned block overlapping ``[start, stop)``."""
    result = []
    for block in range(start // LOAD_CHUNK, -(-stop // LOAD_CHUNK)):
        first = max(start, block * LOAD_CHUNK)
        last = min(stop, (block + 1) * LOAD_CHUNK)
        if first < last:
            result.append((block, first, last))
    return result


def block_rows(label: str, seed: int, block: int, first: int, stop: int, make: MakeRows) -> list[Any]:
    """Rows ``first..stop-1`` of a block, generated from the block's start so they never depend on ``first``."""
    block_start = block * LOAD_CHUNK
    rows = make(block_random(label, seed, block), block_start, stop)
    return rows[first - block_start :]


# ---------------------------------------------------------------------------------------------
# PostgreSQL

#: The set-up's retries of a statement DSQL refuses with 40001 (10 ms, doubling, at most 2 s a wait).
SETUP_BACKOFF = Backoff(0.01, 2.0)


def insert_missing(label: str, seed: int, *, make: MakeRows, start: int, stop: int, batch_size: int, progress: Any,
                   insert: Callable[[list[Any]], None], present: Callable[[list[Any]], set[Any]] | None) -> int:
    """Rows ``start..stop-1`` block by block (`block_rows`), less the keys `present` finds (None: an empty
    table, nothing to check), written by `insert` in batches of ``batch_size``; returns how many were written.
    A row's first item is its key. The CQL and DynamoDB-API loads share it."""
    inserted = 0
    for block, first, last in blocks(start, stop):
        rows = block_rows(label, seed, block, first, last, make)
        if present is not None:
            found = present([row[0] for row in rows])
            rows = [row for row in rows if row[0] not in found]
        for offset in range(0, len(rows), batch_size):
            batch = rows[offset:offset + batch_size]
            insert(batch)
            inserted += len(batch)
        progress.advance(last - first)
    return inserted


def pg_execute(session: Any, sql: str, params: Sequence[Any] | None = None, *, attempts: int = 8) -> Any:
    """Run one autocommit statement, retrying SQLSTATE 40001 after `SETUP_BACKOFF`'s waits; returns the cursor.

    Aurora DSQL answers 40001 to a statement as well as to a commit, for instance to the first
    statements on a table right after its CREATE ("schema has been updated by another transaction").
    """
    import psycopg  # the drivers load with the binding that uses them, not with every workload

    for attempt in range(attempts):
        try:
            return pg_executor(session)(sql, params, prepare=params is not None)
        except psycopg.errors.SerializationFailure:
            if attempt == attempts - 1:
                raise
            time.sleep(SETUP_BACKOFF.delay(attempt))
    raise AssertionError("unreachable")


def pg_table_has_rows(session: Any, table: str) -> bool:
    """True if ``table`` exists and has at least one row."""
    import psycopg

    try:
        return pg_execute(session, f"select 1 from {table} limit 1").fetchone() is not None
    except psycopg.errors.UndefinedTable:
        return False


def pg_count_present(session: Any, table: str, key_column: str, keys: Sequence[Any]) -> int:
    """How many of ``keys`` exist in ``table`` (0 if the table does not exist)."""
    import psycopg

    try:
        cursor = pg_execute(session, f"select count(*) from {table} where {key_column} = any(%s)", (list(keys),))
        return int(cursor.fetchone()[0])
    except psycopg.errors.UndefinedTable:
        return 0


def pg_insert_sql(table: str, columns: Sequence[str], rows: int) -> str:
    """A multi-row ``insert into table (cols) values (...), (...)`` for ``rows`` rows."""
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return f"insert into {table} ({', '.join(columns)}) values " + ", ".join([one] * rows)


def pg_load(
    session: Any,
    *,
    label: str,
    seed: int,
    table: str,
    columns: Sequence[str],
    make: MakeRows,
    start: int,
    stop: int,
    statement_rows: int,
    progress: LoadProgress,
) -> int:
    """Insert the missing rows ``start..stop-1``; returns how many were inserted.

    ``statement_rows`` rows go in one INSERT; a multi-row INSERT runs in ``session.run_transaction``
    (whole-transaction retry on serialization failures), a single-row one in autocommit, as an
    unbatched YCSB load does.
    """
    check_existing = pg_table_has_rows(session, table)
    key_column = columns[0]
    exists_sql = f"select {key_column} from {table} where {key_column} = any(%s)"
    sql_by_rows: dict[int, str] = {}
    inserted = 0
    for block, first, last in blocks(start, stop):
        rows = block_rows(label, seed, block, first, last, make)
        if check_existing:
            present = {r[0] for r in pg_execute(session, exists_sql, ([row[0] for row in rows],))}
            rows = [row for row in rows if row[0] not in present]
        for offset in range(0, len(rows), statement_rows):
            batch = rows[offset : offset + statement_rows]
            sql = sql_by_rows.get(len(batch))
            if sql is None:
                sql = sql_by_rows[len(batch)] = pg_insert_sql(table, columns, len(batch))
            params = [value for row in batch for value in row]
            if len(batch) == 1:
                pg_execute(session, sql, params)
            else:
                session.run_transaction(lambda conn, sql=sql, params=params: conn.execute(sql, params))
            inserted += len(batch)
        progress.advance(last - first)
    return inserted


# ---------------------------------------------------------------------------------------------
# MongoDB


def mongo_load(
    collection: Any,
    *,
    label: str,
    seed: int,
    make: MakeRows,
    start: int,
    stop: int,
    batch_size: int,
    progress: LoadProgress,
) -> int:
    """Insert the missing documents ``start..stop-1`` (``make`` returns documents with ``_id``).

    ``batch_size`` 1 inserts one document per command (``insert_one``), more uses unordered
    ``insert_many``, as YCSB's MongoDB binding does. Duplicate keys (a concurrent loader) are
    ignored; any other write error raises.
    """
    check_existing = collection.find_one({}, {"_id": 1}) is not None
    inserted = 0
    for block, first, last in blocks(start, stop):
        docs = block_rows(label, seed, block, first, last, make)
        if check_existing:
            present = _mongo_present(collection, [doc["_id"] for doc in docs])
            docs = [doc for doc in docs if doc["_id"] not in present]
        for offset in range(0, len(docs), batch_size):
            inserted += _mongo_insert(collection, docs[offset : offset + batch_size])
        progress.advance(last - first)
    return inserted


def _mongo_present(collection: Any, ids: list[Any]) -> set[Any]:
    # $in lists of 100: secantusdb's $in costs grow with the square of the list (1,000 ids: ~1 s).
    present: set[Any] = set()
    for offset in range(0, len(ids), 100):
        chunk = ids[offset : offset + 100]
        present.update(d["_id"] for d in collection.find({"_id": {"$in": chunk}}, {"_id": 1}))
    return present


def _mongo_insert(collection: Any, docs: list[dict[str, Any]]) -> int:
    import pymongo.errors

    try:
        if len(docs) == 1:
            collection.insert_one(docs[0])
            return 1
        return len(collection.insert_many(docs, ordered=False).inserted_ids)
    except pymongo.errors.DuplicateKeyError:
        return 0
    except pymongo.errors.BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        if any(error.get("code") != 11000 for error in errors):
            raise
        return int(exc.details.get("nInserted", 0))


def mongo_count_present(collection: Any, keys: Sequence[Any]) -> int:
    """How many of ``keys`` exist as ``_id`` in ``collection``."""
    return collection.count_documents({"_id": {"$in": list(keys)}})
