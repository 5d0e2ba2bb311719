"""A plain Locust user for PostgreSQL, written the way Locust's documentation shows.

The reference dbsurge is compared with: Locust's "testing other systems" pattern (a `User`
that opens its client in ``on_start``, a ``@task`` that times the call with ``time.perf_counter``
and fires ``events.request``), psycopg 3 with one connection per user and psycopg's defaults
(its own wait function under gevent, automatic prepared statements after 5 executions).
It runs dbsurge's product lookup: the same SQL and the same product keys, so the two differ only
in the generator.

    locust -f bench/plain_locust.py --headless -u 16 -r 16 -t 10s --host postgresql://... --products 100000
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid

import psycopg
from locust import User, constant, events, task

LOOKUP_SQL = "select id, sku, name, price, stock from products where id = %s"


@events.init_command_line_parser.add_listener
def _(parser):
    parser.add_argument("--products", type=int, default=100_000, help="products loaded (dbsurge's orders workload)")
    parser.add_argument("--seed", type=int, default=42, help="the orders workload's data seed")


def product_id(seed: int, index: int) -> uuid.UUID:
    """Product ``index``'s key, as dbsurge's orders workload makes it (BLAKE2b of seed and index)."""
    digest = hashlib.blake2b(f"dbsurge-orders:{seed}:{index}".encode(), digest_size=20).digest()
    return uuid.UUID(bytes=digest[:16], version=4)


class PostgresUser(User):
    wait_time = constant(0)

    def on_start(self):
        self.conn = psycopg.connect(self.host, autocommit=True)
        self.products = self.environment.parsed_options.products
        self.seed = self.environment.parsed_options.seed

    def on_stop(self):
        self.conn.close()

    @task
    def product_lookup(self):
        pid = product_id(self.seed, random.randrange(self.products))
        start = time.perf_counter()
        exception = None
        try:
            self.conn.execute(LOOKUP_SQL, (pid,)).fetchone()
        except Exception as e:  # noqa: BLE001  (the docs' pattern: any failure is reported to Locust)
            exception = e
        self.environment.events.request.fire(
            request_type="postgres",
            name="product_lookup",
            response_time=(time.perf_counter() - start) * 1000,
            response_length=0,
            exception=exception,
            context={},
        )
