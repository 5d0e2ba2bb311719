"""The benchmark's plumbing, quickly: bench/run.py runs real clients against a real server and writes
RESULTS-style tables with numbers in them.

No timing assertions: speed targets belong in the benchmark (`make bench`, bench/RESULTS.md), not in
tests, which run on shared and slow machines too.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.profile_worker import summarise
from bench.recorder_cost import _slope, _split_roles, recorder_cost
from bench.throughput import Sample, Spread, paired_ratio


@pytest.fixture(scope="module")
def bench_db(pg_uri: str) -> str:
    """A database of its own on the session's server (pgbench -i replaces its tables)."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = 'bench_smoke'").fetchone() is None:
            conn.execute("create database bench_smoke")
    return pg_uri.rsplit("/", 1)[0] + "/bench_smoke"


def _number_cells(row: str) -> list[float]:
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    out = []
    for c in cells:
        m = re.match(r"^([\d,]+(?:\.\d+)?)", c)
        if m:
            out.append(float(m.group(1).replace(",", "")))
    return out


def test_quick_run_writes_tables_with_numbers(tmp_path: Path, bench_db: str) -> None:
    out, raw = tmp_path / "RESULTS.md", tmp_path / "raw.json"
    cmd = [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--pg-uri", bench_db,
           "--sections", "throughput,recorder", "--clients", "pgbench,dbsurge,bare_pq16",
           "--seconds", "4", "--short-seconds", "1", "--scale", "1", "--products", "2000",
           "--workdir", str(tmp_path / "work"), "--output", str(out), "--json", str(raw)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    text = out.read_text()
    assert "## 1. Throughput and client CPU per operation" in text
    assert "## 3. Recorder cost" in text and "## Machine" in text
    for label in ("pgbench -S -M prepared", "dbsurge product_lookup, 1 process",
                  "bare psycopg.pq loop, 16 connections"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
        numbers = _number_cells(row)
        assert len(numbers) >= 3 and all(n > 0 for n in numbers[:3]), row  # ops/s, CPU/op marginal, whole run
    assert re.search(r"product lookup TPS ≥ 80% of pgbench \(1 process\) \| ≥ 0.80x \| \d+\.\d+x", text)
    assert re.search(r"loop on 16 connections \(1 process\) \| ≤ 1.2x \| \d+\.\d+x", text)

    data = json.loads(raw.read_text())
    runs = {s["client"]: s for s in data["throughput"]}
    assert set(runs) == {"pgbench", "dbsurge", "bare_pq16"}
    for s in runs.values():  # 4 s against 1 s: beside other tests (-n 3) a 2 s run once did fewer than the 1 s one
        assert s["ops_long"] > s["ops_short"] > 0 and s["cpu_long"] > 0
    assert data["recorder"]["this"]["record_us"] > 0

    # the open model's floor (bench/rate_search.py's second reference): the bare loop paces the lookups
    # on the tables the run loaded, and reports every one with its schedule lag
    loop = subprocess.run([sys.executable, str(REPO / "bench" / "bare_loops.py"), "pq16_open", "--uri", bench_db,
                           "--rate", "400", "--duration", "1.5", "--products", "2000", "--connections", "4"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert loop.returncode == 0, loop.stdout[-2000:] + loop.stderr[-2000:]
    out = json.loads(loop.stdout.strip().splitlines()[-1])
    assert out["ops"] == 600 and out["achieved_tps"] == 400
    assert 0 <= out["lag_p99_ms"] < 1000 and out["cpu_s"] > 0

    # the closed loop on gevent (a reference for the CPU per operation): it finds the products it looks up
    loop = subprocess.run([sys.executable, str(REPO / "bench" / "bare_loops.py"), "pq16_gevent", "--uri", bench_db,
                           "--duration", "1", "--products", "2000", "--connections", "4"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert loop.returncode == 0, loop.stdout[-2000:] + loop.stderr[-2000:]
    assert json.loads(loop.stdout.strip().splitlines()[-1])["ops"] > 100


def test_ratios_are_paired_within_a_repetition() -> None:
    def sample(client: str, rep: int, ops: int, cpu: float) -> Sample:
        return Sample(client, rep, 10, 4, ops, ops * 4 // 10, cpu, cpu * 0.4, 10.0)

    samples = [sample("pgbench", 0, 200_000, 2.0), sample("dbsurge", 0, 100_000, 4.0),
               sample("pgbench", 1, 100_000, 1.0), sample("dbsurge", 1, 60_000, 2.4)]
    ratio = paired_ratio(samples, "dbsurge", "pgbench", "ops_per_s")
    assert ratio.values == [0.5, 0.6] and ratio.low == 0.5 and ratio.high == 0.6
    assert math.isnan(Spread.of([]).median)
    assert samples[1].cpu_us_marginal == pytest.approx((4.0 - 1.6) / 60_000 * 1e6)


def test_profile_summary_from_py_spy_raw_output() -> None:
    raw = """
run (locust/user/users.py:10);_operation_loop (dbsurge/load/user.py:90);execute (psycopg/cursor.py:5) 60
run (locust/user/users.py:10);_operation_loop (dbsurge/load/user.py:99);fire (locust/event.py:3) 30
run (locust/user/users.py:10);_operation_loop (dbsurge/load/user.py:80) 10
"""
    p = summarise(raw, seconds=1.0)
    assert p.samples == 100
    parts = dict(p.parts)
    assert parts["driver: psycopg / libpq / socket I/O"] == 60.0
    assert parts["Locust request event and stats"] == 30.0
    assert dict(p.self_time)["execute (psycopg/cursor.py)"] == 60.0


def test_recorder_cost_and_memory_slope_helpers() -> None:
    cost = recorder_cost(operations=20_000, per_drain=5_000)
    assert cost.operations == 20_000 and cost.record_us > 0 and cost.drain_us > 0
    assert _slope([(0.0, 10.0), (1.0, 12.0), (2.0, 14.0)]) == pytest.approx(2.0)
    samples = [(0.0, {1: (0, 5), 2: (1, 100)}), (1.0, {1: (0, 5), 2: (1, 110), 3: (2, 50), 4: (2, 60)}),
               (2.0, {1: (0, 5), 2: (1, 120), 3: (2, 55), 4: (2, 60)})]
    master, workers = _split_roles(samples)
    assert master == [(0.0, 100), (1.0, 110), (2.0, 120)]
    assert workers == [(1.0, 110), (2.0, 115)]


def test_the_rate_table_sets_dbsurge_against_both_references() -> None:
    from bench.rate_search import Trial
    from bench.report import rates_section

    def best(rate: float) -> tuple[Trial, list[Trial]]:
        t = Trial(rate, rate, 0.5, 0, 0, 1.0)
        return t, [t, Trial(rate * 2, rate * 2, 3.0, 0, 0, 1.0)]

    text = rates_section({("pgbench", 1): best(24000), ("bare", 1): best(20000), ("", 1): best(8000),
                          ("", 2): best(10000)}, 10)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split("|")[1].strip() for r in rows] == [
        "pgbench -R, -j 1 (the reference)", "bare open loop: gevent + psycopg.pq, 1 process (the stack's floor)",
        "1 (no separate master)", "2"]
    assert "1 process: 0.33x pgbench -R, 0.40x the bare loop" in text
    assert "2 processes: 0.42x pgbench -R, 0.50x the bare loop (0.21x pgbench -R per process)" in text


def test_the_cql_pair_runs_the_same_operations_at_the_same_rate_and_is_reported_as_a_ratio(tmp_path: Path) -> None:
    """The CQL pair without a server (no JVM here: `make bench` runs it, bench/findings.md has its numbers): both
    clients are in `make bench`'s default list, are built with the same rate, records and consistency, the bare
    loop refuses a consistency the driver does not have, and a saved run renders section 1b and the goals' ratio."""
    from bench import cql_pair, run
    from bench.clients import CLIENTS, CQL_CLIENTS, Env

    args = run.parse_args([])
    assert set(CQL_CLIENTS) == {"dbsurge_ycsb_cql", "bare_cql_gevent"} <= set(args.client_list)
    assert (args.cql_rate, args.cql_seconds, args.cql_short_seconds, args.cql_records) == (500, 8, 2, 10_000)
    env = Env("postgresql://unused", None, Path("pgbench"), 5432, 1000, 1000, 16, tmp_path, cql_uri=None, cql_rate=300,
              cql_records=2000)
    with pytest.raises(RuntimeError, match="need a CQL server"):
        CLIENTS["bare_cql_gevent"].command(env, 5, "t")
    env.cql_uri = "cql://127.0.0.1:9"
    dbsurge_cmd = CLIENTS["dbsurge_ycsb_cql"].command(env, 5, "t")
    bare_cmd = CLIENTS["bare_cql_gevent"].command(env, 5, "t")
    joined = " ".join(dbsurge_cmd)
    assert "--shape constant --rate 300 --duration 5s" in joined and "--target cql://127.0.0.1:9" in joined
    assert "recordcount=2000" in joined and "consistency=ONE" in joined
    assert bare_cmd[2] == "cql_gevent" and " ".join(bare_cmd[3:]).startswith("--uri cql://127.0.0.1:9 --duration 5")
    assert ["--rate", "300"] == bare_cmd[7:9] and "--records 2000 --consistency ONE" in " ".join(bare_cmd)

    bad = subprocess.run([*bare_cmd[:-2], "--consistency", "SOMETIMES"], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=False)
    assert bad.returncode == 2 and "invalid choice: 'SOMETIMES'" in bad.stderr

    assert cql_pair.section({"skipped": "embedded-cassandra needs Java 17: apt-get install x"}).endswith(
        "Skipped: embedded-cassandra needs Java 17: apt-get install x.")

    def sample(client: str, rep: int, cpu_long: float, cpu_short: float) -> dict:
        return {"client": client, "rep": rep, "long_s": 8, "short_s": 2, "ops_long": 4000, "ops_short": 1000,
                "cpu_long": cpu_long, "cpu_short": cpu_short, "wall_long": 9.0}

    raw = {"args": vars(args) | {"client_list": list(CQL_CLIENTS)}, "command": "python bench/run.py",
           "started": 0.0, "finished": 60.0, "machine": {"cpu": "test"},
           "cql": {"rate": 500, "records": 10_000, "consistency": "ONE", "reps": 2, "long_s": 8, "short_s": 2,
                   "clients": list(CQL_CLIENTS), "server": "a test server",
                   "samples": [sample("dbsurge_ycsb_cql", 0, 4.0, 1.6), sample("bare_cql_gevent", 0, 2.0, 0.8),
                               sample("bare_cql_gevent", 1, 2.0, 0.8), sample("dbsurge_ycsb_cql", 1, 3.0, 1.2)]}}
    saved, out = tmp_path / "raw.json", tmp_path / "RESULTS.md"
    saved.write_text(json.dumps(raw, default=str))
    assert run.main(["--render-json", str(saved), "--output", str(out)]) == 0
    text = out.read_text()
    assert re.search(r"YCSB-A on CQL client CPU/op vs the bare scylla-driver loop .* \| 1.75x \(1.50–2.00\) \|", text)
    assert "## 1b. YCSB-A on CQL" in text and "both at 500 ops/s, consistency ONE" in text
    row = next(line for line in text.splitlines() if line.startswith("| dbsurge YCSB-A (CQL)"))
    assert _number_cells(row)[:2] == [500, 700.0]  # ops/s; marginal µs/op, median of 800 and 600
