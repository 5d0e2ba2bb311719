"""Any text a user can type into a parser either parses or ends in one short `UserError` line.

Property-based (hypothesis): arbitrary Unicode, huge strings, numbers in odd spellings (nan, inf,
1e400, 400 digits, Arabic-Indic and fullwidth digits). No other exception type may escape: the
CLI turns only `UserError` into ``dbsurge: <one line>`` and exit 2.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runs import REPO, strict_locust_parser

from dbsurge.base.errors import UserError
from dbsurge.config.checks import parse_checks
from dbsurge.config.option_types import ascii_float, ascii_int
from dbsurge.config.options import parse_key_values, parse_operation_weights
from dbsurge.plan.stage_plan import StagePlan, parse_duration
from dbsurge.targets import open_target
from dbsurge.workloads import WORKLOADS, parse_workload_options

MAX_MESSAGE = 300

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces that make the parsers' own syntax likely, so the fuzz gets past the first character.
NUMBERS = st.sampled_from(["0", "1", "10", "2.5", "nan", "inf", "-inf", "1e400", "9" * 400, "-1", "١٢", "１２",
                           "1_000", "0x10", ".5", "5.", "1e3", "𝟗"])
UNITS = st.sampled_from(["", "s", "m", "h", "ms", "%", "tps", "us", " ", "\n", "S"])
WORDS = st.sampled_from(["@", ",", "..", "ramp(", ")", "=", "<", ">", "<=", ".", "p99", "failure_rate", "ALL",
                         "order_create", "product_lookup", "://", "mongodb", "postgresql", "?", "&", "/", ":", "@"])
TOKENS = st.one_of(NUMBERS, UNITS, WORDS, st.text(max_size=8))
SYNTAXY = st.lists(TOKENS, max_size=30).map("".join)
# Huge inputs are few and made by repetition: generating 100,000 random characters is slow.
TEXT = st.one_of(st.text(), SYNTAXY, SYNTAXY, SYNTAXY.map(lambda s: s * 500),
                 st.text(max_size=20).map(lambda s: s * 5000))


def assert_clean(fn, *args) -> None:
    """`fn(*args)` returns, or raises a `UserError` whose message is one line of at most MAX_MESSAGE characters."""
    try:
        fn(*args)
    except UserError as e:
        msg = str(e)
        assert "\n" not in msg and "\r" not in msg, repr(msg)
        assert len(msg) <= MAX_MESSAGE, f"{len(msg)} characters: {msg[:400]!r}"
        assert msg.strip(), "an empty message says nothing"


@FUZZ
@given(TEXT, st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
def test_stage_plan(text, baseline):
    assert_clean(StagePlan.parse, text, baseline)


@FUZZ
@given(TEXT)
def test_stage_plan_result_is_sane(text):
    """What parses is finite and positive: no nan or inf slips through into a schedule."""
    try:
        plan = StagePlan.parse(text, 1000.0)
    except UserError:
        return
    for s in plan.stages:
        assert math.isfinite(s.duration_s) and s.duration_s > 0
        assert math.isfinite(s.start_tps) and math.isfinite(s.end_tps) and s.start_tps >= 0 and s.end_tps >= 0
        assert max(s.start_tps, s.end_tps) <= 1e7  # a rate a fleet of generators could send
    assert str(plan)  # printable again


@FUZZ
@given(TEXT)
def test_parse_duration(text):
    assert_clean(parse_duration, text)
    try:
        value = parse_duration(text)
    except UserError:
        return
    assert math.isfinite(value) and value >= 0


@FUZZ
@given(TEXT)
def test_parse_checks(text):
    assert_clean(parse_checks, text)
    try:
        checks = parse_checks(text)
    except UserError:
        return
    assert all(math.isfinite(c.limit) for c in checks)


@FUZZ
@given(st.lists(TEXT, max_size=4))
def test_parse_operation_weights(items):
    assert_clean(parse_operation_weights, items)
    try:
        weights = parse_operation_weights(items)
    except UserError:
        return
    assert all(math.isfinite(w) and w >= 0 for w in weights.values())


@FUZZ
@given(st.lists(TEXT, max_size=4))
def test_parse_workload_options(pairs):
    assert_clean(parse_workload_options, pairs)


@FUZZ
@given(st.lists(TEXT, max_size=4))
def test_parse_key_values(pairs):
    assert_clean(parse_key_values, pairs, "--target-option")


URI_PREFIX = st.sampled_from(["", "postgresql://", "postgres://", "dsql://", "mongodb://", "mongodb+srv://",
                              "ftp://", "embedded-", "postgresql://u:pw@", "mongodb://u:p@h/?"])


@FUZZ
@given(URI_PREFIX, TEXT)
def test_open_target(prefix, rest):
    """No network: open_target only parses. A bad URI is one line, never a driver's traceback."""
    assert_clean(open_target, prefix + rest)


