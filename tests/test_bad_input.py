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
    # numbers in ASCII digits only, as the rate endpoint reads them (float() takes all of these)
    (["--shape", "constant", "--rate", "٥٠"], "argument --rate: expected a number in ASCII digits"),
    (["--shape", "constant", "--rate", "１０"], "argument --rate"),  # fullwidth
    (["--shape", "constant", "--rate", "1_000"], "not '1_000'"),
    (["--shape", "constant", "--rate", "1e400"], "too large"),
    (["--shape", "spike", "--baseline-tps", "٥٠"], "argument --baseline-tps"),
    (["--shape", "spike", "--stage-seconds", "1_0"], "argument --stage-seconds"),
    (["--users", "٥"], "argument --users/-u"),
    (["-u", "1_0"], "argument --users/-u"),
    (["--processes", "٢"], "argument --processes"),
    (["--max-users", "1e3"], "argument --max-users"),
    (["--max-users", "9" * 400], "argument --max-users"),
    (["--seed", "nan"], "argument --seed"),
    (["--drain", "٠"], "argument --drain"),
    (["--cost-cap", "inf"], "argument --cost-cap"),
    (["--prometheus-port", "٨٠"], "argument --prometheus-port"),
    (["--spawn-rate", "٥"], "argument -r/--spawn-rate"),  # Locust's own options too
    (["--web-port", "٨٠٨٩"], "argument --web-port"),
    # ports, whether or not their feature is on
    (["--web-port", "70000"], "--web-port must be a port number from 1 to 65535, not 70000"),
    (["--web", "--web-port", "70000"], "--web-port must be a port number"),
    (["--web-port", "0"], "--web-port"),
    (["--master-bind-port", "99999"], "--master-bind-port must be a port number"),
    (["--prometheus-port", "70000"], "--prometheus-port must be a port number"),
    # checks that could never fail, or that mean something else than they say
    (["--check", "failure_rate<200%"], "a failure rate is at most 100%"),
    (["--check", "failure_rate<1"], "a failure rate without % is a fraction below 1; write 1%"),
    (["--check", "failure_rate<5"], "write 5%"),
    (["--check", "p99<50"], "p99 takes a time unit (us, ms or s), e.g. p99<50ms"),
    (["--check", "lag_p99<=2"], "lag_p99 takes a time unit"),
    (["--check", "p99<٥٠ms"], "bad --check"),
    # the cost's runners, checked at the start, not when cost.csv is missing at the end
    (["--runner", "foo"], "bad --runner 'foo': 'foo' is not an EC2 instance type"),
    (["--runner", "m7g.4xlarge:-1"], "the count must be a whole number of at least 1"),
    (["--runner", "m7g.4xlarge:0"], "the count must be from 1 to"),
    (["--runner", "m7g.4xlarge:٢"], "bad --runner"),
    (["--runner", "m7g.4xlarge:x"], "bad --runner"),
    (["--cloudwatch", "foo"], "foo"),  # checked before the target, like every other option
    (["--expect-workers", "٣"], "argument --expect-workers"),
    # workload options: the same ASCII numbers, and what the database column holds
    (["--workload-option", "products=١٠٠"], "products='١٠٠': expected an integer in ASCII digits"),
    (["--workload-option", "products=1_0_0"], "expected an integer in ASCII digits"),
    (["--workload-option", "order_proportion=٠.٥"], "in ASCII digits"),
    (["--workload-option", "customers=" + "1" + "0" * 26], "expected an integer <= 2,147,483,647"),
    (["--workload-option", "items_min=6"], "items_min=6 is above items_max=5"),  # before the target, now
    (["--max-lag", "1_0ms"], "--max-lag"),
    # where the results go
    (["--run-id", ""], "--run-id is empty"),
    (["--run-id="], "--run-id is empty"),
    (["--repeat", "2", "--run-id", ""], "--run-id is empty"),
    (["--results-dir", "/proc/nope"], "/proc/nope"),
    (["--results-dir", ""], "--results-dir is empty"),  # it wrote into the working directory
    (["--results-dir=  "], "--results-dir is empty"),
    (["--repeat", "2", "--results-dir", ""], "--results-dir is empty"),
    (["--run-id", "../../x"], "a run id is a name, not a path"),
    (["--run-id", "a/b"], "a run id is a name, not a path"),
    (["--run-id", ".hidden"], "a run id is a name"),
])
def test_bad_option_fails_before_load(tmp_path, args, words):
    # a spike or stages plan lasts as long as its stages: --duration with one is itself refused
    extra = [] if any(a in ("--duration", "spike", "stages") for a in args) else ["--duration", "2s"]
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, *args, *extra, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")
    assert not (tmp_path / "results").exists()


