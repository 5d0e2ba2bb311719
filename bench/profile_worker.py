"""Where a worker's CPU goes: py-spy samples of the worker process of a closed-model product_lookup run.

`profile_worker` starts ``dbsurge run ... --processes 1`` (a master and one worker that runs all
users), lets it warm up, records the worker with py-spy for a few seconds (``--format raw``:
collapsed stacks), and sums the samples by function (inclusive and self) and by part of the
stack. Samples are of a running thread only (py-spy leaves out idle waits in the event loop),
so the percentages are of the worker's CPU; time in C code and system calls counts for the
Python function that called it (a socket send is part of the driver call that made it).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.clients import Env, new_tag, summary_all_row
from dbsurge.embedded.servers import free_port

# Each sample goes to the first of these parts found walking its stack from the leaf up.
PARTS = [
    ("driver: psycopg / libpq / socket I/O", ("psycopg/", "dbsurge/targets/", "psycopg_c/", "pymongo/")),
    ("Locust request event and stats", ("locust/stats.py", "locust/event.py", "locust/runners.py",
                                        "dbsurge/measure/latency_buckets.py")),
    ("dbsurge recorder, histograms, aggregation", ("dbsurge/recorder.py", "dbsurge/histogram.py",
                                                  "dbsurge/aggregator.py", "numpy/", "hdrh/")),
    ("workload: key and parameter generation", ("dbsurge/workloads/", "dbsurge/distributions/", "uuid.py",
                                                "hashlib", "random.py")),
    ("gevent hub, greenlet switches, waiting", ("gevent/", "greenlet")),
    ("dbsurge operation loop (timing, choosing, pacing)", ("dbsurge/load/user.py", "dbsurge/load/pacer.py")),
]
OTHER = "other (Locust runner, messaging, logging)"


@dataclass
class Profile:
    samples: int
    seconds: float
    inclusive: list[tuple[str, float]]
    self_time: list[tuple[str, float]]
    parts: list[tuple[str, float]]
    ops_per_s: float | None
    worker_cpu: tuple[float, float] | None = None  # (user, system) CPU seconds per second, while sampled
    native: list[tuple[str, float]] | None = None  # perf: % of CPU samples per binary (kernel, libpython, ...)


def py_spy() -> str | None:
    candidate = Path(sys.executable).parent / "py-spy"
    return str(candidate) if candidate.exists() else shutil.which("py-spy")


def profile_worker(env: Env, *, seconds: int = 8, warmup_s: int = 8, rate: int = 250, top: int = 15,
                   pythonpath: str | None = None, log=print) -> Profile | None:
    spy = py_spy()
    if spy is None:
        log("  py-spy not found (pip install py-spy): no profile")
        return None
    tag = new_tag("profile")
    run_s = warmup_s + seconds + 4
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", env.pg_uri,
           "--users", str(env.users), "--duration", f"{run_s}s", "--operation", "product_lookup", "--quiet",
           "--workload-option", f"products={env.products}", "--results-dir", str(env.workdir / "results"),
           "--run-id", tag, "--no-db-sampler"]
    port = str(free_port())  # a master and one worker process; not Locust's default port (see clients)
    cmd += ["--processes", "1", "--master-bind-port", port, "--master-port", port]
    run_env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(env.workdir),
                            env=run_env)
    raw = env.workdir / f"{tag}.raw"
    cpu = native = None
    try:
        time.sleep(warmup_s)
        worker = _worker_pid(proc.pid)
        if worker is None:
            log("  no worker process found: no profile")
            return None
        before, t0 = psutil.Process(worker).cpu_times(), time.monotonic()
        subprocess.run([spy, "record", "--pid", str(worker), "--duration", str(seconds), "--rate", str(rate),
                        "--format", "raw", "--output", str(raw), "--nonblocking"],
                       check=True, capture_output=True, timeout=seconds + 60)
        after, t1 = psutil.Process(worker).cpu_times(), time.monotonic()
        cpu = ((after.user - before.user) / (t1 - t0), (after.system - before.system) / (t1 - t0))
        native = perf_by_binary(worker, min(seconds, 4), env.workdir / f"{tag}.perf")
    finally:
        proc.wait(timeout=run_s + 120)
    ops = None
    try:
        ops = float(summary_all_row(env.workdir / "results" / tag)["achieved_tps"])
    except (OSError, RuntimeError, KeyError, ValueError):
        pass
    profile = summarise(raw.read_text(), seconds, top, ops)
    profile.worker_cpu, profile.native = cpu, native
    return profile


def perf_by_binary(pid: int, seconds: float, path: Path) -> list[tuple[str, float]] | None:
    """Share of on-CPU samples per binary (kernel, libpython, libpq, ...) from Linux perf, if it is there.

    py-spy samples wall-clock time of a thread that is running *or runnable*; perf samples the CPU.
    The binary split says how much of the worker's CPU is the kernel (socket system calls, wake-ups),
    which no client can avoid, and how much is the Python interpreter.
    """
    perf = shutil.which("perf")
    if perf is None:
        return None
    try:
        subprocess.run([perf, "record", "-F", "999", "-p", str(pid), "-o", str(path), "--", "sleep", str(seconds)],
                       check=True, capture_output=True, timeout=seconds + 60)
        out = subprocess.run([perf, "report", "-i", str(path), "--sort", "dso", "--stdio"], check=True,
                             capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith("%") and not line.startswith("#"):
            try:
                rows.append((parts[1], float(parts[0].rstrip("%"))))
            except ValueError:
                pass
    return rows[:8] or None


def _worker_pid(cli_pid: int) -> int | None:
    """The worker: the grandchild of ``dbsurge run`` (CLI -> Locust master -> worker)."""
    try:
        for child in psutil.Process(cli_pid).children(recursive=True):
            if child.ppid() != cli_pid:
                return child.pid
    except psutil.Error:
        pass
    return None


def _function(frame: str) -> tuple[str, str]:
    """``"name (path/file.py:12)"`` -> (``"name (path/file.py)"``, ``"path/file.py"``)."""
    if " (" not in frame:
        return frame, ""
    name, rest = frame.rsplit(" (", 1)
    path = rest.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({path})", path


def summarise(raw: str, seconds: float, top: int = 15, ops_per_s: float | None = None) -> Profile:
    inclusive: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    parts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        line = line.strip()
        if not line or " " not in line:
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [_function(f) for f in stack.split(";") if f]
        for name in {f for f, _ in frames}:
            inclusive[name] += n
        if frames:
            self_time[frames[-1][0]] += n
        parts[_part(frames)] += n
    scaffolding = ("locust/user/", "gevent/greenlet.py", "run_operations", "_operation_loop")

    def pct(counter: collections.Counter[str], skip: bool) -> list[tuple[str, float]]:
        rows = [(f, 100.0 * c / total) for f, c in counter.most_common() if not (skip and any(
            s in f for s in scaffolding))]
        return rows[:top]

    order = [p for p, _ in PARTS] + [OTHER]
    return Profile(total, seconds, pct(inclusive, True), pct(self_time, False),
                   [(p, 100.0 * parts[p] / total) for p in order if parts[p]] if total else [], ops_per_s)


def _part(frames: list[tuple[str, str]]) -> str:
    for name, path in reversed(frames):
        for part, markers in PARTS:
            if any(m in path or m in name for m in markers):
                return part
    return OTHER
