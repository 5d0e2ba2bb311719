"""dbsurge's panel in Locust's web UI, and its endpoints (docs/web-ui.md).

- ``GET  /dbsurge/plan``: the plan, the rate overrides, where the run is; after the end, where
  its results are (`dbsurge.ui.web_state`).
- ``GET  /dbsurge/live``: that, and the live figures the panel shows (the timeline's seconds);
  ``?since=EPOCH_S``: the chart's seconds after that one only.
- ``POST /dbsurge/rate``: ``{"rate_tps": 800}`` (this rate from now on) or ``{"scale": 2}`` (the
  plan's own rates times 2 from now on, replacing any override; 1 is the plan again).
  Form fields work too: ``curl -X POST -d rate_tps=800 http://127.0.0.1:8089/dbsurge/rate``. A body
  above `MAX_BODY_BYTES` is a 413, read no further (`bounded_body`).
- ``GET  /dbsurge/report``: the finished run's report.html (that file only).

The panel is a script and a stylesheet added to Locust's own page (``/``): a column at the right,
below Locust's header, for which Locust's main area makes room, so it works with Locust's React
front end as shipped, without covering it. Under a plan, the start form's users, ramp-up and run
time fields and the plan's own options leave the form (`adjust_swarm_form`): the plan sets them.

The UI answers its own origin only (`SameOriginGuard`): no CORS, and every state-changing request
from another site is refused with 403; the new endpoints are behind it like Locust's own. No page
or endpoint shows a secret: the ``--target`` default in Locust's swarm form is the redacted URI,
and submitting it unchanged keeps the real one (`protect_secret_options`). A rate is checked by
`parse_rate_request`: a number, 0 (a pause) or more, at most ``--max-rate``, each field once. The start form
(``POST /swarm``) is checked as the command line checks it before Locust's swarm runs (`check_swarm_requests`,
`dbsurge.ui.web_forms`): a bad one is a 400 and starts nothing.
"""

from __future__ import annotations

import base64
import hmac
import importlib.resources
import io
import ipaddress
import json
import logging
import math
import socket
import time
from urllib.parse import urlsplit

import gevent
from flask import Response, jsonify, request

from dbsurge.base.errors import UserError, clip
from dbsurge.base.json_input import DuplicateKey, load_json
from dbsurge.base.redact import MASK, redact_uri
from dbsurge.config.options import WEIGHT_NUMBER
from dbsurge.engine.membership import is_loopback
from dbsurge.rundir.schema import REPORT_HTML
from dbsurge.ui.web_forms import PLAN_OPTIONS, check_swarm_form, duplicate_field, form_extra_fields, option_actions
from dbsurge.ui.web_state import live_state, max_rate, plan_state, remaining_peak

log = logging.getLogger("dbsurge")


def install_web_controls(web_ui, run, web_auth: str | None = None) -> None:
    """Add the endpoints, the panel and the form's adjustments to Locust's Flask app.

    `web_auth` is ``--web-auth USER:PASSWORD`` (the plugin takes it out of the options Locust sends
    to workers before it gets here); the Host names allowed are the UI's own and ``--web-host-allow``'s.
    """
    app = web_ui.app
    auth = getattr(web_ui, "auth_required_if_enabled", lambda f: f)
    if not isinstance(app.wsgi_app, SameOriginGuard):
        opts = run.options
        app.wsgi_app = SameOriginGuard(app.wsgi_app, web_host=getattr(opts, "web_host", None),
                                       host_allow=getattr(opts, "web_host_allow", None),
                                       credentials=web_auth)  # every route, these included
    protect_secret_options(web_ui, run.environment)
    check_swarm_requests(web_ui, run)  # outermost: the form as it came, before Locust or the secret's filter
    adjust_swarm_form(web_ui, run)
    web_ui.dbsurge_page = PageWatch()
    _add_endpoints(app, auth, run, web_ui.dbsurge_page)
    _add_panel(app)
    _watch_locust_state(app, run, web_ui.dbsurge_page)
    gevent.spawn(say_where_the_ui_is, web_ui, getattr(run.environment.parsed_options, "web_base_path", "") or "")


