"""The ycsb workload on DynamoDB-API targets (Amazon DynamoDB, ScyllaDB Alternator): table, load and operations.

As YCSB's dynamodb binding: one item per record, the key as a string hash key (``ycsb_key``, the
column name the SQL binding uses), each field a string attribute. Read is ``GetItem`` (``ConsistentRead``
from the target option ``consistent_read``; one field through a ``ProjectionExpression`` unless
readallfields), update is ``UpdateItem`` with ``SET`` and a condition that the item exists (YCSB's
NOT_FOUND: `LookupError`), insert is ``PutItem``, scan is a ``Scan`` from the drawn key with ``Limit``
(DynamoDB has no ordered scan over a hash key; YCSB's binding does the same), and the batched load is
``BatchWriteItem`` of up to 25 items, its unprocessed items sent again.

Every request goes through `DynamoSession.call`, which retries throttling and counts the retries. The
set-up (schema, the load of `Workload.load`, the presence checks) is more patient still (`patient_call`):
it is not measured, and a load must not fail because the table throttles it for a while.
The table is created on demand (``PAY_PER_REQUEST``: on-demand capacity, what the cost model prices).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dbsurge.base.backoff import Backoff
from dbsurge.base.errors import WorkloadError
from dbsurge.targets.dynamodb import ThrottledError
from dbsurge.workloads.loading import insert_missing
from dbsurge.workloads.stores import register_store
from dbsurge.workloads.ycsb_keys import KEY_COLUMN
from dbsurge.workloads.ycsb_store import MakeRows, YcsbConnection, YcsbStore

#: Items in one BatchWriteItem request (DynamoDB's limit) and keys in one BatchGetItem request.
BATCH_WRITE_MAX = 25
BATCH_GET_MAX = 100
TABLE_ACTIVE_TIMEOUT_S = 120.0
SETUP_ATTEMPTS = 30  # of a set-up request the server keeps throttling (each after the session's own retries)
#: Waits between those set-up attempts (50 ms, doubling, at most 1 s), and between the sends of a batch's
#: unprocessed items (25 ms, the AWS SDKs' DynamoDB base, doubling, at most 1 s).
SETUP_BACKOFF = Backoff(0.05, 1.0)
UNPROCESSED_BACKOFF = Backoff(0.025, 1.0)


def patient_call(session: Any) -> Callable[..., dict[str, Any]]:
    """``call(method, **request)``: `DynamoSession.call`, tried again with backoff while it stays throttled."""
    def call(method: Callable[..., dict[str, Any]], /, **request: Any) -> dict[str, Any]:
        for attempt in range(SETUP_ATTEMPTS):
            try:
                return session.call(method, **request)
            except ThrottledError:
                if attempt == SETUP_ATTEMPTS - 1:
                    raise
                time.sleep(SETUP_BACKOFF.delay(attempt))
        raise AssertionError("unreachable")

    return call


def _table(workload: Any) -> str:
    return workload.target.table_name(workload.table)


def _item(key: str, fields: Sequence[str], values: Sequence[str]) -> dict[str, dict[str, str]]:
    item = {KEY_COLUMN: {"S": key}}
    item.update({field: {"S": value} for field, value in zip(fields, values)})
    return item


def ensure_table(workload: Any, session: Any) -> None:
    """Create the workload's table (hash key ``ycsb_key``, on-demand) unless it exists; wait until it is ACTIVE."""
    client, table, call = session.client, _table(workload), patient_call(session)
    try:
        status = call(client.describe_table, TableName=table)["Table"].get("TableStatus")
    except client.exceptions.ResourceNotFoundException:
        try:
            call(client.create_table, TableName=table, BillingMode="PAY_PER_REQUEST",
                         AttributeDefinitions=[{"AttributeName": KEY_COLUMN, "AttributeType": "S"}],
                         KeySchema=[{"AttributeName": KEY_COLUMN, "KeyType": "HASH"}])
        except client.exceptions.ResourceInUseException:
            pass  # another loader created it meanwhile
        status = "CREATING"
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    while status != "ACTIVE":
        if time.monotonic() > deadline:
            raise TimeoutError(f"DynamoDB table {table} was not ACTIVE after {TABLE_ACTIVE_TIMEOUT_S:g}s")
        time.sleep(0.5)
        status = call(client.describe_table, TableName=table)["Table"].get("TableStatus")


