"""Study 000's documents workload: reads by id (all ids or a hot set) and batch-timed full scans.

    locust -f locustfiles/documents.py --target embedded-mongo --headless -u 8 -t 30s
"""

from __future__ import annotations

import dbsurge.locust_plugin  # noqa: F401  (registers dbsurge's options and listeners)
from dbsurge.load.user import DbUser


class DocumentsUser(DbUser):
    workload = "documents"