def _add_endpoints(app, auth, run, page: PageWatch) -> None:
    from dbsurge.engine.protocol import change_rate

    @app.route("/dbsurge/plan")
    @auth
    def dbsurge_plan():
        return jsonify(plan_state(run))

    @app.route("/dbsurge/live")
    @auth
    def dbsurge_live():
        since = request.args.getlist("since")
        if len(since) > 1 or (since and not (since[0].isascii() and since[0].isdigit() and len(since[0]) < 16)):
            # the page sends the last whole second it has; anything else is a client's mistake, said, not ignored
            return jsonify({"error": f"since must be a whole number of seconds (epoch), given once, not "
                                     f"{clip(','.join(since))!r}"}), 400
        state = live_state(run, since=since[0] if since else None)
        response = jsonify(state)
        page.polled(response, run.test, ending=(state["plan"]["results"] or {}).get("state") == "done")
        return response

    @app.route("/dbsurge/rate", methods=["POST"])
    @auth
    def dbsurge_rate():
        try:
            data = _rate_request_data()
            elapsed = max(0.0, run.elapsed_s() or 0.0)
            rate, scale = parse_rate_request(data, max_rate(run), scale_peak=remaining_peak(run.plan, elapsed))
            change = change_rate(run, rate_tps=rate, scale=scale)
        except BodyTooLarge as e:
            return jsonify({"error": str(e)}), 413
        except UserError as e:
            return jsonify({"error": str(e)}), 400
        return jsonify({"ok": True, "change": change, "state": plan_state(run)})

    @app.route("/dbsurge/report")
    @auth
    def dbsurge_report():
        return report_response(run)


def _add_panel(app) -> None:
    @app.route("/dbsurge/panel.js")
    def dbsurge_panel_js():
        return Response(panel_asset("web_panel.js"), mimetype="application/javascript")

    @app.route("/dbsurge/panel.css")
    def dbsurge_panel_css():
        return Response(panel_asset("web_panel.css"), mimetype="text/css")

    @app.after_request
    def inject_panel(response):
        is_page = request.path in ("/", "/index.html") and response.mimetype == "text/html"
        if is_page and not response.direct_passthrough:
            response.set_data(with_panel(response.get_data(as_text=True)))
        return response


# -- the address, and the ending shown before the process goes ---------------------------------------------

#: A page that polled within this many seconds before the results began to be written is open (the panel polls
#: once a second; the process answers nothing while it builds the report, so "before" is counted from then).
PAGE_OPEN_S = 5.0
#: At the plan's end under ``dbsurge run --web``, the longest the process waits for an open page to show the ending.
ENDING_SHOWN_WAIT_S = 10.0


class PageWatch:
    """What the open pages were last sent: when the panel last polled, and for which test it has been sent the
    ending (the results written: verdict, run directory, report) and Locust's stopped state (its header).

    A response counts once it has been sent whole (Werkzeug's ``call_on_close``, which gevent's server calls after
    the last byte), not when it was made: the process may end right after.
    """

    def __init__(self) -> None:
        self.last_poll: float | None = None  # monotonic: the panel's last poll of /dbsurge/live
        self.last_stats: float | None = None  # Locust's own page's last poll of /stats/requests
        self.ending_sent_for = None  # the test (`run.test`) whose ending a page has been sent
        self.stopped_sent_for = None  # the test after whose stop Locust's page has been sent its state

    def polled(self, response, test, *, ending: bool) -> None:
        """``/dbsurge/live`` answered; ``ending``: the answer holds ``test``'s results, written."""
        def sent() -> None:
            self.last_poll = time.monotonic()
            if ending:
                self.ending_sent_for = test

        response.call_on_close(sent)

    def stats_polled(self, response, test, *, stopped: bool) -> None:
        """``/stats/requests`` (Locust's page: its header's state and Stop button) answered."""
        def sent() -> None:
            self.last_stats = time.monotonic()
            if stopped:
                self.stopped_sent_for = test

        response.call_on_close(sent)

    def open_since(self, began: float) -> tuple[bool, bool]:
        """Whether the panel and Locust's page polled within `PAGE_OPEN_S` before ``began`` (monotonic), or since."""
        def recent(t: float | None) -> bool:
            return t is not None and t >= began - PAGE_OPEN_S

        return recent(self.last_poll), recent(self.last_stats)

    def last_heard(self) -> float:
        return max(self.last_poll or 0.0, self.last_stats or 0.0)


