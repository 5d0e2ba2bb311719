"""Reads of the documents workload by a given id, and the server's own cache counters around them.

The documents workload's ``read_by_id`` draws its id inside the operation; the cache scenarios
need to choose the ids themselves (the same 1,000 ids warm and cold, a trace that names each id),
so they read through `id_reader`, the same statement the workload sends.

`server_cache_counters` reads what the database says about its buffer cache, the study's
BufferCacheHitRatio seen from inside: PostgreSQL's ``pg_statio_user_tables`` for the documents
table (heap and index blocks found in shared buffers vs read from outside them), MongoDB's
``serverStatus().wiredTiger.cache`` (pages requested vs read into the cache). A server that does not
give them (Aurora DSQL, secantusdb) gives ``None``, and the table leaves the cell blank.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from typing import Any

from dbsurge.workloads.base import pg_executor
from dbsurge.workloads.documents import TABLE

PG_SELECT = f"select id, category, payload from {TABLE} where id = %s"
PG_STATIO = (
    "select coalesce(sum(heap_blks_read), 0) + coalesce(sum(idx_blks_read), 0), "
    "coalesce(sum(heap_blks_hit), 0) + coalesce(sum(idx_blks_hit), 0) "
    f"from pg_statio_user_tables where relname = '{TABLE}'"
)


def id_reader(kind: str, session: Any) -> Callable[[int], object]:
    """``read(doc_id)``: one complete read of a document by id on ``session``; raises if it is missing."""
    if kind == "postgres":
        execute = pg_executor(session)

        def read_pg(doc_id: int) -> object:
            row = execute(PG_SELECT, (doc_id,), prepare=True).fetchone()
            if row is None:
                raise LookupError(f"documents: no row with id {doc_id}")
            return row

        return read_pg
    find_one = session.db[TABLE].find_one

    def read_mongo(doc_id: int) -> object:
        doc = find_one({"_id": doc_id})
        if doc is None:
            raise LookupError(f"documents: no document with _id {doc_id}")
        return doc

    return read_mongo


def seeded_ids(seed: int, count: int, documents: int) -> list[int]:
    """``count`` distinct document ids in a seeded random order (all ids, shuffled, if count >= documents)."""
    rng = random.Random(seed)
    if count >= documents:
        ids = list(range(documents))
        rng.shuffle(ids)
        return ids
    return rng.sample(range(documents), count)


def flush_server_counters(kind: str, session: Any) -> None:
    """Ask PostgreSQL to publish this backend's statistics now (15+), so another connection sees them."""
    if kind != "postgres":
        return
    # older servers, DSQL: the counters are then a little late or absent
    with contextlib.suppress(Exception):
        session.conn.execute("select pg_stat_force_next_flush()")


def server_cache_counters(target: Any) -> dict | None:
    """``{"read": blocks/pages read into the cache, "hit": found there}`` from the server, or None."""
    session = None
    try:
        session = target.connect()
        if target.kind == "postgres":
            row = session.conn.execute(PG_STATIO).fetchone()
            return {"read": int(row[0]), "hit": int(row[1])}
        cache = session.client.admin.command("serverStatus").get("wiredTiger", {}).get("cache", {})
        read = cache.get("pages read into cache")
        requested = cache.get("pages requested from the cache")
        if read is None or requested is None:
            return None
        return {"read": int(read), "hit": max(0, int(requested) - int(read))}
    except Exception:  # noqa: BLE001 - no counters is an answer: the cells stay blank
        return None
    finally:
        if session is not None:
            with contextlib.suppress(Exception):
                session.close()


def counter_delta(before: dict | None, after: dict | None) -> dict:
    """Blocks read and hit between two readings, and the hit ratio in percent (blanks when unknown)."""
    if not before or not after or after["read"] < before["read"] or after["hit"] < before["hit"]:
        return {"blocks_read": None, "blocks_hit": None, "hit_pct": None}
    read, hit = after["read"] - before["read"], after["hit"] - before["hit"]
    return {"blocks_read": read, "blocks_hit": hit,
            "hit_pct": round(100.0 * hit / (read + hit), 3) if read + hit else None}
