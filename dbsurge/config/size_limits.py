"""Bounds on every size a run takes from its options, checked before anything starts.

A typo (``--processes 1000``, ``--users 1000000``, a generated plan of 10,000 stages) used to take the
machine's memory or processes and print nothing. Each bound here is refused in one line that names
it and the environment variable that raises it on purpose:

======================  ======================================  ==========================
size                    bound                                   raised by
======================  ======================================  ==========================
``--processes``         `PROCESSES_PER_CORE` x the CPU cores      ``DBSURGE_MAX_PROCESSES``
users on this host      what `MEMORY_SHARE` of the available      ``DBSURGE_MAX_HOST_USERS``
                        memory holds at `USER_BYTES` a user
stages in a plan        `MAX_STAGES`                              ``DBSURGE_MAX_STAGES``
arrivals in a plan      `MAX_ARRIVALS` (duration x rate)          ``DBSURGE_MAX_ARRIVALS``
closed-model users      the target's free connections             ``DBSURGE_MAX_CONNECTIONS``
======================  ======================================  ==========================

``-1`` processes is one per core, as in Locust. The open connections a run may need are checked
against the target's own limit where it can be read (`check_connections`: PostgreSQL's
``max_connections``, MongoDB's ``serverStatus`` connections).

    >>> check_processes(3, cores=2)
    3
    >>> check_processes(9, cores=2, environ={})
    Traceback (most recent call last):
    ...
    dbsurge.base.errors.UserError: --processes 9 is more than 4 per CPU core (8 on this host's 2): use -1 for one per core, or set DBSURGE_MAX_PROCESSES=9 to run that many on purpose
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping

from dbsurge.base.errors import UserError

PROCESSES_PER_CORE = 4
#: What one user costs on its load host: a greenlet, its connection's buffers and driver objects, its
#: share of the recorder (measured ~0.3 MB with psycopg and pymongo; rounded up for the other drivers).
USER_BYTES = 1024 * 1024
MEMORY_SHARE = 0.5
MAX_STAGES = 500
#: 10^8 arrivals (a day at 1,150 TPS, three hours at 10,000): the master counts the plan's arrivals at the end,
#: each of them (`measure.ledger.planned_counts`, about 40 ns an arrival: 4 s here), and the workers write
#: off the slots they did not send the same way. At 10^12 (the bound before) that was hours after the plan.
MAX_ARRIVALS = 1e8


def _limit(name: str, default: float, environ: Mapping[str, str] | None) -> float:
    """The bound, or the number in environment variable `name` when it is set (a whole number >= 1)."""
    env = os.environ if environ is None else environ
    text = (env.get(name) or "").strip()
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise UserError(f"{name} must be a whole number of at least 1, not '{text[:30]}'")
    return int(text)


def check_processes(processes: int | None, *, cores: int | None = None,
                    environ: Mapping[str, str] | None = None) -> int | None:
    """``--processes`` within `PROCESSES_PER_CORE` x cores (``-1`` is one per core); returns the count."""
    if processes is None or processes == 0:
        return processes
    cores = cores or os.cpu_count() or 1
    if processes == -1:
        return cores
    bound = _limit("DBSURGE_MAX_PROCESSES", PROCESSES_PER_CORE * cores, environ)
    if processes > bound:
        raise UserError(f"--processes {processes} is more than {PROCESSES_PER_CORE} per CPU core ({bound:g} on this "
                        f"host's {cores}): use -1 for one per core, or set DBSURGE_MAX_PROCESSES={processes} to run "
                        f"that many on purpose")
    return processes


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_users(users: int | None, flag: str, *, memory: int | None = None,
                environ: Mapping[str, str] | None = None) -> None:
    """`users` on this host fit `MEMORY_SHARE` of the available memory at `USER_BYTES` each."""
    if users is None:
        return
    memory = available_memory() if memory is None else memory
    if memory is None:
        return
    default = max(1, int(memory * MEMORY_SHARE // USER_BYTES))
    bound = _limit("DBSURGE_MAX_HOST_USERS", default, environ)
    if users > bound:
        raise UserError(f"{flag} {users} is more users than this host's memory holds ({bound:g} at about "
                        f"{USER_BYTES // 1024 // 1024} MB each in half of {memory / 1e9:.1f} GB available): spread "
                        f"them over workers, or set DBSURGE_MAX_HOST_USERS={users} to try on purpose")


def check_plan_size(plan, *, environ: Mapping[str, str] | None = None) -> None:
    """A plan's stages and arrivals (duration x rate) within `MAX_STAGES` and `MAX_ARRIVALS`."""
    if plan is None:
        return
    stages = len(plan.stages)
    bound = _limit("DBSURGE_MAX_STAGES", MAX_STAGES, environ)
    if stages > bound:
        raise UserError(f"the plan has {stages} stages, more than {bound:g}: each stage is a row in every table and "
                        f"a timer on every worker; merge stages, or set DBSURGE_MAX_STAGES={stages} on purpose")
    arrivals = sum(s.arrivals for s in plan.stages)
    if not math.isfinite(arrivals):
        return  # an open-ended constant rate: counted as it goes, never planned ahead
    bound_a = _limit("DBSURGE_MAX_ARRIVALS", MAX_ARRIVALS, environ)
    if arrivals > bound_a:
        raise UserError(f"the plan needs {arrivals:.3g} arrivals (duration x rate), more than {bound_a:.3g}: shorten "
                        f"it or lower the rate, or set DBSURGE_MAX_ARRIVALS={math.ceil(arrivals)} on purpose")


def check_connections(users: int | None, limit: int | None, in_use: int | None, target: str,
                      environ: Mapping[str, str] | None = None) -> None:
    """Users that each hold a connection must fit the target's own limit (None: not readable, not checked).

    ``DBSURGE_MAX_CONNECTIONS=N`` lets up to N users through on purpose: a test of what the server does
    when it refuses connections (its SQLSTATE 53300 is then booked per slot, `dbsurge.load.user`)."""
    if not users or limit is None:
        return
    free = limit - (in_use or 0)
    if users > _limit("DBSURGE_MAX_CONNECTIONS", free, environ):
        raise UserError(f"up to {users} users would each open a connection, but {target} allows {limit} "
                        f"connections with {in_use or 0} in use: lower --users to {max(free, 0)}, raise the "
                        f"server's limit, or set DBSURGE_MAX_CONNECTIONS={users} to see it refuse them on purpose")


# -- files a user names: regular files only, read with a bound --------------------------------------------------


class FileRefused(Exception):
    """A user-named file that is not read: not a regular file, or larger than its bound. `reason` completes
    "<file> ..." in the caller's one line (``is a FIFO (named pipe), not a regular file``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def read_bounded(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of regular file `path`, at most `limit` of them, else `FileRefused` (or the `OSError`).

    ``st_size`` is no bound: it is 0 for /dev/zero (which never ends) and for a FIFO (whose open waits
    for a writer that may never come). The file is opened without blocking, refused unless the opened
    file is regular (checked on the descriptor: no window to swap the file), and read up to ``limit + 1``
    bytes, so a file that grows while it is read is still refused, never read whole.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), None)
            raise FileRefused(f"is {kind}, not a regular file" if kind else "is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1024 * 1024, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise FileRefused(f"is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