def drop_table(workload: Any, session: Any) -> None:
    """Delete the workload's table if it exists, and wait until it is gone."""
    client, table = session.client, _table(workload)
    try:
        session.call(client.delete_table, TableName=table)
    except client.exceptions.ResourceNotFoundException:
        return
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            session.call(client.describe_table, TableName=table)
        except client.exceptions.ResourceNotFoundException:
            return
        time.sleep(0.5)


def table_has_rows(workload: Any, session: Any) -> bool:
    """True if the workload's table exists and holds at least one item."""
    client = session.client
    try:
        answer = patient_call(session)(client.scan, TableName=_table(workload), Limit=1, ProjectionExpression="#k",
                              ExpressionAttributeNames={"#k": KEY_COLUMN})
    except client.exceptions.ResourceNotFoundException:
        return False
    return bool(answer.get("Items"))


def present_keys(workload: Any, session: Any, keys: Sequence[str]) -> set[str]:
    """Which of ``keys`` exist (BatchGetItem of 100 keys a request; an absent table holds none)."""
    client, table, call = session.client, _table(workload), patient_call(session)
    found: set[str] = set()
    for offset in range(0, len(keys), BATCH_GET_MAX):
        chunk = keys[offset:offset + BATCH_GET_MAX]
        pending: dict[str, Any] = {table: {"Keys": [{KEY_COLUMN: {"S": k}} for k in chunk],
                                           "ProjectionExpression": "#k",
                                           "ExpressionAttributeNames": {"#k": KEY_COLUMN}}}
        while pending:
            try:
                answer = call(client.batch_get_item, RequestItems=pending)
            except client.exceptions.ResourceNotFoundException:
                return set()
            found.update(item[KEY_COLUMN]["S"] for item in answer.get("Responses", {}).get(table, []))
            pending = answer.get("UnprocessedKeys") or {}
    return found


def batch_write(workload: Any, session: Any, items: list[dict[str, Any]], *, attempts: int = 10,
                call: Callable[..., dict[str, Any]] | None = None) -> None:
    """One ``BatchWriteItem`` of ``items`` (at most 25), its ``UnprocessedItems`` sent again with backoff.

    DynamoDB answers a partly throttled batch with the items it did not write instead of an error;
    a batch still unfinished after ``attempts`` raises.
    """
    client, table, call = session.client, _table(workload), call or session.call
    pending: dict[str, Any] = {table: [{"PutRequest": {"Item": item}} for item in items]}
    for attempt in range(attempts):
        pending = call(client.batch_write_item, RequestItems=pending).get("UnprocessedItems") or {}
        if not pending:
            return
        session.retries += 1
        time.sleep(UNPROCESSED_BACKOFF.delay(attempt))
    raise RuntimeError(f"BatchWriteItem: {len(pending.get(table, []))} items still unprocessed after "
                       f"{attempts} attempts")


def inserter(workload: Any, session: Any, *, patient: bool = False) -> Callable[[list[tuple]], None]:
    """``insert(rows)`` for the load: PutItem for one row, BatchWriteItem for more (rows: key, then fields).

    ``patient``: retry throttling beyond the session's retries (`Workload.load`); the ycsb-load scenario
    measures inserts and keeps the session's own retries.
    """
    client, table, fields = session.client, _table(workload), workload.fields
    call = patient_call(session) if patient else session.call

    def insert(rows: list[tuple]) -> None:
        items = [_item(row[0], fields, row[1:]) for row in rows]
        if len(items) == 1:
            call(client.put_item, TableName=table, Item=items[0])
        else:
            for offset in range(0, len(items), BATCH_WRITE_MAX):
                batch_write(workload, session, items[offset:offset + BATCH_WRITE_MAX], call=call)

    return insert


def load(workload: Any, session: Any, *, make: Callable[..., list[tuple]], start: int, stop: int, batch_size: int,
         progress: Any) -> int:
    """Insert the missing records ``start..stop-1`` in ``batch_size`` calls; returns how many were written."""
    check_existing = table_has_rows(workload, session)
    insert = inserter(workload, session, patient=True)
    present = (lambda keys: present_keys(workload, session, keys)) if check_existing else None
    return insert_missing(workload.name, workload.options["seed"], make=make, start=start, stop=stop,
                          batch_size=batch_size, progress=progress, insert=insert, present=present)