def _watch_locust_state(app, run, page: PageWatch) -> None:
    from locust.runners import STATE_STOPPED

    @app.after_request
    def note_locust_state(response):
        if request.path.endswith("/stats/requests") and response.status_code == 200:
            runner = run.environment.runner
            page.stats_polled(response, run.test, stopped=runner is not None and runner.state == STATE_STOPPED)
        return response


def let_the_page_show_the_ending(web_ui, run, began: float, timeout_s: float = ENDING_SHOWN_WAIT_S) -> bool:
    """Before ``dbsurge run --web`` exits at the plan's end: serve on until each page that was open when the results
    began to be written (``began``, monotonic) has been sent this test's ending; whether they were.

    True at once when no page was open. A page that goes quiet for `PAGE_OPEN_S` (closed) is not waited for, and
    nothing is waited for past ``timeout_s``. Without this the process was gone before the page's next poll, which
    stayed on RUNNING with Stop enabled and showed no verdict, run directory or report. A page polls once a
    second (Locust's own every 2 s), so this costs a second or two.
    """
    page = getattr(web_ui, "dbsurge_page", None) if web_ui is not None else None
    if page is None:
        return True
    panel, locust_page = page.open_since(began)
    if not (panel or locust_page):
        return True
    written = time.monotonic()
    while (panel and page.ending_sent_for is not run.test) or (locust_page and page.stopped_sent_for is not run.test):
        now = time.monotonic()
        if now - max(written, page.last_heard()) > PAGE_OPEN_S:
            return False  # the page was closed: nobody to show it to
        if now - written > timeout_s:
            log.warning("the web page was not sent the results within %g s: exiting anyway (they are in %s)",
                        timeout_s, run.rundir.path if run.rundir else "the run directory")
            return False
        gevent.sleep(0.05)
    return True


def ui_address(host: str | None, port: int, *, tls: bool = False, base_path: str = "") -> str:
    """The address to open the UI at: the host it listens on (loopback for every interface), ``/`` at the end."""
    shown = host if host and host not in ("*", "0.0.0.0", "::") else "127.0.0.1"
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    path = base_path.rstrip("/") + "/"
    return f"{'https' if tls else 'http'}://{shown}:{port}{path}"


#: How long `say_where_the_ui_is` waits for the UI's server to listen.
LISTEN_WAIT_S = 30.0


def say_where_the_ui_is(web_ui, base_path: str = "") -> str | None:
    """Once Locust's web server listens: one line with its address (``dbsurge run`` hides Locust's own INFO line).

    The address is read from the server bound (its real port), so the line means the page can be opened now.
    """
    deadline = time.monotonic() + LISTEN_WAIT_S
    while time.monotonic() < deadline:
        server = getattr(web_ui, "server", None)
        if server is not None and server.started:
            break
        gevent.sleep(0.05)
    else:
        return None
    host = server.server_host if hasattr(server, "server_host") else web_ui.host
    url = ui_address(host, server.server_port, tls=bool(getattr(web_ui, "tls_cert", None)), base_path=base_path)
    every = " (listening on every interface)" if not web_ui.host or web_ui.host in ("*", "0.0.0.0", "::") else ""
    log.info("web UI at %s%s", url, every)  # an INFO line prints no logger name: "12:00:01Z web UI at ..."
    return url


# -- the panel: a script and a stylesheet on Locust's own page -------------------------------------------------


def panel_asset(name: str) -> str:
    """The panel's script or stylesheet, shipped beside this module (package data)."""
    return (importlib.resources.files(__package__) / name).read_text(encoding="utf-8")


