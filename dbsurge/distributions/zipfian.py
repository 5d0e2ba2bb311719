"""Zipfian integers: a few items are very popular, most are rarely touched.

Algorithm: Jim Gray, Prakash Sundaresan, Susanne Englert, Ken Baclawski and Peter J. Weinberger,
"Quickly Generating Billion-Record Synthetic Databases", SIGMOD 1994 (section on the Zipfian
distribution), as YCSB's ``ZipfianGenerator`` implements it: one uniform draw ``u`` and a closed
form, with ``zeta(n, theta) = sum(1 / i**theta for i in 1..n)`` computed once per item count.
Item ``lower`` is the most popular, ``lower + 1`` the next, and so on.

``ScrambledZipfianGenerator`` follows YCSB's class of the same name: draw from a zipfian over a
huge item space (10**10 items, whose zeta for constant 0.99 YCSB ships precomputed) and map the
draw to ``lower + fnvhash64(draw) % count``, so the popular items are scattered over the range
instead of clustered at its start (where they would all share a few B-tree pages).
"""

from __future__ import annotations

import math
import random

from dbsurge.distributions.fnv import fnvhash64

ZIPFIAN_CONSTANT = 0.99
# YCSB's ScrambledZipfianGenerator constants: the zipfian it scrambles spans 10**10 items, and
# zeta(10**10, 0.99) is precomputed because summing 10**10 terms is out of the question.
SCRAMBLED_ITEM_COUNT = 10_000_000_000
SCRAMBLED_ZETAN = 26.46902820178302

# Above this many terms zeta's tail is computed with the Euler-Maclaurin formula (error < 1e-12
# relative once the first 100k terms are summed exactly), so building a generator stays fast.
_EXACT_TERMS = 100_000


def zeta(count: int, theta: float) -> float:
    """``sum(1 / i**theta for i in 1..count)``."""
    return zeta_range(0, count, theta)


def zeta_range(after: int, upto: int, theta: float) -> float:
    """``sum(1 / i**theta for i in after+1..upto)``: lets a generator grow its item count cheaply."""
    if upto <= after:
        return 0.0
    split = min(upto, after + _EXACT_TERMS)
    total = math.fsum(i**-theta for i in range(after + 1, split + 1))
    if split < upto:
        total += _tail(split + 1, upto, theta)
    return total


def _tail(a: int, b: int, theta: float) -> float:
    # Euler-Maclaurin: sum_{i=a..b} f(i) ~ integral + (f(a)+f(b))/2 + (f'(b)-f'(a))/12 - (f'''(b)-f'''(a))/720
    one = 1.0 - theta
    integral = math.log(b / a) if one == 0.0 else (b**one - a**one) / one
    f_a, f_b = a**-theta, b**-theta
    d1_a, d1_b = -theta * a ** (-theta - 1), -theta * b ** (-theta - 1)
    k3 = -theta * (theta + 1) * (theta + 2)
    d3_a, d3_b = k3 * a ** (-theta - 3), k3 * b ** (-theta - 3)
    return integral + (f_a + f_b) / 2 + (d1_b - d1_a) / 12 - (d3_b - d3_a) / 720


class ZipfianGenerator:
    """Zipf-distributed integers in ``[lower, upper]``; ``lower`` is the most frequent.

    With constant 0.99 over 1,000 items, item 0 gets about 13% of the draws, item 1 about 7%,
    and the 900 least popular items together about 19%:

        >>> gen = ZipfianGenerator(random.Random(1), 0, 999)
        >>> draws = [gen.next() for _ in range(100_000)]
        >>> round(draws.count(0) / len(draws), 2), round(draws.count(1) / len(draws), 2)
        (0.13, 0.07)

    ``next_of(count)`` draws over ``[lower, lower + count)`` for an item count that grows as
    records are inserted (YCSB's ``nextLong(itemcount)``); zeta is extended term by term.
    """

    __slots__ = ("_alpha", "_eta", "_half_pow", "_random", "_zeta2", "items", "lower", "theta", "zetan")

    def __init__(
        self,
        rng: random.Random,
        lower: int,
        upper: int,
        theta: float = ZIPFIAN_CONSTANT,
        zetan: float | None = None,
    ) -> None:
        if upper < lower:
            raise ValueError(f"zipfian range is empty: [{lower}, {upper}]")
        if not 0.0 < theta < 1.0:
            raise ValueError(f"zipfian constant must be between 0 and 1 (exclusive), not {theta}")
        self.lower = lower
        self.theta = theta
        self.items = upper - lower + 1
        self.zetan = zeta(self.items, theta) if zetan is None else zetan
        self._zeta2 = zeta(2, theta)
        self._alpha = 1.0 / (1.0 - theta)
        self._half_pow = 1.0 + 0.5**theta
        self._random = rng.random
        self._eta = self._compute_eta()

    def _compute_eta(self) -> float:
        denominator = 1.0 - self._zeta2 / self.zetan
        if self.items <= 2 or denominator == 0.0:
            return 0.0  # the two shortcut branches in next() cover every draw
        return (1.0 - (2.0 / self.items) ** (1.0 - self.theta)) / denominator

    def next(self) -> int:
        """The next zipfian integer in ``[lower, upper]``."""
        u = self._random()
        uz = u * self.zetan
        if uz < 1.0:
            return self.lower
        if uz < self._half_pow:
            return self.lower + 1
        return self.lower + int(self.items * (self._eta * u - self._eta + 1.0) ** self._alpha)

    def next_of(self, count: int) -> int:
        """The next zipfian integer in ``[lower, lower + count)`` (``count`` may change between calls)."""
        if count != self.items:
            if count < 1:
                raise ValueError(f"zipfian item count must be at least 1, not {count}")
            if count > self.items:
                self.zetan += zeta_range(self.items, count, self.theta)
            else:
                self.zetan = zeta(count, self.theta)
            self.items = count
            self._eta = self._compute_eta()
        return self.next()


class ScrambledZipfianGenerator:
    """Zipfian popularity, but the popular items are scattered over ``[lower, upper]`` by FNV hashing.

    YCSB's default request distribution (``requestdistribution=zipfian`` uses it). Draws a
    zipfian number over 10**10 items and returns ``lower + fnvhash64(draw) % count``. The most
    popular item is therefore ``lower + fnvhash64(0) % count`` rather than ``lower``:

        >>> gen = ScrambledZipfianGenerator(random.Random(1), 0, 999)
        >>> draws = [gen.next() for _ in range(100_000)]
        >>> top = max(set(draws), key=draws.count)
        >>> top == fnvhash64(0) % 1000, round(draws.count(top) / len(draws), 2)
        (True, 0.04)
    """

    __slots__ = ("_zipf_next", "count", "lower")

    def __init__(self, rng: random.Random, lower: int, upper: int, theta: float = ZIPFIAN_CONSTANT) -> None:
        if upper < lower:
            raise ValueError(f"zipfian range is empty: [{lower}, {upper}]")
        self.lower = lower
        self.count = upper - lower + 1
        # Like YCSB, only constant 0.99 has a precomputed zeta; other constants compute it here.
        zetan = SCRAMBLED_ZETAN if theta == ZIPFIAN_CONSTANT else None
        self._zipf_next = ZipfianGenerator(rng, 0, SCRAMBLED_ITEM_COUNT, theta, zetan).next

    def next(self) -> int:
        """The next scrambled-zipfian integer in ``[lower, upper]``."""
        return self.lower + fnvhash64(self._zipf_next()) % self.count
