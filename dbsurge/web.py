"""Interactive spikes from Locust's web UI: a rate control on the page and an HTTP endpoint.

- ``GET  /dbsurge/plan``: the plan, the current position in it, target and achieved rates.
- ``POST /dbsurge/rate``: ``{"rate_tps": 800}`` (an absolute rate from now on) or
  ``{"scale": 2}`` (the plan's remaining rates times 2, i.e. a multiple of the baseline).
  Form fields work too: ``curl -X POST -d rate_tps=800 http://127.0.0.1:8089/dbsurge/rate``.

The control is a small panel added to Locust's own page (a script tag injected into the HTML
of ``/``), so it works with any Locust version's React front end without rebuilding it.
"""

from __future__ import annotations

import math

from flask import Response, jsonify, request

from .errors import UserError

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
    from .locust_plugin import change_rate

    app = web_ui.app
    auth = getattr(web_ui, "auth_required_if_enabled", lambda f: f)

    @app.route("/dbsurge/plan")
    @auth
    def dbsurge_plan():
        return jsonify(plan_state(run))

    @app.route("/dbsurge/rate", methods=["POST"])
    @auth
    def dbsurge_rate():
        data = request.get_json(silent=True) or request.form.to_dict()
        try:
            rate = _number(data.get("rate_tps"))
            scale = _number(data.get("scale"))
            if (rate is None) == (scale is None):
                raise UserError("give exactly one of rate_tps or scale")
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


def _number(v) -> float | None:
    if v in (None, ""):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise UserError(f"not a number: {v!r}") from None
    if not (f >= 0 and math.isfinite(f)):
        raise UserError(f"must be a non-negative number: {v!r}")
    return f