# Options the chosen shape would not read, or that contradict each other: refused before anything starts (they
# used to be dropped without a word: `--shape spike --duration 10s` ran the 6-minute spike).
@pytest.mark.parametrize("args, words", [
    (["--shape", "spike", "--duration", "10s"], "--duration 10s does not apply to --shape spike"),
    (["--shape", "spike", "-t", "10s"], "use --stage-seconds"),
    (["--shape", "stages", "--stages", "3s@10tps", "--duration", "10s"], "does not apply to --shape stages"),
    (["--shape", "stages", "--stages", "3s@10tps", "--rate", "5"], "--rate and --stages both set the rate"),
    (["--shape", "constant", "--stages", "3s@10tps", "--rate", "5"], "--rate and --stages both set the rate"),
    (["--shape", "spike", "--rate", "5"], "--rate is the constant shape's rate, not read by --shape spike"),
    (["--shape", "constant", "--rate", "5", "--stages", "3s@10tps"], "--rate and --stages"),
    (["--shape", "constant", "--rate", "5", "--stage-seconds", "3"], "--stage-seconds is the spike shape's"),
    (["--shape", "spike", "--stages", "3s@10tps", "--stage-seconds", "3"], "--stage-seconds and --stages"),
    (["--shape", "stages", "--stages", "3s@10tps", "--stage-seconds", "3"], "--stage-seconds and --stages"),
    (["--stages", "3s@10tps"], "--stages needs a shape: add --shape stages"),
    (["--rate", "5"], "--rate needs a shape: add --shape constant"),
    (["--stage-seconds", "3"], "--stage-seconds needs a shape"),
    (["--users", "5", "--max-users", "1"], "--users 5 and --max-users 1 disagree"),
    (["--max-users", "5"], "--max-users 5 caps the users a shape starts: without --shape"),
    (["--shape", "spike", "--users", "5", "--max-users", "1"], "--users 5 and --max-users 1 disagree"),
    (["--shape", "spike", "--repeat", "2", "--duration", "10s"], "does not apply to --shape spike"),
])
def test_conflicting_plan_options_are_refused(tmp_path, args, words):
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, *args, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")


@pytest.mark.parametrize("env, words", [({"DBSURGE_STAGES": "3s@10tps"}, "--stages needs a shape"),
                                        ({"LOCUST_RUN_TIME": "10s", "DBSURGE_SHAPE": "spike"}, "--duration 10")])
def test_conflicting_plan_options_from_the_environment(tmp_path, env, words):
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, cwd=tmp_path, env=env, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")


def test_users_and_max_users_that_agree_pass(tmp_path):
    """The same cap given twice is no conflict: the run gets as far as the target."""
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "spike", "--stage-seconds", "1",
                   "--users", "5", "--max-users", "5", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "127.0.0.1:1", tmp_path / "results")


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


def test_empty_results_dir_leaves_a_run_in_the_working_directory_alone(tmp_path):
    """``--results-dir ''`` was checked as results/ but written as ./: ./mine's run.json was replaced and its
    timeline appended to."""
    old = tmp_path / "mine"
    old.mkdir()
    (old / "run.json").write_text("{}\n")
    (old / "timeline.csv").write_text("t\n")
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--run-id", "mine", "--results-dir", "",
                   "--duration", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "--results-dir is empty", tmp_path / "results")
    assert (old / "run.json").read_text() == "{}\n" and (old / "timeline.csv").read_text() == "t\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_existing_run_is_looked_for_where_the_run_writes(tmp_path):
    """The existing-run check looks in the directory the run would write, not in results/."""
    old = tmp_path / "elsewhere" / "mine"
    old.mkdir(parents=True)
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--run-id", "mine", "--results-dir",
                   str(tmp_path / "elsewhere"), "--duration", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "run id mine already exists in", tmp_path / "results")


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


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "directory"])
def test_ca_file_that_is_not_a_regular_file(tmp_path, kind):
    """Said as what it is, not as a missing file (a FIFO would otherwise wait in the TLS library's read)."""
    import os

    ca = tmp_path / "ca.pem"
    if kind == "fifo":
        os.mkfifo(ca)
    elif kind == "directory":
        ca.mkdir()
    else:
        ca = Path("/dev/zero")
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--target-option", f"sslrootcert={ca}",
                   "--duration", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, f"CA file sslrootcert='{ca}' is not a regular file", tmp_path / "results")


