"""The orders workload's product-key cache alone: resident memory as it is called, LRU against direct-mapped.

``python bench/key_cache_memory.py [CALLS]`` calls each cache CALLS times (default 3,000,000) with
product indexes drawn uniformly from 100,000, in a fresh process each, and prints every change of
resident memory over 1 MB between checks (every 20,000 calls), then the total and the hit rate.
An orders worker makes about 2 such calls per operation. bench/findings.md (stop 28) has what
it showed: the LRU steps +5.2 MB long after it is full, the direct-mapped table does not.
"""

from __future__ import annotations

import functools
import os
import random
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.soak import _rss_mb

PRODUCTS = 100_000
CHECK_EVERY = 20_000


def rss_mb() -> float:
    return _rss_mb(os.getpid()) or 0.0


def run_one(kind: str, calls: int) -> None:
    from dbsurge.workloads.orders import PRODUCT_CACHE_SLOTS, product_cache, product_key

    misses = 0

    def counted(seed: int, index: int):
        nonlocal misses
        misses += 1
        return product_key(seed, index)

    if kind == "lru":
        cache = functools.lru_cache(maxsize=PRODUCT_CACHE_SLOTS)(functools.partial(counted, 1))
    else:
        cache = product_cache(1, make=counted)
    draw = random.Random(5).random
    start = last = rss_mb()
    for i in range(1, calls + 1):
        cache(int(draw() * PRODUCTS))
        if i % CHECK_EVERY == 0:
            now = rss_mb()
            if abs(now - last) > 1:
                print(f"  {kind}: after {i:>9,} calls  RSS {last:6.1f} -> {now:6.1f} MB", flush=True)
            last = now
    print(f"  {kind}: {calls:,} calls, RSS {start:.1f} -> {last:.1f} MB (+{last - start:.1f}), "
          f"hit rate {1 - misses / calls:.1%}")


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--one":
        run_one(argv[1], int(argv[2]))
        return 0
    calls = int(argv[0]) if argv else 3_000_000
    for kind in ("lru", "direct"):
        subprocess.run([sys.executable, __file__, "--one", kind, str(calls)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