def with_panel(page: str) -> str:
    """Locust's page with the panel's stylesheet (in the head: the page is laid out with it from the
    first paint, so Locust's charts size themselves beside the panel) and its script."""
    if "dbsurge/panel.js" in page or "</body>" not in page:
        return page
    if "</head>" in page:
        page = page.replace("</head>", '<link rel="stylesheet" href="./dbsurge/panel.css"></head>', 1)
    return page.replace("</body>", '<script src="./dbsurge/panel.js"></script></body>', 1)


#: The report is dbsurge's own escaped HTML and needs no script: none may run in the UI's origin.
REPORT_CSP = "script-src 'none'; object-src 'none'; base-uri 'none'"


def report_response(run):
    """``GET /dbsurge/report``: this run's report.html, once built; nothing else is served from the run directory."""
    path = run.ending.report_path
    if path is None or not path.is_file():
        return jsonify({"error": f"no report for this run yet: {REPORT_HTML} is built when the run ends"}), 404
    response = Response(path.read_bytes(), mimetype="text/html")
    response.headers["Content-Security-Policy"] = REPORT_CSP
    return response


# -- Locust's start form under a dbsurge plan -------------------------------------------------------------------

TARGET_HELP = "the database this dbsurge process was started with; shown here, not changed here"


def adjust_swarm_form(web_ui, run) -> None:
    """Keep Locust's start form from offering what the run would ignore.

    - The plan's options (`PLAN_OPTIONS`) leave "Custom parameters": the plan was built from them
      at start-up and the panel shows it (a ``baselineTps 1000`` beside a 50 TPS plan misleads).
    - Under a plan, Locust's own "Number of users", "Ramp up" and "Run time" are disabled
      (``hide_common_options``, as Locust does for shapes without common options): the plan
      sets the rate and the shape sizes the pool. The panel hides them and says so in the form.
    """
    original_update = web_ui.update_template_args

    def update_template_args():
        original_update()
        args = web_ui.template_args
        extra = args.get("extra_options") or {}
        for name in PLAN_OPTIONS:
            extra.pop(name, None)
        if isinstance(extra.get("target"), dict):
            extra["target"]["help_text"] = TARGET_HELP
        if run.plan is not None:
            args["hide_common_options"] = True

    web_ui.update_template_args = update_template_args
    if getattr(web_ui, "template_args", None) is not None and web_ui.environment.runner is not None:
        update_template_args()


def check_swarm_requests(web_ui, run) -> None:
    """Put `dbsurge.ui.web_forms.check_swarm_form` in front of Locust's ``POST /swarm``: a form the command line
    would refuse is a 400 ``{"success": false, "message": ...}``, and Locust's swarm (which copies every field
    over the run's options, then starts) never runs."""
    swarm = web_ui.app.view_functions.get("locust.swarm")
    if swarm is None or getattr(swarm, "_dbsurge_checks_form", False):
        return
    from locust.argument_parser import get_parser

    parser = get_parser()  # Locust's options and dbsurge's (the plugin's listener), with the same types
    actions = option_actions(parser)
    extra, multiple = form_extra_fields(parser)
    environment = run.environment

    def swarm_checked(*args, **kwargs):
        try:
            form = bounded_form()
            check_swarm_form(form, environment.parsed_options, actions, extra_fields=extra, multiple=multiple,
                             plan=environment.shape_class is not None)
        except BodyTooLarge as e:
            return jsonify({"success": False, "message": str(e), "host": environment.host}), 413
        except UserError as e:
            log.warning("web UI: a start refused (400): %s", e)
            return jsonify({"success": False, "message": str(e), "host": environment.host}), 400
        return swarm(*args, **kwargs)

    swarm_checked._dbsurge_checks_form = True
    web_ui.app.view_functions["locust.swarm"] = swarm_checked