@FUZZ
@given(st.sampled_from(["postgresql://u@127.0.0.1:1/x", "mongodb://127.0.0.1:1/"]),
       st.dictionaries(st.sampled_from(["tls", "tls_ca_file", "sslrootcert", "sslmode", "connect_timeout",
                                        "max_pool_size", "isolation", "retry_attempts", "flavor", "w", "nosuch"]),
                       TEXT, max_size=3))
def test_open_target_options(uri, options):
    assert_clean(open_target, uri, options)


@pytest.mark.parametrize("text", ["nan@10%", "inf@10%", "1e400@10%", "1m@" + "9" * 400 + "tps", "1m@١٠tps",
                                  "１m@10%", "1m@10%,,", "x" * 100_000])
def test_known_bad_plans(text):
    with pytest.raises(UserError) as e:
        StagePlan.parse(text, 1000.0)
    assert len(str(e.value)) < 200 and "\n" not in str(e.value)


# -- numbers on the command line: ASCII digits only ---------------------------------------------------------------

ASCII_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@FUZZ
@given(TEXT)
def test_ascii_float_takes_only_ascii_numbers(text):
    """What `ascii_float` takes is an ASCII number and finite; everything else is an `ArgumentTypeError`."""
    try:
        value = ascii_float(text)
    except argparse.ArgumentTypeError as e:
        assert "\n" not in str(e) and len(str(e)) <= MAX_MESSAGE
        return
    assert ASCII_NUMBER.fullmatch(text.strip()), text
    assert math.isfinite(value)


@FUZZ
@given(st.one_of(TEXT, st.integers().map(str), st.integers().map(lambda i: f"{i:_}")))
def test_ascii_int_takes_only_ascii_digits(text):
    try:
        value = ascii_int(text)
    except argparse.ArgumentTypeError as e:
        assert "\n" not in str(e) and len(str(e)) <= MAX_MESSAGE
        return
    assert re.fullmatch(r"[+-]?[0-9]+", text.strip()), text
    assert value == int(text)


@FUZZ
@given(st.sampled_from(["--rate", "--baseline-tps", "--max-users", "--seed", "--drain", "--web-port", "-u",
                        "--spawn-rate", "--processes", "--master-bind-port", "--prometheus-port", "--cost-cap"]),
       st.one_of(NUMBERS, st.integers(min_value=0, max_value=10**6).map(lambda i: "".join(chr(0x660 + int(d))
                                                                                    for d in str(i)))))
def test_locust_parser_refuses_other_digits(flag, value):
    """Locust's own parser with dbsurge's options, as `dbsurge run` and the plugin build it: a value that is
    not ASCII digits (Arabic-Indic, fullwidth, 1_000, nan, inf, 1e400) is refused by the option's type."""
    parser = strict_locust_parser()
    action = next(a for a in parser._actions if flag in a.option_strings)
    if value.isascii() and ASCII_NUMBER.fullmatch(value) and math.isfinite(float(value)):
        return  # a real number: the type may take it (range checks are validate's)
    with pytest.raises(argparse.ArgumentTypeError):
        action.type(value)




# -- every dbsurge option, as `dbsurge run` parses and checks it (no network, no files) --------------------------

OPTION_FLAGS = st.sampled_from(["--rate", "--baseline-tps", "--stage-seconds", "--max-rate", "--max-users", "--seed",
                                "--drain", "--start-delay", "--align-start", "--cloudwatch-interval", "--cost-cap",
                                "--prometheus-port", "--max-lag", "--lag-warn", "--runner", "--web-auth",
                                "--operation", "--target-option", "--workload-option"])


