"""The ycsb workload on PostgreSQL targets (PostgreSQL, Aurora, Aurora DSQL), as YCSB's JDBC binding.

``usertable(ycsb_key text primary key, field0 text, ...)``. Everything an operation needs (SQL text, bound
methods) is prepared once per client; an operation is a key draw, one round trip (``prepare=True``: server-side
prepared after the first call) and a check of the result. A missing record or an update that matches nothing
raises `LookupError`, which the engine counts as a failure, as YCSB counts a NOT_FOUND status.

Writes on a target whose `Target.optimistic_writes` is true (Aurora DSQL) go through ``run_transaction``, which
retries serialization conflicts; elsewhere a write is one autocommit statement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbsurge.base.errors import WorkloadError
from dbsurge.workloads.base import pg_executor, pg_lookup
from dbsurge.workloads.loading import pg_count_present, pg_execute, pg_insert_sql, pg_load, pg_table_has_rows
from dbsurge.workloads.stores import register_store
from dbsurge.workloads.ycsb_keys import KEY_COLUMN
from dbsurge.workloads.ycsb_store import MakeRows, YcsbConnection, YcsbStore, YcsbWorkload

PG_MAX_PARAMS = 65_535  # bind parameters in one statement (the protocol counts them in 16 bits)


def optimistic_writes(target: Any) -> bool:
    """True when any write on ``target`` may answer a serialization conflict (`Target.optimistic_writes`)."""
    return bool(getattr(target, "optimistic_writes", False))


@register_store("ycsb", "postgres")
class PostgresYcsbStore(YcsbStore):
    """The ycsb workload's table, load and operations on a PostgreSQL session."""

    def check_options(self, options: Mapping[str, Any]) -> None:
        super().check_options(options)
        if options["batchsize"] * (options["fieldcount"] + 1) > PG_MAX_PARAMS:
            raise WorkloadError(
                f"workload options batchsize={options['batchsize']} x fieldcount={options['fieldcount']} pass "
                f"PostgreSQL's {PG_MAX_PARAMS} parameters per statement; lower batchsize"
            )

    def create_table(self, session: Any) -> None:
        workload = self.workload
        columns = ", ".join(f"{field} text" for field in workload.fields)
        pg_execute(session, f"create table if not exists {workload.table} ({KEY_COLUMN} text primary key, {columns})")

    def drop_table(self, session: Any) -> None:
        pg_execute(session, f"drop table if exists {self.workload.table}")

    def table_has_rows(self, session: Any) -> bool:
        return pg_table_has_rows(session, self.workload.table)

    def count_present(self, session: Any, keys: Sequence[str]) -> int:
        return pg_count_present(session, self.workload.table, KEY_COLUMN, keys)

    def load(self, session: Any, *, make: MakeRows, start: int, stop: int, batch_size: int, progress: Any) -> int:
        workload = self.workload
        return pg_load(session, label=workload.name, seed=workload.options["seed"], table=workload.table,
                       columns=(KEY_COLUMN, *workload.fields), make=make, start=start, stop=stop,
                       statement_rows=batch_size, progress=progress)

    def batch_inserter(self, session: Any, batch_size: int) -> Callable[[list[tuple]], None]:
        """One INSERT per call: autocommit for one row, else (or on DSQL) in a transaction."""
        workload = self.workload
        columns = (KEY_COLUMN, *workload.fields)
        sql_for: dict[int, str] = {}
        execute = pg_executor(session)
        autocommit = batch_size == 1 and not optimistic_writes(workload.target)

        def insert(rows: list[tuple]) -> None:
            sql = sql_for.get(len(rows)) or sql_for.setdefault(len(rows), pg_insert_sql(workload.table, columns,
                                                                                         len(rows)))
            params = [v for row in rows for v in row]
            if autocommit:
                execute(sql, params, prepare=True)
            else:
                session.run_transaction(lambda conn: conn.execute(sql, params, prepare=True))

        return insert

    def connect(self, session: Any) -> YcsbConnection:
        return PostgresYcsbConnection(self.workload, session)


def _pg_writer(workload: YcsbWorkload, session: Any, execute: Any) -> Callable[[str, Sequence[object]], int]:
    """``write(sql, params) -> rowcount``: one write statement as the target wants it."""
    if optimistic_writes(workload.target):
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


class PostgresYcsbConnection(YcsbConnection):
    """One client's statements on a PostgreSQL session: SQL text built once, reads through the session's fast
    lookup (prepared once per connection), writes as the target wants them (`optimistic_writes`)."""

    __slots__ = ("_execute", "_exists_sql", "_insert_sql", "_read_all", "_read_field", "_scan_all_sql",
                 "_scan_field_sql", "_update_all_sql", "_update_field_sql", "_write")

    def __init__(self, workload: YcsbWorkload, session: Any) -> None:
        table, fields = workload.table, workload.fields
        where = f"where {KEY_COLUMN} = %s"
        read_all = workload.options["readallfields"]
        self._execute = execute = pg_executor(session)
        # prepared at connect: the ones the workload uses
        self._read_all = pg_lookup(session, f"select {KEY_COLUMN}, {', '.join(fields)} from {table} {where}",
                                   prepare_now=read_all)
        self._read_field = [pg_lookup(session, f"select {KEY_COLUMN}, {field} from {table} {where}",
                                      prepare_now=not read_all) for field in fields]
        self._update_all_sql = f"update {table} set {', '.join(f'{field} = %s' for field in fields)} {where}"
        self._update_field_sql = [f"update {table} set {field} = %s {where}" for field in fields]
        marks = ", ".join(["%s"] * (len(fields) + 1))
        self._insert_sql = f"insert into {table} ({KEY_COLUMN}, {', '.join(fields)}) values ({marks})"
        scan_tail = f"from {table} where {KEY_COLUMN} >= %s order by {KEY_COLUMN} limit %s"
        self._scan_all_sql = f"select {KEY_COLUMN}, {', '.join(fields)} {scan_tail}"
        self._scan_field_sql = [f"select {KEY_COLUMN}, {field} {scan_tail}" for field in fields]
        self._exists_sql = f"select 1 from {table} {where}"
        self._write = _pg_writer(workload, session, execute)

    def read(self, key: str, field: int | None) -> object:
        row = (self._read_all if field is None else self._read_field[field])((key,))
        if row is None:
            raise LookupError(f"ycsb read: no record {key}")
        return row

    def update(self, key: str, field: int, value: str) -> object:
        rowcount = self._write(self._update_field_sql[field], (value, key))
        if rowcount != 1:
            raise LookupError(f"ycsb update: no record {key}")
        return rowcount

    def update_all(self, key: str, values: list[str]) -> object:
        values.append(key)  # the list is the caller's, made for this call
        rowcount = self._write(self._update_all_sql, values)
        if rowcount != 1:
            raise LookupError(f"ycsb update: no record {key}")
        return rowcount

    def insert(self, key: str, values: Sequence[str]) -> object:
        return self._write(self._insert_sql, (key, *values))

    def scan(self, start: str, count: int, field: int | None) -> object:
        sql = self._scan_all_sql if field is None else self._scan_field_sql[field]
        return self._execute(sql, (start, count), prepare=True).fetchall()

    def exists(self, key: str) -> bool:
        return self._execute(self._exists_sql, (key,)).fetchone() is not None
