"""Request distributions: the statistics each promises, FNV-64 known values, and the doc examples."""

from __future__ import annotations

import doctest
import math
import random
from collections import Counter

import pytest

from dbsurge.distributions import (
    HotspotGenerator,
    ScrambledZipfianGenerator,
    SkewedLatestGenerator,
    UniformGenerator,
    ZipfianGenerator,
    fnv,
    fnv1a_64,
    fnvhash64,
    hotspot,
    latest,
    uniform,
    zipfian,
)
from dbsurge.distributions.zipfian import SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN, zeta, zeta_range

DRAWS = 100_000


def _within(observed: float, expected: float, n: int, sigmas: float = 5.0) -> bool:
    """``observed`` share of ``n`` Bernoulli draws is within ``sigmas`` standard errors of ``expected``."""
    return abs(observed - expected) <= sigmas * math.sqrt(expected * (1 - expected) / n) + 1e-12


@pytest.mark.parametrize("module", [fnv, uniform, zipfian, hotspot, latest])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


# ---- FNV ------------------------------------------------------------------------------------


def test_fnv1a_64_known_values():
    assert fnv1a_64(b"") == 0xCBF29CE484222325  # the offset basis
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C  # from the FNV reference test vectors
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_fnvhash64_matches_ycsb_keys():
    # YCSB's BasicDB prints the first inserted keys of a hashed load as these three.
    assert [f"user{fnvhash64(i)}" for i in range(3)] == [
        "user6284781860667377211",
        "user8517097267634966620",
        "user1820151046732198393",
    ]


def test_fnvhash64_is_fnv1a_of_the_little_endian_long_then_abs():
    rng = random.Random(9)
    for value in [0, 1, 255, 256, 2**31 - 1, 2**63 - 1, -1, -(2**63)] + [rng.getrandbits(63) for _ in range(200)]:
        unsigned = fnv1a_64(value.to_bytes(8, "little", signed=True))
        signed = unsigned - 2**64 if unsigned >= 2**63 else unsigned
        assert fnvhash64(value) == abs(signed)
        assert 0 <= fnvhash64(value) < 2**63


# ---- uniform --------------------------------------------------------------------------------


def test_uniform_covers_the_range_evenly():
    gen = UniformGenerator(random.Random(1), 10, 19)
    counts = Counter(gen.next() for _ in range(DRAWS))
    assert set(counts) == set(range(10, 20))
    assert all(_within(c / DRAWS, 0.1, DRAWS) for c in counts.values())


def test_uniform_single_value_and_empty_range():
    assert {UniformGenerator(random.Random(1), 5, 5).next() for _ in range(100)} == {5}
    with pytest.raises(ValueError):
        UniformGenerator(random.Random(1), 5, 4)


def test_same_seed_same_sequence():
    def draws(seed):
        gens = [
            UniformGenerator(random.Random(seed), 0, 999),
            ZipfianGenerator(random.Random(seed), 0, 999),
            ScrambledZipfianGenerator(random.Random(seed), 0, 999),
            HotspotGenerator(random.Random(seed), 0, 999),
            SkewedLatestGenerator(random.Random(seed), lambda: 1000),
        ]
        return [[g.next() for _ in range(50)] for g in gens]

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)


# ---- zipfian --------------------------------------------------------------------------------


def test_zeta_tail_approximation_matches_exact_sum_and_ycsb_constant():
    exact = math.fsum(i**-0.99 for i in range(1, 300_001))
    assert zeta(300_000, 0.99) == pytest.approx(exact, rel=1e-12)
    assert zeta_range(1000, 300_000, 0.99) == pytest.approx(exact - zeta(1000, 0.99), rel=1e-12)
    # YCSB ships zeta(10**10, 0.99) precomputed in ScrambledZipfianGenerator.
    assert zeta(SCRAMBLED_ITEM_COUNT, 0.99) == pytest.approx(SCRAMBLED_ZETAN, rel=1e-9)


