"""The bottom layer: what every other part uses and that imports nothing of dbsurge (errors a user can cause, the time format, redaction, bounded JSON, text tables, versions)."""
