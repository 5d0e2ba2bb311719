"""Client CPU from the kernel's own accounting: run a client as a child process, reap its whole tree.

`run_measured` starts a command, waits for it, and returns the user + system CPU of the command
and of every process it started (Locust's ``--processes`` workers, the ``dbsurge run`` -> ``locust``
child), from `resource.getrusage(RUSAGE_CHILDREN)` deltas around the run.

A process's CPU reaches ``RUSAGE_CHILDREN`` only once it has been waited for. Locust's master
does not always reap its workers (its ``atexit`` handler gives up on a worker that has not yet
exited), and an orphan would then be reaped by init, its CPU lost. So the benchmark makes itself a
*child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): orphans of the client's tree are re-parented
to the benchmark, which waits for them before taking the second reading.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field

import psutil

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); return whether it worked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children_cpu_s() -> float:
    """User + system CPU seconds of every reaped descendant of this process so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@dataclass
class Measured:
    """One client run: exit code, wall time, CPU of its whole process tree, output, RSS samples."""

    returncode: int
    wall_s: float
    cpu_s: float
    stdout: str
    stderr: str
    rss: list[tuple[float, dict[int, tuple[int, int]]]] = field(default_factory=list)  # (elapsed_s, {pid: (ppid, rss)})


def run_measured(cmd: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None,
                 timeout_s: float = 900.0, rss_interval_s: float | None = None) -> Measured:
    """Run ``cmd`` to completion and measure the CPU of its process tree.

    Children this process already had (the embedded servers) are left alone. With
    ``rss_interval_s``, the resident set size of every process of the tree is sampled at that
    interval (psutil), for memory-growth measurements.
    """
    keep = frozenset(c.pid for c in psutil.Process().children())
    before = children_cpu_s()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, text=True)
    samples: list[tuple[float, dict[int, int]]] = []
    stop = threading.Event()
    sampler = None
    if rss_interval_s:
        sampler = threading.Thread(target=_sample_rss, args=(proc.pid, started, rss_interval_s, samples, stop),
                                   daemon=True)
        sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        out, err = proc.communicate()
    wall = time.monotonic() - started
    stop.set()
    if sampler is not None:
        sampler.join()
    _reap_orphans(keep)
    return Measured(proc.returncode, wall, children_cpu_s() - before, out, err, samples)


def _sample_rss(pid: int, started: float, interval: float, out: list, stop: threading.Event) -> None:
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    while not stop.wait(interval):
        sample: dict[int, tuple[int, int]] = {}
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                sample[p.pid] = (p.ppid(), p.memory_info().rss)
            except psutil.Error:
                pass
        out.append((time.monotonic() - started, sample))


def _reap_orphans(keep: frozenset[int], timeout_s: float = 30.0, quiet_s: float = 0.3) -> None:
    """Wait for re-parented orphans of the client's tree (not for the servers in ``keep``).

    An exiting process closes its pipes before the kernel re-parents it, so the client's output
    can end a moment before its last orphan shows up here: wait until none has appeared for
    ``quiet_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    me = psutil.Process()
    while time.monotonic() - quiet_since < quiet_s:
        try:
            orphans = [c.pid for c in me.children() if c.pid not in keep]
        except psutil.Error:
            orphans = []
        if orphans:
            quiet_since = time.monotonic()
        for pid in orphans:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if not done and time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
        time.sleep(0.02)


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def least_squares(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares slope of (t, value) points, per unit of t, and its standard error (nan, nan with
    fewer than 3 points or no spread in t): the memory-growth figures of the long run and the soak."""
    n = len(points)
    if n < 3:
        return float("nan"), float("nan")
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    sxx = sum((t - mt) ** 2 for t, _ in points)
    if not sxx:
        return float("nan"), float("nan")
    b = sum((t - mt) * (v - mv) for t, v in points) / sxx
    a = mv - b * mt
    resid = sum((v - a - b * t) ** 2 for t, v in points)
    return b, math.sqrt(resid / (n - 2) / sxx)
