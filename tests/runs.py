"""Running dbsurge and Locust as a user would, from the tests: real processes, real servers."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def dbsurge(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``dbsurge ARGS`` in a child process; returns the completed process (text output)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "dbsurge.cli", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout)


def locust(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "locust", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout)


def only_run_dir(results: Path) -> Path:
    dirs = [d for d in results.iterdir() if d.is_dir()]
    assert len(dirs) == 1, f"expected one run directory in {results}, found {dirs}"
    return dirs[0]


def run_files(results: Path, name: str) -> list[Path]:
    """``results/*/NAME`` while a run may be starting: the checks before a run make the results
    directory to probe that it is writable and remove it again, so it can vanish between the
    glob's look and its listing; that is "not there yet", not an error."""
    try:
        return sorted(Path(results).glob(f"*/{name}"))
    except FileNotFoundError:
        return []


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
