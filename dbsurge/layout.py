"""Where dbsurge's parts live: the engine, and the folders a checkout keeps beside it.

``locustfiles/``, ``shapes/`` and ``collectors/`` stay at the top of a checkout (Locust users pass
them with ``-f``), and a wheel installs each inside the package (``dbsurge.locustfiles``...). The
one list of them is here: ``setup.py`` reads this file by path at build time (so it imports
nothing), `dbsurge.base.versions` leaves them out of the build hash, and the install tests map a
checkout's files to a wheel's with it.
"""

#: Folders beside ``dbsurge/`` in a checkout that a wheel installs inside it, as ``dbsurge.<folder>``.
BESIDE = ("locustfiles", "shapes", "collectors")