def test_bad_postgres_ca_file(tmp_path):
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--target-option",
                   f"sslrootcert={tmp_path / 'nope.pem'}", "--duration", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "missing CA file sslrootcert=", tmp_path / "results")


@pytest.mark.parametrize("text, words", [("1min", "expected e.g. 30s, 2m, 1h or 250ms"),
                                         ("off", "operations must have a time bound, it cannot be turned off")])
@pytest.mark.parametrize("how", ["--op-timeout", "--target-option"])
def test_op_timeout_is_read_alike_on_the_command_line_and_as_a_target_option(tmp_path, text, words, how):
    """``--target-option op_timeout=1min`` passed (and went on to connect) where ``--op-timeout 1min`` was refused."""
    given = ["--op-timeout", text] if how == "--op-timeout" else ["--target-option", f"op_timeout={text}"]
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, *given, "--duration", "2s", cwd=tmp_path,
                   timeout=60)
    assert_one_line(proc, f"'{text}': {words}", tmp_path / "results")


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
    (["--rate", "٥٠"], "argument --rate: expected a number in ASCII digits"),
    (["--rate", "1_000"], "not '1_000'"),
    (["--rate", "10", "--web-port", "70000"], "--web-port must be a port number"),
    (["--rate", "10", "--spawn-rate", "١"], "argument -r/--spawn-rate"),
    (["--rate", "10", "--check", "p99<50"], "takes a time unit"),
    (["--rate", "10", "--runner", "foo"], "bad --runner"),
    (["--rate", "10", "--run-id", ""], "--run-id is empty"),
    (["--rate", "10", "--results-dir", ""], "--results-dir is empty"),
])
def test_locust_path(tmp_path, args, words):
    proc = locust("-f", LOCUSTFILES, "--headless", "-L", "WARNING", "--target", NO_PG, *args, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")


def test_locust_path_check_operation(tmp_path, pg_uri):
    proc = locust("-f", LOCUSTFILES, "--headless", "-L", "WARNING", "--target", pg_uri, "--rate", "10", "-t", "30s",
                  "--check", "nope.p99<5ms", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "no operation 'nope'", tmp_path / "results")


@pytest.mark.parametrize("args, words", [
    (["--rate", "10", "--stages", "2s@5tps"], "--rate and --stages both set the rate"),
])
def test_locust_path_conflicting_plan_options(tmp_path, args, words):
    proc = locust("-f", LOCUSTFILES, "--headless", "-L", "WARNING", "--target", NO_PG, *args, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")


@pytest.mark.parametrize("args", [["-u", "5"], ["-r", "2"], ["-u", "5", "-r", "2"]])
def test_locust_path_users_under_constant_shape_warned(tmp_path, args):
    """Locust's -u and -r do nothing under the constant shape (the rate paces, --max-users caps): one warning
    line, as Locust warns under a shape that does not read them, then the run goes on (here to the target)."""
    proc = locust("-f", LOCUSTFILES, "--headless", "-L", "WARNING", "--target", NO_PG, "--rate", "10", *args,
                  cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "no effect under the constant shape" in line]
    assert len(warned) == 1, proc.stderr
    assert ("-u/--users" in warned[0]) == ("-u" in args) and ("-r/--spawn-rate" in warned[0]) == ("-r" in args)
    assert "127.0.0.1:1" in proc.stderr.splitlines()[-1]


@pytest.mark.parametrize("users", ["0", "-1"])
def test_locust_path_closed_model_users(tmp_path, users):
    proc = locust("-f", str(REPO / "locustfiles" / "orders.py"), "--headless", "-L", "WARNING", "--target", NO_PG,
                  "-u", users, "-t", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "-u/--users", tmp_path / "results")




@pytest.mark.parametrize("content, words", [
    (b"rate = 80\n\xff\n", "is not UTF-8 text (byte 0xff at offset 10)"),
    (bytes(range(256)), "is not text (a NUL byte at offset 0)"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "is not text"),
    ("rate = \u0665\u0660\n".encode(), "argument --rate: expected a number in ASCII digits"),
    (b"web-port = 70000\n", "--web-port must be a port number"),
    (b"run-id = \n", "--run-id is empty"),
])
@pytest.mark.parametrize("how", ["--config", "locust.conf"])
def test_config_file_is_text(tmp_path, content, words, how):
    """A config file that is not text is one line naming it, not a UnicodeDecodeError traceback."""
    conf = tmp_path / ("locust.conf" if how == "locust.conf" else "my.conf")
    conf.write_bytes(content)
    args = ["--config", str(conf)] if how == "--config" else []
    env: dict = {}
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "constant", "--rate", "10", *args,
                   "--duration", "2s", cwd=tmp_path, env=env, timeout=60)
    if "rate = " in content.decode(errors="replace"):
        proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "constant", *args,
                       "--duration", "2s", cwd=tmp_path, env=env, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")
    if "text" in words:
        assert conf.name in proc.stderr


def test_missing_config_file(tmp_path):
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--config", str(tmp_path / "nope.conf"),
                   "--duration", "2s", cwd=tmp_path, timeout=60)
    assert_one_line(proc, "nope.conf not found", tmp_path / "results")


