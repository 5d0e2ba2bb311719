"""The plan's arrivals, numbered: one global sequence that every process computes alike.

Arrival ``k`` (k = 0, 1, 2, ...) has a *position* ``E_k`` on the plan's cumulative-arrivals axis
and is due at ``schedule.time_of(E_k)``:

- uniform (evenly spaced): ``E_k = k``;
- poisson: ``E_k = X_0 + ... + X_k`` with ``X_i ~ Exp(1)`` drawn from one seeded generator, so
  the arrival times form a Poisson process of the plan's rate (a unit-rate Poisson process mapped
  through the inverse of the cumulative rate is a Poisson process of that rate).

Because the sequence depends only on the seed and the plan, a worker with share ``i`` of ``n``
takes arrivals ``i, i+n, ...`` of the *same* sequence, the master can count exactly how many
arrivals each stage planned (`Ledger`), and the arrival times do not depend on how many workers
share the plan. Each arrival's operation is a pure function of its number too
(`operation_of`): an arrival that is dropped or never sent still has an operation, so the
ledger balances per operation and not only per stage.

Positions are drawn in blocks of 4,096 with numpy: a worker that steps one arrival at a time
pays an array index, and the master counts a stage's arrivals with one ``searchsorted`` per block.

    >>> seq = ArrivalSequence("uniform", seed=1)
    >>> [seq.position(k) for k in (0, 1, 2)]
    [0.0, 1.0, 2.0]
    >>> seq.first_at_or_after(2.5)
    3
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

import numpy as np

BLOCK = 4096
_MASK = (1 << 64) - 1


class ArrivalSequence:
    """Positions ``E_k`` of the numbered arrivals (see the module docstring)."""

    def __init__(self, process: str, seed: int):
        if process not in ("uniform", "poisson"):
            raise ValueError(f"unknown arrival process '{process}': use uniform or poisson")
        self.process = process
        self.seed = int(seed)
        self._blocks: dict[int, np.ndarray] = {}
        self._ends: list[float] = []  # last position of each block generated so far, in order
        self._next_block = 0
        self._carry = 0.0
        self._rng = np.random.Generator(np.random.PCG64(self.seed)) if process == "poisson" else None

    # -- poisson blocks, generated in order and kept --------------------------------------------------

    def _block(self, b: int) -> np.ndarray:
        while self._next_block <= b:
            pos = self._carry + np.cumsum(self._rng.exponential(1.0, BLOCK))
            self._blocks[self._next_block] = pos
            self._carry = float(pos[-1])
            self._ends.append(self._carry)
            self._next_block += 1
        return self._blocks[b]

    def forget_before(self, k: int) -> None:
        """Free the blocks wholly before arrival ``k`` (a worker only walks forward)."""
        for b in [b for b in self._blocks if (b + 1) * BLOCK <= k]:
            del self._blocks[b]

    # -- positions ----------------------------------------------------------------------------------

    def position(self, k: int) -> float:
        """``E_k``."""
        if self._rng is None:
            return float(k)
        b, i = divmod(k, BLOCK)
        return float(self._block(b)[i])

    def positions(self, k0: int, k1: int) -> np.ndarray:
        """``E_k`` for ``k0 <= k < k1`` (in order)."""
        if self._rng is None:
            return np.arange(k0, k1, dtype=np.float64)
        if k1 <= k0:
            return np.empty(0)
        parts = []
        for b in range(k0 // BLOCK, (k1 - 1) // BLOCK + 1):
            blk = self._block(b)
            lo, hi = max(k0 - b * BLOCK, 0), min(k1 - b * BLOCK, BLOCK)
            parts.append(blk[lo:hi])
        return np.concatenate(parts)

    def first_at_or_after(self, e: float) -> int:
        """The smallest ``k`` with ``E_k >= e`` (for e = inf: a very large number)."""
        if not math.isfinite(e):
            return 1 << 62
        if self._rng is None:
            return max(0, math.ceil(e))
        while not self._ends or self._ends[-1] < e:
            self._block(self._next_block)
        b = bisect_left(self._ends, e)  # the first block that reaches e
        blk = self._block(b)
        return b * BLOCK + int(np.searchsorted(blk, e, side="left"))


# -- the operation of an arrival -------------------------------------------------------------------------


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _splitmix64_np(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def normalised_weights(weights: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """`weights` divided by the largest: the same proportions, each at most 1, their sum at most their count.

        >>> normalised_weights([("a", 1e308), ("b", 1e308)])
        [('a', 1.0), ('b', 1.0)]
    """
    top = max((w for _, w in weights), default=0.0)
    if not (0.0 < top < math.inf):
        return weights
    return [(n, w / top) for n, w in weights]


def operation_mix_weights(requested: list, known: dict) -> list[tuple[str, float]]:
    """The (operation, weight) pairs a run uses: what --operation asked for, else the workload's own.

    Scaled so that the largest is 1 (`normalised_weights`): weights are any finite numbers, and two of
    1e308 summed to inf, after which the cumulative shares sent every operation to the last name."""
    weights = [(n, float(w)) for n, w in requested if n in known and w > 0]
    return normalised_weights(weights or [(n, float(w)) for n, w in known.items() if w > 0])


class OperationMix:
    """Which operation arrival ``k`` runs: weights, and a hash of (seed, k) into them.

    The hash is splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
    generators", 2014), the same in Python integers and in numpy's wrapping uint64, so a worker
    choosing one arrival's operation and the master counting a stage's operations agree exactly.
    """

    def __init__(self, weights: list[tuple[str, float]], seed: int):
        if not weights:
            raise ValueError("an operation mix needs at least one operation")
        self.names = [n for n, _ in weights]
        # scaled by the largest first: weights of 1e308 would sum to inf (every arrival to the last operation)
        weights = normalised_weights([(n, float(w)) for n, w in weights])
        total = float(sum(w for _, w in weights))
        acc, cum = 0.0, []
        for _, w in weights:
            acc += w
            cum.append(acc / total)
        cum[-1] = 1.0
        self._cum = cum
        self._cum_np = np.array(cum)
        self._salt = (int(seed) * 0x2545F4914F6CDD1D) & _MASK

    def of(self, k: int) -> int:
        """Index (into ``names``) of arrival ``k``'s operation."""
        if len(self._cum) == 1:
            return 0
        u = (_splitmix64((k ^ self._salt) & _MASK) >> 11) * (1.0 / (1 << 53))
        return bisect_right(self._cum, u)

    def of_many(self, ks: np.ndarray) -> np.ndarray:
        if len(self._cum) == 1 or ks.size == 0:
            return np.zeros(ks.size, dtype=np.int64)
        h = _splitmix64_np(ks.astype(np.uint64) ^ np.uint64(self._salt))
        u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return np.searchsorted(self._cum_np, u, side="right").astype(np.int64)
