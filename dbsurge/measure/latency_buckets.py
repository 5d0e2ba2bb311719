"""A finer rule for Locust's response-time buckets.

Locust keeps a count per rounded response time, rounding below 100 ms to whole milliseconds
(`locust.stats.bucket_response_time`), so a 0.68 ms read shows as 1 ms in its web UI and CSVs.
dbsurge's own percentiles come from HdrHistograms; this rule only makes Locust's view agree:
three significant digits below 100 ms (0.412, 4.12, 41.2), Locust's own rule above.
"""

from __future__ import annotations


def bucket_response_time(response_time: float) -> float:
    if response_time < 1:
        return round(response_time, 3)
    if response_time < 10:
        return round(response_time, 2)
    if response_time < 100:
        return round(response_time, 1)
    if response_time < 1000:
        return int(round(response_time, -1))
    if response_time < 10000:
        return int(round(response_time, -2))
    return int(round(response_time, -3))
