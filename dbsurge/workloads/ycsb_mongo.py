"""The ycsb workload on MongoDB targets (MongoDB, DocumentDB, secantusdb), as YCSB's MongoDB binding.

One document per record, ``_id`` = key, one string field per field. The ``readpreference`` and ``writeconcern``
options (MongoDB's only) apply to the collection every operation and the load use. A missing record or an
update that matches nothing raises `LookupError`, as YCSB counts a NOT_FOUND status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pymongo import ReadPreference, WriteConcern

from dbsurge.workloads.loading import mongo_count_present, mongo_load
from dbsurge.workloads.stores import register_store
from dbsurge.workloads.ycsb_store import MakeRows, YcsbConnection, YcsbStore, YcsbWorkload

ID_INDEX = [("_id", 1)]
_READ_PREFERENCE_NAMES = {"primarypreferred": "PRIMARY_PREFERRED", "secondarypreferred": "SECONDARY_PREFERRED"}


@register_store("ycsb", "mongo")
class MongoYcsbStore(YcsbStore):
    """The ycsb workload's collection, load and operations on a MongoDB session."""

    def check_options(self, options: Mapping[str, Any]) -> None:
        """MongoDB honours readpreference and writeconcern: nothing to refuse."""

    def collection(self, session: Any) -> Any:
        """The collection on ``session``, with the readpreference and writeconcern options applied."""
        collection = session.db[self.workload.table]
        read_preference = self.workload.options["readpreference"]
        write_concern = self.workload.options["writeconcern"]
        if read_preference or write_concern:
            kwargs: dict[str, Any] = {}
            if read_preference:
                name = _READ_PREFERENCE_NAMES.get(read_preference, read_preference.upper())
                kwargs["read_preference"] = getattr(ReadPreference, name)
            if write_concern:
                kwargs["write_concern"] = WriteConcern(
                    w=write_concern if write_concern == "majority" else int(write_concern)
                )
            collection = collection.with_options(**kwargs)
        return collection

    def create_table(self, session: Any) -> None:
        """Nothing: MongoDB creates the collection with its first insert."""

    def drop_table(self, session: Any) -> None:
        session.db[self.workload.table].drop()

    def table_has_rows(self, session: Any) -> bool:
        return session.db[self.workload.table].find_one({}, {"_id": 1}) is not None

    def count_present(self, session: Any, keys: Sequence[str]) -> int:
        return mongo_count_present(session.db[self.workload.table], keys)

    def _document(self, row: tuple) -> dict[str, str]:
        doc = {"_id": row[0]}
        doc.update(zip(self.workload.fields, row[1:]))
        return doc

    def load(self, session: Any, *, make: MakeRows, start: int, stop: int, batch_size: int, progress: Any) -> int:
        workload, document = self.workload, self._document

        def docs(rng: Any, first: int, last: int) -> list[dict[str, str]]:
            return [document(row) for row in make(rng, first, last)]

        return mongo_load(self.collection(session), label=workload.name, seed=workload.options["seed"], make=docs,
                          start=start, stop=stop, batch_size=batch_size, progress=progress)

    def batch_inserter(self, session: Any, batch_size: int) -> Callable[[list[tuple]], None]:
        """``insert_one`` for one row, unordered ``insert_many`` for more, honouring the writeconcern option."""
        collection, document = self.collection(session), self._document

        def insert(rows: list[tuple]) -> None:
            docs = [document(row) for row in rows]
            if len(docs) == 1:
                collection.insert_one(docs[0])
            else:
                collection.insert_many(docs, ordered=False)

        return insert

    def connect(self, session: Any) -> YcsbConnection:
        return MongoYcsbConnection(self.workload, self.collection(session))


class MongoYcsbConnection(YcsbConnection):
    """One client's calls on a MongoDB collection (with the workload's readpreference and writeconcern)."""

    __slots__ = ("_fields", "_find", "_find_one", "_insert_one", "_projection", "_update_one")

    def __init__(self, workload: YcsbWorkload, collection: Any) -> None:
        self._fields = workload.fields
        self._find_one, self._update_one, self._insert_one, self._find = (
            collection.find_one,
            collection.update_one,
            collection.insert_one,
            collection.find,
        )
        self._projection = [{field: 1} for field in self._fields]

    def read(self, key: str, field: int | None) -> object:
        find_one = self._find_one
        doc = find_one({"_id": key}) if field is None else find_one({"_id": key}, self._projection[field])
        if doc is None:
            raise LookupError(f"ycsb read: no record {key}")
        return doc

    def update(self, key: str, field: int, value: str) -> object:
        result = self._update_one({"_id": key}, {"$set": {self._fields[field]: value}})
        if result.matched_count != 1:
            raise LookupError(f"ycsb update: no record {key}")
        return result.modified_count

    def update_all(self, key: str, values: list[str]) -> object:
        result = self._update_one({"_id": key}, {"$set": dict(zip(self._fields, values))})
        if result.matched_count != 1:
            raise LookupError(f"ycsb update: no record {key}")
        return result.modified_count

    def insert(self, key: str, values: Sequence[str]) -> object:
        doc = {"_id": key}
        doc.update(zip(self._fields, values))
        return self._insert_one(doc)

    def scan(self, start: str, count: int, field: int | None) -> object:
        projection = None if field is None else self._projection[field]
        # The hint makes secantusdb walk the _id index (it plans range + sort as a collection scan);
        # MongoDB and DocumentDB pick that index anyway.
        return list(self._find({"_id": {"$gte": start}}, projection).sort("_id", 1).hint(ID_INDEX).limit(count))

    def exists(self, key: str) -> bool:
        return self._find_one({"_id": key}, {"_id": 1}) is not None
