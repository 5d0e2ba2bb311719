"""dbsurge's panel in Locust's web UI, in a real browser (Debian's Chromium via Playwright).

Start a run from Locust's page; see the panel's live figures (the timeline's, in ms with three
decimals); override the rate twice and see the plan and the table follow, each override its own
row; the panel beside Locust's charts, not over them; Stop, and see the run directory and the
report. Then the run directory: events, the console line, segments.csv, and a ledger that balances.
Screenshots of every step are saved under the test's tmp dir (``screenshots/``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ledger_checks import ledger
from runs import REPO, read_csv

from dbsurge.embedded import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
THREE_DECIMALS = re.compile(r"[0-9]+\.[0-9]{3}")
FIGURES_MS = ["#dbsurge-p50", "#dbsurge-p99", "#dbsurge-svc-p50", "#dbsurge-svc-p99", "#dbsurge-lag"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not shutil.which("chromium") and not __import__("os").path.exists(CHROMIUM),
                       reason="Debian's chromium is not installed (make test installs it as root)"),
]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = _try(predicate)
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


def _try(fn):
    from playwright.sync_api import Error as PageError

    try:
        return fn()
    except (OSError, ValueError, KeyError, PageError):  # not up yet, or a figure still "-"
        return None


@pytest.fixture
def locust_web(tmp_path, pg_uri):
    """A local Locust with the web UI: orders' product_lookup at a constant 20 TPS, not started yet."""
    port = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py",
           "--target", pg_uri, "--rate", "20", "--web-port", str(port), "--operation", "product_lookup",
           "--no-db-sampler", "--workload-option", "products=2000", "--results-dir", str(tmp_path / "results")]
    log_path = tmp_path / "locust.log"
    with open(log_path, "w") as log:  # a file, not a pipe nobody reads: the child never blocks on its output
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: _get(base + "/dbsurge/plan"), 30, "the web UI")
        yield base, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _number(page, selector: str) -> float:
    return float(page.inner_text(selector))


