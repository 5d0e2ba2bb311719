"""The report: report.html (self-contained, opened in headless Chromium), timeline.png and summary.md."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from dbsurge.collectors.cli import collect_main, report_main
from dbsurge.collectors.report import build_report

FIXTURE = Path(__file__).parent / "fixtures" / "run_spike"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("report") / "run_spike"
    shutil.copytree(FIXTURE, run)
    assert build_report(run) == run / "report.html"
    return run


def test_report_files_are_written(report_dir):
    for name in ("report.html", "timeline.png", "summary.md", "merged.csv", "cost.csv"):
        assert (report_dir / name).stat().st_size > 0, name
    assert (report_dir / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_html_is_self_contained(report_dir):
    page = (report_dir / "report.html").read_text()
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 4 and all(len(data) > 1000 for data in images)
    # nothing to fetch: no scripts, no external stylesheets, images or links
    assert "<script" not in page and not re.search(r'(src|href)="(https?:|//)', page)
    for text in ("Per stage", "a2-spike/writer ACU (max)", "Cost", "Aurora a2-spike/writer ACU-hours",
                 "us-east-1 defaults as of", "SerializationFailure"):
        assert text in page, text


def test_summary_md_has_the_studies_tables(report_dir):
    summary = (report_dir / "summary.md").read_text()
    header = next(line for line in summary.splitlines() if line.startswith("| Stage | Target TPS"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[:4] == ["Stage", "Target TPS", "Achieved TPS", "Failure rate"]
    assert "create_order p95 / p99 (ms)" in columns and "a2-spike/writer ACU (max)" in columns
    spike = next(line for line in summary.splitlines() if line.startswith("| 200% | 2,000 |"))
    cells = dict(zip(columns, [c.strip() for c in spike.strip("|").split("|")]))
    assert cells["a2-spike/writer ACU (max)"] == "21" and cells["create_order p95 / p99 (ms)"] == "12.0 / 37.8"
    assert cells["Achieved TPS"] == "1,960" and cells["Dropped"] == "24"
    assert "| Total | 360.4 s |  | $0.2368 |" in summary  # capacity only: no runner type given
    assert "| 200% | 60.0 | $0.0396 | 117,585 |" in summary


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
    assert len(sizes) == 4 and all(done and width >= 800 for done, width in sizes), sizes
    assert tables >= 3 and title.startswith("dbsurge report: ")


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
    assert "report.html" in capsys.readouterr().out
    page = (run / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4
    summary = (run / "summary.md").read_text()
    assert "| 100tps | 100 |" in summary and "| Total | 5.0 s |  | $0.0000 |" in summary
