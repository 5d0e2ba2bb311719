"""The web UI's forms go through the command line's checks (`dbsurge.ui.web_forms`, docs/web-ui.md).

- Unit: `check_swarm_form` with Locust's real parser and dbsurge's options, every field of the start form:
  what the command line refuses is refused in one line, naming the field or the flag; a field given twice,
  one the form has not got, a plan option and a changed target are refused; Locust's own form passes.
- A real ``dbsurge run --web`` (constant shape, order_create on the session's PostgreSQL): each bad
  ``POST /swarm`` and ``POST /dbsurge/rate`` is a 400 with ``success: false`` and one line, nothing starts (no
  run directory, no order row written); then the good form starts the run, which ends OK (exit 0).
- A real ``locust -f orders.py`` web UI (the closed model): Locust's users, ramp-up and run time as ``-u``,
  ``-r`` and ``-t`` are checked.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from runs import REPO, strict_locust_parser
from werkzeug.datastructures import MultiDict

from dbsurge.base.errors import UserError
from dbsurge.base.json_input import DuplicateKey, load_json
from dbsurge.embedded.servers import free_port

TARGET = "postgresql://u:secret@127.0.0.1:5432/x"


def _check(pairs, *, plan=True, options=None):
    from dbsurge.ui.web_forms import check_swarm_form, form_extra_fields, option_actions

    parser = strict_locust_parser()
    ns = parser.parse_args(["--target", TARGET, "--rate", "5"])
    for key, value in (options or {}).items():
        setattr(ns, key, value)
    extra, multiple = form_extra_fields(parser)
    assert extra == {"target", "max_users", "arrivals", "max_lag"}  # what the form shows beside Locust's own
    check_swarm_form(MultiDict(pairs), ns, option_actions(parser), extra_fields=extra, multiple=multiple, plan=plan)
    return ns


# every field of the start form (Locust's and dbsurge's), with values the command line refuses
BAD_FIELDS = [
    ([("arrivals", "bogus")], "bad arrivals 'bogus': choose one of uniform, poisson"),
    ([("arrivals", "")], "bad arrivals ''"),
    ([("max_lag", "-1s")], "--max-lag"), ([("max_lag", "0")], "--max-lag must be a positive duration"),
    ([("max_lag", "nan")], "--max-lag"), ([("max_lag", "1e400s")], "--max-lag"),
    ([("max_users", "-5")], "--max-users must be a whole number of at least 1, not -5"),
    ([("max_users", "0")], "--max-users"), ([("max_users", "1e3")], "bad max_users"),
    ([("max_users", "١")], "ASCII digits"), ([("max_users", "9" * 40)], "bad max_users"),
    ([("max_users", "")], "bad max_users"),
    ([("user_count", "-1")], "-u/--users must be a whole number of at least 1, not -1"),
    ([("user_count", "x")], "bad user_count"), ([("user_count", "1_000")], "bad user_count"),
    ([("spawn_rate", "1e400")], "too large a number"), ([("spawn_rate", "-1")], "bad spawn_rate '-1': must be > 0"),
    ([("spawn_rate", "nan")], "bad spawn_rate"), ([("spawn_rate", "inf")], "bad spawn_rate"),
    ([("run_time", "5s")], "run_time does not apply under a dbsurge plan"),
    ([("target", "postgresql://evil@10.0.0.1/x")], "target is the database this dbsurge process was started with"),
    ([("rate", "1000000")], "rate is a plan option"), ([("baseline_tps", "5")], "baseline_tps is a plan option"),
    ([("stages", "1s@5tps")], "stages is a plan option"), ([("stage_seconds", "1")], "stage_seconds is a plan option"),
    ([("maxLag", "1s")], "unknown field 'maxLag' in the start form (the form's field is max_lag)"),
    ([("maxUsers", "-5")], "the form's field is max_users"),
    ([("results_dir", "/tmp")], "unknown field 'results_dir'"), ([("web_auth", "a:b")], "unknown field 'web_auth'"),
    ([("headless", "true")], "unknown field 'headless'"), ([("num_users", "5")], "unknown field 'num_users'"),
    ([("max_users", "5"), ("max_users", "7")], "field 'max_users' is given more than once"),
    ([("user_count", "1"), ("user_count", "1")], "field 'user_count' is given more than once"),
    ([("arrivals", "poisson"), ("arrivals", "uniform")], "field 'arrivals' is given more than once"),
]


@pytest.mark.parametrize("pairs, words", BAD_FIELDS)
def test_a_bad_start_form_is_one_line(pairs, words):
    with pytest.raises(UserError) as e:
        _check(pairs)
    message = str(e.value)
    assert words in message and "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("pairs, words", [
    ([("user_count", "0"), ("spawn_rate", "1")], "-u/--users must be a whole number of at least 1, not 0"),
    ([("user_count", "1"), ("spawn_rate", "0")], "bad spawn_rate '0': must be > 0"),
    ([("user_count", "2000000000"), ("spawn_rate", "1")], "-u/--users"),
])
def test_the_closed_models_users_and_ramp_up(pairs, words):
    with pytest.raises(UserError, match=words.replace("/", ".")):
        _check(pairs, plan=False)


@pytest.mark.parametrize("pairs", [
    # what Locust's own page sends under a shape: users and ramp-up disabled at 0, the plan's options left out
    [("user_count", "0"), ("spawn_rate", "0"), ("host", "x"), ("target", "postgresql://u:***@127.0.0.1:5432/x"),
     ("max_users", "200"), ("arrivals", "uniform"), ("max_lag", "")],
    [("user_count", "1"), ("spawn_rate", "1")], [("target", TARGET)], [("max_lag", "250ms"), ("arrivals", "poisson")],
    [("run_time", "")], [("user_classes", "A"), ("user_classes", "B")], [],
])
def test_a_good_start_form_passes_and_leaves_the_options_alone(pairs):
    ns = _check(pairs)
    assert ns.max_lag is None and ns.arrivals == "uniform" and ns.max_users == 200  # a copy was checked


def test_json_with_a_key_twice():
    """``{"rate_tps": 100, "rate_tps": 1000000}`` took the last value without a word."""
    with pytest.raises(DuplicateKey, match="rate_tps"):
        load_json('{"rate_tps": 100, "rate_tps": 1000000}', unique_keys=True)
    with pytest.raises(DuplicateKey, match="'a'"):
        load_json('{"x": {"a": 1, "a": 2}}', unique_keys=True)
    assert load_json('{"rate_tps": 100, "rate_tps": 5}') == {"rate_tps": 5}  # other readers: as json.loads


# -- a real `dbsurge run --web` ---------------------------------------------------------------------------------


def _post(url: str, body: bytes, ctype: str = "application/x-www-form-urlencoded") -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _get_status(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _wait_up(url: str, proc, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    raise AssertionError(f"{url} not up after {timeout} s")


def _orders(pg_uri: str) -> int:
    import psycopg

    with psycopg.connect(pg_uri) as conn:
        exists = conn.execute("select to_regclass('public.orders')").fetchone()[0]
        return conn.execute("select count(*) from orders").fetchone()[0] if exists else 0


BAD_SWARMS = [
    (b"user_count=1&spawn_rate=1&arrivals=bogus", "bad arrivals 'bogus'"),
    (b"user_count=1&spawn_rate=1&max_lag=-1s", "--max-lag"),
    (b"max_users=-5", "--max-users must be a whole number of at least 1, not -5"),
    (b"spawn_rate=1e400", "too large a number"), (b"user_count=-1", "-u/--users"),
    (b"maxLag=-1s", "unknown field 'maxLag'"), (b"rate=1000000", "rate is a plan option"),
    (b"max_users=5&max_users=100000", "field 'max_users' is given more than once"),
    (b"run_time=5s", "run_time does not apply"), (b"target=postgresql%3A%2F%2Fx%40127.0.0.1%3A1%2Fy", "target is"),
    (b"arrivals=\xff", "not url-encoded UTF-8"), (b"arrivals=%ff", "not url-encoded UTF-8"),
    (b"results_dir=%2Ftmp", "unknown field 'results_dir'"), (b"max_users=5&max_users=5", "more than once"),
]
BAD_RATES = [
    (b'{"rate_tps": 100, "rate_tps": 1000000}', "application/json", "field 'rate_tps' is given more than once"),
    (b"rate_tps=100&rate_tps=1000000", "application/x-www-form-urlencoded", "field 'rate_tps' is given more than once"),
    (b"scale=1&scale=2", "application/x-www-form-urlencoded", "field 'scale' is given more than once"),
]


def test_a_web_run_refuses_bad_forms_and_starts_nothing(tmp_path, pg_uri):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "dbsurge.commands.cli", "run", "--workload", "orders", "--target", pg_uri, "--shape",
           "constant", "--rate", "20", "--duration", "2s", "--web", "--web-port", str(port), "--operation",
           "order_create", "--no-db-sampler", "--workload-option", "products=300", "--results-dir", str(results)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_up(base + "/dbsurge/plan", proc)
        before = _orders(pg_uri)
        for body, words in BAD_SWARMS:
            status, answer = _post(base + "/swarm", body)
            assert status == 400 and answer["success"] is False, (body, status, answer)
            assert words in answer["message"] and "\n" not in answer["message"], (body, answer)
        for body, ctype, words in BAD_RATES:
            status, answer = _post(base + "/dbsurge/rate", body, ctype)
            assert status == 400 and words in answer["error"], (body, status, answer)
        for query in ("since=x", "since=-1", "since=1.5", "since=1&since=2", "since=%ff", "since=" + "9" * 20):
            status, answer = _get_status(f"{base}/dbsurge/live?{query}")
            assert status == 400 and "since must be a whole number" in answer["error"], (query, status, answer)
        assert _get_status(f"{base}/dbsurge/live?since=12")[0] == 200
        time.sleep(3)  # a start that got through would have sent by now (time zero is 1 s after it)
        assert proc.poll() is None
        assert _orders(pg_uri) == before
        assert not results.exists() or not any(results.iterdir()), list(results.iterdir())
        # Locust's own form under a shape, as the page sends it, still starts the run
        status, answer = _post(base + "/swarm", b"user_count=0&spawn_rate=0&max_users=50&arrivals=uniform&max_lag=")
        assert status == 200 and answer["success"] is True, answer
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out and out.count("a start refused (400)") == len(BAD_SWARMS), out[-3000:]
    assert _orders(pg_uri) == before + 40


def test_a_closed_model_web_ui_checks_users_ramp_up_and_run_time(tmp_path, pg_uri):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "locust", "-f", f"{REPO}/locustfiles/orders.py", "--web-port", str(port),
           "--target", pg_uri, "--operation", "product_lookup", "--no-db-sampler", "--workload-option",
           "products=300", "--results-dir", str(results)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_up(base + "/dbsurge/plan", proc)
        for body, words in [(b"user_count=0&spawn_rate=1", "-u/--users must be a whole number of at least 1"),
                            (b"user_count=-1&spawn_rate=1", "-u/--users"),
                            (b"user_count=1&spawn_rate=0", "bad spawn_rate '0'"),
                            (b"user_count=1&spawn_rate=inf", "bad spawn_rate"),
                            (b"user_count=1&spawn_rate=1&run_time=0s", "-t/--run-time must be positive"),
                            (b"user_count=1&spawn_rate=1&run_time=soon", "bad run_time"),
                            (b"user_count=1&spawn_rate=1&run_time=99999999h", "-t/--run-time must be at most a year"),
                            (b"user_count=1&user_count=2&spawn_rate=1", "field 'user_count' is given more than once")]:
            status, answer = _post(base + "/swarm", body)
            assert status == 400 and answer["success"] is False, (body, status, answer)
            assert words in answer["message"], (body, answer)
        time.sleep(2)
        assert not results.exists() or not any(results.iterdir()), list(results.iterdir())
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_check_swarm_form_reads_what_argparse_reads():
    """The form's values go through the command line's own actions (not a second set of rules)."""
    from dbsurge.ui.web_forms import option_actions

    actions = option_actions(strict_locust_parser())
    assert isinstance(actions["max_users"], argparse.Action) and actions["arrivals"].choices == ["uniform", "poisson"]
    assert actions["num_users"].option_strings[:1] == ["-u"]


def test_a_form_that_is_not_utf8_is_refused_not_emptied():
    """Werkzeug drops a url-encoded form whole when a value is not UTF-8: ``arrivals=%ff`` started the run with
    none of its fields. Read strictly here."""
    from dbsurge.ui.web import form_fields

    env = {"CONTENT_TYPE": "application/x-www-form-urlencoded"}
    for body in (b"arrivals=%ff", b"arrivals=\xff", b"max_users=5&x=%c3%28"):
        with pytest.raises(UserError, match="not url-encoded UTF-8"):
            form_fields(env, body)
    assert form_fields(env, b"a=1&a=2&b=&c=%C3%A9") == [("a", "1"), ("a", "2"), ("b", ""), ("c", "é")]
