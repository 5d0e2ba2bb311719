"""Interactive spikes from Locust's web UI: a rate control on the page and an HTTP endpoint.

- ``GET  /dbsurge/plan``: the plan, the current position in it, target and achieved rates.
- ``POST /dbsurge/rate``: ``{"rate_tps": 800}`` (an absolute rate from now on) or
  ``{"scale": 2}`` (the plan's remaining rates times 2, i.e. a multiple of the baseline).
  Form fields work too: ``curl -X POST -d rate_tps=800 http://127.0.0.1:8089/dbsurge/rate``.

The control is a small panel added to Locust's own page (a script tag injected into the HTML
of ``/``), so it works with any Locust version's React front end without rebuilding it.

The UI answers its own origin only (`SameOriginGuard`, see docs/web-ui.md): no CORS, and every
state-changing request from another site is refused with 403. No page or endpoint shows a secret:
the ``--target`` default in Locust's swarm form is the redacted URI, and submitting it unchanged
keeps the real one (`protect_secret_options`). A rate is checked by `parse_rate_request`: a number,
0 (a pause) or more, at most ``--max-rate``.
"""

from __future__ import annotations

import json
import logging
import math
from urllib.parse import urlsplit

from flask import Response, jsonify, request

from .errors import UserError, clip
from .options import _WEIGHT
from .redact import MASK, redact_uri

log = logging.getLogger("dbsurge")

PANEL_JS = r"""
(function () {
  if (document.getElementById('dbsurge-panel')) return;
  var p = document.createElement('div');
  p.id = 'dbsurge-panel';
  p.style.cssText = 'position:fixed;right:12px;bottom:12px;z-index:99999;background:#fff;color:#111;' +
    'border:1px solid #888;border-radius:6px;padding:10px 12px;font:13px sans-serif;min-width:300px;' +
    'box-shadow:0 2px 8px rgba(0,0,0,.3)';
  p.innerHTML =
    '<b>dbsurge arrival rate</b>' +
    '<div id="dbsurge-plan" style="margin:6px 0;font-family:monospace;white-space:pre"></div>' +
    '<div>target <span id="dbsurge-target">-</span> TPS, achieved <span id="dbsurge-achieved">-</span> TPS</div>' +
    '<div style="margin-top:6px"><input id="dbsurge-rate" type="number" min="0" step="any" ' +
    'placeholder="TPS" style="width:90px"> <button id="dbsurge-set-rate">Set rate</button></div>' +
    '<div style="margin-top:4px"><input id="dbsurge-scale" type="number" min="0" step="any" ' +
    'placeholder="x baseline" style="width:90px"> <button id="dbsurge-set-scale">Scale plan</button></div>' +
    '<div id="dbsurge-msg" style="margin-top:4px;color:#a00"></div>';
  document.body.appendChild(p);
  function post(body) {
    fetch('/dbsurge/rate', {method: 'POST', headers: {'Content-Type': 'application/json'},
                            body: JSON.stringify(body)})
      .then(function (r) { return r.json(); })
      .then(function (j) { document.getElementById('dbsurge-msg').textContent = j.error || ''; refresh(); });
  }
  document.getElementById('dbsurge-set-rate').onclick = function () {
    post({rate_tps: parseFloat(document.getElementById('dbsurge-rate').value)});
  };
  document.getElementById('dbsurge-set-scale').onclick = function () {
    post({scale: parseFloat(document.getElementById('dbsurge-scale').value)});
  };
  function refresh() {
    fetch('/dbsurge/plan').then(function (r) { return r.json(); }).then(function (s) {
      var lines = (s.stages || []).map(function (st, i) {
        return (i === s.stage_index && s.running ? '> ' : '  ') + st.name + '  ' +
          (st.duration_s === null ? 'open' : st.duration_s + 's') + '  ' + Math.round(st.target_tps) + ' TPS';
      });
      lines.push(s.running ? ('t = ' + s.elapsed_s.toFixed(1) + ' s') : 'not running');
      document.getElementById('dbsurge-plan').textContent = lines.join('\n');
      document.getElementById('dbsurge-target').textContent = s.target_tps === null ? '-' : s.target_tps.toFixed(1);
      document.getElementById('dbsurge-achieved').textContent = s.achieved_tps.toFixed(1);
    }).catch(function () {});
  }
  refresh();
  setInterval(refresh, 1000);
})();
"""


def plan_state(run) -> dict:
    """The plan and where the run is in it, for the panel and for scripts."""
    plan = run.plan
    elapsed = run.elapsed_s()
    running = bool(elapsed is not None and not run.finished and run.aggregator is not None)
    schedule = run.schedule
    state = {
        "plan": str(plan) if plan else None,
        "stages": [],
        "running": running,
        "elapsed_s": round(elapsed, 3) if elapsed is not None else 0.0,
        "stage_index": None,
        "stage": None,
        "target_tps": None,
        "achieved_tps": round(run.aggregator.recent_achieved_tps(), 3) if run.aggregator else 0.0,
        "dropped": sum(run.aggregator.dropped.values()) if run.aggregator else 0,
        "rate_changes": run.changes,
        "run_dir": str(run.rundir.path) if run.rundir else None,
    }
    if plan:
        for st, s in zip(plan.starts, plan.stages):
            state["stages"].append({"name": s.name, "start_s": st,
                                    "duration_s": s.duration_s if math.isfinite(s.duration_s) else None,
                                    "target_tps": s.mean_tps})
    if plan and schedule is not None and elapsed is not None:
        t = max(0.0, elapsed)
        state["stage_index"] = plan.stage_index_at(t)
        state["stage"] = plan.stages[state["stage_index"]].name
        state["target_tps"] = round(schedule.rate_at(t), 3)
    return state


