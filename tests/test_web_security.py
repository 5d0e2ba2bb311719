"""The web UI answers its own origin only and shows no secret (docs/web-ui.md).

- Unit tests: `parse_rate_request` (what ``POST /dbsurge/rate`` accepts) and `refusal` (which
  requests the same-origin guard turns away).
- A real Locust master and worker run orders against the session's PostgreSQL as a role with a
  password, started from Locust's own page in Chromium. A second HTTP server serves an attacker
  page, opened from a foreign site (``attacker.test``, cross-site) and from another port of
  127.0.0.1 (same-site): it tries to read the UI, change the rate, start a swarm and stop the test.
  Every attempt gets 403 or stays unreadable, and the run goes on at its rate; the password is in
  no page, endpoint or download; the panel on the UI's own page still sets the rate.
- ``--web-login``: pages still need a login, and a same-origin login form still works.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from runs import REPO

from dbsurge.base.errors import UserError
from dbsurge.embedded.servers import free_port
from dbsurge.ui.web import parse_rate_request, refusal

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--host-resolver-rules=MAP attacker.test 127.0.0.1"]
HAVE_CHROMIUM = bool(shutil.which("chromium")) or os.path.exists(CHROMIUM)
PASSWORD = "Xq7wzDbsurgeWebSecret93"
# Locust says "spawning" until the last user of the plan has started, "running" after; the load goes in both
LOAD_GOING = ("spawning", "running")
ROLE = "dbsurge_web_t"
FILES = f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py"


# -- the rate a request may ask for -----------------------------------------------------------------------------

@pytest.mark.parametrize("data", [
    {"rate_tps": True}, {"rate_tps": False}, {"rate_tps": "1_000"}, {"rate_tps": [1]}, {"rate_tps": {}},
    {"rate_tps": "nan"}, {"rate_tps": "inf"}, {"rate_tps": float("nan")}, {"rate_tps": float("inf")},
    {"rate_tps": 1e300}, {"rate_tps": 10**400}, {"rate_tps": -1}, {"rate_tps": "-1"}, {"rate_tps": "0x10"},
    {"rate_tps": "１２"}, {"rate_tps": "12 TPS"}, {"scale": True}, {"scale": "nan"}, {"scale": 11},
    {"rate_tps": 1, "scale": 1}, {}, {"rate_tps": None}, {"rate_tps": ""}, {"rate": 5}, {"rate_tps": 5, "x": 1},
    [1], [], "12", 12, None, True,
])
def test_rate_request_refused(data):
    with pytest.raises(UserError) as e:
        parse_rate_request(data, max_rate=1000.0, scale_peak=100.0)
    assert "\n" not in str(e.value) and str(e.value)


@pytest.mark.parametrize("data, expected", [
    ({"rate_tps": "12"}, (12.0, None)), ({"rate_tps": 12.5}, (12.5, None)), ({"rate_tps": 0}, (0.0, None)),
    ({"rate_tps": " 800 "}, (800.0, None)), ({"rate_tps": "1e3"}, (1000.0, None)), ({"rate_tps": 1000}, (1000.0, None)),
    ({"scale": "2"}, (None, 2.0)), ({"scale": 10}, (None, 10.0)), ({"scale": 0}, (None, 0.0)),
    ({"rate_tps": "", "scale": "1.5"}, (None, 1.5)), ({"rate_tps": None, "scale": 0.5}, (None, 0.5)),
])
def test_rate_request_accepted(data, expected):
    assert parse_rate_request(data, max_rate=1000.0, scale_peak=100.0) == expected


def test_rate_above_max_rate_names_the_limit():
    with pytest.raises(UserError, match="--max-rate 500"):
        parse_rate_request({"rate_tps": 501}, max_rate=500.0)
    with pytest.raises(UserError, match="peak to 600"):
        parse_rate_request({"scale": 6}, max_rate=500.0, scale_peak=100.0)


# -- which requests the guard turns away ------------------------------------------------------------------------

def _environ(method="GET", path="/", **headers):
    env = {"REQUEST_METHOD": method, "PATH_INFO": path, "wsgi.url_scheme": "http", "HTTP_HOST": "127.0.0.1:8089"}
    env.update({"HTTP_" + k.upper(): v for k, v in headers.items()})
    return env


@pytest.mark.parametrize("env", [
    _environ("POST", "/dbsurge/rate", origin="http://attacker.test"),
    _environ("POST", "/dbsurge/rate", origin="null"),
    _environ("POST", "/dbsurge/rate", sec_fetch_site="cross-site", sec_fetch_mode="no-cors"),
    _environ("POST", "/swarm", sec_fetch_site="same-site", sec_fetch_mode="navigate", origin="http://127.0.0.1:9"),
    _environ("POST", "/stop", referer="http://attacker.test/page"),
    _environ("GET", "/stop", sec_fetch_site="cross-site", sec_fetch_mode="no-cors"),
    _environ("GET", "/stats/reset", referer="http://attacker.test/"),
    _environ("GET", "/dbsurge/plan", sec_fetch_site="cross-site", sec_fetch_mode="cors", origin="http://a.test"),
    _environ("GET", "/dbsurge/panel.js", sec_fetch_site="cross-site", sec_fetch_mode="no-cors"),
    _environ("GET", "/", sec_fetch_site="same-site", sec_fetch_mode="no-cors"),
    _environ("OPTIONS", "/dbsurge/rate", origin="http://attacker.test"),
    _environ("GET", "/", origin="http://127.0.0.1:8090"),
    _environ("GET", "/", origin="https://127.0.0.1:8089"),
])
def test_guard_refuses(env):
    assert refusal(env)


@pytest.mark.parametrize("env", [
    _environ("POST", "/dbsurge/rate"),  # curl
    _environ("GET", "/stop"),
    _environ("POST", "/dbsurge/rate", origin="http://127.0.0.1:8089", sec_fetch_site="same-origin"),
    _environ("POST", "/swarm", referer="http://127.0.0.1:8089/"),
    _environ("POST", "/swarm", sec_fetch_site="none"),
    _environ("GET", "/", sec_fetch_site="cross-site", sec_fetch_mode="navigate"),  # a link from elsewhere
    _environ("GET", "/", referer="http://attacker.test/"),  # a read without Sec-Fetch-*: no CORS, unreadable
    _environ("GET", "/dbsurge/plan", sec_fetch_site="same-origin", sec_fetch_mode="cors"),
    _environ("POST", "/dbsurge/rate", origin="http://127.0.0.1:80", HOST="127.0.0.1"),
    _environ("POST", "/dbsurge/rate", origin="https://lg.example", HOST="lg.example", X_FORWARDED_PROTO="https"),
])
def test_guard_lets_through(env):
    assert refusal(env) is None


# -- a real run, a real browser, a foreign page -------------------------------------------------------------------

def _http(url, data=None, headers=None, method=None):
    """(status, body text) of a plain HTTP request: no Origin, no Sec-Fetch-* (like curl)."""
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def _json(url):
    status, body = _http(url)
    assert status == 200, (url, status, body[:300])
    return json.loads(body)


def _wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
        except (OSError, ValueError, KeyError, AssertionError) as e:  # not up yet
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


@pytest.fixture
def password_uri(pg_uri):
    import psycopg

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        try:
            conn.execute(f"create role {ROLE} login superuser password '{PASSWORD}'")
        except psycopg.errors.DuplicateObject:
            conn.execute(f"alter role {ROLE} login superuser password '{PASSWORD}'")
    # postgresql://postgres@127.0.0.1:PORT/postgres -> the new role, with its password
    return pg_uri.replace("postgres@", f"{ROLE}:{PASSWORD}@", 1)


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def master_web(tmp_path, password_uri):
    """A master (web UI on 127.0.0.1) and one worker; constant 50 TPS, not started yet."""
    web_port, master_port = free_port(), free_port()
    common = ["--operation", "product_lookup", "--workload-option", "products=2000"]
    with open(tmp_path / "master.log", "w") as log:  # the child keeps writing to its copy
        master = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", FILES, "--master", "--master-bind-host", "127.0.0.1",
             "--master-bind-port", str(master_port), "--web-host", "127.0.0.1", "--web-port", str(web_port),
             "--target", password_uri, "--rate", "50", "--no-db-sampler", "--results-dir", str(tmp_path / "results"),
             *common], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", FILES, "--worker", "--master-host", "127.0.0.1", "--master-port",
         str(master_port), *common], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "DBSURGE_TARGET": password_uri})  # the master never sends a password: the worker's own
    base = f"http://127.0.0.1:{web_port}"

    def master_log():
        return (tmp_path / "master.log").read_text()

    try:
        try:
            _wait_for(lambda: _json(base + "/stats/requests").get("worker_count", 0) >= 1, 45, "the worker")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{master_log()[-3000:]}") from None
        yield base, master_log
    finally:
        _stop(worker)
        _stop(master)


ATTACK_PAGE = """<!doctype html><html><body><h1>cat pictures</h1>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe><iframe name="sink3"></iframe>
<form id="f-rate" method="POST" action="BASE/dbsurge/rate" target="sink1"><input name="rate_tps" value="999"></form>
<form id="f-swarm" method="POST" action="BASE/swarm" target="sink2"><input name="user_count" value="7">
<input name="spawn_rate" value="7"></form>
<form id="f-stop" method="POST" action="BASE/stop" target="sink3"></form>
<script>
const B = "BASE";
window.results = {};
async function attempt(name, fn) {
  try {
    const r = await fn();
    let text = "";
    try { text = await r.text(); } catch (e) {}
    window.results[name] = "response type=" + r.type + " status=" + r.status + " readable=" + text.length;
  } catch (e) { window.results[name] = "error " + e.name; }
}
function load(name, tag, url) {
  return new Promise(res => {
    const el = document.createElement(tag);
    el.onload = () => res(window.results[name] = "loaded");
    el.onerror = () => res(window.results[name] = "error");
    el.src = url;
    document.body.appendChild(el);
  });
}
(async () => {
  await attempt("fetch GET /", () => fetch(B + "/", {credentials: "include"}));
  await attempt("fetch GET /dbsurge/plan", () => fetch(B + "/dbsurge/plan", {credentials: "include"}));
  await attempt("fetch GET /stats/requests", () => fetch(B + "/stats/requests"));
  await attempt("fetch POST /dbsurge/rate no-cors", () => fetch(B + "/dbsurge/rate", {method: "POST", mode: "no-cors",
    headers: {"Content-Type": "text/plain"}, body: JSON.stringify({rate_tps: 999})}));
  await attempt("fetch POST /dbsurge/rate no-cors form", () => fetch(B + "/dbsurge/rate", {method: "POST",
    mode: "no-cors", body: new URLSearchParams({rate_tps: "999"})}));
  await attempt("fetch POST /dbsurge/rate json (preflight)", () => fetch(B + "/dbsurge/rate", {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({rate_tps: 999})}));
  await attempt("fetch POST /swarm no-cors", () => fetch(B + "/swarm", {method: "POST", mode: "no-cors",
    body: new URLSearchParams({user_count: "7", spawn_rate: "7"})}));
  await attempt("fetch POST /stop no-cors", () => fetch(B + "/stop", {method: "POST", mode: "no-cors"}));
  await attempt("fetch POST /stats/reset no-cors", () => fetch(B + "/stats/reset", {method: "POST", mode: "no-cors"}));
  await load("img GET /stop", "img", B + "/stop");
  await load("img GET /stats/reset", "img", B + "/stats/reset");
  await load("script GET /dbsurge/panel.js", "script", B + "/dbsurge/panel.js");
  await load("script GET /dbsurge/plan", "script", B + "/dbsurge/plan");
  document.getElementById("f-rate").submit();
  document.getElementById("f-swarm").submit();
  document.getElementById("f-stop").submit();
  await new Promise(r => setTimeout(r, 1500));
  window.done = true;
})();
</script></body></html>
"""


@pytest.fixture
def attacker_server():
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.get(self.path, b"not found")
            self.send_response(200 if self.path in pages else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], pages
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
@pytest.mark.skipif(not HAVE_CHROMIUM, reason="Debian's chromium is not installed (make test installs it as root)")
def test_foreign_page_can_neither_read_nor_steer(master_web, attacker_server, password_uri):
    from playwright.sync_api import sync_playwright

    base, master_log = master_web
    port, pages = attacker_server
    pages["/"] = ATTACK_PAGE.replace("BASE", base).encode()
    seen: list[tuple[str, str, str, int]] = []  # (attacker origin, method, path, status) as the browser saw it
    failed: list[tuple[str, str, str, str]] = []  # (attacker origin, method, path, the browser's error)
    outcomes: dict[str, dict[str, str]] = {}

    # the form's --target default is the redacted URI; the password is nowhere in the page
    status, page_html = _http(base + "/")
    assert status == 200 and PASSWORD not in page_html
    assert f"{ROLE}:***@" in page_html

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # start the run from Locust's own page (same origin), with the form as it is shown
        own = browser.new_page()
        own.goto(base + "/")
        own.wait_for_selector("#dbsurge-panel")
        own.get_by_role("button", name="Start").click()
        _wait_for(lambda: _json(base + "/dbsurge/plan")["achieved_tps"] >= 45, 30, "50 TPS achieved")
        assert _json(base + "/stats/requests")["state"] in LOAD_GOING, "the run is not going"

        for origin in (f"http://attacker.test:{port}", f"http://127.0.0.1:{port}"):
            ctx = browser.new_context()
            page = ctx.new_page()
            page.on("response", lambda r, o=origin: seen.append((o, r.request.method, r.url[len(base):], r.status))
                    if r.url.startswith(base) else None)
            page.on("requestfailed", lambda r, o=origin: failed.append((o, r.method, r.url[len(base):], r.failure))
                    if r.url.startswith(base) else None)
            page.goto(origin + "/")
            page.wait_for_function("window.done === true", timeout=20000)
            outcomes[origin] = page.evaluate("window.results")
            ctx.close()
        print(json.dumps(outcomes, indent=1))
        print("\n".join(f"{o} {m} {path} -> {s}" for o, m, path, s in seen + failed))

        for origin, results in outcomes.items():
            for name, result in results.items():
                # nothing readable: a network error, an error event, or an opaque no-cors response
                assert result.startswith("error") or result == "response type=opaque status=0 readable=0", \
                    (origin, name, result)
        assert seen, "the browser sent nothing to the UI"
        assert all(s == 403 for *_x, s in seen), seen
        # the UI refused each one itself (403), whatever the browser would have done with the answer
        refused = [line for line in master_log().splitlines() if "web UI refused" in line]
        print("\n".join(refused))
        for method, path in [("POST", "/dbsurge/rate"), ("POST", "/swarm"), ("POST", "/stop"), ("GET", "/stop"),
                             ("POST", "/stats/reset"), ("GET", "/stats/reset"), ("GET", "/dbsurge/plan"), ("GET", "/"),
                             ("GET", "/stats/requests"), ("GET", "/dbsurge/panel.js"), ("OPTIONS", "/dbsurge/rate")]:
            for kind in ("cross-origin request from http://attacker.test", "cross-origin request from http://127.0.0.1",
                         "cross-site", "same-site"):
                if any(f"refused {method} {path} (403)" in line and kind in line for line in refused):
                    break
            else:
                raise AssertionError(f"no refusal of {method} {path} in the log: {refused}")

        # the run went on untouched
        state = _json(base + "/dbsurge/plan")
        assert state["running"] and state["rate_changes"] == [] and state["target_tps"] == 50, state
        stats = _json(base + "/stats/requests")
        assert stats["state"] in LOAD_GOING and stats["user_count"] > 0, stats

        # the panel on the UI's own page still sets the rate (same origin works)
        own.fill("#dbsurge-rate", "60")
        own.click("#dbsurge-set-rate")
        _wait_for(lambda: _json(base + "/dbsurge/plan")["rate_changes"], 10, "the panel's rate change")
        assert own.inner_text("#dbsurge-msg") == ""
        browser.close()
    state = _json(base + "/dbsurge/plan")
    assert [c[1] for c in state["rate_changes"]] == [60], state

    # plain HTTP clients (curl) keep working; bad input is a 400 with one line, never a 500
    def post(body, ctype="application/json", **headers):
        return _http(base + "/dbsurge/rate", data=body.encode(), headers={"Content-Type": ctype, **headers},
                     method="POST")

    for body in ['{"rate_tps": true}', '[1]', '{"rate_tps": "1_000"}', '{"rate_tps": "nan"}', '{rate_tps: 5',
                 '{"rate_tps": 501}', '{"scale": 11}', 'null', '"12"', '{"rate_tps": 1e999}']:
        status, text = post(body)
        assert status == 400 and "\n" not in json.loads(text)["error"], (body, status, text)
    assert post("rate_tps=true", "application/x-www-form-urlencoded")[0] == 400
    assert post('{"rate_tps": 70}', Origin="http://attacker.test")[0] == 403
    assert post('{"rate_tps": 70}')[0] == 200
    assert post("rate_tps=80", "application/x-www-form-urlencoded")[0] == 200
    assert [c[1] for c in _json(base + "/dbsurge/plan")["rate_changes"]] == [60, 70, 80]

    # no secret in any page, endpoint or download
    for path in ["/", "/dbsurge/plan", "/stats/requests", "/stats/report", "/stats/report?download=1",
                 "/stats/requests/csv", "/stats/failures/csv", "/exceptions", "/exceptions/csv", "/tasks",
                 "/logs", "/worker-count", "/stats/requests_full_history/csv", "/dbsurge/panel.js", "/dbsurge/live",
                 "/dbsurge/report"]:
        status, body = _http(base + path)
        assert status in (200, 404), (path, status)
        assert PASSWORD not in body, path
    assert _json(base + "/stats/requests")["state"] in LOAD_GOING


AUTH_LOCUSTFILE = '''
from flask import redirect, request, session, url_for
from flask_login import UserMixin, login_user
from locust import events


class AuthUser(UserMixin):
    def __init__(self, name):
        self.id = name


@events.init.add_listener
def _auth(environment, **_kw):
    if environment.web_ui:
        environment.web_ui.app.config["SECRET_KEY"] = "test-only-key"
        environment.web_ui.auth_args = {"username_password_callback": "/login_submit"}
        environment.web_ui.login_manager.user_loader(AuthUser)

        @environment.web_ui.app.route("/login_submit", methods=["POST"])
        def login_submit():
            if request.form.get("password") == "letmein":
                login_user(AuthUser(request.form.get("username")))
                return redirect(url_for("locust.index"))
            session["auth_error"] = "Invalid username or password"
            return redirect(url_for("locust.login"))
'''


def test_web_login_still_works(tmp_path, password_uri):
    import requests

    (tmp_path / "auth.py").write_text(AUTH_LOCUSTFILE)
    port = free_port()
    with open(tmp_path / "locust.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", f"{FILES},{tmp_path / 'auth.py'}", "--web-login", "--web-port",
             str(port), "--target", password_uri, "--rate", "20", "--operation", "product_lookup", "--no-db-sampler",
             "--workload-option", "products=2000", "--results-dir", str(tmp_path / "results")],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: requests.get(base + "/login", timeout=5).status_code == 200, 30,
                  "the login page" + (tmp_path / "locust.log").read_text()[-2000:])
        s = requests.Session()
        for path in ["/", "/dbsurge/plan", "/stats/requests"]:
            r = s.get(base + path, allow_redirects=False, timeout=5)
            assert r.status_code == 302 and "/login" in r.headers["Location"], (path, r.status_code)
        assert s.post(base + "/dbsurge/rate", json={"rate_tps": 5}, allow_redirects=False).status_code == 302
        # a login form on a foreign page is refused (no login CSRF); a wrong password is not let in
        r = s.post(base + "/login_submit", data={"username": "a", "password": "letmein"}, allow_redirects=False,
                   headers={"Origin": "http://attacker.test", "Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
        r = s.post(base + "/login_submit", data={"username": "a", "password": "nope"}, allow_redirects=False,
                   headers={"Origin": base, "Sec-Fetch-Site": "same-origin"})
        assert s.get(base + "/", allow_redirects=False).status_code == 302
        # the UI's own login form logs in
        r = s.post(base + "/login_submit", data={"username": "a", "password": "letmein"}, allow_redirects=False,
                   headers={"Origin": base, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate"})
        assert r.status_code == 302, r.text[:300]
        page = s.get(base + "/", allow_redirects=False)
        assert page.status_code == 200 and "dbsurge/panel.js" in page.text and PASSWORD not in page.text
        assert f"{ROLE}:***@" in page.text
        assert s.get(base + "/dbsurge/plan").json()["running"] is False
        assert "error" in s.post(base + "/dbsurge/rate", json={"rate_tps": True}).json()
    finally:
        _stop(proc)


# -- the Host header, --web-auth and --web-host beyond loopback ---------------------------------------------------

@pytest.mark.parametrize("host, web_host, allow", [
    ("evil.example", "127.0.0.1", None), ("evil.example:8089", "127.0.0.1", None),
    ("127.0.0.1.evil.example", "127.0.0.1", None), ("localhost.evil.example:8089", "127.0.0.1", None),
    ("lg.example", "127.0.0.1", ["other.example"]), ("evil.example", "0.0.0.0", None), ("EVIL.example.", "", None),
])
def test_host_header_refused(host, web_host, allow):
    """A DNS-rebinding page sends its own name as Host: refused, with the flag that would allow it named."""
    from dbsurge.ui.web import host_refusal

    reason = host_refusal(_environ("POST", "/dbsurge/rate", HOST=host, ORIGIN=f"http://{host}"), web_host, allow)
    assert reason and "--web-host-allow" in reason and "\n" not in reason


@pytest.mark.parametrize("host, web_host, allow", [
    ("127.0.0.1:8089", "127.0.0.1", None), ("localhost:8089", "127.0.0.1", None), ("[::1]:8089", "127.0.0.1", None),
    ("10.1.2.3:8089", "0.0.0.0", None), ("lg.example", "127.0.0.1", ["lg.example"]),
    ("LG.example:443", "127.0.0.1", ["a.example,lg.example"]), ("anything.example", "127.0.0.1", ["*"]),
    ("lg.internal:8089", "lg.internal", None),
])
def test_host_header_allowed(host, web_host, allow):
    from dbsurge.ui.web import host_refusal

    assert host_refusal(_environ("GET", "/", HOST=host), web_host, allow) is None


def _call_guard(guard, env):
    out = {}

    def start_response(status, headers, exc_info=None):
        out["status"], out["headers"] = status, dict(headers)

    body = b"".join(guard(env, start_response))
    return int(out["status"].split()[0]), out["headers"], body


def test_guard_basic_auth_and_host():
    """The guard in front of any app: 401 without the --web-auth credentials, 403 for a foreign Host."""
    import base64

    from dbsurge.ui.web import SameOriginGuard

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"locust"]

    guard = SameOriginGuard(app, web_host="127.0.0.1", credentials="alice:s3cret")
    good = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"alice:wrong").decode()
    status, headers, _ = _call_guard(guard, _environ("GET", "/"))
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert _call_guard(guard, _environ("GET", "/", AUTHORIZATION=bad))[0] == 401
    assert _call_guard(guard, _environ("GET", "/", AUTHORIZATION=good))[:1] == (200,)
    assert _call_guard(guard, _environ("POST", "/swarm", AUTHORIZATION=good, HOST="evil.example:8089"))[0] == 403
    assert b"s3cret" not in _call_guard(guard, _environ("GET", "/"))[2]
    open_guard = SameOriginGuard(app, web_host="127.0.0.1")
    assert _call_guard(open_guard, _environ("GET", "/"))[0] == 200


@pytest.mark.parametrize("args, words", [
    (["--web", "--web-host", "0.0.0.0"], "beyond this host, and anyone reaching it could start load"),
    (["--web", "--web-host", ""], "every interface"),
    (["--web", "--web-host", "10.233.0.5"], "--web-auth USER:PASSWORD"),
    (["--web-auth", "nocolon"], "bad --web-auth: expected USER:PASSWORD"),
    (["--web-auth", ":pw"], "bad --web-auth"),
    (["--web", "--web-host", "0.0.0.0", "--web-auth", "u:"], "bad --web-auth"),
])
def test_web_beyond_loopback_needs_auth(tmp_path, args, words):
    """One line, exit 2, before the target, the UI or a run directory; the password is never echoed."""
    from test_bad_input import NO_PG, assert_one_line

    proc = dbsurge_cli("run", "--workload", "orders", "--target", NO_PG, "--shape", "constant", "--rate", "10",
                       *args, cwd=tmp_path)
    assert_one_line(proc, words, tmp_path / "results")


def dbsurge_cli(*args, cwd):
    from runs import dbsurge

    return dbsurge(*args, cwd=cwd, timeout=60)


def test_exposure_warning_either_way():
    import argparse

    from dbsurge.engine.validate import check_web_exposure

    def ns(**kw):
        return argparse.Namespace(**{"web_host": "0.0.0.0", "web_auth": None, "web_login": False,
                                     "web_insecure": False, "tls_cert": "", **kw})

    assert check_web_exposure(ns(web_host="127.0.0.1"), web=True) is None
    assert check_web_exposure(ns(), web=False) is None
    assert "WITHOUT authentication" in check_web_exposure(ns(web_insecure=True), web=True)
    warning = check_web_exposure(ns(web_auth="u:pw"), web=True)
    assert "behind a login over plain HTTP" in warning and "pw" not in warning
    assert "plain HTTP" not in check_web_exposure(ns(web_login=True, tls_cert="c.pem"), web=True)


def test_web_auth_and_host_on_a_real_ui(tmp_path, pg_uri):
    """`locust -f ... --web-auth` (as DBSURGE_WEB_AUTH): every page asks for it, a rebinding Host is refused,
    `--web-host-allow` lets a proxy's name in, and the password is in no page, no run.json, no command line."""
    import requests

    port = free_port()
    with open(tmp_path / "locust.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", FILES, "--web-port", str(port), "--target", pg_uri, "--rate", "20",
             "--operation", "product_lookup", "--no-db-sampler", "--workload-option", "products=2000",
             "--web-host-allow", "lg.example", "--results-dir", str(tmp_path / "results")],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "DBSURGE_WEB_AUTH": f"alice:{PASSWORD}"})
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: requests.get(base + "/", timeout=5).status_code == 401, 45,
                  "the UI" + (tmp_path / "locust.log").read_text()[-2000:])
        auth = ("alice", PASSWORD)
        page = requests.get(base + "/", auth=auth, timeout=5)
        assert page.status_code == 200 and "dbsurge/panel.js" in page.text and PASSWORD not in page.text
        assert requests.get(base + "/", auth=("alice", "nope"), timeout=5).status_code == 401
        assert requests.get(base + "/dbsurge/plan", timeout=5).status_code == 401
        evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        r = requests.post(base + "/dbsurge/rate", json={"rate_tps": 78}, auth=auth, headers=evil, timeout=5)
        assert r.status_code == 403 and "--web-host-allow" in r.text
        proxy = {"Host": "lg.example", "Origin": "http://lg.example"}
        assert requests.get(base + "/dbsurge/plan", auth=auth, headers=proxy, timeout=5).status_code == 200
        assert requests.get(base + "/dbsurge/plan", auth=auth, timeout=5).json()["overrides"] == []
        assert PASSWORD not in Path(f"/proc/{proc.pid}/cmdline").read_text().replace("\0", " ")
        assert "WITHOUT" not in (tmp_path / "locust.log").read_text()
    finally:
        _stop(proc)
    for f in (tmp_path / "results").rglob("*"):
        if f.is_file():
            assert PASSWORD not in f.read_text(errors="replace"), f


