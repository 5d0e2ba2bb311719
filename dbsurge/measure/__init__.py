"""Measurement: histograms, the one wire format, the worker's recorder, the master's aggregator, the ledger.

No Locust and no files in here: the recorder turns operations into payloads, the aggregator
merges payloads into cells and hands back rows (`Flush`), and whoever owns the run directory
writes them (`dbsurge.rundir.RunDirectory.write_flush`). The ledger counts what the plan called for.
Every second the aggregator writes also goes to its `LiveFigures` (`live`), which the web panel reads.

    operation (user loop) -> Recorder.record -> Recorder.drain (payload, once a second)
      -> Aggregator.merge (master) -> Aggregator.flush -> RunDirectory.write_flush (timeline.csv, ...)
"""
