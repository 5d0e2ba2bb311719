"""The soak's plumbing (`make soak`, bench/soak.py): a short soak writes its samples, the ledger and the verdicts.

No timing or memory assertions: the hour-long figures belong in bench/RESULTS.md, not in tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.soak import judge, pool_growth, slope_per_h, splice


def test_slope_and_verdicts() -> None:
    rising = [{"t_s": t * 60.0, "m": 100 + t * 0.5} for t in range(60)]  # 30 MB/h
    flat = [{"t_s": t * 60.0, "m": 100 + (0.3 if t % 2 else -0.3)} for t in range(60)]  # noise only
    slope, se = slope_per_h([(s["t_s"], s["m"]) for s in rising])
    assert abs(slope - 30.0) < 1e-6 and se < 1e-6
    grows = judge(rising, "m", 1800)
    assert grows["flat"] is False and abs(grows["slope_per_h"] - 30.0) < 1e-3
    assert judge(flat, "m", 1800)["flat"] is True
    assert judge([], "m", 1800)["flat"] is None


def test_pool_growth_names_the_samples_where_the_workers_held_more_connections() -> None:
    samples = [{"t_s": 60.0, "workers": 1, "db_connections": 2},  # one worker up: not a full tree
               {"t_s": 120.0, "workers": 2, "db_connections": 8}, {"t_s": 180.0, "workers": 2, "db_connections": 8},
               {"t_s": 240.0, "workers": 2, "db_connections": 12}, {"t_s": 300.0, "workers": 2, "db_connections": 11},
               {"t_s": 360.0, "workers": 2}]  # an old sample without the count
    assert pool_growth(samples) == [(240.0, 8, 12)]


def test_splice_replaces_section_5_only() -> None:
    report = "# title\n\n## 4. Profile\nold\n\n## 5. Soak: 60 minutes\nstale\n\n## Machine\nbox\n"
    out = splice(report, "## 5. Soak: 1 minutes\nfresh")
    assert "stale" not in out and "fresh" in out and "## 4. Profile\nold" in out and out.endswith("## Machine\nbox\n")
    added = splice("# title\n\n## Machine\nbox\n", "## 5. Soak\nnew")
    assert added.index("## 5. Soak") < added.index("## Machine")


def test_a_short_soak_writes_samples_ledger_and_section(tmp_path: Path) -> None:
    report, raw = tmp_path / "RESULTS.md", tmp_path / "soak.json"
    report.write_text("# dbsurge benchmark\n\n## Machine\nthis one\n")
    cmd = [sys.executable, str(REPO / "bench" / "soak.py"), "--minutes", "0.4", "--sample-seconds", "4",
           "--rate", "100", "--products", "2000", "--json", str(raw), "--output", str(report)]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(raw.read_text())
    during = [s for s in data["samples"] if s["workers"] == 2]  # the last may be of the master's finish alone
    assert data["exit_code"] == 0 and len(during) >= 3
    assert all(s["master_mb"] > 0 and s["workers_mb"] > 0 for s in during)
    # the users hold their connections (a sample taken as the workers start may come before they connect)
    assert max(s["db_connections"] or 0 for s in during) >= 2
    assert data["samples"][-1]["rundir_mb"] > 0
    assert int(data["summary"]["planned"]) == 2400 == int(data["summary"]["ok"])  # 24 s at 100 TPS, all done
    text = report.read_text()
    assert "## 5. Soak: 0.4 minutes of the orders mix" in text and "planned 2,400 = ok 2,400" in text
    assert "| minute | master MB | workers MB | database connections |" in text
    assert "| master RSS |" in text and "| run directory |" in text and text.rstrip().endswith("this one")
