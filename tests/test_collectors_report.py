"""The report: report.html (self-contained, opened in headless Chromium), timeline.png and summary.md.

Two run directories: ``run_spike`` (1,000 TPS with CloudWatch capacity and a cost) and ``run_low_rate``
(a real local run at 10 TPS on the embedded PostgreSQL: no CloudWatch, nothing to price, and
per-second percentiles from a handful of operations).
"""

from __future__ import annotations

import csv
import html
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from dbsurge.collectors.cli import collect_main, report_main
from dbsurge.collectors.report import build_report, load_report_data
from dbsurge.collectors.scenario_hooks import install as install_scenario_reports
from runs import SHOWN_3

from dbsurge.scenarios import SCENARIO_REPORTS

# `report_main` called here as `dbsurge.commands.cli` calls it: a scenario's report asks the scenario for its tables
install_scenario_reports(SCENARIO_REPORTS)

FIXTURES = Path(__file__).parent / "fixtures"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SPIKE_PANELS = ["latency-create_order", "latency-get_product", "counts", "rate", "lag", "database", "capacity"]


def _built(tmp_path_factory, name: str) -> Path:
    run = tmp_path_factory.mktemp("report") / name
    shutil.copytree(FIXTURES / name, run)
    assert build_report(run) == run / "report.html"
    return run


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    return _built(tmp_path_factory, "run_spike")


@pytest.fixture(scope="module")
def low_dir(tmp_path_factory) -> Path:
    return _built(tmp_path_factory, "run_low_rate")


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def html_tables(page: str) -> dict[str, list[dict[str, str]]]:
    """The table under each <h2>, by the heading's text, as rows keyed by the column headers."""
    out = {}
    for title, body in re.findall(r"<h2>(.*?)</h2>\s*<table>(.*?)</table>", page, re.DOTALL):
        rows = [[html.unescape(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr)]
                for tr in re.findall(r"<tr>(.*?)</tr>", body)]
        out[html.unescape(title)] = [dict(zip(rows[0], r)) for r in rows[1:]]
    return out


def ms(value: str) -> str:
    return f"{float(value):.3f}"