@FUZZ
@given(st.lists(st.tuples(OPTION_FLAGS, st.one_of(NUMBERS, TEXT)), min_size=1, max_size=4))
def test_every_option_value_parses_or_is_one_line(pairs):
    """dbsurge's own options: parsed (ASCII numbers) and validated, or one `UserError` line; what passes is
    finite and in range."""
    from dbsurge.engine.validate import dbsurge_options, validate_options

    argv = [x for flag, value in pairs for x in (flag, value)]

    def parse_and_check():
        ns = dbsurge_options(argv)
        validate_options(ns)
        for name in ("rate", "baseline_tps", "stage_seconds", "max_rate", "drain", "start_delay", "align_start",
                     "cloudwatch_interval", "cost_cap"):
            value = getattr(ns, name)
            assert value is None or (math.isfinite(value) and value >= 0), (name, value)
        assert ns.max_users is None or ns.max_users >= 1

    assert_clean(parse_and_check)


# -- host names: Python's IDNA encoding refuses an empty label or one of 64+ characters before any lookup -------

LONG_LABEL = "a" * 64
BAD_HOSTS = [("a..b", "has an empty label"), (".a", "has an empty label"), (LONG_LABEL, "a label of 64 characters"),
             (f"db.{LONG_LABEL}.example.com", "a label of 64 characters"), ("é" * 70, "a label of 70 characters")]


@pytest.mark.parametrize("host, words", BAD_HOSTS)
@pytest.mark.parametrize("template", ["postgresql://postgres@{h}:5432/postgres", "postgres://u@ok.example,{h}/db",
                                      "dsql://admin@{h}/postgres?region=us-east-1", "mongodb://{h}:27017/",
                                      "mongodb://ok.example,{h}/", "mongodb+srv://{h}/", "cql://{h}:9042/ks",
                                      "cql://ok.example,{h}/ks", "alternator://{h}:8000", "dynamodb://{h}:8000"])
def test_bad_host_label_is_refused_where_the_uri_is_parsed(template, host, words):
    """Every target kind that takes a host: a host DNS cannot carry is one line naming it when the URI is parsed
    (no network), not a UnicodeError traceback from the driver's first lookup."""
    with pytest.raises(UserError) as e:
        open_target(template.format(h=host))
    msg = str(e.value)
    assert words in msg and "host '" in msg and "\n" not in msg and len(msg) <= MAX_MESSAGE, msg


@pytest.mark.parametrize("uri", ["postgresql://u@db.example.com:5432/x", "postgresql://u@127.0.0.1/x",
                                 "postgresql://u@[::1]:5432/x", "postgresql://u@/x?host=/var/run/postgresql",
                                 f"postgresql://u@{'a' * 63}.example./x", "mongodb://bücher.example:27017/",
                                 "mongodb://[::1]:27017/", "cql://10.0.0.1,10.0.0.2:9042/ks",
                                 "alternator://scylla-1:8000", "dynamodb://localhost:8000"])
def test_good_hosts_still_parse(uri):
    open_target(uri)


# -- operation weights: any finite weights give the mix they say ---------------------------------------------------

def test_huge_weights_give_the_mix_run_json_records():
    """``--operation product_lookup=1e308 --operation order_create=1e308``: run.json records the two weights
    (equal: 50/50); their sum was inf, and every arrival ran order_create. The mix now sends what they say."""
    import numpy as np

    from dbsurge.plan.arrivals import OperationMix, operation_mix_weights

    weights = parse_operation_weights(["product_lookup=1e308", "order_create=1e308"])
    recorded = list(weights.items())  # run.json's "operations": [name, weight] pairs as given
    mix = OperationMix(operation_mix_weights(recorded, {"product_lookup": 1.0, "order_create": 1.0}), 42)
    chosen = mix.of_many(np.arange(20_000, dtype=np.int64))
    shares = np.bincount(chosen, minlength=2) / chosen.size
    assert mix.names == ["product_lookup", "order_create"]
    assert 0.47 < shares[0] < 0.53 and 0.47 < shares[1] < 0.53, shares
    assert [mix.of(k) for k in range(200)] == list(chosen[:200])  # one arrival at a time agrees
    closed = operation_mix_weights(recorded, {"product_lookup": 1.0, "order_create": 1.0})
    assert math.isfinite(sum(w for _, w in closed))  # the closed model's cumulative weights too


