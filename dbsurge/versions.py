"""The versions a run records in run.json: Python, dbsurge, Locust, gevent and the drivers.

Read from the installed distributions' metadata, so asking imports nothing: the ``dbsurge``
process (scenarios, the CLI) must not import Locust, which monkey-patches the process with gevent.
A package that is not installed is left out.
"""

from __future__ import annotations

import platform
from importlib import metadata

#: run.json key -> distribution name
PACKAGES = {"locust": "locust", "gevent": "gevent", "psycopg": "psycopg", "pymongo": "pymongo"}


def versions() -> dict:
    """``{"python": ..., "dbsurge": ..., "locust": ..., "gevent": ..., "psycopg": ..., "pymongo": ...}``."""
    from dbsurge import __version__

    out = {"python": platform.python_version(), "dbsurge": __version__}
    for key, dist in PACKAGES.items():
        try:
            out[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out
