"""Bad input ends in one clear line on stderr and a non-zero exit, before any load is sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from runs import REPO, dbsurge, locust

NO_PG = "postgresql://nobody@127.0.0.1:1/x"  # nothing listens: a case that got this far would fail on it


def assert_one_line(proc, words: str, results: Path) -> None:
    """Exit 2, one ``dbsurge:`` line on stderr naming `words`, no traceback, no run directory."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dbsurge: ") and words in lines[0], lines[0]
    assert len(lines[0]) < 400, lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not results.exists() or not any(p.is_dir() for p in results.iterdir())  # no run directory


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


# `dbsurge run --workload orders --target <nothing listening> ...`: each fails before the target is contacted.
@pytest.mark.parametrize("args, words", [
    # plans
    (["--shape", "stages", "--stages", "nan@10%"], "bad duration 'nan'"),
    (["--shape", "stages", "--stages", "inf@10%"], "bad duration 'inf'"),
    (["--shape", "stages", "--stages", "1e400@10%"], "longer than a year"),
    (["--shape", "stages", "--stages", "1m@" + "9" * 400 + "tps"], "too large"),
    (["--shape", "stages", "--stages", "1m@١٠٠tps"], "bad rate"),  # Arabic-Indic digits
    (["--shape", "stages", "--stages", "１m@10%"], "bad duration"),  # a fullwidth digit
    (["--shape", "stages", "--stages", "x" * 100_000], "…"),  # quoted, not echoed whole
    (["--shape", "spike", "--stage-seconds", "nan"], "--stage-seconds"),
    (["--shape", "spike", "--stage-seconds", "inf"], "--stage-seconds"),
    (["--shape", "spike", "--stage-seconds", "0"], "--stage-seconds must be a positive number"),
    (["--shape", "spike", "--stage-seconds", "-5"], "--stage-seconds"),
    (["--shape", "spike", "--baseline-tps", "nan"], "--baseline-tps"),
    (["--shape", "spike", "--baseline-tps", "inf"], "--baseline-tps"),
    (["--shape", "spike", "--baseline-tps", "0"], "--baseline-tps"),
    (["--shape", "spike", "--baseline-tps", "-10"], "--baseline-tps"),
    (["--shape", "constant", "--rate", "nan"], "--rate"),
    (["--shape", "constant", "--rate", "inf"], "--rate"),
    (["--shape", "constant", "--rate", "0"], "--rate"),
    (["--shape", "constant", "--rate", "-1"], "--rate"),
    (["--shape", "constant", "--rate", "abc"], "--rate"),
    # timing
    (["--max-lag", "nan"], "--max-lag"),
    (["--drain", "nan"], "--drain"),
    (["--drain", "inf"], "--drain"),
    (["--drain", "-1"], "--drain"),
    (["--start-delay", "nan"], "--start-delay"),
    (["--start-delay", "-1"], "--start-delay"),
    (["--align-start", "nan"], "--align-start"),
    (["--align-start", "0"], "--align-start"),
    (["--lag-warn", "nan"], "--lag-warn"),
    (["--cost-cap", "nan"], "--cost-cap"),
    (["--duration", "0s"], "--duration must be a positive duration"),
    (["--duration", "nan"], "--duration"),
    # sizes
    (["--users", "0"], "--users"),
    (["--users", "-1"], "--users"),
    (["--processes", "0"], "--processes"),
    (["--shape", "constant", "--rate", "10", "--max-users", "0"], "--max-users"),
    # operations and checks
    (["--operation", "product_lookup=inf"], "bad --operation"),
    (["--operation", "product_lookup=nan"], "bad --operation"),
    (["--operation", "product_lookup=-1"], "bad --operation"),
    (["--check", "p99<nanms"], "bad --check"),
    (["--check", "p99<infms"], "bad --check"),
    # where the results go
    (["--results-dir", "/proc/nope"], "/proc/nope"),
    (["--run-id", "../../x"], "a run id is a name, not a path"),
    (["--run-id", "a/b"], "a run id is a name, not a path"),
    (["--run-id", ".hidden"], "a run id is a name"),
])
def test_bad_option_fails_before_load(tmp_path, args, words):
    extra = [] if any(a in ("--duration",) for a in args) else ["--duration", "2s"]
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, *args, *extra, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_existing_run_id_is_refused(tmp_path):
    old = tmp_path / "results" / "mine"
    old.mkdir(parents=True)
    (old / "run.json").write_text("{}\n")
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--run-id", "mine", "--duration", "2s",
                   cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["dbsurge: run id mine already exists in results: choose another --run-id or leave it out"]
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["mine"]
    assert (old / "run.json").read_text() == "{}\n"  # untouched


@pytest.mark.parametrize("content, words", [(None, "missing CA file tls_ca_file="),
                                            ("not a certificate\n", "is not a PEM certificate bundle")])
def test_bad_mongo_ca_file(tmp_path, content, words):
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_text(content)
    proc = dbsurge("run", "--workload", "documents", "--target", "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500",
                   "--target-option", f"tls_ca_file={ca}", "--duration", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")
    assert str(ca) in proc.stderr


def test_bad_postgres_ca_file(tmp_path):
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--target-option",
                   f"sslrootcert={tmp_path / 'nope.pem'}", "--duration", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "missing CA file sslrootcert=", tmp_path / "results")


def test_check_on_unknown_operation_fails_before_load(tmp_path, pg_uri):
    """Today's --check on a misspelt operation failed only after the whole run."""
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--check", "nope.p99<5ms", "--duration", "30s",
                   cwd=tmp_path, timeout=60)
    assert_one_line(proc, "no operation 'nope'", tmp_path / "results")
    assert "product_lookup" in proc.stderr  # the known ones are listed


# The same rules for `locust -f ...` users: the plugin's preflight on the local runner.
LOCUSTFILES = f"{REPO / 'locustfiles' / 'orders.py'},{REPO / 'shapes' / 'constant.py'}"


@pytest.mark.parametrize("args, words", [
    (["--rate", "nan"], "--rate"),
    (["--rate", "10", "-t", "0s"], "-t/--run-time must be positive"),
    (["--rate", "10", "--max-users", "0"], "--max-users"),
    (["--rate", "10", "--drain", "inf"], "--drain"),
    (["--rate", "10", "--max-lag", "nan"], "--max-lag"),
    (["--rate", "10", "--operation", "product_lookup=inf"], "bad --operation"),
    (["--rate", "10", "--results-dir", "/proc/nope"], "/proc/nope"),
    (["--rate", "10", "--run-id", "../x"], "a run id is a name"),
])
def test_locust_path(tmp_path, args, words):
    proc = locust("-f", LOCUSTFILES, "--headless", "-L", "WARNING", "--target", NO_PG, *args, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")


def test_locust_path_check_operation(tmp_path, pg_uri):
    proc = locust("-f", LOCUSTFILES, "--headless", "-L", "WARNING", "--target", pg_uri, "--rate", "10", "-t", "30s",
                  "--check", "nope.p99<5ms", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "no operation 'nope'", tmp_path / "results")


@pytest.mark.parametrize("users", ["0", "-1"])
def test_locust_path_closed_model_users(tmp_path, users):
    proc = locust("-f", str(REPO / "locustfiles" / "orders.py"), "--headless", "-L", "WARNING", "--target", NO_PG,
                  "-u", users, "-t", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "-u/--users", tmp_path / "results")