@FUZZ
@given(st.lists(st.floats(min_value=0.0, max_value=1.7e308, allow_nan=False, allow_infinity=False)
                .filter(lambda w: w > 0), min_size=1, max_size=6))
def test_operation_mix_shares_are_the_weights(weights):
    """For any finite positive weights, each operation's share of the mix is its weight over their (exact) sum."""
    from fractions import Fraction

    from dbsurge.plan.arrivals import OperationMix

    mix = OperationMix([(f"op{i}", w) for i, w in enumerate(weights)], 1)
    cum = mix._cum
    assert all(math.isfinite(c) for c in cum) and cum[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(cum))
    total = sum(Fraction(w) for w in weights)
    shares = [b - a for a, b in zip([0.0, *cum], cum)]
    for w, share in zip(weights, shares):
        assert abs(share - float(Fraction(w) / total)) < 1e-9, (weights, cum)


# -- workload options: the same numbers as everywhere, bounded by what the database holds --------------------------

WORKLOAD_OPTIONS = sorted((name, key) for name, cls in WORKLOADS.items() for key in cls.OPTIONS)
INT8_MAX = 2**63 - 1


@FUZZ
@given(st.sampled_from(WORKLOAD_OPTIONS),
       st.one_of(NUMBERS, TEXT, st.integers().map(str), st.integers().map(lambda i: f"{i:_}"),
                 st.integers(min_value=0, max_value=10**6).map(lambda i: "".join(chr(0x660 + int(d)) for d in str(i)))))
def test_workload_option_numbers_are_ascii_and_bounded(option, value):
    """Every workload option reads numbers as the command line does (`option_types.read_int`/`read_float`):
    a number it takes is written in ASCII digits, without underscores, finite and within int8."""
    name, key = option
    try:
        values = WORKLOADS[name].resolve({key: value})
    except UserError:
        assert_clean(WORKLOADS[name].resolve, {key: value})
        return
    got = values[key]
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return
    assert value.strip().isascii() and "_" not in value, (key, value)
    assert math.isfinite(got) and -INT8_MAX - 1 <= got <= INT8_MAX, (key, got)


@pytest.mark.parametrize("workload, pair, words", [
    ("orders", "products=١٠٠", "expected an integer in ASCII digits"),
    ("orders", "products=１００", "expected an integer in ASCII digits"),
    ("orders", "products=1_0_0", "expected an integer in ASCII digits"),
    ("orders", "order_proportion=٠.٥", "in ASCII digits"),
    ("orders", "customers=" + "1" + "0" * 26, "expected an integer <= 2,147,483,647"),  # orders.customer_id: integer
    ("orders", "customers=2147483648", "<= 2,147,483,647"),
    ("orders", "seed=9223372036854775808", "<= 9,223,372,036,854,775,807"),
    ("documents", "documents=99999999999999999999", "<= 9,223,372,036,854,775,807"),
    ("ycsb", "fieldlength=200000000", "expected an integer <= 1,048,576"),  # was a raw OverflowError
    ("ycsb", "fieldlength=1048576,fieldcount=17", "more than 16,777,216"),
    ("ycsb", "recordcount=１０", "in ASCII digits"),
    ("ycsb", "zipfianconstant=٠.٩", "in ASCII digits"),
    ("ycsb", "writeconcern=٢", "expected a number of nodes"),
])
def test_workload_option_refused(workload, pair, words):
    given = dict(p.split("=", 1) for p in pair.split(","))
    with pytest.raises(UserError) as e:
        WORKLOADS[workload].resolve(given)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_workload_option_bounds_taken():
    assert WORKLOADS["orders"].resolve({"customers": "2147483647"})["customers"] == 2**31 - 1
    assert WORKLOADS["ycsb"].resolve({"fieldlength": "1048576"})["fieldlength"] == 1 << 20


