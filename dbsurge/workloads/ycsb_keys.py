"""The ycsb workload's keys: numbering, insert ranges, record values and one client's draws (`ClientDraws`).

`YcsbWorkload` (``ycsb.py``) draws with these; the stores (``ycsb_<database>.py``) use `KEY_COLUMN`. Neither
imports the other's internals: ``ycsb.py -> ycsb_keys.py`` and ``ycsb_<database>.py -> ycsb_store.py``.
"""

from __future__ import annotations

import atexit
import os
import random
from array import array
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


class ClientDraws:
    """One client's draws: its keys (requested and inserted), fields, values and scan lengths, from its seed.

    The ycsb workload draws them and hands them to the store's connection, so every database sees the same
    sequence for the same seed and options."""

    def __init__(self, workload: Any, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.keys = ClientKeys(workload.recordcount, workload.insert_base(seed))
        self.choose = workload.request_generator(rng, self.keys.count).next
        if workload.options["tracekeys"]:
            self.choose = traced(self.choose, f"{workload.options['tracekeys']}-{os.getpid()}.bin")
        self.scan_length = scan_length_generator(workload, rng).next
        self.key_for = workload.key_for
        self.fields = workload.fields
        self.wants_inserts = "insert" in workload.operations
        self.record = lambda: workload.record(rng)
        length = workload.options["fieldlength"]
        nbytes = (length + 1) // 2
        randbytes = rng.randbytes
        self.value = (
            (lambda: randbytes(nbytes).hex()) if length % 2 == 0 else (lambda: randbytes(nbytes).hex()[:length])
        )
        self.field_index = lambda: int(rng.random() * len(self.fields))

    def next_key(self) -> str:
        index = self.choose()
        keys = self.keys
        if index >= keys.recordcount:
            index = keys.base + index - keys.recordcount
        return self.key_for(index)

    def next_insert_key(self) -> str:
        # Taken before the insert runs: a failed insert leaves a gap rather than a key retried forever.
        keys = self.keys
        keynum = keys.base + keys.inserted
        keys.inserted += 1
        return self.key_for(keynum)

    def resume_inserts(self, exists: Callable[[str], bool]) -> None:
        """Skip the insert numbers an earlier run with this client seed already used."""
        if self.wants_inserts:
            self.keys.inserted = first_free(lambda keynum: exists(self.key_for(keynum)), self.keys.base)


def traced(choose: Callable[[], int], path: str, flush_every: int = 1000) -> Callable[[], int]:
    """``choose`` that also appends each record number it draws to ``path`` (int64), so a test can check
    the distribution of the keys actually requested, reads and updates alike."""
    buf = array("q")

    def flush() -> None:
        if buf:
            with open(path, "ab") as f:
                f.write(buf.tobytes())
            del buf[:]

    atexit.register(flush)

    def traced_choose() -> int:
        index = choose()
        buf.append(index)
        if len(buf) >= flush_every:
            flush()
        return index

    return traced_choose
