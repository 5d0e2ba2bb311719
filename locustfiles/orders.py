"""Study 001's orders workload: product lookups by key and order creation in one transaction.

    locust -f locustfiles/orders.py,shapes/spike.py --target embedded-postgres --headless
"""

from __future__ import annotations

import dbsurge.locust_plugin  # noqa: F401  (registers dbsurge's options and listeners)
from dbsurge.load.user import DbUser


class OrdersUser(DbUser):
    workload = "orders"