def bounded_form():
    """The request's form fields (a MultiDict, every value of a field named twice), read from a body of at most
    `MAX_BODY_BYTES` (`bounded_body`); the request's own ``form`` is set to them for the views after."""
    from werkzeug.datastructures import ImmutableMultiDict

    form = form_fields(request.environ, bounded_body(request.environ))
    if request.args:  # Locust reads the body only: a field in the query string would be dropped without a word
        raise UserError(f"field {clip(next(iter(request.args)), 60)!r} is in the URL's query string: the start "
                        f"form's fields go in the request body")
    form = ImmutableMultiDict(form)
    request.form = form  # Locust's swarm reads request.form: the fields checked here, not the stream again
    return form


def form_fields(environ, data: bytes) -> list[tuple[str, str]]:
    """The ``(name, value)`` pairs of a form body, every one of them, or `UserError`.

    Werkzeug drops a url-encoded form whole when it is not UTF-8 (``arrivals=%ff`` started the run with none of
    its fields, ``success: true``): such a body is read here, strictly. Multipart bodies are werkzeug's."""
    import urllib.parse

    from werkzeug.formparser import parse_form_data

    ctype = (environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
    if ctype in ("", "application/x-www-form-urlencoded"):
        try:
            return urllib.parse.parse_qsl(data.decode("ascii"), keep_blank_values=True, encoding="utf-8",
                                          errors="strict", max_num_fields=1000)
        except (UnicodeDecodeError, ValueError) as e:
            raise UserError(f"the form is not url-encoded UTF-8 text ({clip(type(e).__name__, 40)}): nothing was "
                            f"started") from None
    environ = {**environ, "wsgi.input": io.BytesIO(data), "CONTENT_LENGTH": str(len(data))}
    environ.pop("wsgi.input_terminated", None)
    _stream, form, _files = parse_form_data(environ)
    return list(form.items(multi=True))


# -- the live rate: what a request may ask for -------------------------------------------------------------

RATE_FIELDS = ("rate_tps", "scale")
#: The most a request body to dbsurge's endpoints may hold: ``{"rate_tps": 800}`` is 17 bytes.
MAX_BODY_BYTES = 64 * 1024


class BodyTooLarge(UserError):
    """A request body above `MAX_BODY_BYTES`: answered with 413 before the rest of it is read."""


def bounded_body(environ, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, at most `limit` bytes, else `BodyTooLarge`.

    Flask's ``get_data`` (and ``form``) read a body whole, however large its Content-Length says it is, or
    however long a chunked one goes on: 200 MB to set a rate was held in memory. Here a declared length above
    the bound is refused unread, and any other body is read up to ``limit + 1`` bytes.
    """
    try:
        declared = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise BodyTooLarge(f"the body is {declared} bytes, more than {limit}: a rate request is a few bytes of JSON")
    stream = environ.get("wsgi.input")
    data = b""
    while stream is not None and len(data) <= limit:
        chunk = stream.read(min(65536, limit + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    if len(data) > limit:
        raise BodyTooLarge(f"the body is more than {limit} bytes: a rate request is a few bytes of JSON")
    return data


def _rate_request_data():
    """The request's fields: a JSON object (Content-Type application/json) or form fields (url-encoded or
    multipart), from a body of at most `MAX_BODY_BYTES` (`bounded_body`)."""
    data = bounded_body(request.environ)
    if request.is_json:
        try:
            return load_json(data.decode("utf-8") or "null", unique_keys=True)
        except DuplicateKey as e:
            raise UserError(f"field {clip(e.key, 60)!r} is given more than once: give it once") from None
        except ValueError as e:  # UnicodeDecodeError too; load_json's "nested too deeply"
            raise UserError(f"the body is not valid JSON ({clip(e, 80)})") from None
    pairs = form_fields(request.environ, data)
    twice = duplicate_field(pairs)
    if twice is not None:  # a dict keeps the first of rate_tps=100&rate_tps=1000000, JSON the last
        raise UserError(f"field {clip(twice, 60)!r} is given more than once: give it once")
    return dict(pairs)


def _rate_number(value, name: str) -> float | None:
    """A JSON number or a plain decimal string (ASCII digits), as a finite float; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserError(f"{name} must be a number, not {clip(json.dumps(value))}")
    if isinstance(value, str):
        text = value.strip()
        if not WEIGHT_NUMBER.fullmatch(text):
            raise UserError(f"{name} must be a number of 0 or more such as 800 or 2.5, not {clip(repr(value))}")
        value = float(text)
    f = float(value)  # an int beyond a float's range raises OverflowError
    if not math.isfinite(f) or f < 0:
        raise UserError(f"{name} must be a finite number of 0 or more, not {clip(repr(value))}")
    return f


def parse_rate_request(data, max_rate: float, scale_peak: float = 0.0) -> tuple[float | None, float | None]:
    """Check a ``POST /dbsurge/rate`` body; return ``(rate_tps, scale)`` (one of them None) or raise UserError.

    ``data`` is the decoded JSON or the form fields: an object with exactly one of ``rate_tps``
    (TPS, 0 pauses the load) and ``scale`` (the plan's own rates times this factor from now on, replacing
    any override before it; `dbsurge.plan.segments`), each a JSON
    number or a plain decimal string. Booleans, ``"1_000"``, ``nan``, ``inf``, negatives, arrays and
    objects are refused. ``rate_tps`` may be at most ``max_rate``; ``scale`` times ``scale_peak``
    (the plan's highest rate still ahead) too.
    """
    if not isinstance(data, dict):
        raise UserError("the body must be a JSON object or form fields, e.g. {\"rate_tps\": 800}")
    unknown = sorted(str(k) for k in data if k not in RATE_FIELDS)
    if unknown:
        raise UserError(f"unknown field {clip(unknown[0])!r}: give rate_tps or scale")
    try:
        rate = _rate_number(data.get("rate_tps"), "rate_tps")
        scale = _rate_number(data.get("scale"), "scale")
    except OverflowError:
        raise UserError("the number is too large") from None
    if (rate is None) == (scale is None):
        raise UserError("give exactly one of rate_tps or scale")
    if rate is not None and rate > max_rate:
        raise UserError(f"rate_tps {rate:g} is above --max-rate {max_rate:g} TPS")
    if scale is not None and scale * scale_peak > max_rate:
        raise UserError(f"scale {scale:g} would take the plan's peak to {scale * scale_peak:g} TPS, above "
                        f"--max-rate {max_rate:g} TPS")
    return rate, scale


# -- same origin only (docs/web-ui.md) -----------------------------------------------------------------------

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# GET endpoints that change state in some Locust version (2.47's /stop and /stats/reset are POST)
STATE_CHANGING_GET = ("/stop", "/reset", "/stats/reset", "/dbsurge/rate")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
SECURITY_HEADERS = {
    "X-Frame-Options": "SAMEORIGIN",
    "Content-Security-Policy": "frame-ancestors 'self'",
    "Cross-Origin-Resource-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}
_SECURITY_HEADER_NAMES = {k.lower() for k in SECURITY_HEADERS}


def _normal_origin(scheme: str, netloc: str) -> str:
    scheme, netloc = scheme.lower(), netloc.lower()
    default = _DEFAULT_PORTS.get(scheme)
    if default and netloc.endswith(":" + default):
        netloc = netloc[: -len(default) - 1]
    return f"{scheme}://{netloc}"


def own_origin(environ) -> str:
    """The origin the request was sent to: scheme (X-Forwarded-Proto behind a proxy) and Host."""
    scheme = (environ.get("HTTP_X_FORWARDED_PROTO") or environ.get("wsgi.url_scheme") or "http").split(",")[0].strip()
    host = environ.get("HTTP_HOST") or f"{environ.get('SERVER_NAME', '')}:{environ.get('SERVER_PORT', '')}"
    return _normal_origin(scheme, host)


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an Origin or Referer value; None for ``null`` or garbage."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    return _normal_origin(parts.scheme, parts.netloc.rpartition("@")[2])


def refusal(environ) -> str | None:
    """Why a request must be refused (one line), or None to let it through.

    - an ``Origin`` that is not the UI's own: refused, whatever the method (no CORS, no preflight);
    - a request that changes state (any method but GET/HEAD/OPTIONS, or a GET in
      `STATE_CHANGING_GET`): refused when ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site``, or,
      when neither Origin nor Sec-Fetch-Site came, when a ``Referer`` names another origin;
    - any other request from another site that is not a top-level navigation (an ``<img>``,
      ``<script>``, ``fetch()``): refused, so a foreign page cannot even trigger it.

    A client that sends none of these headers (curl, scripts) is let through.
    """
    own = own_origin(environ)
    origin = environ.get("HTTP_ORIGIN")
    site = (environ.get("HTTP_SEC_FETCH_SITE") or "").strip().lower()
    mode = (environ.get("HTTP_SEC_FETCH_MODE") or "").strip().lower()
    method = (environ.get("REQUEST_METHOD") or "GET").upper()
    path = (environ.get("PATH_INFO") or "/").rstrip("/") or "/"
    if origin is not None and origin_of(origin) != own:
        return f"cross-origin request from {clip(origin)} refused: the web UI answers its own origin only"
    foreign_site = site in ("cross-site", "same-site")
    if method not in SAFE_METHODS or path.endswith(STATE_CHANGING_GET):
        if foreign_site:
            return f"{site} request refused: only the web UI's own pages may change the run"
        referer = environ.get("HTTP_REFERER")
        if origin is None and not site and referer and origin_of(referer) != own:
            return "request from another origin (Referer) refused: only the web UI's own pages may change the run"
    elif foreign_site and mode != "navigate":
        return f"{site} {mode or 'subresource'} request refused: the web UI answers its own origin only"
    return None


def _host_name(host: str) -> str:
    """The name part of a Host header: ``[::1]:8089`` -> ``::1``, ``Evil.Example.:80`` -> ``evil.example``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_refusal(environ, web_host: str | None, host_allow: list[str] | None = None) -> str | None:
    """Why a request's ``Host`` is not one this UI serves (one line), or None.

    A DNS-rebinding page (``evil.example`` made to resolve to 127.0.0.1) is the same origin as the UI
    to the browser; only the Host header it sends still names the attacker's domain. Allowed: an IP
    address (a rebinding page cannot make the browser send one), ``localhost``, the address the UI
    binds (``--web-host``), this machine's own name when the UI listens beyond loopback, and each
    ``--web-host-allow`` (``*`` allows any).
    """
    host = environ.get("HTTP_HOST")
    if not host:
        return None  # HTTP/1.0 without a Host: no browser sends that
    allow = {_host_name(h) for entry in host_allow or [] for h in str(entry).split(",") if h.strip()}
    name = _host_name(host)
    if "*" in allow or name in allow or _is_ip(name) or name in ("localhost", _host_name(web_host or "")):
        return None
    if not is_loopback(web_host) and name in {_host_name(socket.gethostname()), _host_name(socket.getfqdn())}:
        return None
    return (f"Host {clip(host)} refused: the web UI answers its own address only (a page on another name may be "
            f"a DNS-rebinding attack); pass --web-host-allow {clip(name, 40)} if the name is yours")


class SameOriginGuard:
    """WSGI middleware around Locust's Flask app: `host_refusal` and `refusal` get a 403, a missing or wrong
    ``--web-auth`` a 401, and CORS headers never go out.

    Locust calls ``CORS(app)`` (flask_cors), which adds ``Access-Control-Allow-Origin`` to every
    response, errors included; the UI never needs CORS, so every ``Access-Control-*`` header is
    dropped here, below Flask, where flask_cors cannot add it back.
    """

    def __init__(self, app, *, web_host: str | None = None, host_allow: list[str] | None = None,
                 credentials: str | None = None):
        self.app = app
        self.logged: set[tuple] = set()
        self.web_host = web_host
        self.host_allow = list(host_allow or [])
        self._expected = ("Basic " + base64.b64encode(credentials.encode()).decode()) if credentials else None

    def _authorized(self, environ) -> bool:
        if self._expected is None:
            return True
        given = environ.get("HTTP_AUTHORIZATION") or ""
        return hmac.compare_digest(given.encode(errors="replace"), self._expected.encode())

    def __call__(self, environ, start_response):
        reason = host_refusal(environ, self.web_host, self.host_allow) or refusal(environ)
        if reason is None and not self._authorized(environ):
            body = json.dumps({"error": "this web UI needs its --web-auth user and password"}).encode()
            start_response("401 Unauthorized", [("Content-Type", "application/json"),
                                                ("Content-Length", str(len(body))),
                                                ("WWW-Authenticate", 'Basic realm="dbsurge", charset="UTF-8"'),
                                                *SECURITY_HEADERS.items()])
            return [body]
        if reason is not None:
            key = (environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"), reason)
            if key not in self.logged and len(self.logged) < 200:  # one line per kind, not a flood
                self.logged.add(key)
                log.warning("web UI refused %s %s (403): %s", key[0], clip(str(key[1])), reason)
            body = json.dumps({"error": reason}).encode()
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                       *SECURITY_HEADERS.items()]
            start_response("403 Forbidden", headers)
            return [body]

        def start(status, headers, exc_info=None):
            return start_response(status, secured_headers(headers), exc_info)

        return self.app(environ, start)


def secured_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A response's headers without CORS, with `SECURITY_HEADERS`; a policy of its own (the report's)
    is kept, with ``frame-ancestors`` added to it."""
    own_csp = [v for k, v in headers if k.lower() == "content-security-policy"]
    kept = [(k, v) for k, v in headers
            if not k.lower().startswith("access-control-") and k.lower() not in _SECURITY_HEADER_NAMES]
    added = dict(SECURITY_HEADERS)
    if own_csp:
        added["Content-Security-Policy"] = f"{own_csp[0]}; {SECURITY_HEADERS['Content-Security-Policy']}"
    return kept + list(added.items())


# -- no secret in the swarm form --------------------------------------------------------------------------------


def shown_value(name: str, value) -> str | None:
    """What the form shows for a secret option: ``--target`` redacted, any other secret masked."""
    if value in (None, ""):
        return value
    text = str(value)
    if name == "target":
        return redact_uri(text)
    return MASK


def protect_secret_options(web_ui, environment) -> None:
    """Keep Locust's ``is_secret`` options (``--target``) out of the page, and real on ``/swarm``.

    Locust's ``is_secret=True`` only masks the input on screen: the value itself is in the page's
    ``templateArgs`` (``extra_options``). Here the page gets `shown_value`, and a form that sends
    that value back unchanged leaves the real option in ``parsed_options`` (Locust copies every form
    field over it).
    """
    shown: dict[str, str] = {}
    original_update = web_ui.update_template_args

    def update_template_args():
        original_update()
        extra = web_ui.template_args.get("extra_options") or {}
        for name, spec in extra.items():
            if isinstance(spec, dict) and spec.get("is_secret"):
                real = getattr(environment.parsed_options, name, spec.get("default_value"))
                spec["default_value"] = shown[name] = shown_value(name, real)

    web_ui.update_template_args = update_template_args
    if getattr(web_ui, "template_args", None) is not None and web_ui.environment.runner is not None:
        update_template_args()

    swarm = web_ui.app.view_functions.get("locust.swarm")
    if swarm is None or getattr(swarm, "_dbsurge_keeps_secrets", False):
        return

    def swarm_keeping_secrets(*args, **kwargs):
        from werkzeug.datastructures import ImmutableMultiDict

        opts = environment.parsed_options
        keep = {k for k, v in shown.items()
                if k in request.form and request.form.get(k) == v and getattr(opts, k, None) != v}
        if keep:
            request.form = ImmutableMultiDict([(k, v) for k, v in request.form.items(multi=True) if k not in keep])
        return swarm(*args, **kwargs)

    swarm_keeping_secrets._dbsurge_keeps_secrets = True
    web_ui.app.view_functions["locust.swarm"] = swarm_keeping_secrets