def install_web_controls(web_ui, run) -> None:
    """Add the endpoints and the panel to Locust's Flask app."""
    from .protocol import change_rate

    app = web_ui.app
    auth = getattr(web_ui, "auth_required_if_enabled", lambda f: f)
    if not isinstance(app.wsgi_app, SameOriginGuard):
        app.wsgi_app = SameOriginGuard(app.wsgi_app)
    protect_secret_options(web_ui, run.environment)

    @app.route("/dbsurge/plan")
    @auth
    def dbsurge_plan():
        return jsonify(plan_state(run))

    @app.route("/dbsurge/rate", methods=["POST"])
    @auth
    def dbsurge_rate():
        try:
            data = _rate_request_data()
            elapsed = max(0.0, run.elapsed_s() or 0.0)
            rate, scale = parse_rate_request(data, max_rate(run), scale_peak=remaining_peak(run.plan, elapsed))
            change = change_rate(run, rate_tps=rate, scale=scale)
        except UserError as e:
            return jsonify({"error": str(e)}), 400
        return jsonify({"ok": True, "change": change, "state": plan_state(run)})

    @app.route("/dbsurge/panel.js")
    def dbsurge_panel_js():
        return Response(PANEL_JS, mimetype="application/javascript")

    @app.after_request
    def inject_panel(response):
        is_page = request.path in ("/", "/index.html") and response.mimetype == "text/html"
        if is_page and not response.direct_passthrough:
            body = response.get_data(as_text=True)
            if "dbsurge/panel.js" not in body and "</body>" in body:
                body = body.replace("</body>", '<script src="./dbsurge/panel.js"></script></body>')
                response.set_data(body)
        return response


# -- the live rate: what a request may ask for -------------------------------------------------------------

RATE_FIELDS = ("rate_tps", "scale")


def _rate_request_data():
    """The request's fields: a JSON object (Content-Type application/json) or form fields."""
    if request.is_json:
        try:
            data = json.loads(request.get_data(as_text=True) or "null")
        except ValueError:
            raise UserError("the body is not valid JSON") from None
        return data
    return request.form.to_dict()


def _rate_number(value, name: str) -> float | None:
    """A JSON number or a plain decimal string (ASCII digits), as a finite float; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserError(f"{name} must be a number, not {clip(json.dumps(value))}")
    if isinstance(value, str):
        text = value.strip()
        if not _WEIGHT.fullmatch(text):
            raise UserError(f"{name} must be a number of 0 or more such as 800 or 2.5, not {clip(repr(value))}")
        value = float(text)
    f = float(value)  # an int beyond a float's range raises OverflowError
    if not math.isfinite(f) or f < 0:
        raise UserError(f"{name} must be a finite number of 0 or more, not {clip(repr(value))}")
    return f


def parse_rate_request(data, max_rate: float, scale_peak: float = 0.0) -> tuple[float | None, float | None]:
    """Check a ``POST /dbsurge/rate`` body; return ``(rate_tps, scale)`` (one of them None) or raise UserError.

    ``data`` is the decoded JSON or the form fields: an object with exactly one of ``rate_tps``
    (TPS, 0 pauses the load) and ``scale`` (a factor on the plan's rates from now on), each a JSON
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


def plan_peak(plan) -> float:
    """The highest rate of a plan, in TPS (0 without a plan)."""
    return max((max(s.start_tps, s.end_tps) for s in plan.stages), default=0.0) if plan else 0.0


def remaining_peak(plan, t: float) -> float:
    """The highest rate of the plan's stages that have not ended at ``t`` (what a scale multiplies)."""
    if not plan:
        return 0.0
    return max((max(s.start_tps, s.end_tps) for st, s in zip(plan.starts, plan.stages)
                if st + s.duration_s > t), default=0.0)


def max_rate(run) -> float:
    """``--max-rate``, or 10 times the plan's peak when it was not given."""
    given = getattr(run.options, "max_rate", None)
    return float(given) if given is not None else 10.0 * plan_peak(run.plan)


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


class SameOriginGuard:
    """WSGI middleware around Locust's Flask app: `refusal` gets a 403, CORS headers never go out.

    Locust calls ``CORS(app)`` (flask_cors), which adds ``Access-Control-Allow-Origin`` to every
    response, errors included; the UI never needs CORS, so every ``Access-Control-*`` header is
    dropped here, below Flask, where flask_cors cannot add it back.
    """

    def __init__(self, app):
        self.app = app
        self.logged: set[tuple] = set()

    def __call__(self, environ, start_response):
        reason = refusal(environ)
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
            kept = [(k, v) for k, v in headers
                    if not k.lower().startswith("access-control-") and k not in SECURITY_HEADERS]
            return start_response(status, kept + list(SECURITY_HEADERS.items()), exc_info)

        return self.app(environ, start)


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
