"""orders (study 001): product lookups by key and order creation as one transaction.

Schema (runs unchanged on PostgreSQL, Aurora PostgreSQL and Aurora DSQL): UUID primary keys made
on the client, no sequences/SERIAL, foreign keys, triggers, temporary tables or TRUNCATE, and the
loader writes 1,000 rows per transaction (DSQL allows 3,000 changed rows per transaction)::

    products    (id uuid pk, sku text, name text, price numeric(12,2), stock integer)
    orders      (id uuid pk, created_at timestamptz, customer_id integer, total numeric(12,2))
    order_items (id uuid pk, order_id uuid, product_id uuid, qty integer, price numeric(12,2))

Product ``i``'s id and price are a hash of (seed, i), so a client computes the key of any product
without asking the database. ``order_create`` is one transaction: the order row, 1-5 item rows
(one multi-row INSERT) and one ``update products set stock = stock - qty`` per item, products
taken in index order so concurrent orders lock rows in the same order and never deadlock.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, ClassVar

from dbsurge.base.errors import WorkloadError
from dbsurge.workloads.base import (
    INT4_MAX,
    LOAD_CHUNK,
    LoadProgress,
    Option,
    Workload,
    fraction,
    integer,
    pg_lookup,
    spread_sample,
)
from dbsurge.workloads.loading import pg_count_present, pg_execute, pg_load

INITIAL_STOCK = 1_000_000  # lasts days at the studies' rates, so stock never goes negative in a run
QTY_MAX = 3

DDL = (
    "create table if not exists products (id uuid primary key, sku text not null, name text not null, "
    + "price numeric(12,2) not null, stock integer not null)",
    "create table if not exists orders (id uuid primary key, created_at timestamptz not null, "
    + "customer_id integer not null, total numeric(12,2) not null)",
    "create table if not exists order_items (id uuid primary key, order_id uuid not null, "
    + "product_id uuid not null, qty integer not null, price numeric(12,2) not null)",
)
PRODUCT_COLUMNS = ("id", "sku", "name", "price", "stock")
LOOKUP_SQL = "select id, sku, name, price, stock from products where id = %s"
INSERT_ORDER_SQL = "insert into orders (id, created_at, customer_id, total) values (%s, now(), %s, %s)"
UPDATE_STOCK_SQL = "update products set stock = stock - %s where id = %s"
_ADJECTIVES = ("red", "blue", "small", "large", "light", "heavy", "smart", "classic")
_NOUNS = ("lamp", "chair", "kettle", "phone", "desk", "bottle", "jacket", "speaker")


def product_key(seed: int, index: int) -> tuple[uuid.UUID, Decimal]:
    """Product ``index``'s id (a version-4 UUID from a BLAKE2b hash of seed and index) and price.

    >>> pid, price = product_key(42, 0)
    >>> pid.version, Decimal("1.00") <= price <= Decimal("1000.00")
    (4, True)
    """
    id_bytes, price = _product_digest(seed, index)
    return uuid.UUID(bytes=id_bytes, version=4), price


def _product_digest(seed: int, index: int) -> tuple[bytes, Decimal]:
    """Product ``index``'s 16 id bytes (before the UUID's version and variant bits) and its price."""
    digest = hashlib.blake2b(f"dbsurge-orders:{seed}:{index}".encode(), digest_size=20).digest()
    cents = 100 + int.from_bytes(digest[16:], "little") % 99_901
    return digest[:16], Decimal(cents).scaleb(-2)


def product_params(seed: int, index: int) -> tuple[str, Decimal]:
    """`product_key` with the id in its text form, as the users' statements take it.

    PostgreSQL casts a text parameter of unspecified type to the ``uuid`` column it is compared with or
    stored in, so the statements give the same rows. Text is what a process can afford to keep many
    of: a `uuid.UUID` is an object the cycle collector tracks, a ``str`` and a ``Decimal`` are not
    (see `product_cache`).

    The text is made from the digest directly (the version and variant bits set as `uuid.UUID` sets
    them): building a `uuid.UUID` to print it cost a third of a cache miss.

    >>> all(product_params(42, i)[0] == str(product_key(42, i)[0]) for i in range(1000))
    True
    >>> product_params(42, 0)[1] == product_key(42, 0)[1]
    True
    """
    id_bytes, price = _product_digest(seed, index)
    h = id_bytes.hex()
    # version 4 (the 13th hex digit) and the RFC 4122 variant (the top two bits of the 17th)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}", price


#: The 17th hex digit of an RFC 4122 UUID: its top two bits are 10.
_VARIANT = {d: format(0x8 | (int(d, 16) & 0x3), "x") for d in "0123456789abcdef"}


#: Products whose keys a process keeps (a power of two): 65,536 (id text, Decimal) pairs.
PRODUCT_CACHE_SLOTS = 1 << 16


def product_cache(
    seed: int, slots: int = PRODUCT_CACHE_SLOTS, make: Callable[[int, int], Any] = product_params
) -> Callable[[int], tuple[str, Decimal]]:
    """``make(seed, index)`` (`product_params`), keeping the last key of each of ``slots`` slots (index mod slots).

    What it keeps must not be objects that Python's cycle collector tracks. With `uuid.UUID` ids the
    full table was 131,072 tracked objects (the UUIDs and their tuples), and as misses replaced them,
    survivors of young collections piled up until a full collection walked them all: a pause of
    every user of the process of 11-22 ms every few seconds (8,000 TPS, one process), the late
    slots of an open-model run. Text ids and ``Decimal`` prices are untracked, and so, after its
    first young collection, is each pair that holds them.

    A direct-mapped table of two fixed lists, not ``functools.lru_cache``: under uniform draws over more
    products than slots an LRU cache evicts on every miss, and its dict, whose deleted entries are not
    reused, is rebuilt every ~109,000 misses. Each rebuild is a new ~5 MB table, and glibc placed one
    at a new top of the heap now and then: a worker's RSS stepped up ~5 MB at the same minutes (38 and
    48) of two hour-long soaks (bench/findings.md). This table is allocated once; under uniform draws
    its hit rate is about the LRU's (both about 65% over 100,000 products).

    >>> product = product_cache(42)
    >>> product(7) == product_params(42, 7) and product(7) is product(7)
    True
    """
    if slots < 1 or slots & (slots - 1):
        raise ValueError(f"slots must be a power of two, not {slots}")
    mask = slots - 1
    indexes = [-1] * slots
    values: list[Any] = [None] * slots

    def product(index: int) -> tuple[str, Decimal]:
        slot = index & mask
        if indexes[slot] == index:
            return values[slot]
        value = values[slot] = make(seed, index)
        indexes[slot] = index
        return value

    return product


def _items_sql(count: int) -> str:
    row = "(%s, %s, %s, %s, %s)"
    return "insert into order_items (id, order_id, product_id, qty, price) values " + ", ".join([row] * count)


class OrdersWorkload(Workload):
    """Product lookup by key and order creation in one transaction (study 001); PostgreSQL targets only."""

    name = "orders"
    kinds = ("postgres",)
    OPTIONS: ClassVar[dict[str, Option]] = {
        "products": Option(10_000, integer(1), "number of products"),
        "seed": Option(42, integer(), "seed of the generated data (product ids and prices)"),
        "items_min": Option(1, integer(1, 1000), "fewest items in an order"),
        "items_max": Option(5, integer(1, 1000), "most items in an order"),
        "customers": Option(100_000, integer(1, INT4_MAX), "customer ids are drawn from 1..customers (orders."
                                                            "customer_id is an integer: at most 2,147,483,647)"),
        "order_proportion": Option(0.5, fraction, "share of order_create in the default mix (rest: product_lookup)"),
    }

    @classmethod
    def check_options(cls, values: Mapping[str, Any]) -> None:
        if values["items_min"] > values["items_max"]:
            raise WorkloadError(
                f"workload option items_min={values['items_min']} is above items_max={values['items_max']}"
            )

    def __init__(self, target: Any, options: dict[str, object] | None = None) -> None:
        super().__init__(target, options)
        # Shared by all users of this process: the same hot products are hashed once.
        self.product = product_cache(self.options["seed"])

    def default_weights(self) -> dict[str, float]:
        share = self.options["order_proportion"]
        weights = {"product_lookup": 1.0 - share, "order_create": share}
        return {name: w for name, w in weights.items() if w > 0}

    # ---- data -------------------------------------------------------------------------------

    def has_data(self) -> bool:
        session = self._session()
        try:
            return self._data_present(session)
        finally:
            session.close()

    def _data_present(self, session: Any) -> bool:
        ids = [self.product(i)[0] for i in spread_sample(0, self.options["products"])]
        return pg_count_present(session, "products", "id", ids) == len(ids)

    def load(self, progress: bool = True) -> int:
        """Create the three tables if missing and insert the missing products; returns the product count."""
        total = self.options["products"]
        meter = LoadProgress(self.name, total, enabled=progress)
        session = self._session()
        try:
            for ddl in DDL:  # one DDL statement per transaction (a DSQL rule)
                pg_execute(session, ddl)
            self.last_load_inserted = 0
            if self._data_present(session):  # a complete earlier load: nothing to send
                return total
            inserted = pg_load(
                session,
                label=self.name,
                seed=self.options["seed"],
                table="products",
                columns=PRODUCT_COLUMNS,
                make=self._make_products,
                start=0,
                stop=total,
                statement_rows=LOAD_CHUNK,
                progress=meter,
            )
        finally:
            session.close()
        meter.finish()
        self.last_load_inserted = inserted
        return total

    def _make_products(self, rng: random.Random, first: int, stop: int) -> list[tuple[Any, ...]]:
        rows = []
        for i in range(first, stop):
            pid, price = product_key(self.options["seed"], i)
            name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {i}"
            rows.append((pid, f"SKU-{i:08d}", name, price, INITIAL_STOCK))
        return rows

    # ---- operations -------------------------------------------------------------------------

    def new_client(self, session: Any, seed: int) -> dict[str, Callable[[], object]]:
        rng = random.Random(seed)
        draw = rng.random
        product = self.product
        products = self.options["products"]
        items_min = min(self.options["items_min"], products)
        items_span = min(self.options["items_max"], products) - items_min + 1
        customers = self.options["customers"]
        items_sql = {k: _items_sql(k) for k in range(items_min, items_min + items_span)}
        new_id = uuid.uuid4  # from os.urandom, not the seeded rng: ids must differ between runs with one seed

        lookup = pg_lookup(session, LOOKUP_SQL)

        def product_lookup() -> object:
            pid = product(int(draw() * products))[0]
            row = lookup((pid,))
            if row is None:
                raise LookupError(f"orders: product {pid} not found (is the workload loaded?)")
            return row

        def order_create() -> object:
            count = items_min + int(draw() * items_span)
            picks: set[int] = set()
            while len(picks) < count:
                picks.add(int(draw() * products))
            order_id = new_id()
            item_params: list[object] = []
            stock_updates = []
            total = Decimal(0)
            for index in sorted(picks):  # one lock order for every transaction: no deadlocks
                pid, price = product(index)
                qty = 1 + int(draw() * QTY_MAX)
                total += price * qty
                item_params += (new_id(), order_id, pid, qty, price)
                stock_updates.append((qty, pid))
            order_params = (order_id, 1 + int(draw() * customers), total)
            sql = items_sql[count]

            def transaction(conn: Any) -> None:
                conn.execute(INSERT_ORDER_SQL, order_params, prepare=True)
                conn.execute(sql, item_params, prepare=True)
                for params in stock_updates:
                    if conn.execute(UPDATE_STOCK_SQL, params, prepare=True).rowcount != 1:
                        raise LookupError(f"orders: product {params[1]} not found (is the workload loaded?)")

            session.run_transaction(transaction)
            return order_id

        return {"product_lookup": product_lookup, "order_create": order_create}
