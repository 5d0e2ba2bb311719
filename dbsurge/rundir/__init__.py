"""The run directory, ``results/<run-id>/``: its one owner.

- `dbsurge.rundir.schema`: every file and folder a run directory holds (and a scenario's and a set of
  repetitions'), the columns of its CSVs and their types, run.json's keys and their types.
- `dbsurge.rundir.writer`: the one writer (`RunDirectory` during a run; `update_run_json`, `append_event`,
  `write_csv`, `write_text` after it; `finalise` for a run whose process died): secrets always removed from
  run.json and events.jsonl, whole files replaced atomically, no temporary file left.
- `dbsurge.rundir.reader`: the one reader, which validates what it reads and refuses a damaged file in one
  line (`check_run_dir`, `read_meta`, `read_rows`).
- `dbsurge.rundir.summaries`: the figures comparisons take from finished runs (headline numbers, stage figures
  across repetitions), read through the reader.

Every other module names a run directory's files through the schema's constants and reads and writes them
through this package.
"""

from __future__ import annotations

from dbsurge.rundir.schema import RUN_SCHEMA, SEGMENT_COLUMNS, STAGE_COLUMNS, TIMELINE_COLUMNS, WORKER_COLUMNS
from dbsurge.rundir.writer import RESERVE_BYTES, RESERVE_NAME, RunDirectory, new_run_id, redact_obj, utc_iso

__all__ = ["RESERVE_BYTES", "RESERVE_NAME", "RUN_SCHEMA", "SEGMENT_COLUMNS", "STAGE_COLUMNS", "TIMELINE_COLUMNS",
           "WORKER_COLUMNS", "RunDirectory", "new_run_id", "redact_obj", "utc_iso"]
