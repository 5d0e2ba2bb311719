"""Bad input ends in one clear line on stderr and a non-zero exit, before any load is sent."""

from __future__ import annotations

import pytest
from runs import dbsurge


@pytest.mark.parametrize("args, words", [
    (["--workload", "orders", "--target", "postgresql://nobody@127.0.0.1:1/x"], "127.0.0.1:1"),
    (["--workload", "nosuch", "--target", "embedded-postgres"], "unknown workload"),
    (["--workload", "ycsb", "--target", "embedded-mongo", "--workload-option", "recordcount"], "key=value"),
    (["--workload", "ycsb", "--target", "embedded-mongo", "--workload-option", "nosuch=1"], "nosuch"),
    (["--workload", "orders", "--target", "ftp://x"], "ftp://"),
    (["--workload", "orders", "--target", "embedded-postgres", "--shape", "stages", "--stages", "2m@20"], "'20'"),
    (["--workload", "orders", "--target", "embedded-postgres", "--shape", "spike", "--check", "p99<<1ms"],
     "bad --check"),
    (["--workload", "documents", "--target", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500"], "127.0.0.1:1"),
])
def test_one_line_and_nonzero_exit_before_load(tmp_path, args, words):
    proc = dbsurge("run", *args, "--duration", "2s", cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dbsurge: ") and words in lines[0], lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()  # nothing ran
