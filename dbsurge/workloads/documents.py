"""documents (study 000): N documents of ~250 bytes, reads by ``_id``, a hot set, a full-scan find.

Study 000 loads 2,000,000 documents (~500 MB) into Amazon DocumentDB, runs seeded random reads by
``_id`` (warm vs cold cache, and a re-warm timeline on a hot set of 100 documents), and times a
find whose filter matches 1% of the documents and so must scan the whole collection, batch by batch.

Data (deterministic from ``seed``): ``_id`` 0..N-1; ``category`` is ``"match"`` exactly for the ids
with ``id % 100 == 99`` (so N // 100 documents, spread evenly through the collection), else one
of a few other words; ``payload`` is 202 random hex characters, which makes each BSON document
~250 bytes. There is no index on ``category``: the match query is a collection scan.

PostgreSQL: ``documents(id bigint primary key, category text, payload text)``; the scan is a
server-side cursor read with FETCH in batches, so the cache scenarios run on PostgreSQL too. Each
database's part is its `DocumentsStore` (``documents_stores.py``), looked up once by target kind.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, ClassVar

from dbsurge.workloads.base import (
    INT4_MAX,
    LoadProgress,
    Option,
    Workload,
    choice,
    integer,
    spread_sample,
    weight,
)
from dbsurge.workloads.stores import make_store

MATCH = "match"
_OTHER_CATEGORIES = ("alpha", "bravo", "delta", "gamma")
PAYLOAD_HEX_CHARS = 202  # with _id and category: ~250 bytes of BSON per document
TABLE = "documents"
COLUMNS = ("id", "category", "payload")

# on_batch(batch_index, docs_in_batch, elapsed_ns)
BatchCallback = Callable[[int, int, int], None]


def category_of(doc_id: int) -> str:
    """The category of a document: ``"match"`` for 1% of the ids (``id % 100 == 99``)."""
    return MATCH if doc_id % 100 == 99 else _OTHER_CATEGORIES[doc_id % 4]


def match_count(documents: int) -> int:
    """How many of ``documents`` documents have ``category == "match"``."""
    return documents // 100


def make_rows(rng: random.Random, first: int, stop: int) -> list[tuple[int, str, str]]:
    half = PAYLOAD_HEX_CHARS // 2
    return [(i, category_of(i), rng.randbytes(half).hex()) for i in range(first, stop)]


def make_docs(rng: random.Random, first: int, stop: int) -> list[dict[str, Any]]:
    return [{"_id": i, "category": c, "payload": p} for i, c, p in make_rows(rng, first, stop)]


class DocumentsWorkload(Workload):
    """Reads by id over all documents or a hot set, and a timed full-scan find (study 000)."""

    name = "documents"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "documents": Option(100_000, integer(1), "number of documents (the study used 2,000,000)"),
        "seed": Option(42, integer(), "seed of the generated data"),
        "hot_set": Option(100, integer(1), "size of the hot set: ids 0..hot_set-1"),
        "read_mode": Option("all", choice("all", "hot"), "read_by_id over all ids or over the hot set"),
        "scan_batch_size": Option(1000, integer(1, INT4_MAX), "documents per batch of the full-scan cursor"),
        "scan_proportion": Option(0.0, weight, "weight of full_scan in the default mix"),
    }

    def __init__(self, target: Any, options: dict[str, object] | None = None) -> None:
        super().__init__(target, options)
        self.store: Any = make_store(self)  # the database's part (documents_stores.py), looked up once

    def default_weights(self) -> dict[str, float]:
        weights = {"read_by_id": 1.0}
        if self.options["scan_proportion"] > 0:
            weights["full_scan"] = self.options["scan_proportion"]
        return weights

    @property
    def documents(self) -> int:
        return self.options["documents"]

    # ---- data -------------------------------------------------------------------------------

    def has_data(self) -> bool:
        session = self._session()
        try:
            return self._data_present(session)
        finally:
            session.close()

    def _data_present(self, session: Any) -> bool:
        sample = spread_sample(0, self.documents)
        return self.store.count_present(session, sample) == len(sample)

    def load(self, progress: bool = True) -> int:
        """Create the table (PostgreSQL) and insert the missing documents; returns the document count."""
        meter = LoadProgress(self.name, self.documents, enabled=progress)
        session = self._session()
        try:
            self.store.create_table(session)
            self.last_load_inserted = 0
            if self._data_present(session):  # a complete earlier load: nothing to send
                return self.documents
            inserted = self.store.load(session, progress=meter)
        finally:
            session.close()
        meter.finish()
        self.last_load_inserted = inserted
        return self.documents

    # ---- operations -------------------------------------------------------------------------

    def new_client(self, session: Any, seed: int) -> dict[str, Callable[[], object]]:
        rng = random.Random(seed)
        span = self.options["hot_set"] if self.options["read_mode"] == "hot" else self.documents
        span = min(span, self.documents)
        read_by_id = self.store.reader(session, rng.random, span)

        def full_scan() -> object:
            return self.scan_batches(session)

        return {"read_by_id": read_by_id, "full_scan": full_scan}

    def scan_batches(self, session: Any, on_batch: BatchCallback | None = None) -> int:
        """Run the 1%-match full scan, consuming the cursor batch by batch; returns documents read.

        ``on_batch(batch_index, docs_in_batch, elapsed_ns)`` is called after each non-empty
        batch with the time that batch took to arrive (the first batch includes starting the
        query); time spent in the callback is not counted in the next batch.
        """
        return self.store.scan_batches(session, self.options["scan_batch_size"], on_batch)
