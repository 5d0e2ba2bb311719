"""ycsb (study 002): YCSB's CoreWorkload on ``usertable``, with YCSB's own property names.

Keys are ``user`` + FNV-64 hash of the record number (``insertorder=hashed``, YCSB's default, so
record 0 is ``user6284781860667377211`` as in YCSB) or ``user`` + the zero-padded number
(``insertorder=ordered``). Each record has ``fieldcount`` fields ``field0..`` of ``fieldlength``
characters (random hex; YCSB uses random printable bytes).

The workload is the same on every database; what one database needs (schema, load, presence checks and the
per-client operations) is its `YcsbStore`, looked up once by target kind when the workload is made
(`dbsurge.workloads.stores`): ``ycsb_postgres.py`` (a table, as YCSB's JDBC binding), ``ycsb_mongo.py`` (one
document per record), ``ycsb_dynamodb.py`` (one item per record) and ``ycsb_cql.py`` (as YCSB's cassandra binding).

Operations: ``read`` (all fields, or one with ``readallfields=false``), ``update`` (one random
field, or all with ``writeallfields=true``), ``insert``, ``scan`` and ``readmodifywrite``; the
default weights come from the ``*proportion`` properties (workload A: 50% read, 50% update).

Differences from YCSB, all because clients here do not share a counter across machines:

- ``insert`` keys: each client owns a disjoint range of record numbers, ``recordcount +
  (client_seed % 9e9) * 10**9 + n``, so concurrent clients never collide. A client whose range
  already holds records from an earlier run with the same seed finds the first free number with
  a few point reads (a galloping search) before its first operation.
- ``requestdistribution=latest`` skews towards the client's own newest insert (YCSB: the newest
  insert of all clients); uniform, zipfian and hotspot draw over the ``recordcount`` loaded
  records, like YCSB (whose zipfian also reaches the keys it expects to be inserted).
- ``operationcount`` is accepted and recorded; how long a run lasts is the engine's stage plan.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from dbsurge.base.errors import WorkloadError
from dbsurge.distributions import (
    HotspotGenerator,
    ScrambledZipfianGenerator,
    SkewedLatestGenerator,
    UniformGenerator,
    fnvhash64,
)
from dbsurge.workloads.base import (
    LoadProgress,
    Option,
    Workload,
    boolean,
    choice,
    fraction,
    integer,
    open_unit_interval,
    spread_sample,
    text,
)
from dbsurge.workloads.stores import make_store
from dbsurge.workloads.ycsb_keys import INSERT_SLOT, KEY_COLUMN, ClientDraws, record_values
from dbsurge.workloads.ycsb_store import YcsbStore

__all__ = ["KEY_COLUMN", "YcsbWorkload"]

KEY_PREFIX = "user"
INSERT_SLOTS = 9 * 10**9  # client ranges: recordcount + slot * INSERT_SLOT stays below 2**63
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_READ_PREFERENCES = ("primary", "primarypreferred", "secondary", "secondarypreferred", "nearest")
OPERATIONS = ("read", "update", "insert", "scan", "readmodifywrite")


def _identifier(value: str) -> str:
    if not _IDENTIFIER.match(value):
        raise ValueError("expected a name of letters, digits and underscores")
    return value


def _zeropadding(value: str) -> str | int:
    if value.strip().lower() == "auto":
        return "auto"
    return integer(1, 64)(value)


def _writeconcern(value: str) -> str:
    value = value.strip().lower()
    if value and value != "majority" and not (value.isascii() and value.isdigit()):
        raise ValueError("expected a number of nodes (0, 1, 2...) or majority")
    return value


def _insertcount(value: str) -> int | None:
    return None if value.strip() == "" else integer(0)(value)


#: The longest field, in characters: 1 MiB (YCSB's default is 100). A record is generated whole in memory, and
#: 200,000,000 ended in a raw OverflowError from the random generator.
MAX_FIELD_LENGTH = 1 << 20
#: The largest record, fieldcount x fieldlength: 16 MiB, MongoDB's document limit (DynamoDB's item is 400 KB).
MAX_RECORD_LENGTH = 16 << 20


class YcsbWorkload(Workload):
    """YCSB's CoreWorkload (workloads A-F) on PostgreSQL, MongoDB, DynamoDB-API and CQL targets (study 002)."""

    name = "ycsb"  # its target kinds: those with a `YcsbStore` (``ycsb_<database>.py``)
    OPTIONS: ClassVar[dict[str, Option]] = {
        "recordcount": Option(1000, integer(1), "records loaded (and drawn from by read/update/scan)"),
        "operationcount": Option(0, integer(0), "YCSB's operation count; recorded only (the stage plan sets the run)"),
        "readproportion": Option(0.5, fraction, "weight of read"),
        "updateproportion": Option(0.5, fraction, "weight of update"),
        "insertproportion": Option(0.0, fraction, "weight of insert"),
        "scanproportion": Option(0.0, fraction, "weight of scan"),
        "readmodifywriteproportion": Option(0.0, fraction, "weight of readmodifywrite"),
        "requestdistribution": Option(
            "uniform", choice("uniform", "zipfian", "hotspot", "latest"), "which records operations touch"
        ),
        "zipfianconstant": Option(0.99, open_unit_interval, "skew of zipfian and latest"),
        "hotspotdatafraction": Option(0.2, fraction, "hotspot: share of the records that are hot"),
        "hotspotopnfraction": Option(0.8, fraction, "hotspot: share of the operations on hot records"),
        "fieldcount": Option(10, integer(1, 1000), "fields per record"),
        "fieldlength": Option(100, integer(1, MAX_FIELD_LENGTH), "characters per field (at most 1 MiB, and a "
                                                                 "record's fields at most 16 MiB together)"),
        "fieldnameprefix": Option("field", _identifier, "field names are prefix + index"),
        "readallfields": Option(True, boolean, "read returns every field (else one random field)"),
        "writeallfields": Option(False, boolean, "update writes every field (else one random field)"),
        "insertorder": Option("hashed", choice("hashed", "ordered"), "keys: user + FNV hash, or user + number"),
        "zeropadding": Option("auto", _zeropadding, "key digits (auto: 1 when hashed as YCSB, 20 when ordered)"),
        "insertstart": Option(0, integer(0), "load: first record number (split a load between loaders)"),
        "insertcount": Option(None, _insertcount, "load: records to load (default recordcount - insertstart)"),
        "maxscanlength": Option(1000, integer(1), "scan: most records per scan"),
        "scanlengthdistribution": Option("uniform", choice("uniform", "zipfian"), "scan: length distribution"),
        "batchsize": Option(1, integer(1, 1000), "load: records per insert (1: unbatched, as YCSB's default)"),
        "table": Option("usertable", _identifier, "table or collection name"),
        "readpreference": Option("", choice(*_READ_PREFERENCES), "MongoDB read preference (default: the URI's)"),
        "writeconcern": Option("", _writeconcern, "MongoDB write concern w (default: the URI's)"),
        "keyspace": Option("ycsb", _identifier, "CQL targets: the keyspace (YCSB's cassandra.keyspace)"),
        "replicationfactor": Option(1, integer(1, 100), "CQL targets: the keyspace's replication factor"),
        "replicationstrategy": Option("SimpleStrategy", choice("simplestrategy", "networktopologystrategy"),
                                      "CQL targets: the keyspace's replication class"),
        "seed": Option(42, integer(), "seed of the loaded data"),
        "tracekeys": Option("", text, "tests and debugging: append every requested record number (int64) to "
                                      "<value>-<pid>.bin"),
    }

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        record = values["fieldcount"] * values["fieldlength"]
        if record > MAX_RECORD_LENGTH:
            raise WorkloadError(f"workload options fieldcount x fieldlength ({values['fieldcount']} x "
                                f"{values['fieldlength']}) make records of {record:,} characters, more than "
                                f"{MAX_RECORD_LENGTH:,} (16 MiB, MongoDB's largest document)")

    def __init__(self, target: Any, options: dict[str, object] | None = None) -> None:
        super().__init__(target, options)
        opts = self.options
        self.recordcount: int = opts["recordcount"]
        if opts["insertcount"] is None:
            opts["insertcount"] = max(0, self.recordcount - opts["insertstart"])
        if opts["insertstart"] + opts["insertcount"] > self.recordcount:
            raise WorkloadError(
                f"workload option insertstart + insertcount ({opts['insertstart']} + {opts['insertcount']})"
                f" is above recordcount={self.recordcount}"
            )
        # the database's part, looked up once: the workload itself never asks which database it drives
        self.store: YcsbStore = make_store(self)
        self.store.check_options(opts)
        if not self.operations:
            raise WorkloadError("workload ycsb: every *proportion option is 0, so there is nothing to run")
        self.ordered = opts["insertorder"] == "ordered"
        padding = opts["zeropadding"]
        self.zeropadding: int = (20 if self.ordered else 1) if padding == "auto" else padding
        self.fields = [f"{opts['fieldnameprefix']}{i}" for i in range(opts["fieldcount"])]
        self.table: str = opts["table"]
        # choice() lowercases; CQL wants the class name as Cassandra spells it
        opts["replicationstrategy"] = {"simplestrategy": "SimpleStrategy",
                                       "networktopologystrategy": "NetworkTopologyStrategy"}.get(
            str(opts["replicationstrategy"]).lower(), opts["replicationstrategy"])

    def default_weights(self) -> dict[str, float]:
        opts = self.options
        weights = {op: opts[f"{op}proportion"] for op in OPERATIONS}
        return {op: w for op, w in weights.items() if w > 0}

    # ---- keys and request distribution -------------------------------------------------------

    def key_for(self, keynum: int) -> str:
        """The key of record number ``keynum``, as YCSB's ``CoreWorkload.buildKeyName``.

        >>> from types import SimpleNamespace
        >>> YcsbWorkload(SimpleNamespace(kind="mongo")).key_for(0)
        'user6284781860667377211'
        """
        if not self.ordered:
            keynum = fnvhash64(keynum)
        return KEY_PREFIX + str(keynum).zfill(self.zeropadding)

    def request_generator(self, rng: random.Random, count: Callable[[], int] | None = None) -> Any:
        """The generator of record numbers for read/update/scan: ``.next()`` in ``[0, recordcount)``.

        ``count`` (latest only) returns the current number of records the client can see.
        """
        opts = self.options
        last = self.recordcount - 1
        distribution = opts["requestdistribution"]
        if distribution == "uniform":
            return UniformGenerator(rng, 0, last)
        if distribution == "zipfian":
            return ScrambledZipfianGenerator(rng, 0, last, opts["zipfianconstant"])
        if distribution == "hotspot":
            return HotspotGenerator(rng, 0, last, opts["hotspotdatafraction"], opts["hotspotopnfraction"])
        return SkewedLatestGenerator(rng, count or (lambda: self.recordcount), opts["zipfianconstant"])

    def insert_base(self, client_seed: int) -> int:
        """The first record number of the insert range owned by the client with ``client_seed``."""
        return self.recordcount + (client_seed % INSERT_SLOTS) * INSERT_SLOT

    def record(self, rng: random.Random) -> list[str]:
        """The field values of one record, drawn from ``rng`` (as the load and the insert operation write them)."""
        return record_values(rng, len(self.fields), self.options["fieldlength"])

    # ---- data -------------------------------------------------------------------------------

    def _load_range(self) -> tuple[int, int]:
        start = self.options["insertstart"]
        return start, start + self.options["insertcount"]

    def has_data(self) -> bool:
        session = self._session()
        try:
            return self._data_present(session)
        finally:
            session.close()

    def check_no_load(self) -> None:
        """The store's schema is there (`YcsbStore.check_no_load`): a CQL keyspace is made only by the load."""
        session = self._session()
        try:
            self.store.check_no_load(session)
        finally:
            session.close()

    def _data_present(self, session: Any) -> bool:
        keys = [self.key_for(i) for i in spread_sample(*self._load_range())]
        return self.store.count_present(session, keys) == len(keys)

    def load(self, progress: bool = True) -> int:
        """Create ``usertable`` if missing, insert the missing records in ``batchsize`` batches; returns insertcount."""
        start, stop = self._load_range()
        meter = LoadProgress(self.name, stop - start, enabled=progress)
        batch = self.options["batchsize"]
        store = self.store
        session = self._session()
        try:
            store.create_table(session)
            self.last_load_inserted = 0
            if self._data_present(session):  # a complete earlier load: nothing to send
                return stop - start
            inserted = store.load(session, make=self.rows, start=start, stop=stop, batch_size=batch, progress=meter)
        finally:
            session.close()
        meter.finish()
        self.last_load_inserted = inserted
        return stop - start

    def rows(self, rng: random.Random, first: int, last: int) -> list[tuple[str, ...]]:
        """The rows (key, then the fields) of records ``first..last-1``, their values drawn from ``rng``."""
        return [(self.key_for(i), *self.record(rng)) for i in range(first, last)]

    # ---- operations -------------------------------------------------------------------------

    def new_client(self, session: Any, seed: int) -> dict[str, Callable[[], object]]:
        """One user's operations: keys, fields and values drawn here (`ClientDraws`), each operation one call of
        the store's connection (`YcsbConnection`), readmodifywrite two."""
        draws = ClientDraws(self, seed)
        db = self.store.connect(session)
        read, update, update_all, insert, scan = db.read, db.update, db.update_all, db.insert, db.scan
        next_key, next_insert_key, record = draws.next_key, draws.next_insert_key, draws.record
        value, field_index, scan_length = draws.value, draws.field_index, draws.scan_length
        read_all, write_all, fieldcount = self.options["readallfields"], self.options["writeallfields"], len(self.fields)

        def read_op() -> object:
            return read(next_key(), None if read_all else field_index())

        def update_key(key: str) -> object:
            if write_all:
                return update_all(key, [value() for _ in range(fieldcount)])
            return update(key, field_index(), value())

        def update_op() -> object:
            key = next_key()
            if write_all:
                return update_all(key, [value() for _ in range(fieldcount)])
            return update(key, field_index(), value())

        def insert_op() -> object:
            key = next_insert_key()
            insert(key, record())
            return key

        def scan_op() -> object:
            field = None if read_all else field_index()
            return scan(next_key(), scan_length(), field)

        def readmodifywrite() -> object:
            key = next_key()
            read(key, None if read_all else field_index())
            return update_key(key)

        if db.resumes_inserts:
            draws.resume_inserts(db.exists)
        return {"read": read_op, "update": update_op, "insert": insert_op, "scan": scan_op,
                "readmodifywrite": readmodifywrite}