def test_report_files_are_written(report_dir):
    for name in ("report.html", "timeline.png", "summary.md", "merged.csv", "cost.csv"):
        assert (report_dir / name).stat().st_size > 0, name
    assert (report_dir / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("run", ["report_dir", "low_dir"])
def test_report_html_is_self_contained(run, request):
    page = (request.getfixturevalue(run) / "report.html").read_text()
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == page.count("<img") >= 5 and all(len(data) > 1000 for data in images)
    # nothing to fetch: no scripts, stylesheets, fonts, images or links from elsewhere
    assert "<script" not in page and "<link" not in page and 'src="http' not in page
    assert not re.search(r'(src|href)="(https?:|//)', page) and "url(" not in page and "@import" not in page


def test_spike_report_has_every_panel_and_section(report_dir):
    page = (report_dir / "report.html").read_text()
    assert re.findall(r'<figure id="plot-([^"]+)"', page) == SPIKE_PANELS
    for text in ("Operations", "Per stage", "a2-spike/writer ACU (max)", "<h2>Cost</h2>",
                 "Aurora a2-spike/writer ACU-hours", "us-east-1 defaults as of", "SerializationFailure",
                 "Every stage and operation", "seconds since the run started"):
        assert text in page, text


@pytest.mark.parametrize("run", ["report_dir", "low_dir"])
def test_operations_table_holds_summary_csv(run, request):
    run_dir = request.getfixturevalue(run)
    table = {r["operation"]: r for r in html_tables((run_dir / "report.html").read_text())["Operations"]}
    summary = read_csv(run_dir / "summary.csv")
    assert list(table) == [r["operation"] for r in summary]
    for r in summary:
        row = table[r["operation"]]
        for column, field in (("p50 ms", "p50_ms"), ("p95 ms", "p95_ms"), ("p99 ms", "p99_ms"),
                              ("p99.9 ms", "p999_ms"), ("max ms", "max_ms"), ("svc p50 ms", "service_p50_ms"),
                              ("svc p99 ms", "service_p99_ms"), ("lag p99 ms", "lag_p99_ms")):
            assert row[column] == ms(r[field]), (r["operation"], column)
        assert row["ops/s"] == f"{float(r['achieved_tps']):,.1f}"
        assert row["failed"] == f"{int(r['failures']):,}"
        assert row["failure rate"] == f"{100 * float(r['failure_rate']):.3f}%"
        if r.get("ok"):  # the spike fixture predates the ledger's planned and ok columns
            assert (row["planned"], row["ok"]) == (f"{int(r['planned']):,}", f"{int(r['ok']):,}")


@pytest.mark.parametrize("run", ["report_dir", "low_dir"])
def test_stage_table_holds_stages_csv(run, request):
    run_dir = request.getfixturevalue(run)
    table = {r["stage"]: r for r in html_tables((run_dir / "report.html").read_text())["Per stage"]}
    stages = read_csv(run_dir / "stages.csv")
    assert list(table) == list(dict.fromkeys(r["stage"] for r in stages))
    for r in stages:
        row = table[r["stage"]]
        if r["operation"] == "ALL":
            assert row["successful TPS"] == f"{float(r['achieved_tps']):,.1f}"
            assert row["svc p99 ms"] == ms(r["service_p99_ms"]) and row["lag p99 ms"] == ms(r["lag_p99_ms"])
            assert row["dropped"] == f"{int(r['dropped']):,}"
        else:
            assert row[f"{r['operation']} p95/p99 ms"] == f"{ms(r['p95_ms'])} / {ms(r['p99_ms'])}"


def test_stage_table_has_capacity_per_stage(report_dir):
    table = {r["stage"]: r for r in html_tables((report_dir / "report.html").read_text())["Per stage"]}
    assert table["200%"]["a2-spike/writer ACU (max)"] == "21" and table["20%"]["a2-spike/writer ACU (max)"] == "15"


def test_summary_md_has_the_studies_tables(report_dir):
    summary = (report_dir / "summary.md").read_text()
    assert "## Operations" in summary and "| create_order | - | - | 3 | 0.002% | 366.1 | 8.201 | 11.979 |" in summary
    header = next(line for line in summary.splitlines() if line.startswith("| stage | arrival rate"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[:3] == ["stage", "arrival rate", "successful TPS"]
    assert "create_order p95/p99 ms" in columns and "a2-spike/writer ACU (max)" in columns
    spike = next(line for line in summary.splitlines() if line.startswith("| 200% | 2,000 |"))
    cells = dict(zip(columns, [c.strip() for c in spike.strip("|").split("|")]))
    assert cells["a2-spike/writer ACU (max)"] == "21" and cells["create_order p95/p99 ms"] == "11.979 / 37.760"
    assert cells["successful TPS"] == "1,959.8" and cells["dropped"] == "24"
    assert "| Total | 360.4 s |  | $0.2368 |" in summary  # capacity only: no runner type given
    assert "| 200% | 60.0 | $0.0396 | 117,585 |" in summary


def test_local_run_has_no_cost_or_capacity_section(low_dir):
    page = re.sub(r"data:image/png;base64,[^\"]+", "", (low_dir / "report.html").read_text())  # text only
    assert "<h2>Cost</h2>" not in page and "$0.0000" not in page and "No cost estimate" not in page
    assert 'id="plot-capacity"' not in page and "capacity units" not in page.lower()
    assert "ACU" not in page and "Capacity per stage" not in page
    # the PostgreSQL sampler's buffer hit ratio has data, so its panel stays, named for what it shows
    assert re.findall(r'<figure id="plot-([^"]+)"', page) == [
        "latency-order_create", "latency-product_lookup", "counts", "rate", "lag", "database", "cache"]
    summary = (low_dir / "summary.md").read_text()
    assert "## Cost" not in summary and "$" not in summary and "## Operations" in summary


def test_thin_seconds_are_marked(low_dir):
    """Each latency caption states the sample thresholds and in how many seconds each percentile is a line."""
    page = (low_dir / "report.html").read_text()
    timeline = read_csv(low_dir / "timeline.csv")
    for op in ("order_create", "product_lookup"):
        ok = [int(r["count"]) - int(r["failures"]) for r in timeline if r["operation"] == op]
        ok = [n for n in ok if n > 0]
        lines = {label: sum(n >= need for n in ok) for label, need in
                 (("p50", 10), ("p95", 20), ("p99", 100), ("p99.9", 1000))}
        assert lines["p99"] == 0 and lines["p50"] < len(ok)  # a thin run: no per-second p99 at all
        caption = html.unescape(re.search(rf'<figure id="plot-latency-{op}">.*?<figcaption>(.*?)</figcaption>',
                                          page, re.DOTALL).group(1))
        assert "p50 from 10, p95 from 20, p99 from 100, p99.9 from 1,000" in caption
        assert (f"of the {len(ok)} seconds with {op} operations it is a line in: "
                + ", ".join(f"{label} in {n}" for label, n in lines.items())) in caption
        assert "Hollow markers are percentiles of fewer than 10 operations" in caption
    notes = re.findall(r'<p class="note">(.*?)</p>', page)
    assert any("p99.9 (fewer than 1,000) in every row; p99 (fewer than 100) in every row" in n for n in notes)


def test_thin_seconds_are_left_out_of_the_lines(report_dir):
    """The drawn p99 line of an operation has a value exactly in the seconds with at least 100 successes."""
    from dbsurge.collectors.timeline_plots import draw_latency, ok_per_second
    from matplotlib.figure import Figure

    data = load_report_data(report_dir)
    ax = Figure().add_subplot()
    draw_latency(ax, data, "get_product")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert {"p50 (≥ 10 ops)", "p95 (≥ 20 ops)", "p99 (≥ 100 ops)", "service p50 (dashed)", "service p99 (dashed)",
            "max of the second"} <= set(lines)
    assert "p99.9 (≥ 1,000 ops)" not in lines  # never 1,000 get_product operations in one second
    drawn = [not math.isnan(y) for y in lines["p99 (≥ 100 ops)"].get_ydata()]
    ok = ok_per_second(data, "get_product")
    assert drawn == list(ok >= 100) and 0 < sum(drawn) < len(drawn)


def test_axes_are_readable(report_dir):
    """Latency ticks read 1, 2, 5, 10 (not 10^0); elapsed seconds below, whole UTC minutes above."""
    from dbsurge.collectors.timeline_plots import draw_latency, format_time_axis
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = load_report_data(report_dir)
    fig = Figure(figsize=(12, 3))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    draw_latency(ax, data, "create_order")
    format_time_axis(ax, data, utc=True, bottom=True)
    fig.canvas.draw()
    low, high = ax.get_ylim()
    y_labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text() and low <= t.get_position()[1] <= high]
    assert y_labels and all(re.fullmatch(r"\d[\d,]*(\.\d+)?", t) for t in y_labels), y_labels
    assert "10" in y_labels and "20" in y_labels
    left, right = ax.get_xlim()
    x_labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text() and left <= t.get_position()[0] <= right]
    assert x_labels == ["0", "60", "120", "180", "240", "300", "360"]
    assert ax.get_xlabel() == "seconds since the run started (t = 0 at 2026-09-29 08:43:07.250 UTC)"
    top = ax.child_axes[0]
    utc_labels = [t.get_text() for t in top.get_xticklabels() if t.get_text()]
    assert {"08:44:00", "08:45:00", "08:46:00", "08:47:00", "08:48:00", "08:49:00"} <= set(utc_labels), utc_labels
    assert all(re.fullmatch(r"08:\d\d:00", t) for t in utc_labels), utc_labels


@pytest.mark.browser
def test_report_opens_in_headless_chromium_without_errors(report_dir, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}"))
            page.goto((report_dir / "report.html").as_uri())
            page.wait_for_load_state("load")
            sizes = page.eval_on_selector_all("figure img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])")
            tables = page.locator("table").count()
            title = page.title()
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert len(sizes) == len(SPIKE_PANELS) and all(done and width >= 800 for done, width in sizes), sizes
    assert tables >= 5 and title.startswith("dbsurge report: ")


def test_report_of_a_bare_run_says_what_is_missing(tmp_path, capsys):
    run = tmp_path / "bare"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({
        "run_id": "bare", "started_utc": "2026-09-29T08:00:00.000Z", "ended_utc": "2026-09-29T08:00:05.000Z",
        "workload": "ycsb", "target": "mongodb://127.0.0.1:27017/",
        "plan": {"text": "5s@100tps", "stages": [{"name": "100tps", "start_utc": "2026-09-29T08:00:00.000Z",
                                                  "end_utc": "2026-09-29T08:00:05.000Z", "target_tps": 100}]},
    }))
    assert collect_main([str(run)]) == 0
    assert "no CloudWatch presets" in capsys.readouterr().out
    assert report_main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "report.html" in out and "timeline.png" not in out
    page = (run / "report.html").read_text()
    # no measurements: no plots and no tables of blanks, and no $0.0000 bill
    assert "<img" not in page and "<table" not in page and "$" not in page
    assert not (run / "timeline.png").exists()
    summary = (run / "summary.md").read_text()
    assert "- **Plan**: 5s@100tps" in summary and "## Per stage" not in summary and "$" not in summary


