"""dbsurge's performance benchmark: generator efficiency against pgbench, plain Locust and bare driver loops.

``python bench/run.py`` (``make bench``) runs everything and writes ``bench/RESULTS.md``; see that
file for what is measured and how.
"""
