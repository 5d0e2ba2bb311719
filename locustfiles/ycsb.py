"""Study 002's YCSB workload A (50% read, 50% update) with YCSB's property names.

    locust -f locustfiles/ycsb.py --target embedded-mongo --headless -u 8 -t 10s \
        --workload-option requestdistribution=hotspot
"""

from __future__ import annotations

import dbsurge.locust_plugin  # noqa: F401  (registers dbsurge's options and listeners)
from dbsurge.load.user import DbUser


class YcsbUser(DbUser):
    workload = "ycsb"
