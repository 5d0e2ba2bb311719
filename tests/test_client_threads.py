"""The scenarios' client threads (`dbsurge.scenarios.client_threads`): a signal waits for every client's rows."""

from __future__ import annotations

import os
import signal
import threading
import time
import types

import pytest

from dbsurge.scenarios.client_threads import run_client_threads


class Interrupted(BaseException):
    """What the command's signal handler raises (`dbsurge.commands.cli.Signalled`)."""


def test_a_signal_during_the_wait_waits_for_every_client_before_it_goes_on():
    """The signal lands while the main thread waits for client 0, which then takes the longest to hand over its
    rows. A wait by ``Thread.join`` took client 0 for ended once the signal interrupted its join (CPython's
    clean-up of an interrupted join), and a killed ycsb-load's table missed that client's last 162 rows."""
    finished: list[int] = []

    def work(i: int, state: object, start) -> None:
        while not start.stop.is_set():
            time.sleep(0.01)
        time.sleep(0.6 if i == 0 else 0.05)  # the call in hand, then the rows handed over
        finished.append(i)

    def on_signal(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGUSR1, on_signal)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    try:
        with pytest.raises(Interrupted):
            run_client_threads(3, lambda i: (types.SimpleNamespace(close=lambda: None), None), work)
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert sorted(finished) == [0, 1, 2]