class DynamoYcsbConnection(YcsbConnection):
    """One client's requests on a DynamoDB-API session, each through `DynamoSession.call` (throttling retries)."""

    __slots__ = ("_call", "_consistent", "_fields", "_get_item", "_names", "_not_found", "_put_item", "_scan",
                 "_table", "_update_all", "_update_item")

    def __init__(self, workload: Any, session: Any) -> None:
        client = session.client
        self._call, self._table, self._fields = session.call, _table(workload), workload.fields
        self._get_item, self._update_item, self._put_item, self._scan = (
            client.get_item, client.update_item, client.put_item, client.scan)
        self._consistent = bool(session.consistent_read)
        self._not_found = client.exceptions.ConditionalCheckFailedException
        self._names = {f"#f{i}": field for i, field in enumerate(self._fields)}
        self._update_all = "SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(self._fields)))

    def read(self, key: str, field: int | None) -> object:
        request: dict[str, Any] = {"TableName": self._table, "Key": {KEY_COLUMN: {"S": key}},
                                   "ConsistentRead": self._consistent}
        if field is not None:
            request["ProjectionExpression"] = "#k, #f"
            request["ExpressionAttributeNames"] = {"#k": KEY_COLUMN, "#f": self._fields[field]}
        item = self._call(self._get_item, **request).get("Item")
        if item is None:
            raise LookupError(f"ycsb read: no record {key}")
        return item

    def update(self, key: str, field: int, value: str) -> object:
        try:
            self._call(self._update_item, TableName=self._table, Key={KEY_COLUMN: {"S": key}},
                       UpdateExpression="SET #f = :v", ConditionExpression="attribute_exists(#k)",
                       ExpressionAttributeNames={"#f": self._fields[field], "#k": KEY_COLUMN},
                       ExpressionAttributeValues={":v": {"S": value}})
        except self._not_found:
            raise LookupError(f"ycsb update: no record {key}") from None
        return 1

    def update_all(self, key: str, values: list[str]) -> object:
        try:
            self._call(self._update_item, TableName=self._table, Key={KEY_COLUMN: {"S": key}},
                       UpdateExpression=self._update_all, ConditionExpression="attribute_exists(#k)",
                       ExpressionAttributeNames={**self._names, "#k": KEY_COLUMN},
                       ExpressionAttributeValues={f":v{i}": {"S": value} for i, value in enumerate(values)})
        except self._not_found:
            raise LookupError(f"ycsb update: no record {key}") from None
        return 1

    def insert(self, key: str, values: Sequence[str]) -> object:
        return self._call(self._put_item, TableName=self._table, Item=_item(key, self._fields, values))

    def scan(self, start: str, count: int, field: int | None) -> object:
        request: dict[str, Any] = {"TableName": self._table, "Limit": count,
                                   "ExclusiveStartKey": {KEY_COLUMN: {"S": start}}}
        if field is not None:
            request["ProjectionExpression"] = "#k, #f"
            request["ExpressionAttributeNames"] = {"#k": KEY_COLUMN, "#f": self._fields[field]}
        return self._call(self._scan, **request).get("Items", [])

    def exists(self, key: str) -> bool:
        answer = self._call(self._get_item, TableName=self._table, Key={KEY_COLUMN: {"S": key}},
                            ProjectionExpression="#k", ExpressionAttributeNames={"#k": KEY_COLUMN})
        return "Item" in answer


@register_store("ycsb", "dynamodb")
class DynamoYcsbStore(YcsbStore):
    """The ycsb workload's table, load and operations on a DynamoDB-API session."""

    def check_options(self, options: Mapping[str, Any]) -> None:
        if options["batchsize"] > BATCH_WRITE_MAX:
            raise WorkloadError(f"workload option batchsize={options['batchsize']}: DynamoDB's BatchWriteItem takes "
                                f"at most {BATCH_WRITE_MAX} items; lower batchsize")
        super().check_options(options)

    def create_table(self, session: Any) -> None:
        ensure_table(self.workload, session)

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
        """PutItem for one row, BatchWriteItem of up to 25 for more (the session's own throttling retries)."""
        return inserter(self.workload, session)

    def connect(self, session: Any) -> YcsbConnection:
        return DynamoYcsbConnection(self.workload, session)