@pytest.mark.parametrize("name, value", [("DBSURGE_RATE", "٥٠"), ("DBSURGE_MAX_USERS", "1_0"),
                                         ("LOCUST_WEB_PORT", "70000"), ("DBSURGE_SEED", "nan")])
def test_environment_values_are_checked_too(tmp_path, name, value):
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "constant", "--rate", "10",
                   "--duration", "2s", cwd=tmp_path, env={name: value}, timeout=60)
    if name == "DBSURGE_RATE":  # the command line wins over the environment: leave --rate out
        proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "constant", "--duration", "2s",
                       cwd=tmp_path, env={name: value}, timeout=60)
    assert_one_line(proc, value, tmp_path / "results")


def test_tiny_op_timeout_is_one_line_or_a_run(tmp_path, pg_uri):
    """--op-timeout 1ms: the first query before load times out; one line naming it, never a traceback."""
    loaded = dbsurge("load", "--workload", "orders", "--target", pg_uri, "--quiet", cwd=tmp_path, timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]  # the data set in place: no "loading" line below
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--rate", "20",
                   "--duration", "2s", "--op-timeout", "1ms", cwd=tmp_path, timeout=120)
    assert "Traceback" not in proc.stderr + proc.stdout and "Uncaught" not in proc.stderr, proc.stderr[-3000:]
    if proc.returncode == 2:
        assert_one_line(proc, "op_timeout=0.001s", tmp_path / "results")
    else:  # a machine fast enough for 1 ms: a run that accounts for every arrival
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        assert "planned" in proc.stdout


# -- sizes: each bound in one line, with the variable that raises it, before anything starts -----------------------

MANY_STAGES = ",".join(["1s@10tps"] * 501)


@pytest.mark.parametrize("args, words", [
    (["--processes", "1000"], "--processes 1000 is more than 4 per CPU core"),
    (["--processes", "100000"], "DBSURGE_MAX_PROCESSES=100000"),
    (["--users", "1000000"], "DBSURGE_MAX_HOST_USERS=1000000"),
    (["--shape", "constant", "--rate", "10", "--max-users", "9000000"], "more users than this host's memory holds"),
    (["--shape", "stages", "--stages", MANY_STAGES], "the plan has 501 stages, more than 500"),
    (["--shape", "stages", "--stages", "8000h@9000000tps"], "DBSURGE_MAX_ARRIVALS="),
    # a rate a generator could plan, and arrivals the end of the run can count in seconds (docs: README, sizes)
    (["--shape", "stages", "--stages", "3s@1000000000tps"], "too large, at most 10,000,000 TPS"),
    (["--shape", "stages", "--stages", "3s@10000001tps"], "at most 10,000,000 TPS"),
    (["--shape", "stages", "--stages", "3s@ramp(10tps..20000000tps)"], "at most 10,000,000 TPS"),
    (["--shape", "stages", "--stages", "3s@1001%", "--baseline-tps", "1000000"], "at most 10,000,000 TPS"),
    (["--shape", "stages", "--stages", "2h@20000tps"], "the plan needs 1.44e+08 arrivals"),
    (["--shape", "constant", "--rate", "20000000"], "--rate must be a positive number of TPS, at most 1e+07"),
    (["--shape", "stages", "--stages", "2s@10tps", "--processes", "1", "--master-bind-host", "10.233.0.5"],
     "--processes workers connect to 127.0.0.1"),
])
def test_size_bounds(tmp_path, args, words):
    extra = [] if "--shape" in args else ["--duration", "2s"]
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, *args, *extra, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")


