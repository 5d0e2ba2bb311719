/* dbsurge's panel on Locust's page (dbsurge/ui/web.py, docs/web-ui.md). Plain DOM and inline SVG, no library.

   Once a second it reads GET ./dbsurge/live (the plan, the overrides, the timeline's figures) and shows:
   the plan and where the run is, a chart of every second of the last 15 minutes (planned and achieved
   TPS, response-time percentiles per operation, lag; stages as bands, overrides as lines), the last
   five complete seconds, a sparkline of the last minutes,
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
        el('div', {id: 'dbsurge-report-path', 'class': 'ds-mono', hidden: ''}),
        el('div', {id: 'dbsurge-verdict'}),
        el('div', {id: 'dbsurge-exits', hidden: ''})]),
      el('h3', {}, ['Plan']),
      el('div', {id: 'dbsurge-plan', 'class': 'ds-mono'}),
      el('div', {id: 'dbsurge-position', hidden: ''}, [
        el('span', {id: 'dbsurge-position-text'}), ' planned now ',
        el('span', {id: 'dbsurge-target', 'class': 'ds-num'}, ['-']), ' TPS']),
      el('h3', {'class': 'ds-chart-head'}, [
        'Per second ', el('span', {'class': 'ds-dim'}, ['(timeline.csv, the last 15 min)']),
        el('button', {id: 'dbsurge-wide', type: 'button', title: 'a wider panel for the chart'}, ['wider'])]),
      el('div', {id: 'dbsurge-chart'}, [
        el('div', {id: 'dbsurge-chart-now', 'class': 'ds-chart-now'}),
        chartSvg('dbsurge-chart-tps', 320), el('div', {id: 'dbsurge-legend-tps', 'class': 'ds-legend'}),
        chartSvg('dbsurge-chart-ms', 320), el('div', {id: 'dbsurge-legend-ms', 'class': 'ds-legend'}),
        chartSvg('dbsurge-chart-lag', 220),
        el('div', {id: 'dbsurge-locust-note', 'class': 'ds-chart-note'}, [LOCUST_NOTE])]),
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
    if (window.localStorage && localStorage.getItem(WIDE_KEY) === '1') widen(true);
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

  function pageChanged() { place(); formNote(); chartsNote(); }

  // Locust's Charts tab: a line above its charts says whose counters they are and where the seconds are
  var LOCUST_CHARTS_NOTE = "These are Locust's own counters: requests completed per second, failures included, " +
    'averaged over about 10 s ending 3 s ago, a point every 2 s, so a short stage shows late, lower than planned ' +
    'and as a ramp. The dbsurge panel\u2019s chart has every second as timeline.csv has it, by the second each ' +
    'operation was due.';

  function chartsNote() {
    var chart = document.querySelector('#root main [_echarts_instance_]');
    if (!chart || !chart.parentNode || document.querySelector('#root main .dbsurge-charts-note')) return;
    chart.parentNode.insertBefore(el('div', {'class': 'dbsurge-charts-note'}, [LOCUST_CHARTS_NOTE]), chart);
  }

  // -- what the state says ---------------------------------------------------------------------------

  function status(p) {
    var r = p.results;
    if (r && r.process_exits) return {writing: 'ended: writing the results...', report: 'ended: building the report...',
                                      done: 'ended: results written'}[r.state] || 'ended';
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
      // the plan's length and rate of the row (a stage: "15 s · target 20"), else its timeline seconds
      figs.push('from ' + clock(r.start_utc) + ' \u00b7 ' + (r.duration_s != null ? r.duration_s : r.seconds) +
                ' s \u00b7 target ' + tps(r.target_tps) +
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
        // the link is served by the process; once `dbsurge run` has exited the file is still there
        line.appendChild(document.createTextNode(r.process_exits ? ' (served until dbsurge run exits), on disk:'
                                                                   : ' (in the run directory)'));
      } else {
        line.appendChild(document.createTextNode(r.state === 'done' ? 'report.html: not built (see the console)'
                                                                     : 'report.html: being built...'));
      }
    }
    setText('dbsurge-verdict', r.verdict || '');
    var path = $('dbsurge-report-path');
    path.hidden = !(r.process_exits && r.report_path);
    setText('dbsurge-report-path', r.report_path || '');
    var exits = $('dbsurge-exits');
    exits.hidden = !(r.process_exits && r.state === 'done');
    if (!exits.hidden && !gone) {
      setText('dbsurge-exits', 'The plan has ended: dbsurge run exits (exit ' + r.exit_code + ') once this page has ' +
                               'the results.');
    }
  }

  // `dbsurge run --web` said it would exit after this page had the ending, and its next poll found nobody
  var gone = false;
  function processGone(r) {
    gone = true;
    setText('dbsurge-status', 'exited (exit ' + r.exit_code + ')');
    setText('dbsurge-exits', 'The plan has ended and dbsurge run has exited (exit ' + r.exit_code + '): the ' +
                             'results stay in the run directory.');
  }

  // -- the chart: planned vs achieved TPS, response-time percentiles and lag, per timeline second -------
  // Three SVGs the width of the panel, drawn at their real pixel size (text stays 13 px and more), from
  // /dbsurge/live's series (timeline.csv's seconds, the last 15 minutes); the plan's stages are shaded
  // bands, rate overrides vertical lines. Time is plan time (s since the plan's zero), as stages are.

  var SVGNS = 'http://www.w3.org/2000/svg';
  var WIDE_KEY = 'dbsurge-panel-wide';
  var OP_COLORS = ['#1f4fbf', '#c0392b', '#7b3fbf', '#1a7f37', '#a35d00', '#00838f', '#c2185b'];
  var PCT_STYLE = {p99_ms: ['', 2.6, 'p99 solid'], p95_ms: ['8 4', 2, 'p95 dashed'], p50_ms: ['2 4', 2, 'p50 dotted']};
  var MARGIN = {l: 66, r: 22, t: 30, b: 30};
  var CHAR_W = 7.4; // a 13 px character, about: whether a stage's label fits its band
  var LOCUST_NOTE = "Locust's Charts tab (and the --html report's chart) plot Locust's own counters: requests " +
    'completed per second, failures included, averaged over about 10 s ending 3 s ago, and percentiles over its ' +
    'last 10 s, sampled every 2 s (every 5 s in the report). A short step there shows late, lower than planned ' +
    'and as a ramp. This chart is timeline.csv: each second on its own, by the second each operation was due, ' +
    'successes only. Read rates and percentiles here.';

  function s(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function chartSvg(id, height) {
    return s('svg', {id: id, 'class': 'ds-chart', height: String(height), 'data-height': String(height)});
  }

  function niceStep(range, n) {
    var raw = range / n, p = Math.pow(10, Math.floor(Math.log(raw) / Math.LN10)), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
  }

  function linearAxis(top, n) {
    if (!(top > 0)) top = 1;
    var step = niceStep(top, n), ticks = [];
    top = Math.ceil(top / step - 1e-9) * step;
    for (var v = 0; v <= top + step / 2; v += step) ticks.push(Number(v.toPrecision(6)));
    return {lo: 0, hi: top, ticks: ticks, log: false};
  }

  function logAxis(lo, hi) {
    var a = Math.floor(Math.log(lo) / Math.LN10), b = Math.ceil(Math.log(hi) / Math.LN10);
    if (b <= a) b = a + 1;
    var mults = b - a <= 2 ? [1, 2, 5] : b - a <= 4 ? [1, 3] : [1], ticks = [];
    for (var d = a; d <= b; d++) {
      mults.forEach(function (m) { var v = m * Math.pow(10, d); if (v <= Math.pow(10, b) * 1.0001) ticks.push(v); });
    }
    return {lo: Math.pow(10, a), hi: Math.pow(10, b), ticks: ticks, log: true};
  }

  function fmtMs(v) {
    if (v >= 1000) return Number((v / 1000).toPrecision(3)) + ' s';
    return Number(v.toPrecision(3)) + ' ms';
  }
  function fmtTps(v) { return v >= 10000 ? Number((v / 1000).toPrecision(3)) + 'k' : String(Number(v.toPrecision(4))); }
  function fmtClock(t) {
    var neg = t < 0, a = Math.round(Math.abs(t)), m = Math.floor(a / 60), sec = a % 60;
    return (neg ? '-' : '') + m + ':' + (sec < 10 ? '0' : '') + sec;
  }

  function timeTicks(x0, x1, width) {
    var want = Math.max(2, Math.floor(width / 80));
    var steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
    var step = steps.filter(function (c) { return (x1 - x0) / c <= want; })[0] || 3600;
    var ticks = [];
    for (var t = Math.ceil(x0 / step) * step; t <= x1 + 1e-9; t += step) ticks.push(t);
    return ticks;
  }

  // A plot area on an SVG: x in plan seconds, y by a linear or log axis.
  function plot(svgEl, width, x0, x1, axis) {
    var h = Number(svgEl.getAttribute('data-height'));
    svgEl.textContent = '';
    svgEl.setAttribute('width', String(width));
    svgEl.setAttribute('viewBox', '0 0 ' + width + ' ' + h);
    var c = {svg: svgEl, w: width, h: h, x0: x0, x1: x1, axis: axis, left: MARGIN.l, right: width - MARGIN.r,
             top: MARGIN.t, bottom: h - MARGIN.b};
    c.x = function (t) { return c.left + (t - x0) * (c.right - c.left) / Math.max(1e-9, x1 - x0); };
    c.y = function (v) {
      var f = axis.log ? (Math.log(v) - Math.log(axis.lo)) / (Math.log(axis.hi) - Math.log(axis.lo))
        : (v - axis.lo) / (axis.hi - axis.lo);
      return c.bottom - Math.max(0, Math.min(1, f)) * (c.bottom - c.top);
    };
    var clipId = svgEl.id + '-clip';
    var defs = s('defs');
    var clip = s('clipPath', {id: clipId});
    clip.appendChild(s('rect', {x: c.left, y: c.top, width: c.right - c.left, height: c.bottom - c.top}));
    defs.appendChild(clip);
    svgEl.appendChild(defs);
    c.bands = s('g', {'class': 'ds-bands'});
    c.grid = s('g', {'class': 'ds-grid'});
    c.lines = s('g', {'class': 'ds-lines', 'clip-path': 'url(#' + clipId + ')'});
    c.marks = s('g', {'class': 'ds-marks'});
    [c.bands, c.grid, c.lines, c.marks].forEach(function (g) { svgEl.appendChild(g); });
    return c;
  }

  function axes(c, title, fmt) {
    c.axis.ticks.forEach(function (v) {
      var y = c.y(v);
      c.grid.appendChild(s('line', {x1: c.left, x2: c.right, y1: y, y2: y, 'class': 'ds-gridline'}));
      c.grid.appendChild(s('text', {x: c.left - 6, y: y + 4.5, 'text-anchor': 'end', 'class': 'ds-tick'}, fmt(v)));
    });
    timeTicks(c.x0, c.x1, c.right - c.left).forEach(function (t) {
      var x = c.x(t);
      c.grid.appendChild(s('line', {x1: x, x2: x, y1: c.bottom, y2: c.bottom + 5, 'class': 'ds-axisline'}));
      c.grid.appendChild(s('text', {x: x, y: c.bottom + 19, 'text-anchor': 'middle', 'class': 'ds-tick'}, fmtClock(t)));
    });
    c.grid.appendChild(s('text', {x: 4, y: c.bottom + 19, 'class': 'ds-tick ds-dim-tick'}, 'm:ss'));
    c.grid.appendChild(s('line', {x1: c.left, x2: c.right, y1: c.bottom, y2: c.bottom, 'class': 'ds-axisline'}));
    c.grid.appendChild(s('line', {x1: c.left, x2: c.left, y1: c.top, y2: c.bottom, 'class': 'ds-axisline'}));
    c.svg.appendChild(s('text', {x: 4, y: 18, 'class': 'ds-chart-title'}, title));
  }

  function stageRate(st) {
    return st.start_tps === st.end_tps ? fmtTps(st.start_tps) + ' TPS'
      : fmtTps(st.start_tps) + '\u2192' + fmtTps(st.end_tps) + ' TPS';
  }

  // The plan's stages as shaded bands (labelled on the top chart), the overrides as vertical lines.
  function bandsAndMarks(c, plan, labels) {
    plan.stages.forEach(function (st, i) {
      var a = st.start_s, b = st.duration_s === null ? Infinity : st.start_s + st.duration_s;
      if (b <= c.x0 || a >= c.x1) return;
      var xa = c.x(Math.max(a, c.x0)), xb = c.x(Math.min(b, c.x1));
      c.bands.appendChild(s('rect', {x: xa, y: c.top, width: Math.max(0, xb - xa), height: c.bottom - c.top,
                                     'class': 'ds-band ds-band-' + (i % 2), 'data-stage': st.name}));
      if (a > c.x0) c.bands.appendChild(s('line', {x1: xa, x2: xa, y1: c.top, y2: c.bottom, 'class': 'ds-stage-edge'}));
      if (!labels) return;
      var text = [st.name + ' \u00b7 ' + stageRate(st), st.name, String(i + 1)].filter(function (t) {
        return t.length * CHAR_W + 8 <= xb - xa;
      })[0];
      if (text) c.bands.appendChild(s('text', {x: xa + 4, y: c.top + 16, 'class': 'ds-band-label'}, text));
    });
    plan.overrides.forEach(function (o) {
      if (o.at_s < c.x0 || o.at_s > c.x1) return;
      var x = c.x(o.at_s);
      var g = s('g', {'class': 'ds-override-mark', 'data-override': String(o.override)});
      g.appendChild(s('line', {x1: x, x2: x, y1: c.top, y2: c.bottom}));
      if (labels) g.appendChild(s('text', {x: x + 4, y: c.top + 34}, 'override ' + o.override + ': ' + o.text));
      c.marks.appendChild(g);
    });
  }

  // A path through (t, v) pairs, broken where v is null; `step` holds each value over its second.
  function path(c, ts, vs, step, cls, extra) {
    var d = [], pen = false, n = 0;
    for (var i = 0; i < ts.length; i++) {
      var v = vs[i];
      if (v === null || v === undefined || (c.axis.log && !(v > 0))) { pen = false; continue; }
      var y = c.y(v).toFixed(1);
      if (step) {
        d.push((pen ? 'L' : 'M') + c.x(ts[i]).toFixed(1) + ',' + y + 'L' + c.x(ts[i] + 1).toFixed(1) + ',' + y);
      } else {
        d.push((pen ? 'L' : 'M') + c.x(ts[i] + 0.5).toFixed(1) + ',' + y);
      }
      pen = true;
      n++;
    }
    var attrs = {d: d.join(''), 'class': cls, 'data-points': String(n)};
    Object.keys(extra || {}).forEach(function (k) { attrs[k] = extra[k]; });
    var p = s('path', attrs);
    c.lines.appendChild(p);
    return p;
  }

  function maxIn(arrays) {
    var m = 0;
    arrays.forEach(function (a) { a.forEach(function (v) { if (v !== null && v > m) m = v; }); });
    return m;
  }

  // The plan ahead of the last second, from the stages (no override yet: after one, the plan no longer says).
  function planAhead(plan, from, to) {
    if (plan.overrides.length) return null;
    var ts = [], vs = [];
    plan.stages.forEach(function (st) {
      var a = st.start_s, b = st.duration_s === null ? to : st.start_s + st.duration_s;
      if (b <= from || a >= to) return;
      var rateAt = function (t) {
        return st.duration_s ? st.start_tps + (st.end_tps - st.start_tps) * (t - a) / st.duration_s : st.start_tps;
      };
      var ta = Math.max(a, from), tb = Math.min(b, to);
      ts.push(ta, tb);
      vs.push(rateAt(ta), rateAt(tb));
    });
    return ts.length ? {ts: ts, vs: vs} : null;
  }

  function legend(id, items) {
    var box = $(id);
    box.textContent = '';
    items.forEach(function (it) {
      var sw = s('svg', {width: '30', height: '12', 'class': 'ds-swatch'});
      sw.appendChild(s('line', {x1: 1, x2: 29, y1: 6, y2: 6, stroke: it[1], 'stroke-width': it[3] || 2.5,
                                'stroke-dasharray': it[2] || ''}));
      box.appendChild(el('span', {'class': 'ds-legend-item'}, [sw, it[0]]));
    });
  }

  function renderChart(st) {
    var box = $('dbsurge-chart');
    if (!box || !st) return;
    var width = Math.floor(box.clientWidth);
    if (width < 120) return; // folded away
    var plan = st.plan, sr = st.series;
    var zero = sr && sr.start_epoch_s !== null ? sr.start_epoch_s : 0;
    var ts = sr ? sr.time_s.map(function (t) { return t - zero; }) : [];
    var span = sr ? sr.span_s : 900;
    var end = ts.length ? ts[ts.length - 1] + 1 : 0, first = ts.length ? ts[0] : 0;
    var x0 = end - span > first ? end - span : Math.min(first, 0); // the last 15 minutes, or from the plan's zero
    var planEnd = plan.stages.reduce(function (m, s2) {
      return s2.duration_s === null ? Infinity : Math.max(m, s2.start_s + s2.duration_s);
    }, 0);
    var x1 = isFinite(planEnd) && planEnd - x0 <= span ? Math.max(end, planEnd) : Math.max(end, x0 + 60);
    x1 = Math.max(x1, x0 + 10);
    var ahead = plan.plan ? planAhead(plan, end, x1) : null;

    // operations per second: planned (a step a second: stages are steps, ramps are ramps) and achieved
    var target = sr ? sr.target_tps : [], achieved = sr ? sr.achieved_tps : [], failed = sr ? sr.failures : [];
    var anyFailed = failed.some(function (v) { return v > 0; });
    var c = plot($('dbsurge-chart-tps'), width, x0, x1,
                 linearAxis(maxIn([target, achieved, failed, ahead ? ahead.vs : []]) * 1.08, 5));
    axes(c, 'Operations per second (TPS)', fmtTps);
    bandsAndMarks(c, plan, true);
    if (ahead) {
      c.lines.appendChild(s('path', {'class': 'ds-line-ahead', d: ahead.ts.map(function (t, i) {
        return (i ? 'L' : 'M') + c.x(t).toFixed(1) + ',' + c.y(ahead.vs[i]).toFixed(1);
      }).join('')}));
    }
    path(c, ts, target, true, 'ds-line-planned');
    path(c, ts, achieved, false, 'ds-line-achieved');
    c.svg.setAttribute('data-seconds', String(ts.length));
    c.svg.setAttribute('data-first-s', sr && ts.length ? String(sr.time_s[0]) : '');
    c.svg.setAttribute('data-last-s', sr && ts.length ? String(sr.time_s[ts.length - 1]) : '');
    if (anyFailed) path(c, ts, failed, false, 'ds-line-failed');
    var planned = target.some(function (v) { return v !== null; });
    var items = (planned ? [['planned', '#555', '6 3', 2.2]] : []).concat([['achieved', '#1a7f37', '', 3]]);
    if (anyFailed) items.push(['failed / s', '#b00020', '', 2]);
    if (ahead) items.push(['plan ahead', '#999', '3 4', 2]);
    if (plan.overrides.length) items.push(['rate override', '#a35d00', '5 3', 2]);
    legend('dbsurge-legend-tps', items);

    // response time per operation: log scale when the values span more than a decade
    var ops = sr ? Object.keys(sr.operations) : [];
    var all = [];
    ops.forEach(function (op) { ['p50_ms', 'p95_ms', 'p99_ms'].forEach(function (k) { all.push(sr.operations[op][k]); }); });
    var lo = Infinity, hi = 0;
    all.forEach(function (a) { a.forEach(function (v) { if (v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); } }); });
    var axis = hi > 0 && hi / lo > 10 ? logAxis(lo, hi) : linearAxis(hi > 0 ? hi * 1.08 : 1, 5);
    c = plot($('dbsurge-chart-ms'), width, x0, x1, axis);
    axes(c, 'Response time, ms (' + (axis.log ? 'log scale' : 'from 0') + ')', fmtMs);
    bandsAndMarks(c, plan, false);
    var opItems = [];
    ops.forEach(function (op, i) {
      var color = OP_COLORS[i % OP_COLORS.length];
      ['p50_ms', 'p95_ms', 'p99_ms'].forEach(function (k) {
        path(c, ts, sr.operations[op][k], false, 'ds-line-pct',
             {stroke: color, 'stroke-dasharray': PCT_STYLE[k][0], 'stroke-width': PCT_STYLE[k][1],
              'data-operation': op, 'data-percentile': k.slice(0, 3)});
      });
      opItems.push([op === 'ALL' && ops.length === 1 ? 'all operations' : op, color, '', 2.6]);
    });
    legend('dbsurge-legend-ms', opItems.concat([['p99', '#333', '', 2.6], ['p95', '#333', '8 4', 2],
                                                ['p50', '#333', '2 4', 2]]));
    if (sr && sr.operations_left_out.length) {
      $('dbsurge-legend-ms').appendChild(el('span', {'class': 'ds-legend-item'}, [
        '(in ALL only: ' + sr.operations_left_out.join(', ') + ')']));
    }

    // lag: how late operations started after their planned second
    var lag = sr ? sr.lag_p99_ms : [];
    c = plot($('dbsurge-chart-lag'), width, x0, x1, linearAxis(maxIn([lag]) * 1.08 || 1, 3));
    axes(c, 'Start lag p99, ms (late vs the plan)', fmtMs);
    bandsAndMarks(c, plan, false);
    path(c, ts, lag, false, 'ds-line-lag');

    // the second under the pointer (or the last one): a line across the three charts, its figures read out
    geometry = {x0: x0, x1: x1, left: c.left, right: c.right};
    var i = achieved.length - 1;
    if (hoverT !== null) {
      for (var k = 0; k < ts.length; k++) if (ts[k] <= hoverT) i = k;
      if (!ts.length || hoverT < ts[0] || hoverT >= end) i = -1;
      if (i >= 0) {
        ['dbsurge-chart-tps', 'dbsurge-chart-ms', 'dbsurge-chart-lag'].forEach(function (id) {
          var x = (c.left + (ts[i] + 0.5 - x0) * (c.right - c.left) / (x1 - x0)).toFixed(1);
          $(id).appendChild(s('line', {x1: x, x2: x, y1: MARGIN.t, y2: Number($(id).getAttribute('data-height')) -
                                       MARGIN.b, 'class': 'ds-hover'}));
        });
      }
    }
    var failures = i >= 0 && failed[i] ? ' \u00b7 failed ' + failed[i] : '';
    var all = i >= 0 ? sr.operations.ALL : null;
    setText('dbsurge-chart-now', i < 0 ? (hoverT !== null ? 'No second there.'
                                          : 'No complete second yet: the chart starts with the run\u2019s first.')
      : (hoverT !== null ? 'second ' : 'last second, ') + fmtClock(ts[i]) + ': achieved ' + tps(achieved[i]) +
        (target[i] === null ? ' TPS' + (plan.plan ? ' (after the plan)' : ' (no plan: the closed model)')
         : ' of ' + tps(target[i]) + ' TPS planned') + failures + ' \u00b7 p50 / p95 / p99 ' + ms(all.p50_ms[i]) + ' / ' +
        ms(all.p95_ms[i]) + ' / ' + ms(all.p99_ms[i]) + ' ms \u00b7 lag p99 ' + ms(lag[i]) + ' ms');
  }

  var hoverT = null, geometry = null, hoverFrame = null;
  function hover(e) {
    var g = geometry;
    if (!g) return;
    var box = e.currentTarget.getBoundingClientRect(), x = e.clientX - box.left;
    hoverT = x < g.left || x > g.right ? null : g.x0 + (x - g.left) * (g.x1 - g.x0) / (g.right - g.left);
    if (hoverFrame === null) {
      hoverFrame = requestAnimationFrame(function () { hoverFrame = null; if (last) renderChart(last); });
    }
  }
  function unhover() { hoverT = null; if (last) renderChart(last); }

  // The series, kept here: the page asks for the seconds after its last (?since=), one point a second, and
  // keeps the last span_s of them; a new run (another time zero) starts it again.
  var chartSeries = null;
  var COLUMNS = ['time_s', 'target_tps', 'achieved_tps', 'failures', 'lag_p99_ms'];
  var PCTS = ['p50_ms', 'p95_ms', 'p99_ms'];

  function nulls(n) { var a = []; for (var i = 0; i < n; i++) a.push(null); return a; }

  function mergeSeries(sr) {
    var buf = chartSeries;
    if (!sr || sr.since === null || !buf || buf.start_epoch_s !== sr.start_epoch_s) {
      chartSeries = sr; // the whole series, or none yet
      return sr;
    }
    // two answers to the same since (the rate control's refresh beside the timer's) must not add a second twice
    var n = buf.time_s.length, lastT = n ? buf.time_s[n - 1] : -Infinity, j = 0;
    while (j < sr.time_s.length && sr.time_s[j] <= lastT) j++;
    var m = sr.time_s.length - j;
    COLUMNS.forEach(function (k) { Array.prototype.push.apply(buf[k], sr[k].slice(j)); });
    Object.keys(sr.operations).forEach(function (op) {
      if (!buf.operations[op]) {
        buf.operations[op] = {};
        PCTS.forEach(function (k) { buf.operations[op][k] = nulls(n); });
      }
    });
    Object.keys(buf.operations).forEach(function (op) {
      PCTS.forEach(function (k) {
        Array.prototype.push.apply(buf.operations[op][k], sr.operations[op] ? sr.operations[op][k].slice(j) : nulls(m));
      });
    });
    var excess = buf.time_s.length - sr.span_s;
    if (excess > 0) {
      COLUMNS.forEach(function (k) { buf[k].splice(0, excess); });
      Object.keys(buf.operations).forEach(function (op) {
        PCTS.forEach(function (k) { buf.operations[op][k].splice(0, excess); });
      });
    }
    buf.operation_names = sr.operation_names;
    buf.operations_left_out = sr.operations_left_out;
    return buf;
  }

  function liveUrl() {
    var t = chartSeries ? chartSeries.time_s : [];
    return './dbsurge/live' + (t.length ? '?since=' + t[t.length - 1] : '');
  }

  function widen(on) {
    document.body.classList.toggle('dbsurge-wide', on);
    setText('dbsurge-wide', on ? 'narrower' : 'wider');
    try { localStorage.setItem(WIDE_KEY, on ? '1' : '0'); } catch (e) { /* private mode */ }
    window.dispatchEvent(new Event('resize'));
  }

  function render(s) {
    last = s;
    var p = s.plan;
    setText('dbsurge-status', status(p));
    document.body.classList.toggle('dbsurge-plan', !!p.plan);
    renderPlan(p);
    renderPosition(p);
    renderNow(s.now);
    s.series = mergeSeries(s.series);
    renderChart(s);
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
    fetch(liveUrl(), {cache: 'no-store'})
      .then(function (r) { return r.json(); })
      .then(render)
      .catch(function () {  // the master is busy or gone: try again
        var r = last && last.plan.results;
        if (r && r.process_exits && r.state === 'done') processGone(r);  // it said it would go, once shown this
      })
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
  window.addEventListener('resize', function () { if (last) renderChart(last); });
  ['dbsurge-chart-tps', 'dbsurge-chart-ms', 'dbsurge-chart-lag'].forEach(function (id) {
    $(id).addEventListener('mousemove', hover);
    $(id).addEventListener('mouseleave', unhover);
  });
  $('dbsurge-wide').onclick = function () { widen(!document.body.classList.contains('dbsurge-wide')); };
  new MutationObserver(pageChanged).observe(document.body, {childList: true, subtree: true});
  refresh();
})();
