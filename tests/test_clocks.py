"""Clock offsets: the minimum-delay sample of several exchanges, and drift judged against its own error bound."""

from __future__ import annotations

import random

from dbsurge.engine.clocks import ROUND, ClockBook, offset_and_delay


def _exchange(book: ClockBook, worker: str, t1: int, offset_ns: int, out_ns: int, back_ns: int) -> None:
    """One exchange over a path taking ``out_ns`` to the worker and ``back_ns`` back; the worker answers at once."""
    t2 = t1 + out_ns + offset_ns
    book.add(worker, t1, t2, t2, t1 + out_ns + back_ns)


def test_one_exchange_is_known_to_half_its_delay():
    offset, delay = offset_and_delay(t1=0, t2=3_000_000, t3=3_000_000, t4=4_000_000)
    assert delay == 4_000_000 and abs(offset - 0) <= delay // 2  # true offset 0, asymmetric path 3 ms / 1 ms


def test_one_kernel_clock_never_drifts_on_a_loaded_machine():
    """Same clock (offset 0), queues of 0-5 ms each way at random: no drift warning, however unlucky."""
    rng = random.Random(7)
    book = ClockBook()
    for i in range(5):
        _exchange(book, "w", i * 20_000_000, 0, 100_000 + rng.randrange(200_000), 100_000)
    book.offset_ns("w")  # the setup's
    for i in range(60):
        _exchange(book, "w", 10**9 + i * 3_000_000_000, 0, rng.randrange(5_000_000), rng.randrange(5_000_000))
        assert book.warnings() == [], book.describe()
    d = book.describe()["w"]
    assert abs(d["drift_ms"]) <= d["drift_bound_ms"]


def test_a_clock_that_moved_beyond_the_bound_is_named():
    book = ClockBook()
    for i in range(5):
        _exchange(book, "w", i * 20_000_000, 0, 100_000, 100_000)
    assert book.offset_ns("w") == 0
    for i in range(ROUND):  # 4 ms later, round trips of 0.4 ms: the bound is 0.3 ms
        _exchange(book, "w", 10**9 + i * 20_000_000, 4_000_000, 200_000, 200_000)
    d = book.describe()["w"]
    assert d["drift_ms"] == 4.0 and d["drift_bound_ms"] == 0.3, d
    (warning,) = book.warnings()
    assert "drifted" in warning and "+4.000 ms last" in warning


def test_the_setup_offset_stays_what_the_worker_was_given():
    """A later, better sample does not rewrite the offset the worker runs on."""
    book = ClockBook()
    _exchange(book, "w", 0, 500_000_000, 2_000_000, 2_000_000)
    given = book.offset_ns("w")
    _exchange(book, "w", 10**9, 500_000_000, 100_000, 100_000)
    assert book.offset_ns("w") == given == book.describe()["w"]["offset_ms"] * 1e6