# -- request bodies: bounded, and any JSON refused in one line (a 400 or a 413, never a 500) ---------------------

def _environ_with_body(body: bytes, length: str | None):
    import io

    env = _environ("POST", "/dbsurge/rate")
    env["wsgi.input"] = io.BytesIO(body)
    if length is not None:
        env["CONTENT_LENGTH"] = length
    return env


def test_bounded_body_unit():
    from dbsurge.ui.web import MAX_BODY_BYTES, BodyTooLarge, bounded_body

    assert bounded_body(_environ_with_body(b'{"rate_tps": 5}', "15")) == b'{"rate_tps": 5}'
    assert bounded_body(_environ_with_body(b"x" * MAX_BODY_BYTES, None)) == b"x" * MAX_BODY_BYTES
    with pytest.raises(BodyTooLarge, match="200000000 bytes"):  # refused unread: the stream holds 3 bytes
        bounded_body(_environ_with_body(b"abc", "200000000"))
    stream_env = _environ_with_body(b"x" * (10 * MAX_BODY_BYTES), None)  # no length (chunked): read to the bound
    with pytest.raises(BodyTooLarge):
        bounded_body(stream_env)
    assert stream_env["wsgi.input"].tell() == MAX_BODY_BYTES + 1  # not a byte more than the bound and one