# -- JSON from outside (run.json, events.jsonl, a web request's body): parsed or a ValueError, at any depth -------

BRACKETS = st.lists(st.sampled_from(["[", "]", "{", "}", '"a":', ",", "1", '"x"', "null", " "]), max_size=60).map("".join)
DEEP = st.tuples(st.sampled_from(["[", '{"a":', '[{"b":']), st.integers(min_value=1, max_value=200_000)).map(
    lambda t: t[0] * t[1])


@FUZZ
@given(st.one_of(BRACKETS, DEEP, TEXT))
def test_load_json_is_total(text):
    """`RecursionError` (``[`` x 100,000) was a traceback from every reader of a run directory and a 500 from the
    web UI: `load_json` returns a value nested at most `MAX_JSON_DEPTH` deep, or raises ValueError."""
    from dbsurge.base.json_input import MAX_JSON_DEPTH, json_depth, load_json

    try:
        value = load_json(text)
    except ValueError as e:
        assert "\n" not in str(e)
        return
    assert json_depth(value) <= MAX_JSON_DEPTH


# -- every input source through the same checks: the command line, the environment, a config file, plain Locust --

NO_PG = "postgresql://nobody@127.0.0.1:1/x"  # nothing listens: a case that got past its check would fail there
SPIKE_FILES = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/spike.py"
CONSTANT_FILES = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py"


