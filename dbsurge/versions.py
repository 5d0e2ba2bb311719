"""The versions a run records in run.json (and scenarios in theirs): Python, Locust, gevent, drivers."""

from __future__ import annotations

import platform


def versions() -> dict[str, str]:
    """Versions of what took part in a run; a driver that is not installed is left out."""
    import gevent
    import locust

    from . import __version__

    out = {"python": platform.python_version(), "dbsurge": __version__, "locust": locust.__version__,
           "gevent": gevent.__version__}
    for name, attr in (("psycopg", "__version__"), ("pymongo", "version")):
        try:
            module = __import__(name)
        except ImportError:
            continue
        out[name] = getattr(module, attr)
    return out
