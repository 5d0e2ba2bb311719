"""The one backoff policy of every retry loop: exponential, capped, with full jitter.

The wait before retry ``n`` (0 for the first retry) is the "full jitter" of AWS's "Exponential Backoff
And Jitter" (Marc Brooker, AWS Architecture Blog, 2015)::

    sleep = random_between(0, min(cap, base * 2 ** n))

Full jitter spreads the retries of many clients that failed together (a conflict, a throttled table, a
restarted server) instead of sending them back in step, and of the schemes that article compares it
does the least work for the same completion time. Each loop keeps its own base, cap and number of
attempts (they are the binding's options or the loop's constants), and its own count of retries: the
policy only says how long to wait. The random generator is injectable, so that a test (or a user with a
seed) gets the same waits every time.

    >>> policy = Backoff(0.1, 1.0, random.Random(7))
    >>> [policy.ceiling(n) for n in range(6)]
    [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    >>> all(0.0 <= policy.delay(n) <= policy.ceiling(n) for n in range(100))
    True
"""

from __future__ import annotations

import random

#: Past this many doublings every ceiling is the cap (and 2**n would overflow a float past 1023).
_MAX_DOUBLINGS = 64


class Backoff:
    """``delay(n)``: the wait before retry ``n`` (0-based), uniform in ``[0, min(cap_s, base_s * 2**n)]``."""

    __slots__ = ("_uniform", "base_s", "cap_s")

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        if not (base_s >= 0 and cap_s >= 0):  # also nan
            raise ValueError(f"a backoff's base and cap are seconds >= 0, not {base_s!r} and {cap_s!r}")
        self.base_s = float(base_s)
        self.cap_s = float(cap_s)
        self._uniform = (rng or random.Random()).uniform

    def ceiling(self, retry: int) -> float:
        """The longest wait before retry ``retry`` (0-based): ``min(cap_s, base_s * 2**retry)``."""
        if retry >= _MAX_DOUBLINGS:
            return self.cap_s
        return min(self.cap_s, self.base_s * (1 << max(0, retry)))

    def delay(self, retry: int) -> float:
        """A wait before retry ``retry`` (0-based), drawn uniformly from 0 to `ceiling` (full jitter)."""
        return self._uniform(0.0, self.ceiling(retry))