def assert_refused(proc, words: str, results) -> str:
    """Exit 2, dbsurge's one line naming `words` last on stderr (Locust's own warnings may come before it), no
    traceback, and no run directory: nothing was sent."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    ours = [line for line in proc.stderr.splitlines() if line.startswith("dbsurge: ") and "warning" not in line]
    assert len(ours) == 1 and words in ours[0], proc.stderr[-2000:]
    assert len(ours[0]) < 400 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-2000:]
    assert not results.exists() or not any(p.is_dir() for p in results.iterdir())
    return ours[0]


@pytest.mark.parametrize("args, words", [
    (["--shape", "constant", "--rat", "100", "--duration", "2s"], "unknown option --rat (did you mean --rate?"),
    (["--shape", "spike", "--baseline-tp", "100"], "unknown option --baseline-tp (did you mean --baseline-tps?"),
    (["--shape", "spike", "--stage-sec", "1"], "did you mean --stage-seconds?"),
    (["--shape", "constant", "--rate", "5", "--max-user", "3", "--duration", "2s"], "did you mean --max-users?"),
    (["--shape", "constant", "--rate", "5", "--duration", "2s", "--run-t", "5s"], "did you mean --run-time?"),
    (["--shape", "constant", "--rate", "5", "--dur", "2s"], "unknown option --dur"),
    (["--shape", "constant", "--rate", "5", "--duration", "2s", "--head"], "unknown option --head"),
])
def test_dbsurge_run_takes_no_option_prefix(tmp_path, args, words):
    """argparse's allow_abbrev took ``--rat 100`` as ``--rate 100`` silently (Locust's configargparse parser
    too), though the README says a misspelt option is refused."""
    from runs import dbsurge

    proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, *args, cwd=tmp_path, timeout=60)
    assert_refused(proc, words, tmp_path / "results")


@pytest.mark.parametrize("args, words", [
    (["--rat", "5", "-t", "2s"], "unknown option --rat (did you mean --rate?"),
    (["--rate", "5", "-t", "2s", "--max-lag", "1s", "--arrival", "poisson"], "did you mean --arrivals?"),
    (["--rate", "5", "-t", "2s", "--target-opt", "a=1"], "did you mean --target-option?"),
])
def test_plain_locust_takes_no_prefix_of_dbsurges_options(tmp_path, args, words):
    from runs import locust

    proc = locust("-f", CONSTANT_FILES, "--headless", "-L", "WARNING", "--target", NO_PG, *args, cwd=tmp_path,
                  timeout=60)
    assert_refused(proc, words, tmp_path / "results")


@pytest.mark.parametrize("argv, words", [
    (["scenario", "spike", "--targ", NO_PG], "did you mean --target?"),
    (["report", "--run-d", "x"], "unknown option --run-d"),
])
def test_other_commands_take_no_option_prefix(tmp_path, argv, words):
    from runs import dbsurge

    proc = dbsurge(*argv, cwd=tmp_path, timeout=60)
    assert_refused(proc, words, tmp_path / "results")


@pytest.mark.parametrize("how", ["env", "config", "locust-u", "locust-u0", "locust-env", "locust-config"])
def test_users_are_checked_from_every_source_under_a_shape(tmp_path, how):
    """``dbsurge run --users -3`` was refused; ``LOCUST_USERS=-3``, ``users = -3`` in a file and ``locust ... -u -3``
    (and ``-u 0``) under a shape ran and wrote ``num_users: -3`` into run.json."""
    from runs import dbsurge, locust

    (tmp_path / "bad.conf").write_text("users = -3\n")
    env = {"LOCUST_USERS": "-3"} if how.endswith("env") else {}
    config = ["--config", "bad.conf"] if how.endswith("config") else []
    if how.startswith("locust"):
        users = ["-u", "0" if how == "locust-u0" else "-3"] if how.startswith("locust-u") else []
        proc = locust("-f", CONSTANT_FILES, "--headless", "-L", "WARNING", "--target", NO_PG, "--rate", "5", "-t",
                      "2s", *users, *config, cwd=tmp_path, env=env, timeout=60)
    else:
        proc = dbsurge("run", "--workload", "orders", "--target", NO_PG, "--shape", "constant", "--rate", "5",
                       "--duration", "2s", *config, cwd=tmp_path, env=env, timeout=60)
    bad = "0" if how == "locust-u0" else "-3"
    assert_refused(proc, f"-u/--users must be a whole number of at least 1, not {bad}", tmp_path / "results")


@pytest.mark.parametrize("shape_file, args", [
    ("spike.py", ["-t", "5s"]), ("stages.py", ["--stages", "2s@5tps", "-t", "5s"]),
])
def test_plain_locust_run_time_under_a_plan_of_stages_is_refused(tmp_path, shape_file, args):
    """``locust ... spike -t 5s`` ignored -t without a word (`dbsurge run` refuses --duration with a spike)."""
    from runs import locust

    proc = locust("-f", f"{REPO}/locustfiles/orders.py,{REPO}/shapes/{shape_file}", "--headless", "-L", "WARNING",
                  "--target", NO_PG, *args, cwd=tmp_path, timeout=60)
    assert_refused(proc, "-t/--run-time 5 does not apply to --shape", tmp_path / "results")


@pytest.mark.parametrize("args, words", [
    (["-u", "1", "-r", "1e400"], "-r/--spawn-rate"), (["-u", "1", "-r", "0"], "-r/--spawn-rate"),
    (["-u", "1", "-r", "-2"], "-r/--spawn-rate"), (["-u", "-1"], "-u/--users"),
])
def test_plain_locust_closed_model_numbers(tmp_path, args, words):
    from runs import locust

    proc = locust("-f", f"{REPO}/locustfiles/orders.py", "--headless", "-L", "WARNING", "--target", NO_PG, "-t", "2s",
                  *args, cwd=tmp_path, timeout=60)
    assert_refused(proc, words, tmp_path / "results")


# -- Locust's report files, checked before any load ------------------------------------------------------------

def _report_file_cases(tmp_path):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "r.html").write_text("old")
    (locked / "r.html").chmod(0o444)
    return [
        (["--html", "/proc/x.html"], "bad --html /proc/x.html: /proc/x.html is in /proc"),
        (["--html", "/sys/x.html"], "is in /sys"), (["--html", "/dev/shm/../x.html"], "is in /dev"),
        (["--html", str(tmp_path / "a-dir")], "is a directory"),
        (["--html", str(tmp_path / "a-file" / "r.html")], "not a directory"),
        (["--html", str(tmp_path / "loop" / "r.html")], "cannot write in"),
        (["--csv", "/proc/1/x"], "bad --csv /proc/1/x: /proc/1/x_stats.csv is in /proc"),
        (["--csv", str(tmp_path / "a-file" / "x")], "not a directory"),
        (["--csv", str(tmp_path / "a-file") + "/sub/x"], "Not a directory"),
        (["--json-file", "/sys/x"], "bad --json-file /sys/x: /sys/x.json is in /sys"),
        (["--json-file", str(tmp_path / "a-file" / "x")], "not a directory"),
    ] + ([] if os.geteuid() == 0 else [(["--html", str(locked / "r.html")], "exists and cannot be written")])


@pytest.mark.parametrize("case", range(12))
@pytest.mark.parametrize("command", ["locust", "dbsurge"])
def test_report_files_are_checked_before_any_load(tmp_path, pg_uri, command, case):
    """``--html /proc/x.html`` (or a bad --csv, --json-file) was found after the load: a traceback from Locust's
    save_html_report, no tables, no verdict, exit 1, run.json not finalised and space.reserve.tmp left behind.
    Now one line before anything starts, on the real database: no run directory."""
    from runs import dbsurge, locust

    cases = _report_file_cases(tmp_path)
    if case >= len(cases):
        pytest.skip("as root every file can be written")
    args, words = cases[case]
    results = tmp_path / "results"
    if command == "locust":
        proc = locust("-f", CONSTANT_FILES, "--headless", "-L", "WARNING", "--target", pg_uri, "--rate", "5", "-t",
                      "1s", "--operation", "product_lookup", "--no-db-sampler", "--results-dir", str(results), *args,
                      cwd=tmp_path, timeout=90)
    else:
        proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--rate", "5",
                       "--duration", "1s", "--operation", "product_lookup", "--no-db-sampler", "--results-dir",
                       str(results), *args, cwd=tmp_path, timeout=90)
    assert_refused(proc, words, results)


def test_a_report_file_in_a_new_directory_is_still_written(tmp_path, pg_uri):
    """Locust makes --html's and --csv's directories: the check leaves that alone (and makes nothing itself)."""
    from runs import locust

    results = tmp_path / "results"
    proc = locust("-f", CONSTANT_FILES, "--headless", "-L", "WARNING", "--target", pg_uri, "--rate", "5", "-t", "1s",
                  "--operation", "product_lookup", "--no-db-sampler", "--results-dir", str(results), "--html",
                  str(tmp_path / "new" / "r.html"), "--csv", str(tmp_path / "new2" / "s"), cwd=tmp_path, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "new" / "r.html").is_file() and (tmp_path / "new2" / "s_stats.csv").is_file()


# -- the web UI's start form: any fields, any values: they pass the command line's checks or are one line ---------

FORM_FIELDS = st.sampled_from(["user_count", "spawn_rate", "run_time", "host", "target", "max_users", "arrivals",
                               "max_lag", "rate", "maxLag", "user_classes", "results_dir", "", "x" * 300])


@FUZZ
@given(st.lists(st.tuples(FORM_FIELDS, st.one_of(NUMBERS, TEXT, st.sampled_from(["poisson", "1s", "0", ""]))),
                max_size=5), st.booleans())
def test_any_start_form_passes_the_checks_or_is_one_line(pairs, plan):
    """`check_swarm_form` raises nothing but a one-line `UserError`; what it lets through is what the command line
    takes (max_users a whole number of at least 1, arrivals one of the two, max_lag a positive duration)."""
    from werkzeug.datastructures import MultiDict

    from dbsurge.engine.validate import validate_locust_options, validate_options
    from dbsurge.ui.web_forms import check_swarm_form, form_extra_fields, option_actions

    parser = strict_locust_parser()
    ns = parser.parse_args(["--target", "postgresql://u@127.0.0.1/x", "--rate", "5"])
    extra, multiple = form_extra_fields(parser)
    actions = option_actions(parser)

    def check():
        check_swarm_form(MultiDict(pairs), ns, actions, extra_fields=extra, multiple=multiple, plan=plan)
        # accepted: each value, set as Locust will set it, passes the command line's checks
        after = argparse.Namespace(**vars(ns))
        for name, value in pairs:
            if name in ("max_users", "arrivals", "max_lag") and value != "":
                setattr(after, name, actions[name].type(value) if actions[name].type else value)
        validate_options(after)
        if not plan:
            validate_locust_options(after, shape=False)
        assert after.arrivals in ("uniform", "poisson")

    assert_clean(check)
