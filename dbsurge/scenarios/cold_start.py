"""Making a target cold, and letting it settle: restarts, page-cache eviction, idle waits.

Study 000 made its cluster cold by waiting 20 minutes for a scale-in; study 001 waited 15 minutes
with every connection closed. On a server that does not scale, the scenarios get there with a
restart: of an embedded server of their own (`start_own_embedded`, restarted through its handle)
or of any server through a shell command. A restart empties only the database's own cache, so the
embedded server's files are also dropped from the operating system's page cache
(`evict_from_page_cache`). `settle_after_load` lets a freshly loaded PostgreSQL finish the work a
bulk load leaves behind before anything is measured.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from dbsurge.base.errors import TargetError, UserError
from dbsurge.embedded.servers import EmbeddedMongo, EmbeddedPostgres
from dbsurge.plan.stage_plan import format_duration
from dbsurge.scenarios.report import say

#: The embedded targets a scenario can start (and restart) a server of its own for.
EMBEDDED_KINDS = {"embedded-postgres": "postgres", "embedded-mongo": "mongo"}


def start_own_embedded(kind: str, settings: dict[str, str]) -> Any:
    """An embedded server of this scenario's own, in a temporary directory removed when it stops."""
    say(f"starting an embedded {kind} of this scenario's own (it is restarted during the run)")
    data_dir = Path(tempfile.mkdtemp(prefix=f"dbsurge-scenario-{kind}-"))
    try:
        if kind == "postgres":
            server = EmbeddedPostgres(data_dir, shared_buffers=settings.get("shared_buffers") or "128MB",
                                      delete_on_stop=True)
        else:
            server = EmbeddedMongo(data_dir, cache_size=settings.get("cache_size") or "256M", delete_on_stop=True)
        server.start()
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    return server


def settle_after_load(workload: Any, tables: tuple[str, ...]) -> None:
    """After a fresh load: the database finishes what the load left behind (`Target.settle`: on PostgreSQL,
    VACUUM ANALYZE and a CHECKPOINT) before the first measurement, as the study's long-settled clusters had."""
    workload.target.settle(tables)


def restart_target(run: Any, command: str | None, timeout_s: float = 180.0,
                   evict_os_cache: bool = True) -> dict:
    """Restart the database (our embedded server, or ``command`` in a shell) and wait until it answers.

    ``run`` is the `ScenarioRun`: its ``handle`` (the embedded server) and ``target`` are used.

    For our own embedded server, its data files are then also evicted from the operating system's
    page cache (``evict_os_cache``), so that the first reads really go to storage, as after a
    serverless scale-in. Returns ``restart_s`` (until the target answered again) and
    ``os_cache_evicted_bytes`` (None when nothing was evicted).
    """
    import subprocess

    t0 = time.monotonic()
    evicted = None
    if command:
        say(f"restarting the target: {command}")
        proc = subprocess.run(command, shell=True, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            raise UserError(f"--restart-command exited with {proc.returncode}: {tail[0]}")
    else:
        say(f"restarting the embedded {run.handle.kind} server (its own caches start empty)")
        run.handle.restart()
        if evict_os_cache:
            evicted = evict_from_page_cache(run.handle.data_dir)
            say(f"evicted {evicted / 2**20:,.1f} MiB of the server's files from the operating system's page cache")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            run.target.check()
            break
        except TargetError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return {"restart_s": round(time.monotonic() - t0, 3), "os_cache_evicted_bytes": evicted}


def evict_from_page_cache(directory: Path) -> int:
    """Drop the pages of every file under ``directory`` from the OS page cache; returns the bytes covered.

    ``posix_fadvise(POSIX_FADV_DONTNEED)`` on each file: clean pages are dropped, for these files only
    (no root, no /proc/sys/vm/drop_caches, nothing else on the host is touched). A restarted server
    has flushed its pages, so they are clean. Where the call is missing the files stay cached.
    """
    if not hasattr(os, "posix_fadvise"):
        return 0
    total = 0
    for path in Path(directory).rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        except OSError:
            pass
        finally:
            os.close(fd)
    return total


def wait_idle(seconds_: float, what: str) -> None:
    """Sleep ``seconds_``, saying so (and every minute on long waits)."""
    if seconds_ <= 0:
        return
    say(f"{what}: idle for {format_duration(round(seconds_, 3))}")
    end = time.monotonic() + seconds_
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 60.0))
        if end - time.monotonic() > 1:
            say(f"{what}: {format_duration(round(end - time.monotonic()))} of idle left")


def add_cold_start_options(p, *, restart_help: str) -> None:
    """The options of a scenario that can empty the target's cache: restart, eviction, embedded sizes."""
    p.add_argument("--restart-target", action="store_true", help=restart_help)
    p.add_argument("--restart-command", default=None, metavar="CMD",
                   help="shell command that restarts the target's server, e.g. 'docker restart pg'")
    p.add_argument("--keep-os-cache", action="store_true",
                   help="with --restart-target: leave the server's files in the OS page cache (by default they are "
                        "evicted, so that cold reads go to storage)")
    p.add_argument("--embedded-shared-buffers", default="128MB", metavar="SIZE",
                   help="shared_buffers of the embedded PostgreSQL this scenario starts (default 128MB)")
    p.add_argument("--embedded-cache-size", default="256M", metavar="SIZE",
                   help="WiredTiger cache of the embedded MongoDB-wire server this scenario starts (default 256M)")


def wants_own_server(args) -> bool:
    """True for ``--restart-target`` without ``--restart-command``: the scenario starts and restarts an
    embedded server of its own, which only an ``embedded-*`` target allows (a `UserError` otherwise)."""
    own = bool(args.restart_target and not args.restart_command)
    if own and (args.target or "").strip().lower() not in EMBEDDED_KINDS:
        raise UserError("--restart-target restarts embedded-postgres / embedded-mongo only; for another server "
                        "pass --restart-command CMD (or leave both out and let --idle do it, as the study did)")
    return own
