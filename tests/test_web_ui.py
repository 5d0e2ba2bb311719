"""Interactive spikes from Locust's web UI, in a real browser (Debian's Chromium via Playwright).

Start a run from Locust's page, raise the arrival rate with dbsurge's control on that page, and
see the achieved rate follow, both on the page and in the run directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
from runs import REPO, read_csv

from dbsurge.embedded import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

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
        last = predicate()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what} (last: {last})")


@pytest.fixture
def locust_web(tmp_path, pg_uri):
    port = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", f"{REPO}/locustfiles/orders.py,{REPO}/shapes/constant.py",
           "--target", pg_uri, "--rate", "20", "--web-port", str(port), "--operation", "product_lookup",
           "--no-db-sampler", "--workload-option", "products=2000", "--results-dir", str(tmp_path / "results")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: _try(lambda: _get(base + "/dbsurge/plan")), 30, "the web UI")
        yield base, tmp_path / "results"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _try(fn):
    try:
        return fn()
    except Exception:
        return None


def test_raise_the_rate_from_the_page(locust_web):
    from playwright.sync_api import sync_playwright

    base, results = locust_web
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(base + "/")
        page.wait_for_selector("#dbsurge-panel")
        page.get_by_role("button", name="Start").click()
        # the panel shows the plan, the position and the achieved rate
        _wait_for(lambda: float(page.inner_text("#dbsurge-achieved") or 0) >= 18, 20, "20 TPS achieved")
        assert "20tps" in page.inner_text("#dbsurge-plan")
        page.fill("#dbsurge-rate", "100")
        page.click("#dbsurge-set-rate")
        _wait_for(lambda: abs(float(page.inner_text("#dbsurge-achieved") or 0) - 100) <= 10, 20, "100 TPS achieved")
        assert page.inner_text("#dbsurge-target") == "100.0"
        page.screenshot(path=str(results.parent / "web-ui.png"))
        browser.close()
    assert not errors, errors
    # the run directory saw the change: events, and a timeline that follows it
    state = _get(base + "/dbsurge/plan")
    run = results / state["run_dir"].split("/")[-1]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "rate_change" and e["rate_tps"] == 100 for e in events)
    time.sleep(4.5)  # the timeline is written a few seconds behind
    # the planned rate is on the ALL rows (one operation here, so their count is product_lookup's)
    rows = [r for r in read_csv(run / "timeline.csv") if r["operation"] == "ALL"]
    assert any(float(r["target_tps"] or 0) == 100 and abs(int(r["count"]) - 100) <= 5 for r in rows), rows[-5:]


def test_rate_endpoint_rejects_bad_input(locust_web):
    base, _ = locust_web
    req = urllib.request.Request(base + "/dbsurge/rate", data=b'{"rate_tps": -5}',
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 400
    assert "error" in json.loads(e.value.read())
