"""Gevent-native wait functions for psycopg 3.

psycopg drives every network exchange through a generator that yields "wait for this fd to be readable
/ writable" and a *wait function* that blocks until it is. Which wait function psycopg picks is decided
once, when `psycopg.waiting` is imported:

- imported before gevent's monkey-patching: ``wait_c``, a C ``poll()`` loop that blocks the whole gevent
  hub (every other Locust user on the worker freezes while one waits for the database);
- imported after: ``wait_poll`` on gevent's emulated ``select.poll``, which cooperates but builds and
  tears down a poll object (and a greenlet switch through a Python-level poll emulation) on every wait.

`install()` replaces both with functions that park the greenlet on a libev io watcher. On a bare
``select 1`` loop this costs about half the client CPU of ``wait_poll`` (see `docs/` and the helper
report for the numbers). The watcher for a (fd, events) pair is created once and reused: re-arming a
stopped libev watcher is cheaper than building a new one, and psycopg's connection lock guarantees that
only one greenlet waits on a connection's fd at a time.
"""

from __future__ import annotations

import sys
from time import monotonic
from typing import Any

from gevent import get_hub
from gevent.socket import wait as wait_on_watcher
from psycopg import errors as e
from psycopg import waiting

# psycopg's Wait and Ready enums use the selectors' bits (read 1, write 2), which are libev's too: a Wait
# value is passed to the loop as is and sent back to the generator as the Ready value. For a read-and-write
# wait `hub.wait` does not say which side fired; answering "both" is safe because libpq's socket is
# non-blocking: a flush or read attempt on a socket that is not ready just finds nothing to do.

# Watchers reused across waits, for the loop of the thread that first waited (Locust runs all users in
# the main thread). Keyed by fd << 2 | events. Only used with libev, which re-registers a reused fd
# number with epoll on every start (EPOLL_CTL_ADD, EEXIST handled), so a closed-and-reopened fd is safe.
_watchers: dict[int, Any] = {}
_watchers_loop: Any = None

_originals: dict[str, Any] = {}


def _is_libev(loop: Any) -> bool:
    return "libev" in type(loop).__module__


def wait_gevent(gen: Any, fileno: int, interval: float | None = None, timeout: float | None = None) -> Any:
    """Consume a psycopg generator waiting on `fileno` through the gevent hub.

    Same contract as `psycopg.waiting.wait`: returns the generator's value, raises
    `psycopg.errors._WaitTimeout` when `timeout` seconds pass. `interval` is ignored: psycopg wakes up
    every `interval` seconds only so that Ctrl-C is noticed, which the gevent hub does by itself.
    """
    global _watchers_loop
    hub = get_hub()
    loop = hub.loop
    if loop is not _watchers_loop:
        if _watchers_loop is None and _is_libev(loop):
            _watchers_loop = loop
        else:
            return _wait_uncached(gen, fileno, timeout)
    if timeout is not None:
        return _wait_uncached(gen, fileno, timeout)
    watchers = _watchers
    try:
        s = next(gen)
        while True:
            key = (fileno << 2) | s
            watcher = watchers.get(key)
            if watcher is None:
                watcher = watchers[key] = loop.io(fileno, s)
            elif watcher.active:
                # Someone else waits on this fd (never with psycopg's locking, but don't fail on it).
                watcher = loop.io(fileno, s)
            hub.wait(watcher)
            s = gen.send(s)
    except StopIteration as ex:
        return ex.value
    except OSError as ex:
        raise e.OperationalError("connection socket closed") from ex


def _wait_uncached(gen: Any, fileno: int, timeout: float | None) -> Any:
    """`wait_gevent` with a fresh watcher per wait and an optional deadline (connect, notifies)."""
    loop = get_hub().loop
    deadline = None if timeout is None else monotonic() + timeout
    try:
        s = next(gen)
        while True:
            wait_on_watcher(loop.io(fileno, s), _remaining(deadline), _timeout_exc(deadline))
            s = gen.send(s)
    except StopIteration as ex:
        return ex.value
    except OSError as ex:
        raise e.OperationalError("connection socket closed") from ex


def wait_conn_gevent(gen: Any, interval: float | None = None, timeout: float | None = None) -> Any:
    """Consume a psycopg connection generator (which yields ``(fd, Wait)`` pairs) through the gevent hub.

    Same contract as `psycopg.waiting.wait_conn`: the fd may change between steps (libpq trying another
    address), so a fresh watcher is used each time; connecting is rare enough for that not to matter.
    Raises `psycopg.errors._WaitTimeout` after `timeout` seconds, which psycopg turns into
    ``ConnectionTimeout`` -- this is what makes ``connect_timeout`` work against a stopped server.
    """
    loop = get_hub().loop
    deadline = None if timeout is None else monotonic() + timeout
    try:
        fileno, s = next(gen)
        while True:
            wait_on_watcher(loop.io(fileno, s), _remaining(deadline), _timeout_exc(deadline))
            fileno, s = gen.send(s)
    except StopIteration as ex:
        return ex.value
    except OSError as ex:
        raise e.OperationalError("connection socket closed") from ex


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    remaining = deadline - monotonic()
    if remaining <= 0:
        raise e._WaitTimeout("wait timeout expired")
    return remaining


def _timeout_exc(deadline: float | None) -> Any:
    # gevent raises this instance when the watcher's timer fires; psycopg maps it to ConnectionTimeout.
    return None if deadline is None else e._WaitTimeout("wait timeout expired")


def gevent_active() -> bool:
    """True when gevent has monkey-patched the socket module (Locust does so on import)."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None:
        return False
    try:
        return bool(monkey.is_module_patched("socket"))
    except Exception:  # an unexpected gevent version: keep psycopg's own choice
        return False


def install() -> bool:
    """Make psycopg wait through the gevent hub, if gevent is active; return whether it is installed.

    Idempotent and cheap after the first call. psycopg's `Connection` looks the functions up as module
    attributes (``waiting.wait(...)``, ``waiting.wait_conn(...)``), so replacing them in
    `psycopg.waiting` reaches every connection, whenever it was created.
    """
    if waiting.wait is wait_gevent:
        return True
    if not gevent_active():
        return False
    _originals.setdefault("wait", waiting.wait)
    _originals.setdefault("wait_conn", waiting.wait_conn)
    waiting.wait = wait_gevent
    waiting.wait_conn = wait_conn_gevent
    return True


def uninstall() -> None:
    """Restore psycopg's own wait functions (for measurements and tests)."""
    if "wait" in _originals:
        waiting.wait = _originals.pop("wait")
        waiting.wait_conn = _originals.pop("wait_conn")
