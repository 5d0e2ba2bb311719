"""Workloads against real servers: embedded PostgreSQL and the secantusdb MongoDB-wire server.

The servers are the session's (tests/conftest.py: `pg_server`, `mongo_server`), the targets the real
bindings (`dbsurge.targets.open_target`). This module works in a database of its own on both
servers, so its tables (products, usertable, documents...) never meet another test's. Record
counts are small to keep the file fast.
"""

from __future__ import annotations

import io
import random
from collections import Counter
from types import SimpleNamespace
from urllib.parse import urlsplit, urlunsplit

import bson
import psycopg
import pymongo
import pytest

from dbsurge.base.errors import WorkloadError
from dbsurge.targets import open_target
from dbsurge.workloads import get_workload, parse_workload_options
from dbsurge.workloads.base import LoadProgress
from dbsurge.workloads.documents import match_count
from dbsurge.workloads.orders import product_cache, product_key, product_params

DB_NAME = "dbsurge_workload_tests"


# ---- targets: the real bindings on the session's embedded servers (tests/conftest.py) ---------


def _with_database(uri: str, name: str) -> str:
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@pytest.fixture(scope="module")
def pg_db_uri(pg_server) -> str:
    """A database of this module's own on the session's PostgreSQL."""
    with psycopg.connect(pg_server.uri, autocommit=True) as conn:
        conn.execute(f"drop database if exists {DB_NAME}")
        conn.execute(f"create database {DB_NAME}")
    return _with_database(pg_server.uri, DB_NAME)


@pytest.fixture(scope="module")
def mongo_db_uri(mongo_server) -> str:
    """A database of this module's own on the session's MongoDB-wire server."""
    with pymongo.MongoClient(mongo_server.uri) as client:
        client.drop_database(DB_NAME)
    return _with_database(mongo_server.uri, DB_NAME)


@pytest.fixture(params=["postgres", "mongo"])
def target(request):
    return open_target(request.getfixturevalue("pg_db_uri" if request.param == "postgres" else "mongo_db_uri"), {})


@pytest.fixture
def pg_target(pg_db_uri):
    return open_target(pg_db_uri, {})


@pytest.fixture
def mongo_target(mongo_db_uri):
    return open_target(mongo_db_uri, {})


@pytest.fixture
def session_of():
    sessions = []

    def connect(target):
        sessions.append(target.connect())
        return sessions[-1]

    yield connect
    for session in sessions:
        session.close()


def _rows(session, kind: str, table: str, order: str = "id") -> list:
    if kind == "postgres":
        return session.conn.execute(f"select * from {table} order by {order}").fetchall()
    return list(session.db[table].find().sort("_id", 1))


def _drop(session, kind: str, table: str) -> None:
    if kind == "postgres":
        session.conn.execute(f"drop table if exists {table}")
    else:
        session.db.drop_collection(table)


# ---- names and options ----------------------------------------------------------------------


