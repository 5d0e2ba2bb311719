"""Configuration: dbsurge's options and their types, option names, config files, credentials, pass/fail checks, size limits, and the examples in every --help."""
