"""The per-client operations of the ycsb workload, one binding per target kind.

Everything an operation needs (SQL text, field lists, bound methods) is prepared once per client;
an operation is a key draw, one round trip (``prepare=True``: server-side prepared after the
first call) and a check of the result. A missing record or an update that matches nothing raises
`LookupError`, which the engine counts as a failure, as YCSB counts a NOT_FOUND status.
"""

from __future__ import annotations

import atexit
import os
import random
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from dbsurge.workloads.base import pg_executor, pg_lookup
from dbsurge.workloads.ycsb_keys import KEY_COLUMN, ClientKeys, first_free, scan_length_generator

# The workload (a `dbsurge.workloads.ycsb.YcsbWorkload`) is passed in; it is not imported, so the
# imports run one way (ycsb -> ycsb_bindings -> ycsb_keys). Its public `record` and `collection` are used.
YcsbWorkload = Any

Operations = dict[str, Callable[[], object]]
ID_INDEX = [("_id", 1)]


class _Common:
    """Key drawing, value generation and insert numbering shared by both bindings."""

    def __init__(self, workload: YcsbWorkload, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.keys = ClientKeys(workload.recordcount, workload.insert_base(seed))
        self.choose = workload.request_generator(rng, self.keys.count).next
        if workload.options["tracekeys"]:
            self.choose = _traced(self.choose, f"{workload.options['tracekeys']}-{os.getpid()}.bin")
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


def _traced(choose: Callable[[], int], path: str, flush_every: int = 1000) -> Callable[[], int]:
    """``choose`` that also appends each record number it draws to ``path`` (int64), so a test can check
    the distribution of the keys actually requested, reads and updates alike."""
    buf = array("q")

    def flush() -> None:
        if buf:
            with open(path, "ab") as f:
                f.write(buf.tobytes())
            del buf[:]

    atexit.register(flush)

    def traced() -> int:
        index = choose()
        buf.append(index)
        if len(buf) >= flush_every:
            flush()
        return index

    return traced


def _pg_writer(workload: YcsbWorkload, session: Any, execute: Any) -> Callable[[str, Sequence[object]], int]:
    """``write(sql, params) -> rowcount``: one write statement as the target wants it."""
    if getattr(workload.target, "flavor", None) == "dsql":
        # DSQL can answer 40001 to any write under optimistic concurrency: run writes through
        # run_transaction, which retries them and counts the retries apart from failures.
        def write(sql: str, params: Sequence[object]) -> int:
            rowcount = [0]

            def transaction(conn: Any) -> None:
                rowcount[0] = conn.execute(sql, params, prepare=True).rowcount

            session.run_transaction(transaction)
            return rowcount[0]

    else:
        # PostgreSQL and Aurora: one autocommit statement, one round trip (YCSB's JDBC binding).
        def write(sql: str, params: Sequence[object]) -> int:
            return execute(sql, params, prepare=True).rowcount

    return write


def pg_client(workload: YcsbWorkload, session: Any, seed: int) -> Operations:
    """The ycsb operations of one client on a PostgreSQL session."""
    c = _Common(workload, seed)
    table, fields = workload.table, c.fields
    where = f"where {KEY_COLUMN} = %s"
    read_all_sql = f"select {KEY_COLUMN}, {', '.join(fields)} from {table} {where}"
    read_field_sql = [f"select {KEY_COLUMN}, {field} from {table} {where}" for field in fields]
    update_all_sql = f"update {table} set {', '.join(f'{field} = %s' for field in fields)} {where}"
    update_field_sql = [f"update {table} set {field} = %s {where}" for field in fields]
    insert_sql = (
        f"insert into {table} ({KEY_COLUMN}, {', '.join(fields)}) values ({', '.join(['%s'] * (len(fields) + 1))})"
    )
    scan_tail = f"from {table} where {KEY_COLUMN} >= %s order by {KEY_COLUMN} limit %s"
    scan_all_sql = f"select {KEY_COLUMN}, {', '.join(fields)} {scan_tail}"
    scan_field_sql = [f"select {KEY_COLUMN}, {field} {scan_tail}" for field in fields]
    exists_sql = f"select 1 from {table} {where}"
    next_key, value, field_index = c.next_key, c.value, c.field_index
    read_all, write_all = c.read_all, c.write_all
    execute = pg_executor(session)
    read_all_lookup = pg_lookup(session, read_all_sql, prepare_now=read_all)  # prepared at connect: the ones used
    read_field_lookup = [pg_lookup(session, sql, prepare_now=not read_all) for sql in read_field_sql]

    def read_key(key: str) -> object:
        lookup = read_all_lookup if read_all else read_field_lookup[field_index()]
        row = lookup((key,))
        if row is None:
            raise LookupError(f"ycsb read: no record {key}")
        return row

    write = _pg_writer(workload, session, execute)

    def update_key(key: str) -> object:
        if write_all:
            rowcount = write(update_all_sql, [value() for _ in fields] + [key])
        else:
            rowcount = write(update_field_sql[field_index()], (value(), key))
        if rowcount != 1:
            raise LookupError(f"ycsb update: no record {key}")
        return rowcount

    def insert() -> object:
        key = c.next_insert_key()
        write(insert_sql, (key, *c.record()))
        return key

    def scan() -> object:
        sql = scan_all_sql if read_all else scan_field_sql[field_index()]
        return execute(sql, (next_key(), c.scan_length()), prepare=True).fetchall()

    def readmodifywrite() -> object:
        key = next_key()
        read_key(key)
        return update_key(key)

    c.resume_inserts(lambda key: execute(exists_sql, (key,)).fetchone() is not None)
    return {
        "read": lambda: read_key(next_key()),
        "update": lambda: update_key(next_key()),
        "insert": insert,
        "scan": scan,
        "readmodifywrite": readmodifywrite,
    }


def mongo_client(workload: YcsbWorkload, session: Any, seed: int) -> Operations:
    """The ycsb operations of one client on a MongoDB session."""
    c = _Common(workload, seed)
    collection = workload.collection(session)
    fields = c.fields
    find_one, update_one, insert_one, find = (
        collection.find_one,
        collection.update_one,
        collection.insert_one,
        collection.find,
    )
    field_projection = [{field: 1} for field in fields]
    next_key, value, field_index = c.next_key, c.value, c.field_index
    read_all, write_all = c.read_all, c.write_all

    def read_key(key: str) -> object:
        doc = find_one({"_id": key}) if read_all else find_one({"_id": key}, field_projection[field_index()])
        if doc is None:
            raise LookupError(f"ycsb read: no record {key}")
        return doc

    def update_key(key: str) -> object:
        if write_all:
            change = {field: value() for field in fields}
        else:
            change = {fields[field_index()]: value()}
        result = update_one({"_id": key}, {"$set": change})
        if result.matched_count != 1:
            raise LookupError(f"ycsb update: no record {key}")
        return result.modified_count

    def insert() -> object:
        key = c.next_insert_key()
        doc = {"_id": key}
        doc.update(zip(fields, c.record()))
        insert_one(doc)
        return key

    def scan() -> object:
        projection = None if read_all else field_projection[field_index()]
        # The hint makes secantusdb walk the _id index (it plans range + sort as a collection scan);
        # MongoDB and DocumentDB pick that index anyway.
        cursor = find({"_id": {"$gte": next_key()}}, projection).sort("_id", 1).hint(ID_INDEX).limit(c.scan_length())
        return list(cursor)

    def readmodifywrite() -> object:
        key = next_key()
        read_key(key)
        return update_key(key)

    c.resume_inserts(lambda key: find_one({"_id": key}, {"_id": 1}) is not None)
    return {
        "read": lambda: read_key(next_key()),
        "update": lambda: update_key(next_key()),
        "insert": insert,
        "scan": scan,
        "readmodifywrite": readmodifywrite,
    }