def test_size_bound_raised_on_purpose(tmp_path):
    """The variable the line names lets the size through (here to the next check: nothing listens at NO_PG)."""
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "stages", "--stages", MANY_STAGES,
                   cwd=tmp_path, env={"DBSURGE_MAX_STAGES": "1000"}, timeout=60)
    assert_one_line(proc, "127.0.0.1:1", tmp_path / "results")


def test_closed_model_users_beyond_max_connections(tmp_path, pg_uri):
    """Users that each hold a connection are checked against the server's max_connections (200 here)."""
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--users", "400", "--duration", "2s",
                   cwd=tmp_path, timeout=60)
    assert_one_line(proc, "allows 197 connections with", tmp_path / "results")


@pytest.mark.parametrize("args, words", [
    (["--processes", "1000"], "--processes 1000 is more than 4 per CPU core"),
    (["--processes", "1", "--master-bind-host", "10.233.0.5"], "--processes workers connect to 127.0.0.1"),
    (["--processes", "2"], "127.0.0.1:1"),  # refused after the fork (the target): the workers end with it
])
def test_locust_path_processes_refused_before_the_fork(tmp_path, args, words):
    """Refused before Locust forks its workers, or after with its workers ended: none is left behind."""
    import time

    import psutil

    before = {p.pid for p in psutil.process_iter()}
    started = time.monotonic()
    results = str(tmp_path / "results")  # on this test's command line only: another test's processes differ
    proc = locust("-f", LOCUSTFILES, "--headless", "-L", "WARNING", "--target", NO_PG, "--rate", "10", "-t", "2s",
                  "--results-dir", results, *args, cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")
    left = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before and results in
            " ".join(p.info["cmdline"] or [])]
    assert not left, left
    assert time.monotonic() - started < 30  # not Locust's 60 s wait for a heartbeat


def test_check_connections_unit():
    from dbsurge.base.errors import UserError
    from dbsurge.config.size_limits import check_connections

    check_connections(100, None, None, "t")  # not readable: not checked
    check_connections(100, 200, 100, "t")
    with pytest.raises(UserError, match="lower --users to 99"):
        check_connections(100, 200, 101, "t")


# -- stdout closed by its reader (`dbsurge --help | head -3`) -------------------------------------------------------

@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["report", "--help"], ["scenario", "--help"],
                                  ["rerun", "--help"], ["--version"],
                                  ["report", str(REPO / "tests" / "fixtures" / "run_low_rate"), "--help"]])