@pytest.fixture
def plain_ui(tmp_path, pg_uri):
    """`locust -f orders,constant --web-port P` (a real UI, not started): its base URL and its log."""
    port = free_port()
    with open(tmp_path / "locust.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", FILES, "--web-host", "127.0.0.1", "--web-port", str(port),
             "--target", pg_uri, "--rate", "20", "--operation", "product_lookup", "--no-db-sampler",
             "--workload-option", "products=2000", "--results-dir", str(tmp_path / "results")],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: _http(base + "/dbsurge/plan")[0] == 200, 45,
                  "the UI" + (tmp_path / "locust.log").read_text()[-2000:])
        yield base, port, lambda: (tmp_path / "locust.log").read_text()
    finally:
        _stop(proc)


def _raw_post(port: int, headers: dict[str, str], body_parts: list[bytes]) -> tuple[int, str]:
    """POST /dbsurge/rate with exactly these headers and body bytes (a declared length may be more than is sent)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.putrequest("POST", "/dbsurge/rate")
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        for part in body_parts:
            conn.send(part)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        conn.close()


def test_rate_endpoint_bodies_are_bounded_and_parsed_totally(plain_ui):
    """`[` x 60,000 was an HTTP 500 with a RecursionError traceback in the log; a 200 MB body was read whole.
    Now: 400 with one line for any JSON that is not a rate, 413 for a body above 64 KiB, read no further."""
    base, port, log = plain_ui

    def post(body: bytes, ctype="application/json"):
        return _http(base + "/dbsurge/rate", data=body, headers={"Content-Type": ctype}, method="POST")

    for body in [b"[" * 60_000, b"{" * 60_000, b'{"rate_tps": ' + b"[" * 70 + b"1" + b"]" * 70 + b"}",
                 b"\xff\xfe{", b'{"rate_tps": 5']:
        status, text = post(body)
        assert status == 400, (body[:30], status, text[:300])
        assert "\n" not in json.loads(text)["error"], text
    # a real rate is parsed (the run has not started: refused for that, not for its body), as JSON or a form
    for body, ctype in [(b'{"rate_tps": 5}', "application/json"), (b"rate_tps=5", "application/x-www-form-urlencoded")]:
        status, text = post(body, ctype)
        assert status == 400 and "no arrival-rate plan is running" in text, (body, status, text)
    # too large: declared (only 70 KiB of 200 MB sent: answered without waiting for the rest), or chunked
    status, text = _raw_post(port, {"Content-Type": "application/json", "Content-Length": str(200 * 1024**2)},
                             [b"[" * (70 * 1024)])
    assert status == 413 and "more than 65536" in json.loads(text)["error"], (status, text[:300])
    chunk = b"x" * 4096
    chunks = [b"%x\r\n" % len(chunk) + chunk + b"\r\n"] * 20  # 80 KiB, no Content-Length
    status, text = _raw_post(port, {"Content-Type": "application/x-www-form-urlencoded",
                                    "Transfer-Encoding": "chunked"}, [*chunks, b"0\r\n\r\n"])
    assert status == 413, (status, text[:300])
    status, text = post(b"rate_tps=5&pad=" + b"x" * (65 * 1024), "application/x-www-form-urlencoded")
    assert status == 413, (status, text[:300])
    assert "Traceback" not in log() and "RecursionError" not in log(), log()[-3000:]
    assert _http(base + "/dbsurge/plan")[0] == 200  # the UI still answers
