"""The ycsb workload on CQL targets (ScyllaDB, Cassandra): schema, load and operations, as YCSB's cassandra binding.

Schema: ``CREATE KEYSPACE <keyspace> WITH replication = {'class': <replicationstrategy>, 'replication_factor': N}``
and ``CREATE TABLE <keyspace>.usertable (y_id varchar PRIMARY KEY, field0 varchar, ...)``. Every statement is
prepared (`CqlStatements` holds their text) and bound per operation, so the driver routes it by token and shard.
Read is ``SELECT ... WHERE y_id = ?`` (a missing row is YCSB's NOT_FOUND: `LookupError`), update is
``UPDATE ... SET fieldN = ? WHERE y_id = ?`` (an upsert, as in YCSB's binding), insert ``INSERT``, scan
``SELECT ... WHERE token(y_id) >= token(?) LIMIT ?``. The batched load sends ``BEGIN UNLOGGED BATCH`` of
``batchsize`` inserts (a `BatchStatement` of type UNLOGGED); ``batchsize=1`` sends each insert alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dbsurge.base.errors import TargetError, WorkloadError
from dbsurge.targets.cql import check_keyspace
from dbsurge.workloads.loading import insert_missing
from dbsurge.workloads.stores import register_store
from dbsurge.workloads.ycsb_store import MakeRows, YcsbConnection, YcsbStore

CQL_KEY = "y_id"  # YCSB's cassandra binding's key column


@dataclass(frozen=True)
class CqlStatements:
    """The CQL text of every statement the ycsb workload prepares, for one keyspace, table and field list."""

    keyspace: str
    table: str
    fields: tuple[str, ...]
    strategy: str = "SimpleStrategy"
    replication_factor: int = 1

    @property
    def qualified(self) -> str:
        return f"{self.keyspace}.{self.table}"

    def create_keyspace(self) -> str:
        return (f"CREATE KEYSPACE IF NOT EXISTS {self.keyspace} WITH replication = "
                f"{{'class': '{self.strategy}', 'replication_factor': {self.replication_factor}}}")

    def create_table(self) -> str:
        columns = ", ".join(f"{field} varchar" for field in self.fields)
        return f"CREATE TABLE IF NOT EXISTS {self.qualified} ({CQL_KEY} varchar PRIMARY KEY, {columns})"

    def drop_table(self) -> str:
        return f"DROP TABLE IF EXISTS {self.qualified}"

    def read(self, field: str | None = None) -> str:
        columns = ", ".join(self.fields) if field is None else field
        return f"SELECT {CQL_KEY}, {columns} FROM {self.qualified} WHERE {CQL_KEY} = ?"

    def update(self, fields: Sequence[str]) -> str:
        return f"UPDATE {self.qualified} SET {', '.join(f'{f} = ?' for f in fields)} WHERE {CQL_KEY} = ?"

    def insert(self) -> str:
        marks = ", ".join("?" * (len(self.fields) + 1))
        return f"INSERT INTO {self.qualified} ({CQL_KEY}, {', '.join(self.fields)}) VALUES ({marks})"

    def scan(self, field: str | None = None) -> str:
        columns = ", ".join(self.fields) if field is None else field
        return (f"SELECT {CQL_KEY}, {columns} FROM {self.qualified} WHERE token({CQL_KEY}) >= token(?) LIMIT ?")

    def exists(self) -> str:
        return f"SELECT {CQL_KEY} FROM {self.qualified} WHERE {CQL_KEY} = ?"

    def any_row(self) -> str:
        return f"SELECT {CQL_KEY} FROM {self.qualified} LIMIT 1"


def statements(workload: Any) -> CqlStatements:
    """The `CqlStatements` of a ycsb workload (its keyspace and replication options)."""
    opts = workload.options
    return CqlStatements(opts["keyspace"], workload.table, tuple(workload.fields), opts["replicationstrategy"],
                         opts["replicationfactor"])


def insert_batch(target: Any, prepared_insert: Any, rows: Sequence[Sequence[str]]) -> Any:
    """One UNLOGGED ``BatchStatement`` of ``rows`` bound to the prepared insert, at the target's consistency."""
    from cassandra.query import BatchStatement, BatchType

    batch = target.configure(BatchStatement(batch_type=BatchType.UNLOGGED))
    for row in rows:
        batch.add(prepared_insert, tuple(row))
    return batch


