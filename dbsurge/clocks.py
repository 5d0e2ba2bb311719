"""Wall clocks across hosts: each worker's offset from the master's clock, measured NTP-style.

The plan's time zero is a wall-clock instant chosen on the master; a worker whose clock runs 0.5 s
ahead would start every stage 0.5 s early at the database. So the master measures each worker's
offset over Locust's own messages (``dbsurge:clock``), the way NTP does (RFC 5905, on-wire
protocol): the master stamps t1 when it sends, the worker stamps t2 on receipt and t3 when it
answers, the master stamps t4 on receipt; then

    offset = ((t2 - t1) + (t3 - t4)) / 2        (worker clock minus master clock)
    delay  = (t4 - t1) - (t3 - t2)              (round trip, less the worker's own time)

and the offset is known to within ``delay / 2``. Of several exchanges the one with the smallest
delay wins. Each worker converts the master's time zero into its own clock with its offset, so
stages start together at the database whatever the workers' clocks say.

`wall_ns` is the clock the pacer and recorder use. ``DBSURGE_TEST_CLOCK_SKEW_S`` shifts it (tests
only: a skewed host clock without LD_PRELOAD shims, since libfaketime also shifts the pacer's
timerfd deadlines).

    >>> offset_and_delay(t1=1_000, t2=501_150, t3=501_250, t4=1_400)
    (500000, 300)
"""

from __future__ import annotations

import os
import time

_SKEW_NS = int(float(os.environ.get("DBSURGE_TEST_CLOCK_SKEW_S", "0") or 0) * 1e9)


def wall_ns() -> int:
    """This host's wall clock in ns (with the test skew, if any)."""
    return time.time_ns() + _SKEW_NS


def offset_and_delay(*, t1: int, t2: int, t3: int, t4: int) -> tuple[int, int]:
    """(offset, delay) in ns from one exchange (see the module docstring)."""
    return ((t2 - t1) + (t3 - t4)) // 2, (t4 - t1) - (t3 - t2)


class ClockBook:
    """The master's record of each worker's best offset estimate."""

    def __init__(self) -> None:
        self.best: dict[str, tuple[int, int]] = {}  # worker -> (offset ns, delay ns)
        self.latest: dict[str, tuple[int, int]] = {}

    def add(self, worker: str, t1: int, t2: int, t3: int, t4: int) -> None:
        sample = offset_and_delay(t1=t1, t2=t2, t3=t3, t4=t4)
        self.latest[worker] = sample
        if worker not in self.best or sample[1] < self.best[worker][1]:
            self.best[worker] = sample

    def offset_ns(self, worker: str) -> int:
        return self.best.get(worker, (0, 0))[0]

    def describe(self) -> dict[str, dict[str, float]]:
        """For run.json and events: offset and uncertainty (delay / 2) in ms, and the latest offset."""
        return {w: {"offset_ms": round(o / 1e6, 3), "uncertainty_ms": round(d / 2e6, 3),
                    "latest_offset_ms": round(self.latest.get(w, (o, d))[0] / 1e6, 3)}
                for w, (o, d) in sorted(self.best.items())}

    def warnings(self, limit_ms: float = 1.0) -> list[str]:
        """Workers whose offset is too uncertain, or drifted, to keep stage boundaries within ``limit_ms``."""
        out = []
        for w, d in self.describe().items():
            if d["uncertainty_ms"] > limit_ms:
                out.append(f"worker {w}'s clock offset ({d['offset_ms']:+.3f} ms) is known only to "
                           f"±{d['uncertainty_ms']:.3f} ms: its stage boundaries may be off by that much")
            if abs(d["latest_offset_ms"] - d["offset_ms"]) > limit_ms:
                out.append(f"worker {w}'s clock drifted during the run ({d['offset_ms']:+.3f} ms at setup, "
                           f"{d['latest_offset_ms']:+.3f} ms last): its later stage boundaries moved by the difference")
        return out