def _overlaps(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and \
        a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


def _start_form(page, shots: Path) -> None:
    """Under a plan, Locust's users and ramp-up are hidden and the form says why; no plan option is offered."""
    page.wait_for_selector(".dbsurge-form-note")
    assert "set by the dbsurge plan" in page.inner_text(".dbsurge-form-note")
    for name in ("userCount", "spawnRate"):
        assert page.locator(f'input[name="{name}"]').count() == 1
        assert not page.locator(f'input[name="{name}"]').is_visible(), name
    args = page.evaluate("window.templateArgs")
    assert args["hide_common_options"] is True
    _beside_the_header(page)
    assert not {"baseline_tps", "rate", "stages", "stage_seconds"} & set(args["extra_options"])
    page.screenshot(path=str(shots / "1-start-form.png"))


def _beside_the_header(page) -> None:
    """The panel starts below Locust's header: Status, RPS and the Stop button stay in view."""
    header, panel = page.locator("#root header").bounding_box(), page.locator("#dbsurge-panel").bounding_box()
    assert not _overlaps(header, panel), (header, panel)


def _override(page, n: int, rate: int) -> None:
    page.fill("#dbsurge-rate", str(rate))
    page.click("#dbsurge-set-rate")
    _wait_for(lambda: page.locator(f'#dbsurge-rows .ds-row[data-override="{n}"] .ds-row-figs').count() >= 3, 20,
              f"the row of override {n}")
    assert page.inner_text("#dbsurge-msg") == ""


def _charts_beside_the_panel(page, shots: Path) -> None:
    page.get_by_role("tab", name="Charts").click()
    page.wait_for_selector("main [_echarts_instance_]")
    time.sleep(1)  # the charts' first draw
    page.screenshot(path=str(shots / "3-charts.png"))
    panel = page.locator("#dbsurge-panel").bounding_box()
    charts = [page.locator("main [_echarts_instance_]").nth(i).bounding_box()
              for i in range(page.locator("main [_echarts_instance_]").count())]
    assert len(charts) >= 3 and panel["width"] >= 300, (charts, panel)
    _beside_the_header(page)
    for chart in charts:
        assert not _overlaps(chart, panel), (chart, panel)
        assert chart["width"] >= 600, chart  # the charts took the room left, not a sliver
    page.get_by_role("tab", name="Statistics").click()


def test_the_panel_follows_the_run_its_overrides_and_points_to_the_results(locust_web, tmp_path):
    from playwright.sync_api import sync_playwright

    base, log_path = locust_web
    shots = tmp_path / "screenshots"
    shots.mkdir()
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(base + "/")
        page.wait_for_selector("#dbsurge-panel")
        _start_form(page, shots)
        page.get_by_role("button", name="Start").click()

        # live figures from the timeline: achieved TPS, and times in ms with three decimals
        _wait_for(lambda: _number(page, "#dbsurge-achieved") >= 18, 25, "20 TPS achieved")
        for selector in FIGURES_MS:
            assert THREE_DECIMALS.fullmatch(page.inner_text(selector)), (selector, page.inner_text(selector))
        assert float(page.inner_text("#dbsurge-p99")) > 0
        assert "> 20tps" in page.inner_text("#dbsurge-plan")
        assert page.locator("#dbsurge-spark-tps polyline").count() == 2
        # the sparklines have their scales, and the panel says why its achieved rate is not Locust's RPS
        assert re.fullmatch(r"y 0 to [\d.]+ TPS \u00b7 x the last \d+ s", page.inner_text("#dbsurge-spark-tps-scale"))
        assert re.fullmatch(r"y 0 to [\d.]+ ms \u00b7 x the last \d+ s", page.inner_text("#dbsurge-spark-p99-scale"))
        assert "Locust's RPS counts failures too" in page.inner_text("#dbsurge-rate-note")

        # two overrides: each its own row, and the plan line follows
        _override(page, 1, 40)
        _override(page, 2, 60)
        plan = page.inner_text("#dbsurge-plan")
        assert re.search(r"^  override 1: 40 TPS from \d\d:\d\d:\d\dZ$", plan, re.MULTILINE), plan
        assert re.search(r"^> override 2: 60 TPS from \d\d:\d\d:\d\dZ$", plan, re.MULTILINE), plan
        assert page.inner_text("#dbsurge-target") == "60.0"
        _wait_for(lambda: abs(_number(page, "#dbsurge-achieved") - 60) <= 6, 20, "60 TPS achieved")
        names = page.locator("#dbsurge-rows .ds-row-name").all_inner_texts()
        assert names[0] == "stage 20tps" and names[1].startswith("override 1: 40 TPS from"), names
        assert names[2].startswith("override 2: 60 TPS from") and len(names) == 3, names
        page.screenshot(path=str(shots / "2-statistics.png"))
        _charts_beside_the_panel(page, shots)

        # Stop: the panel points to the run directory and serves its report
        page.get_by_role("button", name="Stop").click()
        page.wait_for_selector("#dbsurge-report", timeout=45000)
        run_dir = Path(page.inner_text("#dbsurge-run-dir"))
        assert page.inner_text("#dbsurge-status") == "stopped: results written"
        assert "planned" in page.inner_text("#dbsurge-verdict")
        assert page.locator("#dbsurge-set-rate").is_disabled()
        report = page.evaluate("fetch('./dbsurge/report').then(r => r.text().then(t => [r.status, "
                               "r.headers.get('content-type'), r.headers.get('content-security-policy'), t]))")
        page.screenshot(path=str(shots / "4-stopped.png"))
        browser.close()
    assert not errors, errors
    assert report[0] == 200 and report[1].startswith("text/html") and "script-src 'none'" in report[2]
    assert report[3] == (run_dir / "report.html").read_text()

    # on disk: an event and a console line per override, segments.csv, summary.md, and a ledger that balances
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    changes = [e for e in events if e["kind"] == "rate_change"]
    assert [(e["override"], e["rate_tps"]) for e in changes] == [(1, 40), (2, 60)]
    console = log_path.read_text()
    for e in changes:
        assert e["label"].startswith(f"override {e['override']}: {e['rate_tps']:g} TPS from ")
        assert f"rate {e['label']}" in console
    segments = read_csv(run_dir / "segments.csv")
    assert [r["segment"] for r in segments] == names
    assert abs(float(segments[2]["achieved_tps"]) - 60) <= 10, segments[2]  # not 40: the override took
    table = console[console.index("Rate overrides: a row per stage"):]
    assert all(name in table for name in names), table[:2000]
    total = ledger(run_dir)  # every row of stages.csv and summary.csv balances, and they agree
    # (what Stop caught on its way to the database is unknown: sent, its outcome never seen)
    assert total["planned"] == total["ok"] + total["failures"] + total["dropped"] + total["unknown"] + total["not_sent"]
    assert total["ok"] > 0 and [r["stage"] for r in read_csv(run_dir / "stages.csv")] == ["20tps", "20tps"]
    assert json.loads((run_dir / "run.json").read_text())["rate_changes"] == [[e["at_s"], e["rate_tps"], None]
                                                                              for e in changes]


def test_endpoints_refuse_bad_input_and_serve_no_report_before_the_end(locust_web):
    base, _ = locust_web
    req = urllib.request.Request(base + "/dbsurge/rate", data=b'{"rate_tps": -5}',
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 400
    assert "error" in json.loads(e.value.read())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/dbsurge/report", timeout=5)
    assert e.value.code == 404
    live = _get(base + "/dbsurge/live")
    assert live["plan"]["running"] is False and live["plan"]["results"] is None and live["rows"] == []
    assert live["plan"]["max_rate"] == 200.0  # 10 times the plan's peak