def test_parse_workload_options():
    assert parse_workload_options(["a=1", "b = x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    for bad in ("recordcount", "=5", ""):
        with pytest.raises(WorkloadError) as info:
            parse_workload_options([bad])
        assert str(info.value) == f"bad --workload-option '{bad}': expected key=value"


def test_unknown_workload_lists_the_known_ones(pg_target):
    with pytest.raises(WorkloadError) as info:
        get_workload("tpcc", pg_target, {})
    assert str(info.value) == "unknown workload 'tpcc': known workloads are documents, orders, ycsb"


@pytest.mark.parametrize(
    ("name", "options", "fragment"),
    [
        ("ycsb", {"recordcont": "10"}, "unknown option 'recordcont' for workload ycsb (did you mean 'recordcount'?)"),
        ("ycsb", {"readproportion": "1.5"}, "readproportion='1.5': expected a number between 0 and 1"),
        ("ycsb", {"requestdistribution": "pareto"}, "requestdistribution='pareto': expected one of uniform|zipfian"),
        ("ycsb", {"recordcount": "many"}, "recordcount='many': expected an integer"),
        ("ycsb", {"readproportion": "0", "updateproportion": "0"}, "nothing to run"),
        ("ycsb", {"readpreference": "nearest"}, "apply to MongoDB targets only"),
        ("ycsb", {"insertstart": "900", "insertcount": "200"}, "insertstart + insertcount (900 + 200)"),
        ("orders", {"items_min": "6"}, "items_min=6 is above items_max=5"),
        ("documents", {"read_mode": "warm"}, "read_mode='warm': expected one of all|hot"),
    ],
)
def test_bad_options_fail_in_one_line(pg_target, name, options, fragment):
    with pytest.raises(WorkloadError) as info:
        get_workload(name, pg_target, options)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_orders_needs_postgres(mongo_target):
    with pytest.raises(WorkloadError, match="orders needs a PostgreSQL target"):
        get_workload("orders", mongo_target, {})


def test_options_and_weights(pg_target):
    ycsb = get_workload("ycsb", pg_target, {"RecordCount": 5000, "insertproportion": "0.1", "readallfields": "no"})
    assert ycsb.options["recordcount"] == 5000 and ycsb.options["readallfields"] is False
    assert ycsb.operations == {"read": 0.5, "update": 0.5, "insert": 0.1}
    assert get_workload("orders", pg_target, {}).operations == {"product_lookup": 0.5, "order_create": 0.5}
    assert get_workload("documents", pg_target, {}).operations == {"read_by_id": 1.0}
    assert set(get_workload("documents", pg_target, {"scan_proportion": "0.01"}).operations) == {
        "read_by_id",
        "full_scan",
    }


def test_ycsb_keys(pg_target):
    hashed = get_workload("ycsb", pg_target, {})
    assert hashed.key_for(0) == "user6284781860667377211"
    ordered = get_workload("ycsb", pg_target, {"insertorder": "ordered"})
    assert ordered.key_for(42) == "user" + "42".zfill(20)
    assert get_workload("ycsb", pg_target, {"insertorder": "ordered", "zeropadding": "1"}).key_for(42) == "user42"
    keys = sorted(ordered.key_for(i) for i in (3, 20, 100, 7))
    assert keys == [ordered.key_for(i) for i in (3, 7, 20, 100)]  # padded keys sort in record order


def test_ycsb_hotspot_request_generator(pg_target):
    workload = get_workload(
        "ycsb",
        pg_target,
        {
            "recordcount": 100_000,
            "requestdistribution": "hotspot",
            "hotspotdatafraction": 0.013,
            "hotspotopnfraction": 0.95,
        },
    )
    gen = workload.request_generator(random.Random(1))
    draws = [gen.next() for _ in range(50_000)]
    hot = sum(d < 1300 for d in draws) / len(draws)
    assert abs(hot - 0.95) < 0.01
    assert max(draws) < 100_000


def test_load_progress_lines():
    now = [0.0]
    out = io.StringIO()
    progress = LoadProgress("ycsb", 100_000, stream=out, clock=lambda: now[0])
    progress.advance(10_000)  # t=0: no line yet
    now[0] = 2.5
    progress.advance(30_000)
    now[0] = 3.0
    progress.advance(60_000)
    progress.finish()
    assert out.getvalue().splitlines() == [
        "loading ycsb: 40000/100000 rows (40%) 16000 rows/s",
        "loading ycsb: 100000/100000 rows (100%) 33333 rows/s",
    ]
    quiet = io.StringIO()
    short = LoadProgress("ycsb", 10, stream=quiet, clock=lambda: 0.0)
    short.advance(10)
    short.finish()
    assert quiet.getvalue() == ""


# ---- documents ------------------------------------------------------------------------------


def test_documents_load_is_idempotent_and_deterministic(target, session_of):
    workload = get_workload("documents", target, {"documents": 2500, "seed": 7})
    session = session_of(target)
    _drop(session, target.kind, "documents")
    assert not workload.has_data()
    assert workload.load(progress=False) == 2500
    assert workload.last_load_inserted == 2500
    assert workload.has_data()
    assert workload.load(progress=False) == 2500
    assert workload.last_load_inserted == 0
    first = _rows(session, target.kind, "documents")
    assert len(first) == 2500
    # Same seed, fresh load: the same bytes.
    _drop(session, target.kind, "documents")
    workload.load(progress=False)
    assert workload.last_load_inserted == 2500
    assert _rows(session, target.kind, "documents") == first
    # A partial load is completed: delete some rows, load again.
    if target.kind == "postgres":
        session.conn.execute("delete from documents where id >= 2000 or id % 7 = 0")
    else:
        session.db.documents.delete_many({"$or": [{"_id": {"$gte": 2000}}, {"_id": {"$mod": [7, 0]}}]})
    assert workload.load(progress=False) == 2500
    assert workload.last_load_inserted == 500 + len(range(0, 2000, 7))
    assert _rows(session, target.kind, "documents") == first
    # About 250 bytes a document, 1% match.
    categories = Counter(row[1] if target.kind == "postgres" else row["category"] for row in first)
    assert categories["match"] == match_count(2500) == 25
    if target.kind == "mongo":
        sizes = [len(bson.encode(doc)) for doc in first[:100]]
        assert 240 <= min(sizes) <= max(sizes) <= 260


def test_documents_operations_and_scan_batches(target, session_of):
    workload = get_workload("documents", target, {"documents": 2500, "seed": 7, "scan_batch_size": 7})
    workload.load(progress=False)
    session = session_of(target)
    ops = workload.new_client(session, seed=1)
    assert set(ops) == {"read_by_id", "full_scan"}
    for _ in range(20):
        assert ops["read_by_id"]() is not None
    assert ops["full_scan"]() == 25
    batches = []
    total = workload.scan_batches(session, lambda index, docs, elapsed_ns: batches.append((index, docs, elapsed_ns)))
    assert total == 25 == sum(docs for _, docs, _ in batches)
    assert [index for index, _, _ in batches] == list(range(4))
    assert [docs for _, docs, _ in batches] == [7, 7, 7, 4]
    assert all(elapsed > 0 for _, _, elapsed in batches)


def test_documents_hot_reads_stay_in_the_hot_set(target, session_of):
    workload = get_workload("documents", target, {"documents": 2500, "seed": 7, "read_mode": "hot", "hot_set": 10})
    workload.load(progress=False)
    read = workload.new_client(session_of(target), seed=3)["read_by_id"]
    ids = {row[0] if target.kind == "postgres" else row["_id"] for row in (read() for _ in range(200))}
    assert ids <= set(range(10)) and len(ids) > 5


def test_documents_store_reads_a_chosen_id_and_the_servers_cache_counters(target, session_of):
    """What the cache scenarios ask of a store, on each real server, without asking which database it is."""
    from dbsurge.scenarios.documents_reads import server_cache_counters

    workload = get_workload("documents", target, {"documents": 300, "seed": 7})
    workload.load(progress=False)
    session = session_of(target)
    read = workload.store.id_reader(session)
    row = read(123)
    assert (row[0] if target.kind == "postgres" else row["_id"]) == 123
    with pytest.raises(LookupError, match="1000000000"):
        read(10**9)
    before = server_cache_counters(workload)
    for doc_id in range(0, 300, 3):
        read(doc_id)
    workload.store.publish_counters(session)
    after = server_cache_counters(workload)
    if target.kind == "postgres":  # pg_statio_user_tables: the hundred reads are hits (or reads) of the table
        assert after["hit"] + after["read"] >= before["hit"] + before["read"] + 100, (before, after)
    else:  # secantusdb has no WiredTiger section: no counters, and the table's cells stay blank
        assert before is None and after is None


# ---- orders ---------------------------------------------------------------------------------


def test_orders_load_and_operations(pg_target, session_of):
    workload = get_workload("orders", pg_target, {"products": 300, "seed": 5})
    assert workload.load(progress=False) == 300
    assert workload.last_load_inserted == 300
    assert workload.load(progress=False) == 300
    assert workload.last_load_inserted == 0
    session = session_of(pg_target)
    conn = session.conn
    assert conn.execute("select count(*) from products").fetchone()[0] == 300
    # Clients compute product keys without asking the database.
    pid, price = product_key(5, 123)
    assert conn.execute("select sku, price from products where id = %s", (pid,)).fetchone() == ("SKU-00000123", price)

    ops = workload.new_client(session, seed=11)
    for _ in range(20):
        row = ops["product_lookup"]()
        assert row[1].startswith("SKU-")
    stock_before = dict(conn.execute("select id, stock from products").fetchall())
    order_ids = [ops["order_create"]() for _ in range(30)]
    assert conn.execute("select count(*) from orders").fetchone()[0] >= 30
    items = conn.execute(
        "select order_id, product_id, qty, price from order_items where order_id = any(%s)", (order_ids,)
    ).fetchall()
    per_order = Counter(order_id for order_id, _, _, _ in items)
    assert set(per_order) == set(order_ids)
    assert all(1 <= n <= 5 for n in per_order.values())
    assert len(set(per_order.values())) > 1  # the item count varies
    sold = Counter()
    for _, product_id, qty, _ in items:
        sold[product_id] += qty
    stock_after = dict(conn.execute("select id, stock from products").fetchall())
    assert {p: stock_before[p] - stock_after[p] for p in sold} == dict(sold)
    assert sum(stock_before.values()) - sum(stock_after.values()) == sum(sold.values())
    totals = dict(conn.execute("select id, total from orders where id = any(%s)", (order_ids,)).fetchall())
    for order_id in order_ids:
        assert totals[order_id] == sum(q * p for o, _, q, p in items if o == order_id)


def test_orders_same_seed_same_products(pg_target, session_of):
    session = session_of(pg_target)
    workload = get_workload("orders", pg_target, {"products": 300, "seed": 5})
    workload.load(progress=False)
    # Stock aside (orders decrement it), a reload gives the same rows.
    before = [row[:4] for row in _rows(session, "postgres", "products")]
    session.conn.execute("delete from products")
    workload.load(progress=False)
    assert workload.last_load_inserted == 300
    after = _rows(session, "postgres", "products")
    assert {row[4] for row in after} == {1_000_000}
    assert [row[:4] for row in after] == before
    other = get_workload("orders", pg_target, {"products": 300, "seed": 6})
    assert not other.has_data()  # other seed, other product keys


# ---- ycsb -----------------------------------------------------------------------------------


def test_ycsb_load_idempotent_deterministic_batched(target, session_of):
    session = session_of(target)
    options = {"recordcount": 600, "seed": 3, "fieldlength": 11}
    unbatched = get_workload("ycsb", target, {**options, "table": "ut_unbatched"})
    batched = get_workload("ycsb", target, {**options, "table": "ut_batched", "batchsize": 100})
    halves = [
        get_workload("ycsb", target, {**options, "table": "ut_split", "insertstart": s, "insertcount": 300})
        for s in (0, 300)
    ]
    for table in ("ut_unbatched", "ut_batched", "ut_split"):
        _drop(session, target.kind, table)
    assert unbatched.load(progress=False) == 600
    assert unbatched.last_load_inserted == 600
    assert unbatched.load(progress=False) == 600
    assert unbatched.last_load_inserted == 0
    batched.load(progress=False)
    assert batched.last_load_inserted == 600
    assert not get_workload("ycsb", target, {**options, "table": "ut_split"}).has_data()
    assert [half.load(progress=False) for half in halves] == [300, 300]
    assert [half.last_load_inserted for half in halves] == [300, 300]
    order = "ycsb_key"
    rows = [_rows(session, target.kind, t, order) for t in ("ut_unbatched", "ut_batched", "ut_split")]
    assert rows[0] == rows[1] == rows[2]
    assert len(rows[0]) == 600
    first = rows[0][0]
    fields = list(first[1:]) if target.kind == "postgres" else [first[f"field{i}"] for i in range(10)]
    assert len(fields) == 10 and all(len(value) == 11 for value in fields)
    other_seed = get_workload("ycsb", target, {**options, "table": "ut_seed", "seed": 4})
    _drop(session, target.kind, "ut_seed")
    other_seed.load(progress=False)
    assert _rows(session, target.kind, "ut_seed", order) != rows[0]


def test_ycsb_operations(target, session_of):
    options = {
        "recordcount": 500,
        "table": "ut_ops",
        "readproportion": 0.2,
        "updateproportion": 0.2,
        "insertproportion": 0.2,
        "scanproportion": 0.2,
        "readmodifywriteproportion": 0.2,
        "maxscanlength": 5,
    }
    workload = get_workload("ycsb", target, options)
    session = session_of(target)
    _drop(session, target.kind, "ut_ops")
    workload.load(progress=False)
    ops = workload.new_client(session, seed=2)
    assert set(ops) == {"read", "update", "insert", "scan", "readmodifywrite"}
    for _ in range(10):
        for op in ops.values():
            op()
    row = ops["read"]()
    assert len(row) == 11  # key + 10 fields
    assert 1 <= len(ops["scan"]()) <= 5
    inserted = [ops["insert"]() for _ in range(3)]
    assert inserted == [workload.key_for(workload.insert_base(2) + n) for n in range(10, 13)]
    # A second client with the same seed (a re-run) continues after the records already there.
    again = workload.new_client(session_of(target), seed=2)
    assert again["insert"]() == workload.key_for(workload.insert_base(2) + 13)
    # Another seed has its own range.
    assert workload.new_client(session, seed=3)["insert"]() == workload.key_for(workload.insert_base(3))
    count = (
        session.conn.execute("select count(*) from ut_ops").fetchone()[0]
        if target.kind == "postgres"
        else session.db.ut_ops.count_documents({})
    )
    assert count == 500 + 14 + 1


def test_ycsb_update_changes_one_field_and_missing_key_fails(target, session_of):
    workload = get_workload("ycsb", target, {"recordcount": 1, "table": "ut_one", "readproportion": 0})
    session = session_of(target)
    _drop(session, target.kind, "ut_one")
    workload.load(progress=False)
    before = _rows(session, target.kind, "ut_one", "ycsb_key")[0]
    workload.new_client(session, seed=1)["update"]()
    after = _rows(session, target.kind, "ut_one", "ycsb_key")[0]
    changed = [
        a != b
        for a, b in zip(
            before if target.kind == "postgres" else before.values(),
            after if target.kind == "postgres" else after.values(),
        )
    ]
    assert sum(changed) == 1
    # A workload that believes in more records than were loaded fails on the missing ones.
    bigger = get_workload("ycsb", target, {"recordcount": 1000, "table": "ut_one"})
    read = bigger.new_client(session, seed=1)["read"]
    with pytest.raises(LookupError, match="ycsb read: no record"):
        for _ in range(50):
            read()


def test_ycsb_latest_reads_the_clients_newest_inserts(target, session_of):
    workload = get_workload(
        "ycsb",
        target,
        {"recordcount": 200, "table": "ut_latest", "requestdistribution": "latest", "insertproportion": 0.5},
    )
    session = session_of(target)
    _drop(session, target.kind, "ut_latest")
    workload.load(progress=False)
    ops = workload.new_client(session, seed=9)
    newest = [ops["insert"]() for _ in range(50)][-1]
    keys = Counter(row[0] if target.kind == "postgres" else row["_id"] for row in (ops["read"]() for _ in range(300)))
    assert keys.most_common(1)[0][0] == newest


def test_ycsb_dsql_flavor_writes_through_run_transaction(pg_target, session_of):
    # Same server, but the workload believes it drives DSQL: writes go through run_transaction.
    dsql_like = SimpleNamespace(kind="postgres", flavor="dsql", optimistic_writes=True, connect=pg_target.connect)
    workload = get_workload("ycsb", dsql_like, {"recordcount": 50, "table": "ut_dsql", "insertproportion": 0.1})
    session = session_of(pg_target)
    _drop(session, "postgres", "ut_dsql")
    assert workload.load(progress=False) == 50
    calls = []
    original = session.run_transaction

    def counting(fn):
        calls.append(fn)
        return original(fn)

    session.run_transaction = counting
    ops = workload.new_client(session, seed=1)
    assert ops["update"]() == 1
    ops["insert"]()
    ops["read"]()
    assert len(calls) == 2


def test_ycsb_mongo_read_preference_and_write_concern(mongo_target, session_of):
    target = mongo_target
    options = {"recordcount": 20, "table": "ut_prefs", "readpreference": "secondaryPreferred", "writeconcern": "1"}
    workload = get_workload("ycsb", target, options)
    workload.load(progress=False)
    session = session_of(target)
    collection = workload.store.collection(session)
    assert collection.read_preference.mongos_mode == "secondaryPreferred"
    assert collection.write_concern.document == {"w": 1}
    ops = workload.new_client(session, seed=1)
    ops["read"]()
    ops["update"]()


def test_product_cache_keeps_one_key_per_slot_and_is_always_right():
    """A direct-mapped table: index i lives in slot i mod slots; a colliding index replaces it, never aliases it."""
    product = product_cache(5, slots=4)
    first = product(1)
    assert first == product_params(5, 1) and product(1) is first  # kept
    assert product(5) == product_params(5, 5)  # the same slot: it replaces index 1
    again = product(1)
    assert again == first and again is not first  # computed again, the same key
    for i in [0, 3, 4, 7, 8, 1_000_003, 2, 6]:
        assert product(i) == product_params(5, i)
    with pytest.raises(ValueError, match="power of two"):
        product_cache(5, slots=6)


def test_product_cache_keeps_nothing_the_cycle_collector_walks():
    """A full table of tracked keys made every full collection walk 131,072 objects: a pause of every user."""
    import gc

    product = product_cache(5, slots=1 << 10)
    kept = [product(i) for i in range(1 << 10)]
    gc.collect()  # a collection untracks a tuple whose items are all untracked
    assert not any(gc.is_tracked(pair) or gc.is_tracked(pair[0]) for pair in kept)
    assert kept[3][0] == str(product_key(5, 3)[0])


@pytest.mark.parametrize("module", ["base", "orders", "ycsb"])
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"dbsurge.workloads.{module}"))
    assert result.failed == 0 and result.attempted > 0