def ensure_schema(workload: Any, session: Any) -> None:
    """Create the keyspace and ``usertable`` if missing (schema statements are not prepared: DDL)."""
    cql = statements(workload)
    session.execute(cql.create_keyspace())
    session.execute(cql.create_table())


def drop_table(workload: Any, session: Any) -> None:
    session.execute(statements(workload).drop_table())


def table_has_rows(workload: Any, session: Any) -> bool:
    from cassandra import InvalidRequest

    try:
        return bool(list(session.execute(statements(workload).any_row())))
    except InvalidRequest:  # no such keyspace or table
        return False


def table_known_missing(workload: Any, session: Any) -> bool:
    """True when the driver's schema metadata has no such keyspace or table.

    Preparing a statement on a missing table only fails, and the driver logs that failure as an ERROR line, which
    a first run (whose data is not loaded yet) printed before its load. Unknown (no metadata): False.
    """
    metadata = getattr(getattr(getattr(session, "session", None), "cluster", None), "metadata", None)
    if metadata is None:
        return False
    cql = statements(workload)
    keyspace = metadata.keyspaces.get(cql.keyspace)
    return keyspace is None or cql.table not in keyspace.tables


def present_keys(workload: Any, session: Any, keys: Sequence[str]) -> set[str]:
    """Which of ``keys`` exist, by one prepared point read each (no IN lists: they fan out over the cluster)."""
    from cassandra import InvalidRequest

    if table_known_missing(workload, session):
        return set()
    try:
        exists = session.prepare(statements(workload).exists())
    except InvalidRequest:
        return set()
    return {key for key in keys if list(session.execute(exists, (key,)))}


def inserter(workload: Any, session: Any) -> Callable[[list[tuple]], None]:
    """``insert(rows)``: one prepared INSERT for one row, an UNLOGGED BATCH of them for more."""
    prepared = session.prepare(statements(workload).insert())
    target = session.target

    def insert(rows: list[tuple]) -> None:
        if len(rows) == 1:
            session.execute(prepared, tuple(rows[0]))
            return
        from cassandra import InvalidRequest

        try:
            session.execute(insert_batch(target, prepared, rows))
        except InvalidRequest as exc:
            if "batch too large" not in str(exc).lower():
                raise
            size = sum(len(str(v)) for row in rows for v in row)
            raise TargetError(f"target {target.display}: an UNLOGGED BATCH of {len(rows)} records (about "
                              f"{size // 1024} KiB) is over the server's batch_size_fail_threshold: lower "
                              f"--workload-option batchsize, or raise the threshold in cassandra.yaml") from None

    return insert


def load(workload: Any, session: Any, *, make: Callable[..., list[tuple]], start: int, stop: int, batch_size: int,
         progress: Any) -> int:
    """Insert the missing records ``start..stop-1`` in batches of ``batch_size``; returns how many were written."""
    check_existing = table_has_rows(workload, session)
    insert = inserter(workload, session)
    present = (lambda keys: present_keys(workload, session, keys)) if check_existing else None
    return insert_missing(workload.name, workload.options["seed"], make=make, start=start, stop=stop,
                          batch_size=batch_size, progress=progress, insert=insert, present=present)