def test_zipfian_item_zero_is_the_most_popular():
    n = 1000
    gen = ZipfianGenerator(random.Random(2), 0, n - 1)
    counts = Counter(gen.next() for _ in range(DRAWS))
    assert min(counts) >= 0 and max(counts) <= n - 1
    # P(item i) = (1 / (i+1)**theta) / zeta(n): item 0 ~13%, item 1 ~6.7%.
    for item in (0, 1):
        assert _within(counts[item] / DRAWS, (item + 1) ** -0.99 / zeta(n, 0.99), DRAWS)
    assert counts[0] > 1.8 * counts[1] > 1.8 * counts[3]
    assert counts[0] > 50 * (DRAWS / n)  # far above the uniform share


def test_zipfian_next_of_follows_a_growing_item_count():
    gen = ZipfianGenerator(random.Random(2), 0, 9)
    assert all(0 <= gen.next_of(10) < 10 for _ in range(1000))
    draws = [gen.next_of(5000) for _ in range(20_000)]
    assert max(draws) >= 1000 and all(0 <= d < 5000 for d in draws)
    assert gen.zetan == pytest.approx(zeta(5000, 0.99), rel=1e-12)
    gen.next_of(100)  # shrinking recomputes
    assert gen.zetan == pytest.approx(zeta(100, 0.99), rel=1e-12)


def test_zipfian_tiny_ranges():
    one = ZipfianGenerator(random.Random(1), 7, 7)
    assert {one.next() for _ in range(100)} == {7}
    two = ZipfianGenerator(random.Random(1), 7, 8)
    assert {two.next() for _ in range(1000)} == {7, 8}
    with pytest.raises(ValueError):
        ZipfianGenerator(random.Random(1), 0, 10, theta=1.0)


def test_scrambled_zipfian_scatters_the_popular_item():
    n = 1000
    gen = ScrambledZipfianGenerator(random.Random(4), 100, 100 + n - 1)
    counts = Counter(gen.next() for _ in range(DRAWS))
    assert min(counts) >= 100 and max(counts) <= 100 + n - 1
    top, top_count = counts.most_common(1)[0]
    assert top == 100 + fnvhash64(0) % n
    assert top_count > 20 * (DRAWS / n)


def test_scrambled_zipfian_other_constant_computes_its_zeta():
    gen = ScrambledZipfianGenerator(random.Random(4), 0, 99, theta=0.5)
    assert all(0 <= gen.next() < 100 for _ in range(1000))


# ---- hotspot --------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "ops"), [(0.2, 0.8), (0.013, 0.95), (0.5, 0.5)])
def test_hotspot_sends_the_op_fraction_to_the_hot_set(data, ops):
    n = 10_000
    gen = HotspotGenerator(random.Random(5), 0, n - 1, data, ops)
    hot = int(n * data)
    assert gen.hot_count == hot
    draws = [gen.next() for _ in range(DRAWS)]
    assert min(draws) >= 0 and max(draws) <= n - 1
    assert _within(sum(d < hot for d in draws) / DRAWS, ops, DRAWS)
    # Uniform inside the hot set: every hot item is drawn about equally often.
    hot_counts = Counter(d for d in draws if d < hot)
    assert len(hot_counts) == hot or hot > 2000


def test_hotspot_edges():
    all_hot = HotspotGenerator(random.Random(1), 0, 9, 1.0, 0.3)
    assert all(0 <= all_hot.next() <= 9 for _ in range(100))
    no_hot = HotspotGenerator(random.Random(1), 0, 9, 0.0, 0.9)
    assert sorted({no_hot.next() for _ in range(1000)}) == list(range(10))
    tiny = HotspotGenerator(random.Random(1), 0, 9, 0.01, 1.0)  # 0.1 item rounds up to one hot item
    assert {tiny.next() for _ in range(100)} == {0}


# ---- latest ---------------------------------------------------------------------------------


def test_latest_favours_the_newest_records():
    count = [1000]
    gen = SkewedLatestGenerator(random.Random(6), lambda: count[0])
    draws = [gen.next() for _ in range(DRAWS)]
    assert min(draws) >= 0 and max(draws) <= 999
    counts = Counter(draws)
    assert counts.most_common(1)[0][0] == 999
    assert _within(counts[999] / DRAWS, 1 / zeta(1000, 0.99), DRAWS)
    assert sum(d >= 900 for d in draws) > 0.5 * DRAWS  # the newest 10% get most of the reads
    count[0] = 5000  # 4,000 inserts later
    later = Counter(gen.next() for _ in range(DRAWS))
    assert later.most_common(1)[0][0] == 4999
    assert max(later) <= 4999
