"""Request distributions: which record the next operation touches.

One generator per module, each after YCSB's generator of the same idea; every generator takes a
seeded `random.Random` and has ``next() -> int``:

- `UniformGenerator` (uniform.py): every item equally likely.
- `ZipfianGenerator`, `ScrambledZipfianGenerator` (zipfian.py): a few items very popular.
- `HotspotGenerator` (hotspot.py): a fraction of the operations on a fraction of the items.
- `SkewedLatestGenerator` (latest.py): the most recently inserted items the most popular.
- `fnvhash64` (fnv.py): YCSB's FNV-1a hash of a record number.
"""

from __future__ import annotations

from dbsurge.distributions.fnv import fnv1a_64, fnvhash64
from dbsurge.distributions.hotspot import HotspotGenerator
from dbsurge.distributions.latest import SkewedLatestGenerator
from dbsurge.distributions.uniform import UniformGenerator
from dbsurge.distributions.zipfian import ScrambledZipfianGenerator, ZipfianGenerator

__all__ = [
    "HotspotGenerator",
    "ScrambledZipfianGenerator",
    "SkewedLatestGenerator",
    "UniformGenerator",
    "ZipfianGenerator",
    "fnv1a_64",
    "fnvhash64",
]
