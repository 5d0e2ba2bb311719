"""The commands (`dbsurge`, `dbsurge worker`, `rerun`, `--repeat`, `make demo`): they compose the engine with collectors/ and the scenarios."""
