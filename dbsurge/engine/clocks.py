"""Wall clocks across hosts: each worker's offset from the master's clock, measured NTP-style.

The plan's time zero is a wall-clock instant chosen on the master; a worker whose clock runs 0.5 s
ahead would start every stage 0.5 s early at the database. So the master measures each worker's
offset over Locust's own messages (`dbsurge.engine.wire.Clock`), the way NTP does (RFC 5905, on-wire
protocol): the master stamps t1 when it sends, the worker stamps t2 on receipt and t3 when it
answers, the master stamps t4 on receipt; then

    offset = ((t2 - t1) + (t3 - t4)) / 2        (worker clock minus master clock)
    delay  = (t4 - t1) - (t3 - t2)              (round trip, less the worker's own time)

and the offset is known to within ``delay / 2``. Of several exchanges the one with the smallest
delay wins (`ClockBook`), and a later drift counts only beyond both estimates' error bounds.
Each worker converts the master's time zero into its own clock with its offset, so
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


#: How many of a worker's latest exchanges make its latest estimate (the master sends that many at a time).
ROUND = 3


class ClockBook:
    """The master's record of each worker's clock: the offset it was given, and what later exchanges say.

    Each estimate is the minimum-delay sample of a round of exchanges (NTP's clock filter): at
    setup, the best of every exchange so far; later, the best of the last `ROUND`. An estimate is
    known to within half its sample's delay (the true offset lies in ``offset ± delay / 2`` whatever
    the path's asymmetry), so a drift is only a drift when the two estimates' intervals do not
    overlap: ``|latest - given| > given_delay / 2 + latest_delay / 2``. Workers on one kernel clock
    never drift, however loaded the machine and however long its messages queue.

        >>> book = ClockBook()
        >>> book.add("w", 0, 1_000_000, 1_000_000, 2_000_000)      # offset 0, delay 2 ms
        >>> book.offset_ns("w")                                   # given to the worker at setup
        0
        >>> for t1 in (10_000_000, 20_000_000, 30_000_000):        # later: 6 ms round trips, 2.5 ms apart
        ...     book.add("w", t1, t1 + 5_500_000, t1 + 5_500_000, t1 + 6_000_000)
        >>> book.describe()["w"]["drift_ms"], book.describe()["w"]["drift_bound_ms"], book.warnings()
        (2.5, 4.0, [])
    """

    def __init__(self) -> None:
        self.best: dict[str, tuple[int, int]] = {}  # worker -> (offset ns, delay ns): the best sample so far
        self.given: dict[str, tuple[int, int]] = {}  # worker -> the estimate its setup carried
        self.recent: dict[str, list[tuple[int, int]]] = {}  # worker -> its last `ROUND` samples

    def add(self, worker: str, t1: int, t2: int, t3: int, t4: int) -> None:
        sample = offset_and_delay(t1=t1, t2=t2, t3=t3, t4=t4)
        self.recent[worker] = (self.recent.get(worker, []) + [sample])[-ROUND:]
        if worker not in self.best or sample[1] < self.best[worker][1]:
            self.best[worker] = sample

    def offset_ns(self, worker: str) -> int:
        """The offset a worker's setup carries (the best estimate so far); remembered, to judge drift against."""
        if worker in self.best:
            self.given.setdefault(worker, self.best[worker])  # a worker keeps the offset of its first setup
        return self.given.get(worker, (0, 0))[0]

    def latest(self, worker: str) -> tuple[int, int] | None:
        """The minimum-delay sample of the worker's last `ROUND` exchanges."""
        samples = self.recent.get(worker)
        return min(samples, key=lambda s: s[1]) if samples else None

    def describe(self) -> dict[str, dict[str, float]]:
        """For run.json and events: the offset given and its uncertainty (delay / 2) in ms, the latest
        estimate and its uncertainty, the drift between them and the drift's error bound."""
        out = {}
        for w in sorted(self.best):
            o, d = self.given.get(w, self.best[w])
            lo, ld = self.latest(w) or (o, d)
            out[w] = {"offset_ms": round(o / 1e6, 3), "uncertainty_ms": round(d / 2e6, 3),
                      "latest_offset_ms": round(lo / 1e6, 3), "latest_uncertainty_ms": round(ld / 2e6, 3),
                      "drift_ms": round((lo - o) / 1e6, 3), "drift_bound_ms": round((d + ld) / 2e6, 3)}
        return out

    def warnings(self, limit_ms: float = 1.0) -> list[str]:
        """Workers whose offset is too uncertain to keep stage boundaries within ``limit_ms``, or whose
        clock moved by more than ``limit_ms`` beyond the error bound of the two estimates."""
        out = []
        for w, d in self.describe().items():
            if d["uncertainty_ms"] > limit_ms:
                out.append(f"worker {w}'s clock offset ({d['offset_ms']:+.3f} ms) is known only to "
                           f"±{d['uncertainty_ms']:.3f} ms: its stage boundaries may be off by that much")
            if abs(d["drift_ms"]) > d["drift_bound_ms"] + limit_ms:
                out.append(f"worker {w}'s clock drifted during the run ({d['offset_ms']:+.3f} ms at setup, "
                           f"{d['latest_offset_ms']:+.3f} ms last, each ±{d['uncertainty_ms']:.3f} / "
                           f"±{d['latest_uncertainty_ms']:.3f} ms): its later stage boundaries moved by the difference")
        return out
