"""dbsurge: distributed, open-model load testing for databases, built on Locust."""

from __future__ import annotations

__version__ = "0.1.0"