def test_a_closed_pipe_is_one_line(tmp_path, args):
    """The reader is gone before the first write (the read end closed): every write raises EPIPE, as when `head`
    has read its lines. One line and exit 141 (the shell's code for SIGPIPE), never a BrokenPipeError traceback."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "dbsurge.commands.cli", *args], cwd=tmp_path, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == ["dbsurge: stdout was closed before the output was written (broken pipe)"], proc.stderr
    assert proc.returncode == 141


# -- files that are not regular files: st_size is 0 for both /dev/zero (endless) and a FIFO (blocks) ---------------

@pytest.mark.parametrize("kind, words", [("/dev/zero", "is a character device, not a regular file"),
                                         ("fifo", "is a FIFO (named pipe), not a regular file"),
                                         ("directory", "is a directory, not a regular file"),
                                         ("link to /dev/zero", "is a character device, not a regular file")])
def test_config_file_must_be_a_regular_file(tmp_path, kind, words):
    """`--config /dev/zero` used to read until MemoryError, a FIFO to wait forever for a writer: one line now."""
    import os

    conf = tmp_path / "my.conf"
    if kind == "/dev/zero":
        conf = Path("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(conf)
    elif kind == "directory":
        conf.mkdir()
    else:
        conf.symlink_to("/dev/zero")
    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--config", str(conf), "--duration", "2s",
                   cwd=tmp_path, timeout=60)
    assert_one_line(proc, words, tmp_path / "results")
    assert f"config file {conf}" in proc.stderr


def test_read_bounded_reads_at_most_its_limit(tmp_path):
    """A file larger than the bound is refused after reading limit + 1 bytes; one at the bound is read."""
    from dbsurge.config.size_limits import FileRefused, read_bounded

    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_bounded(f, 100) == b"x" * 100
    with pytest.raises(FileRefused, match="larger than 99 bytes"):
        read_bounded(f, 99)
    with pytest.raises(FileRefused, match="character device"):
        read_bounded("/dev/zero", 10**12)  # refused before any read: no bound is large enough for it


@pytest.mark.parametrize("host", ["a..b", "a" * 64])
@pytest.mark.parametrize("command", ["run", "load"])
def test_bad_host_label_is_one_line(tmp_path, command, host):
    """`postgresql://postgres@a..b:5432/postgres` was a UnicodeError traceback from `run` and `load`."""
    args = ["--duration", "2s"] if command == "run" else []
    proc = dbsurge(command, "--workload", "orders", "--target", f"postgresql://postgres@{host}:5432/postgres", *args,
                   cwd=tmp_path, timeout=60)
    assert_one_line(proc, f"host '{host}'", tmp_path / "results")


@pytest.mark.parametrize("target", [NO_PG, "embedded-postgres"])
def test_web_port_in_use_is_one_line_before_anything_starts(tmp_path, target):
    """`dbsurge run --web --web-port P` with P taken was ~54 lines of traceback, after the embedded server had
    started and the data set loaded; now one line before the target, a server or a run directory."""
    import socket

    from dbsurge.embedded.servers import free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        proc = dbsurge("run", "--workload", "orders", "--target", target, "--shape", "constant", "--rate", "10",
                       "--duration", "2s", "--web", "--web-port", str(port), cwd=tmp_path, timeout=60)
    assert_one_line(proc, f"cannot listen on 127.0.0.1:{port} for --web-port: it is already in use",
                    tmp_path / "results")


def test_prometheus_port_in_use_is_one_line_before_anything_starts(tmp_path):
    import socket

    from dbsurge.embedded.servers import free_port

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "constant", "--rate", "10",
                       "--duration", "2s", "--prometheus-port", str(port), cwd=tmp_path, timeout=60)
    assert_one_line(proc, f"cannot listen on 127.0.0.1:{port} for --prometheus-port: it is already in use",
                    tmp_path / "results")


@pytest.mark.parametrize("command", ["run", "load"])
def test_wrong_database_name_is_one_clear_line(tmp_path, pg_uri, command):
    """A database the server does not have was the driver's raw text (OperationalError: connection failed: ...
    FATAL: ...); now one line naming the database and the server, never the password."""
    uri = pg_uri.rsplit("/", 1)[0] + "/nosuchdb"
    with_password = uri.replace("postgres@", "postgres:Sekret0Pw@", 1)  # trust auth: the password is never asked
    args = ["--duration", "2s"] if command == "run" else []
    proc = dbsurge(command, "--workload", "orders", "--target", with_password, *args, cwd=tmp_path, timeout=120)
    where = pg_uri.split("@", 1)[1].rsplit("/", 1)[0]
    assert_one_line(proc, f"database 'nosuchdb' does not exist on {where}: create it (createdb nosuchdb)",
                    tmp_path / "results")
    assert "Sekret0Pw" not in proc.stderr + proc.stdout and "OperationalError" not in proc.stderr


@pytest.mark.parametrize("args, words", [
    (["--check", "order_creat.p99<50ms"], "no operation 'order_creat' in this workload"),
    (["--operation", "order_creat"], "unknown operation 'order_creat' for workload orders"),
    ([], "did you mean embedded-postgres?"),
])
def test_a_typo_is_refused_before_an_embedded_server_starts(tmp_path, args, words):
    """`--check order_creat.p99<50ms` started the embedded PostgreSQL (seconds, a server process) and only then said
    the operation does not exist; now the line comes before: no "starting embedded" line, no run directory."""
    target = "embedded-postgress" if not args else "embedded-postgres"
    proc = dbsurge("run", "--workload", "orders", "--target", target, "--shape", "constant", "--rate", "5",
                   "--duration", "1s", *args, cwd=tmp_path, timeout=60)
    assert "starting embedded" not in proc.stderr, proc.stderr
    assert_one_line(proc, words, tmp_path / "results")


@pytest.mark.parametrize("scenario, check, words", [
    ("spike", "order_creat.p99<50ms", "no operation 'order_creat' in this workload"),
    ("ycsb-run", "reed.p99<50ms", "no operation 'reed' in this workload"),
])
def test_a_scenarios_check_typo_is_refused_before_its_embedded_server_starts(tmp_path, scenario, check, words):
    proc = dbsurge("scenario", scenario, "--quick", "--target", "embedded-postgres", "--check", check,
                   cwd=tmp_path, timeout=60)
    assert "starting embedded" not in proc.stderr, proc.stderr
    assert_one_line(proc, words, tmp_path / "results")
