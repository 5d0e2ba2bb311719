"""The product as a user installs it: a clean copy of the tree, its wheel, and fresh venvs without the repository.

A test that runs dbsurge under the repository's own venv proves nothing about the wheel: the
editable install's finder serves every module of the checkout, listed in pyproject or not. These
helpers build the wheel from a copy of the tracked (and new, not ignored) files, make a venv from the
base interpreter, install into it, and run commands there with a clean environment: no PYTHONPATH,
no VIRTUAL_ENV, the venv's bin first on PATH, and a working directory outside the repository.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from runs import REPO

from dbsurge.layout import BESIDE

#: each source root -> where a wheel installs it (setup.py's ROOTS, from the same list)
ROOTS = {"dbsurge": "dbsurge", **{folder: f"dbsurge/{folder}" for folder in BESIDE}}
INSTALL_TIMEOUT = 600


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """A folder `build` fills once for the whole test session, whichever parallel worker asks first.

    pytest-xdist's workers share the parent of their temporary folders: the first one to ask builds
    under a lock and the others wait for it and reuse the result, instead of each building its own
    wheel or venv (a minute of two CPUs each). What is built is only read afterwards.
    """
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / f"built-{name}"
    with open(shared / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".done").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root)
            (root / ".done").write_text("")
    return root


def source_files() -> list[str]:
    """The tree's files as git sees them: tracked, plus new ones that .gitignore does not exclude."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                         capture_output=True).stdout.decode()
    return sorted(f for f in out.split("\0") if f and (REPO / f).is_file())


def copy_tree(files: list[str], dest: Path) -> Path:
    """A clean copy of `files` (no .venv, no build/, no egg-info, no caches) under `dest`."""
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, target)
    return dest


def expected_wheel_files(files: list[str]) -> set[str]:
    """What the wheel must hold: every file under the four roots, at its installed path."""
    out = set()
    for rel in files:
        root, _, rest = rel.partition("/")
        if root in ROOTS and rest:
            out.add(f"{ROOTS[root]}/{rest}")
    return out


def build_wheel(tree: Path, dist: Path) -> Path:
    """``pip wheel`` of the tree (no dependencies, the build backend of this venv); returns the .whl path."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(tree)], check=True, capture_output=True, timeout=INSTALL_TIMEOUT, cwd=tree)
    (wheel,) = dist.glob("dbsurge-*.whl")
    return wheel


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if ".dist-info/" not in n}


def base_python() -> str:
    """The interpreter this venv was made from: a new venv must not chain to the repository's."""
    return getattr(sys, "_base_executable", None) or sys.executable


def fresh_venv(path: Path, *requirements: str) -> Path:
    """A new venv at `path` with `requirements` pip-installed (non-editable); returns its bin directory."""
    subprocess.run([base_python(), "-m", "venv", str(path)], check=True, capture_output=True, timeout=120,
                   env=clean_env(None))
    bin_dir = path / "bin"
    proc = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", *requirements], text=True,
                          capture_output=True, timeout=INSTALL_TIMEOUT, env=clean_env(bin_dir), cwd=path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return bin_dir


def clean_env(bin_dir: Path | None, **extra: str) -> dict[str, str]:
    """The environment of a user's shell with the venv activated: nothing that points at the repository."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith("PYTEST")
           and k != "COV_CORE_SOURCE"}
    repo_bin = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != repo_bin]
    if bin_dir is not None:
        path.insert(0, str(bin_dir))
    env["PATH"] = os.pathsep.join(path)
    env.update(extra)
    return env


def run_in(bin_dir: Path, *cmd: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """`cmd` with the venv's bin first on PATH (``dbsurge``, ``locust`` and ``python`` are the venv's)."""
    return subprocess.run(list(cmd), cwd=cwd, env=clean_env(bin_dir, **env), text=True, capture_output=True,
                          timeout=timeout)


def import_walk_code(package: str = "dbsurge") -> str:
    """A ``python -c`` program that imports every module of the installed `package` and prints their names."""
    return (
        "import importlib, pkgutil, sys\n"
        f"import {package} as root\n"
        "names = [root.__name__]\n"
        "names += [m.name for m in pkgutil.walk_packages(root.__path__, root.__name__ + '.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print('FILE', root.__file__)\n"
        "print('MODULES', ' '.join(sorted(names)))\n"
    )


def source_modules(files: list[str]) -> set[str]:
    """The dotted module names the wheel must import, from the tree's .py files."""
    out = set()
    for installed in expected_wheel_files(files):
        if installed.endswith(".py"):
            name = installed[:-3].replace("/", ".")
            out.add(name.removesuffix(".__init__"))
    return out
