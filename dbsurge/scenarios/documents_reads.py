"""The ids the cache scenarios read, and the server's own cache counters around them.

The documents workload's ``read_by_id`` draws its id inside the operation; the cache scenarios
choose the ids themselves (the same 1,000 ids warm and cold, a trace that names each id), so they
read through the store's ``id_reader`` (`dbsurge.workloads.documents_stores`), the same statement
the workload sends.

`server_cache_counters` reads what the database says about its buffer cache, the study's
BufferCacheHitRatio seen from inside, through the store's ``cache_counters``: PostgreSQL's
``pg_statio_user_tables`` for the documents table, MongoDB's ``serverStatus().wiredTiger.cache``.
A server that does not give them (Aurora DSQL, secantusdb) gives ``None``, and the table leaves the
cell blank. Nothing here asks which database it is.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any


def seeded_ids(seed: int, count: int, documents: int) -> list[int]:
    """``count`` distinct document ids in a seeded random order (all ids, shuffled, if count >= documents)."""
    rng = random.Random(seed)
    if count >= documents:
        ids = list(range(documents))
        rng.shuffle(ids)
        return ids
    return rng.sample(range(documents), count)


def server_cache_counters(workload: Any) -> dict | None:
    """``{"read": blocks/pages read into the cache, "hit": found there}`` from the server, or None."""
    session = None
    try:
        session = workload.target.connect()
        return workload.store.cache_counters(session)
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
