"""What the ycsb workload and its bindings share: key numbering, insert ranges and record values.

`YcsbWorkload` (``ycsb.py``) and the stores that run its operations on each database (``ycsb_store.py``,
``ycsb_<database>.py``) both use the pieces here, so neither imports the other's internals and the imports
run one way: ``ycsb.py -> ycsb_keys.py`` and ``ycsb_<database>.py -> ycsb_store.py -> ycsb_keys.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from dbsurge.distributions import UniformGenerator, ZipfianGenerator

KEY_COLUMN = "ycsb_key"
INSERT_SLOT = 10**9  # record numbers a client may insert before its range runs into the next client's


def record_values(rng: random.Random, fieldcount: int, fieldlength: int) -> list[str]:
    """The ``fieldcount`` values of one record, ``fieldlength`` random hex characters each."""
    blob = rng.randbytes((fieldcount * fieldlength + 1) // 2).hex()
    return [blob[i * fieldlength : (i + 1) * fieldlength] for i in range(fieldcount)]


class ClientKeys:
    """One client's view of the record numbers: the loaded ``0..recordcount-1``, then its own inserts.

    Index ``i < recordcount`` is record ``i``; index ``recordcount + n`` is the client's ``n``-th
    insert, record ``insert_base + n``. `SkewedLatestGenerator` draws over `count`.
    """

    __slots__ = ("base", "inserted", "recordcount")

    def __init__(self, recordcount: int, base: int, inserted: int = 0) -> None:
        self.recordcount = recordcount
        self.base = base
        self.inserted = inserted

    def count(self) -> int:
        return self.recordcount + self.inserted

    def keynum(self, index: int) -> int:
        return index if index < self.recordcount else self.base + index - self.recordcount


def first_free(exists: Callable[[int], bool], base: int, limit: int = INSERT_SLOT) -> int:
    """The first ``n`` with record ``base + n`` absent, assuming records ``base..`` were inserted in order.

    A galloping search: about 2 * log2(n) point reads, done once per client.
    """
    if not exists(base):
        return 0
    present, absent = 0, 1
    while absent < limit and exists(base + absent):
        present, absent = absent, absent * 2
    absent = min(absent, limit)
    while absent - present > 1:
        middle = (present + absent) // 2
        if exists(base + middle):
            present = middle
        else:
            absent = middle
    return absent


def scan_length_generator(workload: Any, rng: random.Random) -> Any:
    """Scan lengths in ``1..maxscanlength`` (uniform or zipfian, YCSB's scanlengthdistribution)."""
    longest = workload.options["maxscanlength"]
    if workload.options["scanlengthdistribution"] == "zipfian":
        return ZipfianGenerator(rng, 1, longest, workload.options["zipfianconstant"])
    return UniformGenerator(rng, 1, longest)
