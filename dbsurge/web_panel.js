/* dbsurge's panel on Locust's page (dbsurge/web.py, docs/web-ui.md). Plain DOM and inline SVG, no library.

   Once a second it reads GET ./dbsurge/live (the plan, the overrides, the timeline's figures) and shows:
   the plan and where the run is, the last five complete seconds, a sparkline of the last minutes,
   the rate control, one row per stage and per rate override, and after the end the run directory
   and its report. Server text goes in with textContent only, never as HTML. */
(function () {
  'use strict';
  if (document.getElementById('dbsurge-panel')) return;

  var REFRESH_MS = 1000;
  var COLLAPSED_KEY = 'dbsurge-panel-collapsed';
  var last = null; // the last state read, for the form note

  // -- small helpers -----------------------------------------------------------------------------

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    });
    return e;
  }

  function svg(id) {
    var s = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    s.setAttribute('id', id);
    s.setAttribute('class', 'ds-spark');
    s.setAttribute('viewBox', '0 0 300 40');
    s.setAttribute('preserveAspectRatio', 'none');
    return s;
  }

  function blank(v) { return v === null || v === undefined || v === ''; }
  function ms(v) { return blank(v) ? '-' : Number(v).toFixed(3); }
  function tps(v) { return blank(v) ? '-' : Number(v).toFixed(1); }
  function count(v) { return blank(v) ? '-' : String(Math.round(Number(v))); }
  function clock(iso) { return iso ? iso.slice(11, 19) + 'Z' : '-'; }
  function rate(v) { return (Math.round(v) === v ? String(v) : v.toFixed(1)) + ' TPS'; }
  function duration(s) {
    if (s === null) return 'open';
    if (s >= 60 && s % 60 === 0) return (s / 60) + 'm';
    return s + 's';
  }
  function pad(text, width) { while (text.length < width) text += ' '; return text; }

  function failures(n, byKind) {
    var kinds = Object.keys(byKind || {}).map(function (k) { return k + ' ' + byKind[k]; });
    return count(n) + (kinds.length ? ' (' + kinds.join(', ') + ')' : '');
  }

  function setText(id, text) { var e = $(id); if (e && e.textContent !== text) e.textContent = text; }

  // -- the panel ---------------------------------------------------------------------------------

  function control(inputId, placeholder, buttonId, label) {
    return el('div', {'class': 'ds-control'}, [
      el('input', {id: inputId, type: 'text', inputmode: 'decimal', placeholder: placeholder, autocomplete: 'off'}),
      el('button', {id: buttonId, type: 'button'}, [label])]);
  }

  function nowRow(label, ids, unit) {
    var cells = [el('td', {}, [label])];
    cells.push(el('td', {'class': 'ds-num'}, ids.length === 1 ? [el('span', {id: ids[0]}, ['-'])]
      : [el('span', {id: ids[0]}, ['-']), ' / ', el('span', {id: ids[1]}, ['-'])]));
    cells.push(el('td', {'class': 'ds-unit'}, [unit]));
    return el('tr', {}, cells);
  }

  function spark(id, label, maxId) {
    // the scale (y from 0 to the top, x the seconds shown) beside the line: an SVG stretched to its box
    // cannot carry readable tick labels itself
    return el('div', {'class': 'ds-spark-box'}, [svg(id), el('div', {'class': 'ds-spark-label'}, [label]),
                                                 el('div', {id: id + '-scale', 'class': 'ds-spark-label ds-num'}),
                                                 el('div', {id: maxId, 'class': 'ds-spark-label ds-num'})]);
  }

  function build() {
    var body = el('div', {'class': 'ds-body'}, [
      el('div', {id: 'dbsurge-results', hidden: ''}, [
        el('b', {}, ['Results']),
        el('div', {}, ['run directory']),
        el('div', {id: 'dbsurge-run-dir', 'class': 'ds-mono'}),
        el('div', {id: 'dbsurge-report-line'}),
        el('div', {id: 'dbsurge-verdict'})]),
      el('h3', {}, ['Plan']),
      el('div', {id: 'dbsurge-plan', 'class': 'ds-mono'}),
      el('div', {id: 'dbsurge-position', hidden: ''}, [
        el('span', {id: 'dbsurge-position-text'}), ' planned now ',
        el('span', {id: 'dbsurge-target', 'class': 'ds-num'}, ['-']), ' TPS']),
      el('h3', {}, ['Last 5 s ', el('span', {id: 'dbsurge-now-when'})]),
      el('table', {id: 'dbsurge-now'}, [
        nowRow('target', ['dbsurge-now-target'], 'TPS'),
        nowRow('achieved', ['dbsurge-achieved'], 'TPS'),
        nowRow('response p50 / p99', ['dbsurge-p50', 'dbsurge-p99'], 'ms'),
        nowRow('service p50 / p99', ['dbsurge-svc-p50', 'dbsurge-svc-p99'], 'ms'),
        nowRow('lag p99', ['dbsurge-lag'], 'ms'),
        nowRow('dropped slots', ['dbsurge-dropped'], ''),
        nowRow('failed', ['dbsurge-failed'], '')]),
      el('div', {id: 'dbsurge-rate-note', 'class': 'ds-help'}, [
        "Achieved: successful operations per second over these 5 complete seconds, by the second each was " +
        "due (timeline.csv's figures). Locust's RPS counts failures too and averages the last seconds as " +
        'requests complete, so the two differ while the rate changes or operations fail.']),
      el('h3', {}, ['Last minutes']),
      el('div', {'class': 'ds-sparks'}, [
        spark('dbsurge-spark-tps', 'TPS (dashed: planned)', 'dbsurge-spark-tps-max'),
        spark('dbsurge-spark-p99', 'response p99, ms', 'dbsurge-spark-p99-max')]),
      el('h3', {}, ['Rate ', el('span', {id: 'dbsurge-max-rate', 'class': 'ds-dim'})]),
      control('dbsurge-rate', 'TPS', 'dbsurge-set-rate', 'Set rate'),
      el('div', {'class': 'ds-help'}, ['This rate from now on, until the plan ends or the next change; 0 pauses.']),
      control('dbsurge-scale', '\u00d7 plan', 'dbsurge-set-scale', 'Plan \u00d7 factor'),
      el('div', {'class': 'ds-help'}, ["The plan's own rates times the factor from now on, replacing any rate " +
                                       'set before; 1 is the plan again.']),
      el('div', {id: 'dbsurge-msg'}),
      el('div', {id: 'dbsurge-note'}),
      el('h3', {}, ['Stages and overrides ', el('span', {'class': 'ds-dim'}, ['(timeline seconds)'])]),
      el('div', {id: 'dbsurge-rows'})]);
    var panel = el('aside', {id: 'dbsurge-panel', 'aria-label': 'dbsurge'}, [
      el('div', {'class': 'ds-head'}, [
        el('button', {id: 'dbsurge-collapse', type: 'button', title: 'hide or show the dbsurge panel'}, ['\u203a']),
        el('b', {}, ['dbsurge']), el('span', {id: 'dbsurge-status'}, ['...'])]),
      body]);
    document.body.appendChild(panel);
    document.body.classList.add('dbsurge-docked');
    if (window.localStorage && localStorage.getItem(COLLAPSED_KEY) === '1') collapse(true);
  }

  function collapse(on) {
    document.body.classList.toggle('dbsurge-collapsed', on);
    setText('dbsurge-collapse', on ? '\u2039' : '\u203a');
    try { localStorage.setItem(COLLAPSED_KEY, on ? '1' : '0'); } catch (e) { /* private mode */ }
    window.dispatchEvent(new Event('resize')); // Locust's charts take the new width
  }

  // The panel starts below Locust's header, which scrolls away with the page (until Locust has drawn
  // its header, the stylesheet's 64 px stand in for it).
  function place() {
    var header = document.querySelector('#root header');
    if (!header) return;
    var top = Math.max(0, Math.round(header.getBoundingClientRect().bottom)) + 'px';
    var panel = $('dbsurge-panel');
    if (panel.style.top !== top) panel.style.top = top;
    document.body.classList.toggle('dbsurge-nomain', !document.querySelector('#root main'));
  }

  function pageChanged() { place(); formNote(); }

  // -- what the state says ---------------------------------------------------------------------------

  function status(p) {
    var r = p.results;
    if (r) return {writing: 'stopped: writing the results...', report: 'stopped: building the report...',
                   done: 'stopped: results written'}[r.state] || 'stopped';
    if (p.closing) return 'stopping: collecting the last accounts...';
    if (p.running) return 'running';
    return p.plan ? 'ready: press Start' : 'closed model: no arrival-rate plan';
  }

  function renderPlan(p) {
    var box = $('dbsurge-plan');
    var lines = [];
    var inForce = p.override ? p.overrides[p.override - 1] : null;
    var width = Math.max.apply(null, [6].concat(p.stages.map(function (s) { return s.name.length; })));
    p.stages.forEach(function (s, i) {
      var current = p.running && !inForce && i === p.stage_index;
      var replaced = inForce && inForce.rate_tps !== null; // an absolute rate replaces the plan's
      lines.push([current, replaced, (current ? '> ' : '  ') + pad(s.name, width) + '  ' +
                  pad(duration(s.duration_s), 5) + ' ' + rate(s.target_tps)]);
    });
    p.overrides.forEach(function (o) {
      var current = p.running && p.override === o.override;
      lines.push([current, false, (current ? '> ' : '  ') + 'override ' + o.override + ': ' + o.text +
                  ' from ' + clock(o.from_utc)]);
    });
    var text = lines.map(function (l) { return l[2]; }).join('\n');
    if (box.getAttribute('data-text') === text + p.running) return;
    box.setAttribute('data-text', text + p.running);
    box.textContent = '';
    lines.forEach(function (l) {
      box.appendChild(el('div', {'class': l[0] ? 'ds-current' : l[1] ? 'ds-dim' : ''}, [l[2]]));
    });
  }

  function renderPosition(p) {
    var where = [];
    if (p.running) {
      where.push('t = ' + p.elapsed_s.toFixed(1) + ' s');
      if (p.stage !== null) where.push('stage ' + p.stage);
      if (p.override) where.push('override ' + p.override);
    }
    $('dbsurge-position').hidden = !p.running;
    if (!p.overrides.length) setText('dbsurge-note', ''); // a new test: the last test's override is history
    setText('dbsurge-position-text', where.length ? where.join(' \u00b7 ') + ' \u00b7' : '');
    setText('dbsurge-target', p.target_tps === null ? '-' : tps(p.target_tps));
    setText('dbsurge-max-rate', p.max_rate ? '(at most ' + rate(p.max_rate) + ', --max-rate)' : '');
    // a rate can change while the plan runs, not before it starts nor while it stops
    var live = !!p.plan && p.running && !p.closing;
    ['dbsurge-rate', 'dbsurge-set-rate', 'dbsurge-scale', 'dbsurge-set-scale'].forEach(function (id) {
      $(id).disabled = !live;
    });
  }

  function renderNow(n) {
    n = n || {};
    setText('dbsurge-now-when', n.start_utc ? '(' + clock(n.start_utc) + ' to ' + clock(n.end_utc) + ')' : '');
    setText('dbsurge-now-target', tps(n.target_tps));
    setText('dbsurge-achieved', tps(n.achieved_tps));
    setText('dbsurge-p50', ms(n.p50_ms));
    setText('dbsurge-p99', ms(n.p99_ms));
    setText('dbsurge-svc-p50', ms(n.service_p50_ms));
    setText('dbsurge-svc-p99', ms(n.service_p99_ms));
    setText('dbsurge-lag', ms(n.lag_p99_ms));
    setText('dbsurge-dropped', count(n.dropped));
    setText('dbsurge-failed', failures(n.failures, n.failed_by_kind));
  }

  function polyline(cls, times, values, span, top) {
    var t1 = times[times.length - 1];
    var pts = [];
    values.forEach(function (v, i) {
      if (v === null) return;
      var x = 300 - (t1 - times[i]) * 300 / span;
      var y = 39 - (top > 0 ? v / top : 0) * 36;
      pts.push(x.toFixed(1) + ',' + y.toFixed(1));
    });
    var line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    line.setAttribute('class', cls);
    line.setAttribute('points', pts.join(' '));
    line.setAttribute('vector-effect', 'non-scaling-stroke');
    return line;
  }

  function maxOf(values) {
    return values.reduce(function (m, v) { return v !== null && v > m ? v : m; }, 0);
  }

  function renderSparklines(sp) {
    var tpsBox = $('dbsurge-spark-tps'), p99Box = $('dbsurge-spark-p99');
    tpsBox.textContent = '';
    p99Box.textContent = '';
    if (!sp || !sp.time_s.length) return;
    var t = sp.time_s;
    var span = Math.max(60, t[t.length - 1] - t[0] + 1); // a minute wide, growing to the last five
    var top = Math.max(maxOf(sp.achieved_tps), maxOf(sp.target_tps)) * 1.1;
    tpsBox.appendChild(polyline('ds-target', t, sp.target_tps, span, top));
    tpsBox.appendChild(polyline('ds-achieved', t, sp.achieved_tps, span, top));
    var p99Top = maxOf(sp.p99_ms) * 1.1;
    p99Box.appendChild(polyline('ds-p99', t, sp.p99_ms, span, p99Top));
    setText('dbsurge-spark-tps-scale', 'y 0 to ' + tps(top) + ' TPS \u00b7 x the last ' + Math.round(span) + ' s');
    setText('dbsurge-spark-p99-scale', 'y 0 to ' + ms(p99Top) + ' ms \u00b7 x the last ' + Math.round(span) + ' s');
    setText('dbsurge-spark-tps-max', 'last ' + tps(sp.achieved_tps[sp.achieved_tps.length - 1]) + ', max ' +
            tps(maxOf(sp.achieved_tps)));
    setText('dbsurge-spark-p99-max', 'last ' + ms(sp.p99_ms[sp.p99_ms.length - 1]) + ', max ' + ms(maxOf(sp.p99_ms)));
  }

  function rowElement(r) {
    var figs = [];
    if (r.seconds) {
      figs.push('from ' + clock(r.start_utc) + ' \u00b7 ' + r.seconds + ' s \u00b7 target ' + tps(r.target_tps) +
                ' \u00b7 achieved ' + tps(r.achieved_tps) + ' TPS');
      figs.push('response p50/p99 ' + ms(r.p50_ms) + ' / ' + ms(r.p99_ms) + ' \u00b7 service ' +
                ms(r.service_p50_ms) + ' / ' + ms(r.service_p99_ms) + ' ms');
      figs.push('lag p99 ' + ms(r.lag_p99_ms) + ' ms \u00b7 dropped ' + count(r.dropped) + ' \u00b7 failed ' +
                failures(r.failures, r.failed_by_kind));
    } else {
      figs.push('no complete second yet');
    }
    return el('div', {'class': 'ds-row', 'data-override': String(r.override || 0), 'data-stage': r.stage}, [
      el('div', {'class': 'ds-row-name'}, [r.segment])].concat(figs.map(function (f, i) {
        return el('div', {'class': 'ds-row-figs' + (i === 2 && r.failures ? ' ds-fail' : '')}, [f]);
      })));
  }

  function renderRows(rows) {
    var box = $('dbsurge-rows');
    box.textContent = '';
    if (!rows.length) {
      box.appendChild(el('div', {'class': 'ds-help'}, ['A row per stage and per rate override, from the first ' +
                                                      'complete second of the run.']));
    }
    rows.forEach(function (r) { box.appendChild(rowElement(r)); });
  }

  function renderResults(r) {
    var box = $('dbsurge-results');
    if (!r) { box.hidden = true; return; }
    box.hidden = false;
    setText('dbsurge-run-dir', r.run_dir);
    var line = $('dbsurge-report-line');
    var want = r.report_url ? 'link' : r.state;
    if (line.getAttribute('data-state') !== want) {
      line.setAttribute('data-state', want);
      line.textContent = '';
      if (r.report_url) {
        line.appendChild(el('a', {id: 'dbsurge-report', href: r.report_url, target: '_blank', rel: 'noopener'},
                            ['report.html']));
        line.appendChild(document.createTextNode(' (in the run directory)'));
      } else {
        line.appendChild(document.createTextNode(r.state === 'done' ? 'report.html: not built (see the console)'
                                                                     : 'report.html: being built...'));
      }
    }
    setText('dbsurge-verdict', r.verdict || '');
  }

  function render(s) {
    last = s;
    var p = s.plan;
    setText('dbsurge-status', status(p));
    document.body.classList.toggle('dbsurge-plan', !!p.plan);
    renderPlan(p);
    renderPosition(p);
    renderNow(s.now);
    renderSparklines(s.sparkline);
    renderRows(s.rows || []);
    renderResults(p.results);
    place();
    formNote();
  }

  // -- Locust's start form: under a plan, its users, ramp-up and run time fields are hidden (CSS); say why

  function formNote() {
    if (!last || !last.plan.plan) return;
    var input = document.querySelector('input[name="userCount"]');
    var field = input && input.closest('.MuiFormControl-root');
    if (!field || !field.parentNode || field.parentNode.querySelector(':scope > .dbsurge-form-note')) return;
    var users = last.plan.max_users ? ' (at most maxUsers, ' + last.plan.max_users + ')' : '';
    field.parentNode.insertBefore(el('div', {'class': 'dbsurge-form-note'}, [
      'Number of users, ramp-up and run time are set by the dbsurge plan: the arrival rate is the plan\u2019s ' +
      '(in the dbsurge panel), and dbsurge starts as many users as that rate needs' + users + '.']), field);
  }

  // -- the rate control ------------------------------------------------------------------------------

  function post(body) {
    setText('dbsurge-msg', '');
    setText('dbsurge-note', '');
    fetch('./dbsurge/rate', {method: 'POST', headers: {'Content-Type': 'application/json'},
                             body: JSON.stringify(body)})
      .then(function (r) { return r.json(); })
      .then(function (j) {
        if (j.error) { setText('dbsurge-msg', j.error); return; }
        setText('dbsurge-note', j.change.label + ' (now ' + rate(j.change.rate_now_tps) + ')');
        refresh(false);
      })
      .catch(function (e) { setText('dbsurge-msg', 'the rate was not sent: ' + e); });
  }

  function wire(inputId, buttonId, field) {
    function send() { var b = {}; b[field] = $(inputId).value.trim(); post(b); }
    $(buttonId).onclick = send;
    $(inputId).onkeydown = function (e) { if (e.key === 'Enter') send(); };
  }

  // -- once a second ---------------------------------------------------------------------------------

  var timer = null;
  function refresh(again) {
    fetch('./dbsurge/live', {cache: 'no-store'})
      .then(function (r) { return r.json(); })
      .then(render)
      .catch(function () { /* the master is busy or gone: try again */ })
      .then(function () {
        if (again === false) return;
        clearTimeout(timer);
        timer = setTimeout(refresh, REFRESH_MS); // one request at a time, even when the master is slow
      });
  }

  build();
  wire('dbsurge-rate', 'dbsurge-set-rate', 'rate_tps');
  wire('dbsurge-scale', 'dbsurge-set-scale', 'scale');
  $('dbsurge-collapse').onclick = function () { collapse(!document.body.classList.contains('dbsurge-collapsed')); };
  window.addEventListener('scroll', place, {passive: true});
  window.addEventListener('resize', place);
  new MutationObserver(pageChanged).observe(document.body, {childList: true, subtree: true});
  refresh();
})();
