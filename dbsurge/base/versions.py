"""The versions a run records in run.json: Python, dbsurge (and its build), Locust, gevent and the drivers.

Read from the installed distributions' metadata, so asking imports nothing: the ``dbsurge``
process (scenarios, the CLI) must not import Locust, which monkey-patches the process with gevent.
A package that is not installed is left out.

`build` fingerprints dbsurge's own code. Exactly once across hosts rests on every worker numbering
the plan's arrivals, timing them and shipping its measurements exactly as the master does
(`dbsurge.plan.arrivals`, `dbsurge.plan.stage_plan`, the recorder's payload), and the version number does not
change with every build: a master refuses a worker whose build differs (`dbsurge.engine.protocol`).
"""

from __future__ import annotations

import hashlib
import platform
from functools import cache
from importlib import metadata
from pathlib import Path

from dbsurge import __version__
from dbsurge.layout import BESIDE

#: run.json key -> distribution name
PACKAGES = {"locust": "locust", "gevent": "gevent", "psycopg": "psycopg", "pymongo": "pymongo"}


def versions() -> dict:
    """``{"python": ..., "dbsurge": ..., "locust": ..., "gevent": ..., "psycopg": ..., "pymongo": ...}``."""
    out = {"python": platform.python_version(), "dbsurge": __version__, "dbsurge_build": build()}
    for key, dist in PACKAGES.items():
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


@cache
def build() -> str:
    """A hash of the engine's Python sources, the ``dbsurge`` package as installed (16 hex digits).

    The same for a wheel and for a checkout of the commit it was built from (the same files): the
    locustfiles, shapes and collectors, which a wheel installs inside the package and a checkout
    keeps beside it, are left out. Any change to the engine's code, a comment included, makes
    another build. Read once per process (a few ms).
    """
    root = Path(__file__).resolve().parents[1]  # the dbsurge package: this file is dbsurge/base/versions.py
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] not in BESIDE:
            digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]