def test_the_database_panel_shows_the_samplers_seconds(report_dir):
    """pg_stat_database.csv's commits, blocks read and backends are drawn, not only its cache hit ratio."""
    data = load_report_data(report_dir)
    from dbsurge.collectors.timeline_plots import database_caption, has_database_seconds

    assert has_database_seconds(data)
    page = (report_dir / "report.html").read_text()
    figure = re.search(r'<figure id="plot-database">.*?<figcaption>(.*?)</figcaption>', page, re.DOTALL)
    assert figure and "commits, rollbacks and blocks read per second" in html.unescape(figure.group(1))
    assert "backends" in database_caption(data)
    assert data.merged["pg.commits_per_s"].notna().any() and data.merged["pg.numbackends"].notna().any()


def test_a_cost_given_to_dbsurge_cost_stays_in_the_report(tmp_path):
    """`dbsurge cost RUN --runner ...` writes cost.csv and its inputs; the report (then and later) shows that bill."""
    from runs import dbsurge, explain

    run = tmp_path / "run_low_rate"
    shutil.copytree(FIXTURES / "run_low_rate", run)
    build_report(run)
    assert "<h2>Cost</h2>" not in (run / "report.html").read_text()  # a local run: nothing to price
    proc = dbsurge("cost", str(run), "--runner", "c6g.4xlarge:2", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, explain(proc)
    assert f"wrote {run / 'cost.csv'}" in proc.stdout and "rebuilt" in proc.stdout
    assert json.loads((run / "run.json").read_text())["cost_inputs"] == {"runners": ["c6g.4xlarge:2"]}
    assert any("c6g.4xlarge" in str(r) for r in read_csv(run / "cost.csv"))
    for _ in range(2):  # the report written by `dbsurge cost`, and one rebuilt later
        page = (run / "report.html").read_text()
        assert "<h2>Cost</h2>" in page and "c6g.4xlarge" in page
        assert "## Cost" in (run / "summary.md").read_text()
        build_report(run)


def test_a_run_with_rate_overrides_has_their_table(tmp_path):
    """segments.csv (a run whose rate was changed live) becomes the report's and summary.md's override table."""
    from dbsurge.rundir import SEGMENT_COLUMNS

    run = tmp_path / "run_low_rate"
    shutil.copytree(FIXTURES / "run_low_rate", run)
    rows = [{"segment": "stage 20tps", "start_utc": "2026-09-29T08:43:08Z", "seconds": 5, "target_tps": 20,
             "achieved_tps": 20, "p50_ms": 1.5, "p99_ms": 3.0, "failures": 0, "dropped": 0},
            {"segment": "override 1: plan x2 from 08:43:13Z (stage 20tps)", "start_utc": "2026-09-29T08:43:13Z",
             "seconds": 5, "target_tps": 40, "achieved_tps": 39.8, "p50_ms": 1.7, "p99_ms": 4.25, "failures": 0,
             "dropped": 0}]
    with open(run / "segments.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, SEGMENT_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    build_report(run)
    table = html_tables((run / "report.html").read_text())["Rate overrides"]
    assert [r["segment"] for r in table] == [r["segment"] for r in rows]
    assert table[1]["target TPS"] == "40.0" and table[1]["achieved TPS"] == "39.8"
    assert "## Rate overrides" in (run / "summary.md").read_text()


def _rewarm_run(parent: Path) -> Path:
    """A rewarm run directory as the scenario writes it: run.json and trace.csv, 10 s of 5 clients x 20 reads/s,
    whose first 300 ms of reads are slow (page fetches of a cold cache) and the rest fast."""
    run = parent / "rewarm-run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({
        "run_id": "rewarm-run", "scenario": "rewarm", "started_utc": "2026-09-29T08:00:00.000Z",
        "ended_utc": "2026-09-29T08:00:12.000Z", "time_zero_utc": "2026-09-29T08:00:01.000Z",
        "target": {"kind": "mongo", "display": "mongodb://127.0.0.1:27017/"},
        "target_display": "mongodb://127.0.0.1:27017/", "workload": "documents", "hot_set": 100,
        "settings": {"clients": 5, "rate": 20.0, "duration_s": 10.0, "bucket_s": 2.0, "first_window_s": 0.5}}))
    with open(run / "trace.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["t_since_start_s", "client", "id", "latency_ms", "service_ms", "ok", "error"])
        for k in range(1000):
            t = k / 100
            latency = 120.0 + k if t < 0.3 else 1.0 + (k % 7) / 10
            writer.writerow([f"{t:.6f}", k % 5, k % 100, f"{latency:.3f}", f"{latency:.3f}", 1, ""])
    return run


@pytest.mark.browser
def test_a_scenario_report_shows_its_table_and_figures_in_chromium(tmp_path):
    """`dbsurge report` on a scenario's run: its study tables and figures, visible in a browser."""
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    run = _rewarm_run(tmp_path)
    assert report_main([str(run)]) == 0
    buckets = read_csv(run / "rewarm.csv")  # written by the report from trace.csv, as the scenario writes it
    assert [int(b["count"]) for b in buckets] == [200] * 5
    assert float(buckets[0]["p99_ms"]) > 100 > float(buckets[1]["max_ms"])  # 0.3 s of slow reads in the first
    problems: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.goto((run / "report.html").as_uri())
            page.wait_for_load_state("load")
            facts = page.locator("dl").inner_text()
            table = page.locator("#scenario table").first
            table_visible = table.is_visible()
            rows = table.locator("tbody tr").all_inner_texts()
            images = page.eval_on_selector_all(
                "#scenario figure img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, "
                "i.getBoundingClientRect().width, i.getBoundingClientRect().height])")
            page.screenshot(path=str(tmp_path / "rewarm-report.png"), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert "Result" in facts and "P50 of bucket 0" in facts and "rewarm" in facts
    assert table_visible and len(rows) == len(buckets)
    for row, bucket in zip(rows, buckets):
        cells = row.split("\t")
        assert cells[2] == bucket["count"] and float(cells[4]) == pytest.approx(float(bucket["p50_ms"]), abs=SHOWN_3)
    assert len(images) == 2, images
    for done, natural, width, height in images:
        assert done and natural >= 800 and width >= 600 and height >= 100, images


def test_a_scenario_whose_table_cannot_be_built_says_why_and_keeps_the_rest(tmp_path):
    """A damaged raw file (trace.csv without its latency column): the page names the error in one sentence
    and keeps the facts and events; the scenario's other files are not rewritten from nothing."""
    run = _rewarm_run(tmp_path)
    rows = (run / "trace.csv").read_text().splitlines()
    (run / "trace.csv").write_text("\n".join(r.rsplit(",", 4)[0] for r in rows) + "\n")  # cut the last columns
    (run / "events.jsonl").write_text(json.dumps({"time_utc": "2026-09-29T08:00:00.500Z", "kind": "run_start",
                                                  "scenario": "rewarm"}) + "\n")
    assert report_main([str(run)]) == 0
    page = (run / "report.html").read_text()
    assert "The scenario's tables could not be built: KeyError: &#x27;latency_ms&#x27;" in page
    assert "<h2>Events</h2>" in page and "run_start" in page and "<img" not in page
    assert not (run / "rewarm.csv").exists()