class CqlYcsbConnection(YcsbConnection):
    """One client's prepared statements on a CQL session (the driver prepares each once per process).

    No resume of inserts: a CQL INSERT is an upsert, and YCSB's cassandra binding does not look either."""

    __slots__ = ("_execute", "_insert", "_read_all", "_read_field", "_scan_all", "_scan_field", "_update_all",
                 "_update_field")
    resumes_inserts = False

    def __init__(self, workload: Any, session: Any) -> None:
        cql, fields = statements(workload), workload.fields
        prepare, self._execute = session.prepare, session.execute
        self._read_all = prepare(cql.read())
        self._read_field = [prepare(cql.read(field)) for field in fields]
        self._update_all = prepare(cql.update(fields))
        self._update_field = [prepare(cql.update([field])) for field in fields]
        self._insert = prepare(cql.insert())
        self._scan_all = prepare(cql.scan())
        self._scan_field = [prepare(cql.scan(field)) for field in fields]

    def read(self, key: str, field: int | None) -> object:
        row = self._execute(self._read_all if field is None else self._read_field[field], (key,)).one()
        if row is None:
            raise LookupError(f"ycsb read: no record {key}")
        return row

    def update(self, key: str, field: int, value: str) -> object:
        self._execute(self._update_field[field], (value, key))
        return 1

    def update_all(self, key: str, values: list[str]) -> object:
        self._execute(self._update_all, (*values, key))
        return 1

    def insert(self, key: str, values: Sequence[str]) -> object:
        return self._execute(self._insert, (key, *values))

    def scan(self, start: str, count: int, field: int | None) -> object:
        return list(self._execute(self._scan_all if field is None else self._scan_field[field], (start, count)))


def keyspace_of(workload: Any, options: dict[str, Any]) -> str:
    """The keyspace the workload works in: the target URI's (``cql://host/KEYSPACE``) when it names one, else the
    workload option ``keyspace`` (default ycsb); both, and different: `WorkloadError`. Checked as a CQL name."""
    named = getattr(workload.target, "keyspace", None)
    given = options["keyspace"]
    if named and "keyspace" in workload.given_options and check_keyspace(given, "workload option") != named:
        raise WorkloadError(f"the target URI names keyspace {named} and --workload-option keyspace={given}: name "
                            f"the keyspace once (in the URI, or the option)")
    return named or check_keyspace(given, "workload option keyspace")


def check_schema_exists(workload: Any, session: Any) -> None:
    """`WorkloadError` (one line) when the keyspace or its table is missing: every statement would fail to prepare."""
    metadata = getattr(getattr(getattr(session, "session", None), "cluster", None), "metadata", None)
    if metadata is None:
        return
    cql = statements(workload)
    display = session.target.display
    if cql.keyspace not in metadata.keyspaces:
        raise WorkloadError(f"keyspace {cql.keyspace} does not exist on {display}, and --no-load keeps dbsurge from "
                            f"creating it: leave out --no-load (the load creates it), or name the keyspace the data "
                            f"is in (cql://host/KEYSPACE)")
    if cql.table not in metadata.keyspaces[cql.keyspace].tables:
        raise WorkloadError(f"table {cql.qualified} does not exist on {display}, and --no-load keeps dbsurge from "
                            f"creating it: leave out --no-load (the load creates it)")


@register_store("ycsb", "cql")
class CqlYcsbStore(YcsbStore):
    """The ycsb workload's keyspace, table, load and operations on a CQL session."""

    def check_options(self, options: dict[str, Any]) -> None:  # type: ignore[override]
        """MongoDB's options refused (`YcsbStore.check_options`); the keyspace the URI names is the workload's."""
        super().check_options(options)
        options["keyspace"] = keyspace_of(self.workload, options)

    def check_no_load(self, session: Any) -> None:
        check_schema_exists(self.workload, session)

    def create_table(self, session: Any) -> None:
        ensure_schema(self.workload, session)

    def drop_table(self, session: Any) -> None:
        drop_table(self.workload, session)

    def table_has_rows(self, session: Any) -> bool:
        return table_has_rows(self.workload, session)

    def count_present(self, session: Any, keys: Sequence[str]) -> int:
        return len(present_keys(self.workload, session, keys))

    def load(self, session: Any, *, make: MakeRows, start: int, stop: int, batch_size: int, progress: Any) -> int:
        return load(self.workload, session, make=make, start=start, stop=stop, batch_size=batch_size,
                    progress=progress)

    def batch_inserter(self, session: Any, batch_size: int) -> Callable[[list[tuple]], None]:
        """One prepared INSERT for one row, an UNLOGGED BATCH of them for more."""
        return inserter(self.workload, session)

    def connect(self, session: Any) -> YcsbConnection:
        return CqlYcsbConnection(self.workload, session)
